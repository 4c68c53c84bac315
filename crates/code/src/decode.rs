//! Decoding and module-wide branch targets.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Formatter, GasFormatter, Instruction};
use std::collections::BTreeSet;

/// Decodes `bytes` at `ip` linearly. Undecodable bytes end the run.
pub fn decode_all(ip: u64, bytes: &[u8]) -> Vec<Instruction> {
    let mut decoder = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let mut out = Vec::with_capacity(bytes.len() / 4);
    let mut insn = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            break;
        }
        out.push(insn);
    }
    out
}

/// AT&T-syntax text of one instruction, as objdump prints it.
pub fn format_instruction(insn: &Instruction) -> String {
    let mut f = GasFormatter::new();
    f.options_mut().set_first_operand_char_index(8);
    let mut s = String::new();
    f.format(insn, &mut s);
    s
}

/// Every address that some instruction of a module may branch or call to:
/// direct jump, conditional jump and call targets, plus resolved
/// jump-table targets. A splice must not cover one of these except at its
/// first byte.
///
/// The set is kept at the addresses it was built with, shared, and read
/// through an offset: [`BranchTargets::rebased`] gives the same targets
/// for the module loaded elsewhere (another process, another load bias)
/// without copying or decoding again.
#[derive(Debug, Default, Clone)]
pub struct BranchTargets {
    targets: std::sync::Arc<BTreeSet<u64>>,
    /// Added to every stored address to give the addresses queried.
    offset: u64,
}

impl BranchTargets {
    /// An empty set.
    pub fn new() -> BranchTargets {
        BranchTargets::default()
    }

    /// The same targets `offset` bytes further (sharing the set).
    pub fn rebased(&self, offset: u64) -> BranchTargets {
        BranchTargets {
            targets: std::sync::Arc::clone(&self.targets),
            offset: self.offset.wrapping_add(offset),
        }
    }

    fn stored(&self, addr: u64) -> u64 {
        addr.wrapping_sub(self.offset)
    }

    /// Adds the direct targets of a decoded run.
    pub fn add_instructions(&mut self, insns: &[Instruction]) {
        for i in insns {
            match i.flow_control() {
                FlowControl::UnconditionalBranch
                | FlowControl::ConditionalBranch
                | FlowControl::Call
                    if (i.is_jmp_short_or_near()
                        || i.is_jcc_short_or_near()
                        || i.is_call_near()
                        || i.is_jcx_short()
                        || i.is_loop()
                        || i.is_loopcc()) =>
                {
                    self.insert(i.near_branch_target());
                }
                _ => {}
            }
        }
    }

    /// Adds one address.
    pub fn insert(&mut self, addr: u64) {
        let at = self.stored(addr);
        std::sync::Arc::make_mut(&mut self.targets).insert(at);
    }

    /// Whether any target lies in `(start, end)`, both exclusive.
    pub fn any_inside(&self, start: u64, end: u64) -> bool {
        start + 1 < end
            && self
                .targets
                .range(self.stored(start) + 1..self.stored(end))
                .next()
                .is_some()
    }

    /// The targets in `range`, in order.
    pub fn within(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = u64> + '_ {
        let (lo, hi) = (self.stored(range.start), self.stored(range.end));
        self.targets
            .range(lo..hi.max(lo))
            .map(|&t| t.wrapping_add(self.offset))
    }

    /// Whether `addr` is a target.
    pub fn contains(&self, addr: u64) -> bool {
        self.targets.contains(&self.stored(addr))
    }

    /// The targets, in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.targets.iter().map(|&t| t.wrapping_add(self.offset))
    }

    /// Number of distinct targets.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_inside() {
        // 0x1000: jne 0x1003 (75 01); 0x1002: nop; 0x1003: ret
        let insns = decode_all(0x1000, &[0x75, 0x01, 0x90, 0xc3]);
        assert_eq!(insns.len(), 3);
        let mut t = BranchTargets::new();
        t.add_instructions(&insns);
        assert!(t.contains(0x1003));
        assert!(t.any_inside(0x1000, 0x1004));
        assert!(!t.any_inside(0x1003, 0x1008));
        assert_eq!(format_instruction(&insns[0]), "jne     0x0000000000001003");
    }

    #[test]
    fn rebased_targets_answer_at_the_new_addresses() {
        let mut t = BranchTargets::new();
        t.insert(0x1003);
        let moved = t.rebased(0x7f00_0000_0000);
        assert!(moved.contains(0x7f00_0000_1003));
        assert!(!moved.contains(0x1003));
        assert!(moved.any_inside(0x7f00_0000_1000, 0x7f00_0000_1004));
        assert!(!moved.any_inside(0x7f00_0000_1003, 0x7f00_0000_1008));
        let base = 0x7f00_0000_0000;
        assert_eq!(
            moved
                .within(base + 0x1000..base + 0x1004)
                .collect::<Vec<_>>(),
            [base + 0x1003]
        );
        assert_eq!(moved.within(base + 0x1004..base + 0x1008).count(), 0);
        // An insert through the moved view lands at its own address, and
        // leaves the original alone.
        let mut moved = moved;
        moved.insert(0x7f00_0000_2000);
        assert!(moved.contains(0x7f00_0000_2000));
        assert!(!t.contains(0x2000));
        assert_eq!((t.len(), moved.len()), (1, 2));
    }
}
