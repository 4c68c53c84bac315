//! Basic blocks and the control-flow graph of one function.

use crate::decode::decode_all;
use crate::jump_table::{self, JumpTable};
use crate::liveness::Liveness;
use crate::DataSource;
use iced_x86::{FlowControl, Instruction};
use std::collections::{BTreeMap, BTreeSet};

mod rebase;

/// How a basic block ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockEnd {
    /// Falls into the next block (the next instruction is a branch target).
    FallThrough,
    /// Unconditional jump inside the function.
    Jump,
    /// Conditional jump.
    CondJump,
    /// `ret`.
    Return,
    /// Jump out of the function (a tail call), direct or through a
    /// pointer ([`FunctionCode::mark_indirect_tail_calls`]).
    TailCall,
    /// Indirect jump through a resolved jump table.
    Switch,
    /// Indirect jump weft could not resolve (treated as a tail call).
    IndirectJump,
    /// `int3`, `ud2`, `hlt` and the like: no successor.
    Trap,
    /// The bytes ran out or did not decode.
    End,
}

/// A basic block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// Address of the first instruction.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// Index range into [`FunctionCode::instructions`].
    pub first: usize,
    /// One past the last instruction index.
    pub last: usize,
    /// Successor block indices.
    pub succs: Vec<usize>,
    /// How it ends.
    pub kind: BlockEnd,
}

/// A function's decoded instructions, blocks, jump tables and exits.
#[derive(Debug, Clone)]
pub struct FunctionCode {
    start: u64,
    end: u64,
    insns: Vec<Instruction>,
    blocks: Vec<Block>,
    jump_tables: Vec<JumpTable>,
    /// Targets outside the function that its jumps reach without leaving
    /// it: other parts of the same function (a `.cold` part), where every
    /// register may be read (see [`FunctionCode::set_other_parts`]).
    other_parts: BTreeSet<u64>,
    /// Places code outside jumps to (see [`FunctionCode::add_entries`]).
    entries: BTreeSet<u64>,
    /// Indirect jumps that are tail calls through a pointer (see
    /// [`FunctionCode::mark_indirect_tail_calls`]).
    tail_jumps: BTreeSet<u64>,
}

/// Where the jumps of the code whose bytes start at `start` go: the target
/// of each direct jump, taken always or on a condition, and every case of
/// each jump table it resolves (in range or not). What
/// [`FunctionCode::analyze`] finds, without its blocks.
pub fn jump_targets(start: u64, bytes: &[u8], data: &dyn DataSource) -> Vec<u64> {
    let end = start + bytes.len() as u64;
    let insns = decode_all(start, bytes);
    let mut out = Vec::new();
    for (k, i) in insns.iter().enumerate() {
        match i.flow_control() {
            FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                out.push(i.near_branch_target());
            }
            FlowControl::IndirectBranch => {
                if let Some(t) = jump_table::resolve(&insns, k, start, end, data) {
                    out.extend(t.targets.iter().chain(&t.outside).copied());
                }
            }
            _ => {}
        }
    }
    out
}

