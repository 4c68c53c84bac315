//! Moving one instruction to another address.
//!
//! Relative branches and RIP-relative operands are re-encoded for the new
//! address (short branches widened); a `call` becomes `push <original return
//! address>; jmp <target>`, so the callee returns to the original code and
//! unwinders see the original caller.

use crate::{Error, Result};
use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, FlowControl, Instruction, InstructionBlock,
    MemoryOperand, Register,
};

/// Why an instruction cannot be moved, or `None` if it can.
pub fn can_relocate(i: &Instruction) -> Option<&'static str> {
    if i.is_invalid() {
        return Some("undecodable");
    }
    // The kernel returns to the next instruction, wherever it is (and
    // restarts an interrupted call 2 bytes back, at the copy).
    if i.code() == Code::Syscall {
        return None;
    }
    match i.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => {
            let uses_rsp = (0..i.op_count()).any(|k| i.op_kind(k) == iced_x86::OpKind::Memory)
                && (i.memory_base().full_register() == Register::RSP
                    || i.memory_index().full_register() == Register::RSP);
            if uses_rsp {
                return Some("call through a stack slot");
            }
            if !matches!(i.code(), Code::Call_rel32_64 | Code::Call_rm64) {
                return Some("unusual call form");
            }
            None
        }
        // A pc-relative read of the instruction's own bytes would see the splice.
        _ if i.is_ip_rel_memory_operand()
            && i.ip_rel_memory_address() >= i.ip()
            && i.ip_rel_memory_address() < i.next_ip() =>
        {
            Some("reads its own bytes")
        }
        _ => None,
    }
}

/// Encodes `i` at `new_ip`. For a call, `ret_literal` is the address of an
/// 8-byte slot holding the original return address (`i.next_ip()`).
pub fn relocate_one(i: &Instruction, new_ip: u64, ret_literal: Option<u64>) -> Result<Vec<u8>> {
    encode_at(&relocated_form(i, ret_literal)?, new_ip)
}

/// The instructions that replace `i` at another address: `i` itself, or for
/// a call `push <ret_literal slot>; jmp <target>`. Their `ip` is cleared, so
/// that encoding them in one block never redirects a branch to a copy.
pub(crate) fn relocated_form(
    i: &Instruction,
    ret_literal: Option<u64>,
) -> Result<Vec<Instruction>> {
    if let Some(why) = can_relocate(i) {
        return Err(Error::NotRelocatable { addr: i.ip(), why });
    }
    let mut seq: Vec<Instruction> = Vec::with_capacity(2);
    match i.code() {
        Code::Call_rel32_64 | Code::Call_rm64 => {
            let slot = ret_literal.ok_or(Error::NotRelocatable {
                addr: i.ip(),
                why: "call without a return-address slot",
            })?;
            seq.push(Instruction::with1(
                Code::Push_rm64,
                MemoryOperand::with_base_displ(Register::RIP, slot as i64),
            )?);
            let mut jmp = *i;
            jmp.set_code(if i.code() == Code::Call_rel32_64 {
                Code::Jmp_rel32_64
            } else {
                Code::Jmp_rm64
            });
            seq.push(jmp);
        }
        _ => seq.push(*i),
    }
    for s in seq.iter_mut() {
        s.set_ip(0);
    }
    Ok(seq)
}

/// Encodes a sequence in one block at `ip`. Branch targets are absolute;
/// instructions with `ip` 0 are never treated as branch targets.
pub(crate) fn encode_block(insns: &[Instruction], ip: u64) -> Result<Vec<u8>> {
    if let Some(to) = crate::error::beyond_reach(insns, ip) {
        return Err(Error::OutOfReach { from: ip, to });
    }
    let r = BlockEncoder::encode(
        64,
        InstructionBlock::new(insns, ip),
        BlockEncoderOptions::NONE,
    )?;
    Ok(r.code_buffer)
}

/// Encodes instructions one after another starting at `ip`.
pub(crate) fn encode_at(insns: &[Instruction], ip: u64) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for i in insns {
        let at = ip + out.len() as u64;
        let one = std::slice::from_ref(i);
        if let Some(to) = crate::error::beyond_reach(one, at) {
            return Err(Error::OutOfReach { from: at, to });
        }
        let r = BlockEncoder::encode(
            64,
            InstructionBlock::new(one, at),
            BlockEncoderOptions::NONE,
        )?;
        out.extend_from_slice(&r.code_buffer);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_code::decode_all;

    fn disasm(bytes: &[u8], ip: u64) -> Vec<String> {
        decode_all(ip, bytes)
            .iter()
            .map(weft_code::format_instruction)
            .collect()
    }

    #[test]
    fn rip_relative_load_keeps_its_target() {
        // 0x1000: mov rax, [rip+0x100]  -> reads 0x1107
        let i = decode_all(0x1000, &[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00])[0];
        let out = relocate_one(&i, 0x2000_0000, None).unwrap();
        let moved = decode_all(0x2000_0000, &out)[0];
        assert_eq!(moved.ip_rel_memory_address(), 0x1107);
    }

    #[test]
    fn out_of_reach_is_told_by_the_numbers() {
        // 0x1000: mov rax, [rip+0x100]: placed 3 GiB away it cannot reach 0x1107.
        let i = decode_all(0x1000, &[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00])[0];
        match relocate_one(&i, 0xc000_0000, None) {
            Err(Error::OutOfReach { from, to }) => assert_eq!((from, to), (0xc000_0000, 0x1107)),
            other => panic!("expected OutOfReach, got {other:?}"),
        }
        // 0x1000: jne 0x1007, likewise.
        let j = decode_all(0x1000, &[0x75, 0x05])[0];
        assert!(matches!(
            relocate_one(&j, 0xc000_0000, None),
            Err(Error::OutOfReach { to: 0x1007, .. })
        ));
    }

    #[test]
    fn short_jcc_is_widened() {
        // 0x1000: jne 0x1007
        let i = decode_all(0x1000, &[0x75, 0x05])[0];
        let out = relocate_one(&i, 0x4000_0000, None).unwrap();
        assert_eq!(
            disasm(&out, 0x4000_0000),
            vec!["jne     0x0000000000001007"]
        );
    }

    #[test]
    fn call_returns_to_original_code() {
        // 0x1000: call 0x2000
        let i = decode_all(0x1000, &[0xe8, 0xfb, 0x0f, 0x00, 0x00])[0];
        assert_eq!(i.near_branch_target(), 0x2000);
        let out = relocate_one(&i, 0x10_0000, Some(0x10_0100)).unwrap();
        let moved = decode_all(0x10_0000, &out);
        assert_eq!(moved.len(), 2);
        assert!(
            moved[0].is_ip_rel_memory_operand() && moved[0].ip_rel_memory_address() == 0x10_0100
        );
        assert_eq!(disasm(&out, 0x10_0000)[1], "jmp     0x0000000000002000");
        assert!(relocate_one(&i, 0x10_0000, None).is_err());
    }

    #[test]
    fn call_through_stack_is_refused() {
        // call qword [rsp+8]: ff 54 24 08
        let i = decode_all(0x1000, &[0xff, 0x54, 0x24, 0x08])[0];
        assert!(can_relocate(&i).is_some());
    }
}
