//! Witness placement (Section 2.2 of the multi-tasking paper) and path
//! regeneration for one function.
//!
//! A function is a CFG of blocks with one entry and a virtual `EXIT`
//! vertex that every returning block has an edge to. A *predicate* is a
//! block with two or more outgoing edges. The plan puts a witness, a
//! number, on some edges; a run of the function writes the numbers of the
//! edges it takes, in order. At each predicate, the next witness then
//! tells which edge was taken, if the sets of witnesses that can come next
//! along each outgoing edge are disjoint.
//!
//! [`place`] chooses the edges:
//!
//! 1. **Blocking witnesses.** Every outgoing edge of a predicate from
//!    which a path without another predicate reaches a call block or
//!    `EXIT` gets a witness. Otherwise the callee's witnesses, or the
//!    caller's after the return, could be read as this function's
//!    (Section 2.2.3).
//! 2. **A maximum-weight spanning tree** of the remaining edges, taken as
//!    undirected and grown with Kruskal's algorithm from the imaginary
//!    edge `EXIT -> entry`, which can carry no witness. Edges are weighed
//!    by an estimate of how often they run ([`weights`]): the entry runs
//!    once, a block's runs split evenly among its outgoing edges, and a
//!    loop's head runs 10 times what enters it.
//! 3. **A witness on every edge left out of the tree.** With no cycle and
//!    no diamond among the edges without witnesses, the witness sets at
//!    each predicate are disjoint (Section 2.2.2).
//!
//! Witnesses are numbered 1, 2, ... within the function, the edge
//! estimated to run most often first; a record holds the first
//! [`crate::record::MAX_BYTE_WITNESS`] in a byte, the next ones up to
//! [`crate::record::MAX_SHORT_WITNESS`] in two, the others in four
//! ([`Plan::witness_width`]).

use std::collections::BTreeSet;

/// One edge of a CFG: from block `from` to block `to` (or [`Cfg::exit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Edge {
    /// The block the edge leaves.
    pub from: usize,
    /// The block it enters, or `EXIT`.
    pub to: usize,
}

/// A function's control-flow graph, as planning needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cfg {
    /// Blocks `0..blocks`; the vertex `blocks` is `EXIT`.
    pub blocks: usize,
    /// The entry block.
    pub entry: usize,
    /// Every edge, those to `EXIT` included (one per returning block).
    /// Two edges may join the same blocks (a conditional branch whose
    /// both ways lead to one block).
    pub edges: Vec<Edge>,
    /// Blocks that call another function.
    pub calls: BTreeSet<usize>,
}

impl Cfg {
    /// The CFG of a decoded function: its basic blocks, an edge per
    /// successor, and an edge to `EXIT` from each block that leaves the
    /// function (`ret`, a tail call, a conditional jump out of the
    /// function, an unresolved indirect jump, running off its end). A
    /// resolved jump table is an edge per target. Blocks holding a call
    /// are call blocks. A block that traps has no successor.
    pub fn from_code(code: &weft_code::FunctionCode) -> Cfg {
        use weft_code::BlockEnd;
        let blocks = code.blocks();
        let exit = blocks.len();
        let mut edges = Vec::new();
        let mut calls = BTreeSet::new();
        for (i, b) in blocks.iter().enumerate() {
            edges.extend(b.succs.iter().map(|&s| Edge { from: i, to: s }));
            let tail = &code.instructions()[b.last - 1];
            let leaves_conditionally = b.kind == BlockEnd::CondJump
                && !blocks.iter().any(|t| t.start == tail.near_branch_target());
            // A switch with cases in another part of the function, or a
            // computed `goto` that may go anywhere.
            let switches_out = b.kind == BlockEnd::Switch
                && code
                    .jump_tables()
                    .iter()
                    .any(|t| t.jump == tail.ip() && (!t.outside.is_empty() || t.elsewhere));
            if leaves_conditionally
                || switches_out
                || matches!(
                    b.kind,
                    BlockEnd::Return | BlockEnd::TailCall | BlockEnd::IndirectJump
                )
            {
                edges.push(Edge { from: i, to: exit });
            }
            // The last block may run off the function's end into the code
            // after it (a `__memmove_chk` falling into `__memmove`).
            let falls_off = b.last == code.instructions().len()
                && matches!(
                    tail.flow_control(),
                    iced_x86::FlowControl::Next
                        | iced_x86::FlowControl::Call
                        | iced_x86::FlowControl::IndirectCall
                        | iced_x86::FlowControl::ConditionalBranch
                );
            if falls_off {
                edges.push(Edge { from: i, to: exit });
            }
            let insns = &code.instructions()[b.first..b.last];
            if insns.iter().any(|i| {
                matches!(
                    i.flow_control(),
                    iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
                )
            }) {
                calls.insert(i);
            }
        }
        Cfg {
            blocks: exit,
            entry: blocks
                .iter()
                .position(|b| b.start == code.start())
                .unwrap_or(0),
            edges,
            calls,
        }
    }

    /// The `EXIT` vertex.
    pub fn exit(&self) -> usize {
        self.blocks
    }