impl FunctionCode {
    /// Decodes and partitions the function whose bytes start at `start`.
    pub fn analyze(start: u64, bytes: &[u8], data: &dyn DataSource) -> FunctionCode {
        let end = start + bytes.len() as u64;
        let insns = decode_all(start, bytes);
        let mut jump_tables = Vec::new();
        for (k, i) in insns.iter().enumerate() {
            if i.flow_control() == FlowControl::IndirectBranch {
                if let Some(t) = jump_table::resolve(&insns, k, start, end, data) {
                    jump_tables.push(t);
                }
            }
        }
        let blocks = partition(
            start,
            end,
            &insns,
            &jump_tables,
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        FunctionCode {
            start,
            end,
            insns,
            blocks,
            jump_tables,
            other_parts: BTreeSet::new(),
            entries: BTreeSet::new(),
            tail_jumps: BTreeSet::new(),
        }
    }

    /// Says which targets of the function's jumps out of its range are
    /// other parts of the same function (a `.cold` part its compiler split
    /// off, entered by jumps, that goes on with every register as the jump
    /// left it), not tail calls. Liveness then keeps every register live
    /// at those jumps.
    pub fn set_other_parts(&mut self, targets: BTreeSet<u64>) {
        self.other_parts = targets;
    }

    /// Starts a block at each of `entries` that is an instruction of the
    /// function (places code outside jumps to: the way back from a `.cold`
    /// part), besides the places the function's own code starts one.
    pub fn add_entries(&mut self, entries: &[u64]) {
        self.entries.extend(entries.iter().copied());
        self.repartition();
    }

    /// Makes each indirect jump still unresolved (a `switch` whose table
    /// weft cannot find, a jump through a pointer that is no tail call) a
    /// `switch` over every instruction of the function, each of which then
    /// starts a block; a target outside the function leaves it. Exact at
    /// any run-time target, for the price of a search per jump and a
    /// witness per target.
    pub fn dispatch_unresolved_over_every_instruction(&mut self) {
        let unresolved: Vec<u64> = self
            .blocks
            .iter()
            .filter(|b| b.kind == BlockEnd::IndirectJump)
            .map(|b| self.insns[b.last - 1].ip())
            .collect();
        if unresolved.is_empty() {
            return;
        }
        let every: Vec<u64> = self.insns.iter().map(|i| i.ip()).collect();
        for jump in unresolved {
            self.jump_tables.push(JumpTable {
                jump,
                table: 0,
                targets: every.clone(),
                outside: Vec::new(),
                elsewhere: true,
            });
        }
        self.repartition();
    }

    /// Gives each indirect jump no jump table describes the targets
    /// `targets` that are instructions of the function (the code addresses
    /// its module keeps in data: the labels of a computed `goto`), as a
    /// table: such a jump becomes a `switch` over them, and each target
    /// starts a block. A jump that goes elsewhere at run time leaves the
    /// function by a way its CFG does not show.
    pub fn add_computed_targets(&mut self, targets: &[u64]) {
        let inside: Vec<u64> = targets
            .iter()
            .copied()
            .filter(|&a| {
                a >= self.start
                    && a < self.end
                    && self.insns.binary_search_by_key(&a, |i| i.ip()).is_ok()
            })
            .collect();
        if inside.is_empty() {
            return;
        }
        // A `switch` whose table weft cannot find is no computed `goto`:
        // it stays unresolved (and its function untraced).
        let unresolved: Vec<u64> = self
            .insns
            .iter()
            .enumerate()
            .filter(|(k, i)| {
                i.flow_control() == FlowControl::IndirectBranch
                    && !jump_table::is_offset_switch(&self.insns, *k)
            })
            .map(|(_, i)| i.ip())
            .filter(|&ip| !self.jump_tables.iter().any(|t| t.jump == ip))
            .collect();
        if unresolved.is_empty() {
            return;
        }
        for jump in unresolved {
            self.jump_tables.push(JumpTable {
                jump,
                table: 0,
                targets: inside.clone(),
                outside: Vec::new(),
                elsewhere: true,
            });
        }
        self.repartition();
    }

    fn repartition(&mut self) {
        self.blocks = partition(
            self.start,
            self.end,
            &self.insns,
            &self.jump_tables,
            &self.entries,
            &self.tail_jumps,
        );
    }

    /// Whether the indirect jump at `ip` is a tail call through a pointer
    /// (see [`FunctionCode::mark_indirect_tail_calls`]).
    pub fn is_indirect_tail_call(&self, ip: u64) -> bool {
        self.tail_jumps.contains(&ip)
    }

    /// Makes each unresolved indirect jump that leaves with the frame gone
    /// (`rsp` back at its entry height, see [`crate::stack`]) and takes
    /// its target from no table a tail call through a pointer
    /// ([`BlockEnd::TailCall`]): `pop rbx; jmp *%rax` after loading a
    /// function pointer. The caller says when this holds: when no code
    /// address inside the function is kept in data (a computed `goto`'s
    /// labels, which a frameless function could jump to the same way).
    pub fn mark_indirect_tail_calls(&mut self) {
        let found: Vec<u64> = self
            .blocks
            .iter()
            .filter(|b| b.kind == BlockEnd::IndirectJump)
            .map(|b| b.last - 1)
            .filter(|&at| {
                !jump_table::fed_by_table(&self.insns, at)
                    && crate::stack::rsp_before(self, at) == Some(0)
            })
            .map(|at| self.insns[at].ip())
            .collect();
        if !found.is_empty() {
            self.tail_jumps.extend(found);
            self.repartition();
        }
    }

    /// The targets [`FunctionCode::set_other_parts`] named.
    pub fn other_parts(&self) -> impl Iterator<Item = u64> + '_ {
        self.other_parts.iter().copied()
    }

