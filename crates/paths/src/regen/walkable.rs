//! Each function's CFG as the walk reads it: its out-edges per block and,
//! for blocks with several, the edge each witness that can come next
//! decides (a dense table where it is small enough).

use crate::instrument::FunctionInfo;

/// A function ready for walking: its out-edges per block, and for blocks
/// with several, which edge each witness that can come next belongs to.
pub(super) struct Walkable {
    pub(super) outs: Vec<Vec<(usize, u32)>>,
    /// Per block with several ways out: (witness, the edge it decides),
    /// sorted by witness.
    pub(super) decide: Vec<Vec<(u32, (usize, u32))>>,
    /// The same as a dense table, where it is small enough: for block `b`
    /// and witness `x`, `dense[dense_row[b] + x]` is 1 + the index in
    /// `flat` of the edge `x` decides (0: none).
    pub(super) dense: Vec<u32>,
    /// Every block's out-edges, [`pack`]ed, one block after another.
    pub(super) flat: Vec<u64>,
    pub(super) dense_row: Vec<usize>,
    /// Witness numbers the dense table covers (0 when there is none).
    pub(super) dense_width: usize,
    pub(super) exit: usize,
    /// Blocks whose way to `EXIT` is a jump into another part of the
    /// function.
    pub(super) part_exit: Vec<bool>,
}

/// An edge (target block, witness or 0) in one word.
pub(super) fn pack((to, witness): (usize, u32)) -> u64 {
    to as u64 | (witness as u64) << 32
}

/// The edge [`pack`] made.
pub(super) fn unpack(edge: u64) -> (usize, u32) {
    ((edge & 0xFFFF_FFFF) as usize, (edge >> 32) as u32)
}

/// Entries a function's dense decision table may have.
const DENSE_MAX: usize = 1 << 22;

impl Walkable {
    /// The edge witness `x` decides at block `b`.
    pub(super) fn decided(&self, b: usize, x: u32) -> Option<(usize, u32)> {
        if (x as usize) < self.dense_width && self.outs[b].len() >= 2 {
            let k = self.dense[self.dense_row[b] + x as usize];
            return (k != 0).then(|| unpack(self.flat[k as usize - 1]));
        }
        let table = &self.decide[b];
        table
            .binary_search_by_key(&x, |&(w, _)| w)
            .ok()
            .map(|k| table[k].1)
    }
}

/// `f` ready for walking; with `dense`, with its dense decision table
/// (the plain walk decides on tables of its own, and leaves the general
/// walk a decision at most where it hands over).
pub(super) fn walkable(f: &FunctionInfo, dense: bool) -> Walkable {
    let cfg = f.cfg();
    let n = f.blocks.len();
    let mut outs = vec![Vec::new(); n];
    let mut decide = vec![Vec::new(); n];
    for &(from, to, w) in &f.edges {
        outs[from].push((to, w));
    }
    let out_index = cfg.out_index();
    let mut reach = Reach::new(&f.edges, &out_index, n);
    for (b, d) in decide.iter_mut().enumerate() {
        if outs[b].len() < 2 {
            continue;
        }
        for &e in &out_index[b] {
            let (_, to, w) = f.edges[e];
            if w != 0 {
                d.push((w, (to, w)));
            } else if to != n {
                d.extend(reach.of(to).iter().map(|&x| (x, (to, w))));
            }
        }
        d.sort_unstable_by_key(|&(x, _)| x);
        d.dedup_by_key(|&mut (x, _)| x);
    }
    // The dense table, rows for blocks with several ways out only.
    let width = f
        .edges
        .iter()
        .map(|&(_, _, w)| w as usize)
        .max()
        .unwrap_or(0)
        + 1;
    let deciders = (0..n).filter(|&b| outs[b].len() >= 2).count();
    let fits = dense && deciders * width <= DENSE_MAX;
    let mut first_out = Vec::with_capacity(n);
    let mut flat = Vec::new();
    for o in &outs {
        first_out.push(flat.len());
        flat.extend(o.iter().map(|&e| pack(e)));
    }
    let (mut dense, mut dense_row, mut dense_width) = (Vec::new(), vec![0; n], 0);
    if fits && deciders > 0 {
        dense_width = width;
        dense = vec![0u32; deciders * width];
        let mut row = 0;
        for b in (0..n).filter(|&b| outs[b].len() >= 2) {
            dense_row[b] = row;
            for &(x, edge) in &decide[b] {
                if let Some(k) = outs[b].iter().position(|&o| o == edge) {
                    dense[row + x as usize] = (first_out[b] + k) as u32 + 1;
                }
            }
            row += width;
        }
    }
    let mut part_exit = vec![false; n];
    for &b in &f.part_exits {
        part_exit[b] = true;
    }
    Walkable {
        flat,
        outs,
        decide,
        dense,
        dense_row,
        dense_width,
        exit: n,
        part_exit,
    }
}

/// Per block, the witnesses that can be the first written once it is
/// reached (those of the first witnessed edges along edges without; what
/// `witness::Plan::may_come_next` gives for an edge into it, less the
/// end of the run), sorted: each block's computed once, when first
/// asked, from those of the blocks after it. (Every cycle of a plan has
/// a witnessed edge; in a damaged table's cycle without one, a block
/// seen again on the way is left out.)
struct Reach<'a> {
    edges: &'a [(usize, usize, u32)],
    outs: &'a [Vec<usize>],
    exit: usize,
    sets: Vec<Option<std::rc::Rc<[u32]>>>,
    on_the_way: Vec<bool>,
}

impl<'a> Reach<'a> {
    fn new(edges: &'a [(usize, usize, u32)], outs: &'a [Vec<usize>], exit: usize) -> Self {
        Reach {
            edges,
            outs,
            exit,
            sets: vec![None; exit],
            on_the_way: vec![false; exit],
        }
    }

    /// The witnesses that can come first from block `b`.
    fn of(&mut self, b: usize) -> std::rc::Rc<[u32]> {
        // Blocks after their successors (without recursion: chains of
        // edges without witnesses can be long).
        let mut stack = vec![(b, false)];
        while let Some((v, successors_done)) = stack.pop() {
            if self.sets[v].is_some() {
                continue;
            }
            if !successors_done {
                if self.on_the_way[v] {
                    continue;
                }
                self.on_the_way[v] = true;
                stack.push((v, true));
                for &e in self.outs.get(v).into_iter().flatten() {
                    let (_, to, w) = self.edges[e];
                    if w == 0 && to < self.exit && self.sets[to].is_none() && !self.on_the_way[to] {
                        stack.push((to, false));
                    }
                }
                continue;
            }
            let mut set = Vec::new();
            for &e in self.outs.get(v).into_iter().flatten() {
                let (_, to, w) = self.edges[e];
                if w != 0 {
                    set.push(w);
                } else if let Some(after) = self.sets.get(to).and_then(|s| s.as_ref()) {
                    set.extend(after.iter().copied());
                }
            }
            set.sort_unstable();
            set.dedup();
            self.on_the_way[v] = false;
            self.sets[v] = Some(set.into());
        }
        self.sets[b]
            .clone()
            .unwrap_or_else(|| std::rc::Rc::from([]))
    }
}