    /// Indexes of the edges leaving `block`, in the order given.
    pub fn out_edges(&self, block: usize) -> impl Iterator<Item = usize> + '_ {
        (0..self.edges.len()).filter(move |&i| self.edges[i].from == block)
    }

    /// Whether `block` has two or more outgoing edges.
    pub fn is_predicate(&self, block: usize) -> bool {
        self.out_edges(block).nth(1).is_some()
    }

    /// For each vertex (`EXIT` included), the indexes of the edges leaving
    /// it, in the order given: [`Cfg::out_edges`] for every vertex at once,
    /// in time linear in the edges (an interpreter's function has
    /// thousands of blocks).
    pub fn out_index(&self) -> Vec<Vec<usize>> {
        let mut outs = vec![Vec::new(); self.blocks + 1];
        for (i, e) in self.edges.iter().enumerate() {
            if let Some(o) = outs.get_mut(e.from) {
                o.push(i);
            }
        }
        outs
    }
}

/// Where a function's witnesses go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// For each edge of the CFG (same index), its witness number, or
    /// `None` if it writes none.
    pub witness: Vec<Option<u32>>,
    /// The edges that got their witness as blocking witnesses (a subset
    /// of those with a witness).
    pub blocking: BTreeSet<usize>,
}

impl Plan {
    /// The edges that write a witness.
    pub fn instrumented(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.witness.len()).filter(|&i| self.witness[i].is_some())
    }

    /// Bytes of the widest witness record the function writes.
    pub fn witness_width(&self) -> usize {
        let most = self.instrumented().count() as u32;
        crate::record::Record::Witness(most.max(1)).len() as usize
    }

    /// The path of one run of the function, as the edges it took, from
    /// the witnesses it wrote; `None` if they do not fit the CFG (another
    /// function's, or cut short).
    pub fn regenerate(&self, cfg: &Cfg, witnesses: &[u32]) -> Option<Vec<usize>> {
        let mut path = Vec::new();
        let mut at = cfg.entry;
        let mut next = 0;
        let limit = witnesses.len() * (cfg.edges.len() + 1) + cfg.edges.len() + 1;
        while at != cfg.exit() {
            let outs: Vec<usize> = cfg.out_edges(at).collect();
            let upcoming = witnesses.get(next).copied();
            let taken = match outs.as_slice() {
                [] => return None,
                [only] => *only,
                _ => *outs
                    .iter()
                    .find(|&&e| self.may_come_next(cfg, e).contains(&upcoming))?,
            };
            if let Some(w) = self.witness[taken] {
                if upcoming != Some(w) {
                    return None;
                }
                next += 1;
            }
            path.push(taken);
            at = cfg.edges[taken].to;
            if path.len() > limit {
                return None;
            }
        }
        (next == witnesses.len()).then_some(path)
    }

    /// The witnesses that can be the next one written once edge `e` is
    /// taken: its own if it has one, else those of the first edges with a
    /// witness reachable through edges without; `None` stands for the end
    /// of the run (`EXIT` reached with no witness on the way).
    pub fn may_come_next(&self, cfg: &Cfg, e: usize) -> BTreeSet<Option<u32>> {
        self.may_come_next_in(cfg, &cfg.out_index(), e)
    }

    /// [`Plan::may_come_next`] with the CFG's [`Cfg::out_index`] at hand.
    pub fn may_come_next_in(
        &self,
        cfg: &Cfg,
        outs: &[Vec<usize>],
        e: usize,
    ) -> BTreeSet<Option<u32>> {
        let mut out = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut stack = vec![e];
        while let Some(e) = stack.pop() {
            if !seen.insert(e) {
                continue;
            }
            if let Some(w) = self.witness[e] {
                out.insert(Some(w));
                continue;
            }
            let to = cfg.edges[e].to;
            if to == cfg.exit() {
                out.insert(None);
                continue;
            }
            stack.extend(outs.get(to).into_iter().flatten().copied());
        }
        out
    }
}

/// How often each edge runs per call, estimated by flow (qpt's estimate):
/// the entry block runs once, a block's runs split evenly among its
/// outgoing edges, and a loop's head runs ten times what enters it.
/// Blocks a depth-first walk from the entry does not reach, and the
/// predecessors of an irreducible loop's other heads, add nothing.
pub fn weights(cfg: &Cfg) -> Vec<f64> {
    runs_per_call(cfg, &cfg.out_index())
}

/// [`weights`] with the CFG's [`Cfg::out_index`] at hand.
fn runs_per_call(cfg: &Cfg, outs: &[Vec<usize>]) -> Vec<f64> {
    let n = cfg.blocks;
    let mut runs = vec![0f64; cfg.edges.len()];
    if cfg.entry >= n {
        return runs;
    }
    let DepthFirst { post, back } = depth_first(cfg, outs);
    let mut ins = vec![Vec::new(); n + 1];
    let mut head = vec![false; n + 1];
    for (e, edge) in cfg.edges.iter().enumerate() {
        if edge.to < n {
            ins[edge.to].push(e);
            head[edge.to] |= back[e];
        }
    }
    for &b in post.iter().rev() {
        let entering: f64 = ins[b].iter().filter(|&&e| !back[e]).map(|&e| runs[e]).sum();
        let mut block = entering + if b == cfg.entry { 1.0 } else { 0.0 };
        if head[b] {
            // (Nested a few hundred deep, the estimate stays finite.)
            block = (block * 10.0).min(f64::MAX / 16.0);
        }
        let each = block / outs[b].len().max(1) as f64;
        for &e in &outs[b] {
            runs[e] = each;
        }
    }
    runs
}

