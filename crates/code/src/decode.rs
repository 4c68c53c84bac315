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
#[derive(Debug, Default, Clone)]
pub struct BranchTargets {
    targets: BTreeSet<u64>,
}

impl BranchTargets {
    /// An empty set.
    pub fn new() -> BranchTargets {
        BranchTargets::default()
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
                    self.targets.insert(i.near_branch_target());
                }
                _ => {}
            }
        }
    }

    /// Adds one address.
    pub fn insert(&mut self, addr: u64) {
        self.targets.insert(addr);
    }

    /// Whether any target lies in `(start, end)`, both exclusive.
    pub fn any_inside(&self, start: u64, end: u64) -> bool {
        start + 1 < end && self.targets.range(start + 1..end).next().is_some()
    }

    /// Whether `addr` is a target.
    pub fn contains(&self, addr: u64) -> bool {
        self.targets.contains(&addr)
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
}