    /// Whether a jump to `target`, outside the function, goes on in another
    /// part of it (see [`FunctionCode::set_other_parts`]).
    pub fn is_other_part(&self, target: u64) -> bool {
        self.other_parts.contains(&target)
    }

    /// First address.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Decoded instructions in address order.
    pub fn instructions(&self) -> &[Instruction] {
        &self.insns
    }

    /// Basic blocks in address order.
    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Resolved jump tables.
    pub fn jump_tables(&self) -> &[JumpTable] {
        &self.jump_tables
    }

    /// Index of the instruction starting exactly at `addr`.
    pub fn index_of(&self, addr: u64) -> Option<usize> {
        self.insns.binary_search_by_key(&addr, |i| i.ip()).ok()
    }

    /// How far `rsp` stands below where it stood at the entry, before the
    /// instruction at `addr` (a negative offset: `Some(-16)` after two
    /// pushes), where the code alone says (see `stack.rs`).
    pub fn rsp_height_before(&self, addr: u64) -> Option<i64> {
        crate::stack::rsp_before(self, self.index_of(addr)?)
    }

    /// The instruction starting at `addr`.
    pub fn instruction_at(&self, addr: u64) -> Option<&Instruction> {
        self.index_of(addr).map(|k| &self.insns[k])
    }

    /// Whether an indirect jump could not be resolved (its targets are unknown).
    pub fn has_unresolved_indirect_jump(&self) -> bool {
        self.blocks.iter().any(|b| b.kind == BlockEnd::IndirectJump)
    }

    /// Every address inside the function that its own branches and jump tables reach.
    pub fn internal_targets(&self) -> BTreeSet<u64> {
        let mut out: BTreeSet<u64> = BTreeSet::new();
        for i in &self.insns {
            if is_direct_branch(i)
                && i.near_branch_target() >= self.start
                && i.near_branch_target() < self.end
            {
                out.insert(i.near_branch_target());
            }
        }
        for t in &self.jump_tables {
            out.extend(t.targets.iter().copied());
        }
        out
    }

    /// Instructions that leave the function: each `ret`, each jump out of
    /// it (tail call) and each unresolved indirect jump.
    pub fn exits(&self) -> Vec<u64> {
        self.blocks
            .iter()
            .filter(|b| {
                matches!(
                    b.kind,
                    BlockEnd::Return | BlockEnd::TailCall | BlockEnd::IndirectJump
                )
            })
            .map(|b| self.insns[b.last - 1].ip())
            .collect()
    }

    /// Register and flags liveness over this CFG.
    pub fn liveness(&self) -> Liveness {
        Liveness::compute(self)
    }

    /// The CFG in Graphviz DOT, one node per block with its instructions.
    pub fn to_dot(&self, name: &str) -> String {
        let mut s = format!(
            "digraph \"{}\" {{\n  node [shape=box fontname=monospace];\n",
            escape(name)
        );
        for (k, b) in self.blocks.iter().enumerate() {
            let mut label = String::new();
            for i in &self.insns[b.first..b.last] {
                label.push_str(&format!(
                    "{:#x}: {}\\l",
                    i.ip(),
                    escape(&crate::format_instruction(i))
                ));
            }
            s.push_str(&format!("  b{k} [label=\"{label}\"];\n"));
            for t in &b.succs {
                s.push_str(&format!("  b{k} -> b{t};\n"));
            }
        }
        s.push_str("}\n");
        s
    }
}