/// A depth-first walk of the blocks from the entry, each block's edges
/// taken last first.
struct DepthFirst {
    /// The blocks reached, in post-order.
    post: Vec<usize>,
    /// For each edge, whether it goes back to a block on the walk's
    /// stack.
    back: Vec<bool>,
}

fn depth_first(cfg: &Cfg, outs: &[Vec<usize>]) -> DepthFirst {
    let n = cfg.blocks;
    let mut walk = DepthFirst {
        post: Vec::with_capacity(n),
        back: vec![false; cfg.edges.len()],
    };
    if cfg.entry >= n {
        return walk;
    }
    let mut state = vec![0u8; n + 1]; // 0 new, 1 on the stack, 2 done
    let mut stack: Vec<(usize, usize)> = vec![(cfg.entry, outs[cfg.entry].len())];
    state[cfg.entry] = 1;
    while let Some((block, left)) = stack.last_mut() {
        let block = *block;
        if *left == 0 {
            state[block] = 2;
            walk.post.push(block);
            stack.pop();
            continue;
        }
        *left -= 1;
        let e = outs[block][*left];
        let to = cfg.edges[e].to;
        if to >= n {
            continue;
        }
        match state[to] {
            0 => {
                state[to] = 1;
                stack.push((to, outs[to].len()));
            }
            1 => walk.back[e] = true,
            _ => {}
        }
    }
    walk
}

/// Places the witnesses of `cfg` (see the module's comment).
pub fn place(cfg: &Cfg) -> Plan {
    let exit = cfg.exit();
    let mut instrumented = vec![false; cfg.edges.len()];
    // 1. Blocking witnesses: a predicate's edge that reaches a call block
    // or EXIT through blocks that are no predicates.
    let outs = cfg.out_index();
    let mut blocking = BTreeSet::new();
    for p in (0..cfg.blocks).filter(|&b| outs[b].len() >= 2) {
        for &e in &outs[p] {
            if reaches_call_or_exit(cfg, &outs, cfg.edges[e].to) {
                instrumented[e] = true;
                blocking.insert(e);
            }
        }
    }
    // 2. A maximum spanning tree of the others, from EXIT -> entry.
    let runs = runs_per_call(cfg, &outs);
    let mut sets: Vec<usize> = (0..=exit).collect();
    fn find(sets: &mut [usize], mut x: usize) -> usize {
        while sets[x] != x {
            sets[x] = sets[sets[x]];
            x = sets[x];
        }
        x
    }
    let (a, b) = (find(&mut sets, exit), find(&mut sets, cfg.entry));
    sets[a] = b;
    let mut order: Vec<usize> = (0..cfg.edges.len()).filter(|&e| !instrumented[e]).collect();
    // Heaviest first; ties in the CFG's order, so the plan is the same
    // every time.
    order.sort_by(|&x, &y| runs[y].total_cmp(&runs[x]).then(x.cmp(&y)));
    let mut in_tree = vec![false; cfg.edges.len()];
    for e in order {
        let (a, b) = (
            find(&mut sets, cfg.edges[e].from),
            find(&mut sets, cfg.edges[e].to),
        );
        if a != b {
            sets[a] = b;
            in_tree[e] = true;
        }
    }
    // 3. A witness on every edge outside the tree, numbered from the
    // heaviest: a loop's witnesses are one byte even in a function with
    // hundreds (see `record`).
    let mut outside: Vec<usize> = (0..cfg.edges.len()).filter(|&e| !in_tree[e]).collect();
    outside.sort_by(|&x, &y| runs[y].total_cmp(&runs[x]).then(x.cmp(&y)));
    let mut witness = vec![None; cfg.edges.len()];
    for (k, &e) in outside.iter().enumerate() {
        witness[e] = Some(k as u32 + 1);
    }
    Plan { witness, blocking }
}

/// Whether a path from `block` through blocks that are no predicates
/// (including `block`) reaches a call block or `EXIT`.
fn reaches_call_or_exit(cfg: &Cfg, outs: &[Vec<usize>], block: usize) -> bool {
    let mut at = block;
    let mut seen = BTreeSet::new();
    loop {
        if at == cfg.exit() || cfg.calls.contains(&at) {
            return true;
        }
        let leaving = outs.get(at).map_or(&[][..], Vec::as_slice);
        if leaving.len() >= 2 || !seen.insert(at) {
            return false;
        }
        match leaving.first() {
            Some(&e) => at = cfg.edges[e].to,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests;