/// Splits `insns` into basic blocks: a block starts at the function's
/// start, after every instruction that does not fall through (calls do),
/// at every branch or jump-table target inside, and at each of `entries`
/// (places code outside jumps to).
fn partition(
    start: u64,
    end: u64,
    insns: &[Instruction],
    jump_tables: &[JumpTable],
    entries: &BTreeSet<u64>,
    tail_jumps: &BTreeSet<u64>,
) -> Vec<Block> {
    let index: BTreeMap<u64, usize> = insns.iter().enumerate().map(|(k, i)| (i.ip(), k)).collect();
    let inside = |a: u64| a >= start && a < end && index.contains_key(&a);
    let mut leaders: BTreeSet<usize> = BTreeSet::new();
    if !insns.is_empty() {
        leaders.insert(0);
    }
    for a in entries {
        if let Some(&k) = index.get(a) {
            leaders.insert(k);
        }
    }
    for (k, i) in insns.iter().enumerate() {
        let ends_block = !matches!(
            i.flow_control(),
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall
        );
        if ends_block && k + 1 < insns.len() {
            leaders.insert(k + 1);
        }
        if is_direct_branch(i) && inside(i.near_branch_target()) {
            leaders.insert(index[&i.near_branch_target()]);
        }
    }
    for t in jump_tables {
        for a in &t.targets {
            if let Some(&k) = index.get(a) {
                leaders.insert(k);
            }
        }
    }
    let leaders: Vec<usize> = leaders.into_iter().collect();
    let block_of: BTreeMap<usize, usize> =
        leaders.iter().enumerate().map(|(b, &k)| (k, b)).collect();
    let mut blocks = Vec::with_capacity(leaders.len());
    for (b, &first) in leaders.iter().enumerate() {
        let last = leaders.get(b + 1).copied().unwrap_or(insns.len());
        let tail = &insns[last - 1];
        let mut succs = Vec::new();
        let next_block = (last < insns.len()).then(|| block_of[&last]);
        let target_block = |a: u64| index.get(&a).and_then(|k| block_of.get(k)).copied();
        let kind = match tail.flow_control() {
            FlowControl::Next | FlowControl::Call | FlowControl::IndirectCall => {
                succs.extend(next_block);
                if next_block.is_some() {
                    BlockEnd::FallThrough
                } else {
                    BlockEnd::End
                }
            }
            FlowControl::ConditionalBranch => {
                succs.extend(next_block);
                if is_direct_branch(tail) {
                    succs.extend(target_block(tail.near_branch_target()));
                }
                BlockEnd::CondJump
            }
            FlowControl::UnconditionalBranch => match target_block(tail.near_branch_target()) {
                Some(t) if inside(tail.near_branch_target()) => {
                    succs.push(t);
                    BlockEnd::Jump
                }
                _ => BlockEnd::TailCall,
            },
            FlowControl::IndirectBranch => match jump_tables.iter().find(|t| t.jump == tail.ip()) {
                Some(t) => {
                    succs.extend(t.targets.iter().filter_map(|&a| target_block(a)));
                    BlockEnd::Switch
                }
                None if tail_jumps.contains(&tail.ip()) => BlockEnd::TailCall,
                None => BlockEnd::IndirectJump,
            },
            FlowControl::Return => BlockEnd::Return,
            _ => BlockEnd::Trap,
        };
        succs.sort_unstable();
        succs.dedup();
        blocks.push(Block {
            start: insns[first].ip(),
            end: tail.next_ip(),
            first,
            last,
            succs,
            kind,
        });
    }
    blocks
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A branch with an immediate target (jmp, jcc, jrcxz, loop, call).
pub(crate) fn is_direct_branch(i: &Instruction) -> bool {
    i.is_jmp_short_or_near()
        || i.is_jcc_short_or_near()
        || i.is_jcx_short()
        || i.is_loop()
        || i.is_loopcc()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoData;

    #[test]
    fn diamond() {
        // 0: test edi,edi (85 ff) 2: je +4 (74 04) 4: mov eax,1 (b8 01 00 00 00)? keep it short:
        // 0: 85 ff        test edi,edi
        // 2: 74 03        je 7
        // 4: 31 c0        xor eax,eax
        // 6: c3           ret
        // 7: b8 01 00 00 00 mov eax,1
        // c: c3           ret
        let code = [
            0x85, 0xff, 0x74, 0x03, 0x31, 0xc0, 0xc3, 0xb8, 1, 0, 0, 0, 0xc3,
        ];
        let f = FunctionCode::analyze(0x100, &code, &NoData);
        assert_eq!(f.blocks().len(), 3);
        assert_eq!(f.blocks()[0].succs, vec![1, 2]);
        assert_eq!(f.blocks()[0].kind, BlockEnd::CondJump);
        assert_eq!(f.exits(), vec![0x106, 0x10c]);
        assert!(f.internal_targets().contains(&0x107));
        assert!(f.to_dot("f").contains("b0 -> b2"));
    }

    #[test]
    fn an_indirect_jump_with_the_frame_gone_is_a_tail_call() {
        let marked = |code: &[u8]| {
            let mut f = FunctionCode::analyze(0x100, code, &NoData);
            assert!(f.has_unresolved_indirect_jump());
            f.mark_indirect_tail_calls();
            f.blocks().last().unwrap().kind
        };
        // mov rax, rdi; push rbx; pop rbx; jmp rax
        let code = [0x48, 0x89, 0xf8, 0x53, 0x5b, 0xff, 0xe0];
        assert_eq!(marked(&code), BlockEnd::TailCall);
        let mut f = FunctionCode::analyze(0x100, &code, &NoData);
        f.mark_indirect_tail_calls();
        assert!(!f.has_unresolved_indirect_jump());
        assert_eq!(f.exits(), vec![0x105]);
        // A word still pushed: no tail call. push rbx; jmp rax
        assert_eq!(marked(&[0x53, 0xff, 0xe0]), BlockEnd::IndirectJump);
        // A table weft could not read (indexed): a switch, even frameless.
        // jmp [rax*8+0x2000]
        let table = [0xff, 0x24, 0xc5, 0x00, 0x20, 0x00, 0x00];
        assert_eq!(marked(&table), BlockEnd::IndirectJump);
        // movsxd rax, [r13+rax*4]; add rax, r13; jmp rax: an offset table
        // whose base weft cannot find.
        let offsets = [0x49, 0x63, 0x44, 0x85, 0x00, 0x4c, 0x01, 0xe8, 0xff, 0xe0];
        assert_eq!(marked(&offsets), BlockEnd::IndirectJump);
    }

    #[test]
    fn tail_call_is_exit() {
        // 0: e9 xx xx xx xx  jmp far away
        let code = [0xe9, 0x00, 0x10, 0x00, 0x00];
        let f = FunctionCode::analyze(0x100, &code, &NoData);
        assert_eq!(f.blocks()[0].kind, BlockEnd::TailCall);
        assert_eq!(f.exits(), vec![0x100]);
    }

    /// The switch of `pic_jump_table` with its three table entries
    /// pointing at `targets` (entries are offsets from the table at 0x20).
    fn switch_with_table(targets: [i32; 3]) -> FunctionCode {
        let code = vec![
            0x83, 0xff, 0x02, 0x77, 0x17, 0x48, 0x8d, 0x15, 0x14, 0, 0, 0, 0x48, 0x63, 0x04, 0xba,
            0x48, 0x01, 0xd0, 0xff, 0xe0, 0xb8, 1, 0, 0, 0, 0xc3, 0xc3, 0x31, 0xc0, 0xc3, 0xcc,
        ];
        assert_eq!(code.len(), 0x20);
        let image: Vec<u8> = code
            .iter()
            .copied()
            .chain(targets.iter().flat_map(|t| (t - 0x20).to_le_bytes()))
            .collect();
        let data =
            move |a: u64, n: usize| image.get(a as usize..a as usize + n).map(|s| s.to_vec());
        FunctionCode::analyze(0, &code, &data)
    }

    #[test]
    fn pic_jump_table() {
        // 0x00: cmp edi,2            83 ff 02
        // 0x03: ja 0x1c              77 17
        // 0x05: lea rdx,[rip+0x14]   48 8d 15 14 00 00 00   -> table at 0x20
        // 0x0c: movsxd rax,[rdx+rdi*4] 48 63 04 ba
        // 0x10: add rax,rdx          48 01 d0
        // 0x13: jmp rax              ff e0
        // 0x15: mov eax,1; ret       b8 01 00 00 00 c3   (case 0 at 0x15)
        // 0x1b: ret                  c3                  (case 1 at 0x1b)
        // 0x1c: xor eax,eax; ret     31 c0 c3            (case 2 / default at 0x1c)
        // 0x1f: pad                  cc
        // 0x20: table: 0x15-0x20, 0x1b-0x20, 0x1c-0x20
        let f = switch_with_table([0x15, 0x1b, 0x1c]);
        assert_eq!(f.jump_tables().len(), 1, "{:?}", f.blocks());
        assert_eq!(f.jump_tables()[0].targets, vec![0x15, 0x1b, 0x1c]);
        assert!(f.internal_targets().contains(&0x1b));
        assert!(!f.has_unresolved_indirect_jump());
        assert!(f.jump_tables()[0].outside.is_empty());
    }

    /// `code` analysed at address 0 with a table of 32-bit offsets right
    /// after it, one per target (offsets from the table).
    fn with_offset_table(code: Vec<u8>, targets: &[i32]) -> FunctionCode {
        let table = code.len() as i32;
        let image: Vec<u8> = code
            .iter()
            .copied()
            .chain(targets.iter().flat_map(|t| (t - table).to_le_bytes()))
            .collect();
        let data =
            move |a: u64, n: usize| image.get(a as usize..a as usize + n).map(|s| s.to_vec());
        FunctionCode::analyze(0, &code, &data)
    }

    /// At 0x1b: a switch on edi through the table whose address r14
    /// holds, and its cases 0 (0x29) and 1 (0x2f); case 2 and the default
    /// follow at 0x30.
    const R14_DISPATCH: [u8; 21] = [
        0x83, 0xff, 0x02, // 0x1b: cmp edi,2
        0x77, 0x10, // 0x1e: ja 0x30
        0x49, 0x63, 0x04, 0xbe, // 0x20: movsxd rax,[r14+rdi*4]
        0x4c, 0x01, 0xf0, // 0x24: add rax,r14
        0xff, 0xe0, // 0x27: jmp rax
        0xb8, 1, 0, 0, 0, 0xc3, // 0x29: case 0
        0xc3, // 0x2f: case 1
    ];

    /// A switch whose table base is loaded far before the jump (20 `nop`s
    /// between), as GCC hoists it out of a loop: `lea r14, [rip+T]`, then
    /// `movsxd rax, [r14+rdi*4]; add rax, r14; jmp rax`. With `clobber`,
    /// the body also writes r14 (`mov r14, rdi`).
    fn far_table_switch(clobber: bool) -> FunctionCode {
        let mut code = vec![0x4c, 0x8d, 0x35, 0x2d, 0, 0, 0]; // lea r14,[rip+0x2d] -> 0x34
        let filler: &[u8] = if clobber {
            &[0x49, 0x89, 0xfe]
        } else {
            &[0x90; 3]
        };
        code.extend_from_slice(filler);
        code.extend_from_slice(&[0x90; 17]); // to 0x1b
        code.extend_from_slice(&R14_DISPATCH);
        code.extend_from_slice(&[
            0x31, 0xc0, 0xc3, // 0x30: case 2 and default
            0xcc, // 0x33
        ]);
        assert_eq!(code.len(), 0x34);
        with_offset_table(code, &[0x29, 0x2f, 0x30])
    }

    /// `far_table_switch`'s shape with the base register written again
    /// after the `switch`, on a way that never leads back to it (bash's
    /// `enable_builtin`): `mov r14, rdi` in the default case.
    fn base_written_after_the_switch() -> FunctionCode {
        let mut code = vec![0x4c, 0x8d, 0x35, 0x31, 0, 0, 0]; // lea r14,[rip+0x31] -> 0x38
        code.extend_from_slice(&[0x90; 20]); // to 0x1b
        code.extend_from_slice(&R14_DISPATCH);
        code.extend_from_slice(&[
            0x49, 0x89, 0xfe, // 0x30: mov r14,rdi (default)
            0x31, 0xc0, 0xc3, // 0x33: xor eax,eax; ret
            0xcc, 0xcc, // 0x36
        ]);
        assert_eq!(code.len(), 0x38);
        with_offset_table(code, &[0x29, 0x2f, 0x30])
    }

    #[test]
    fn a_table_base_written_again_only_after_the_switch() {
        let f = base_written_after_the_switch();
        assert_eq!(f.jump_tables().len(), 1, "{:?}", f.blocks());
        assert_eq!(f.jump_tables()[0].targets, vec![0x29, 0x2f, 0x30]);
        // Taken for a computed `goto` when unresolved, the jump would have
        // had the function's entry (a code address in data) as its case.
        let mut g = far_table_switch(true);
        g.add_computed_targets(&[0]);
        assert!(g.jump_tables().is_empty(), "{:?}", g.jump_tables());
        assert!(g.has_unresolved_indirect_jump());
    }

    #[test]
    fn an_unresolved_switch_dispatches_over_every_instruction() {
        let mut f = far_table_switch(true);
        assert!(f.has_unresolved_indirect_jump());
        f.dispatch_unresolved_over_every_instruction();
        assert!(!f.has_unresolved_indirect_jump());
        // Every instruction starts a block, and the jump's block reaches
        // each of them; a target outside leaves the function.
        assert_eq!(f.blocks().len(), f.instructions().len());
        let jump = f
            .blocks()
            .iter()
            .find(|b| b.kind == BlockEnd::Switch)
            .expect("the jump is a switch");
        assert_eq!(jump.succs, (0..f.blocks().len()).collect::<Vec<_>>());
        let t = &f.jump_tables()[0];
        assert!(t.elsewhere);
        assert_eq!(t.targets.len(), f.instructions().len());
    }

    #[test]
    fn a_table_base_loaded_far_before_the_jump() {
        let f = far_table_switch(false);
        assert_eq!(f.jump_tables().len(), 1, "{:?}", f.blocks());
        assert_eq!(f.jump_tables()[0].targets, vec![0x29, 0x2f, 0x30]);
        assert!(!f.has_unresolved_indirect_jump());
        // Another write of the base register: no table is guessed.
        let f = far_table_switch(true);
        assert!(f.jump_tables().is_empty(), "{:?}", f.jump_tables());
        assert!(f.has_unresolved_indirect_jump());
    }

    #[test]
    fn a_switch_with_cases_in_a_cold_part() {
        // The table of `pic_jump_table` with case 1 sent to 0x900, outside
        // the function (a `.cold` part, as GCC splits python3.11's).
        let mut f = switch_with_table([0x15, 0x900, 0x1c]);
        let t = &f.jump_tables()[0];
        assert_eq!(
            (t.targets.clone(), t.outside.clone()),
            (vec![0x15, 0x1c], vec![0x900])
        );
        // Every register is live at the dispatch: the cold case may read any.
        f.set_other_parts([0x900].into_iter().collect());
        let live = f.liveness().live_before(0x13).unwrap();
        assert!(live.contains(iced_x86::Register::R10), "{live}");
    }
}
