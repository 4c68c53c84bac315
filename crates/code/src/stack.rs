//! Stack heights: how far `rsp` stands below where it stood at the
//! function's entry, before each instruction, where the code alone says.
//!
//! The one use is telling an indirect jump that leaves the function (a
//! tail call through a pointer: `jmp *%rax` after the epilogue, as
//! sqlite's `sqlite3_free` calls the allocator's `xFree`) from a `switch`
//! whose table weft could not find: a tail call jumps with the frame gone,
//! `rsp` back at its entry height. Heights are tracked through `push`,
//! `pop`, `sub`/`add rsp, imm`, `lea rsp, [rsp+d]` and a frame pointer
//! (`mov rbp, rsp`, `leave`, `mov rsp, rbp`); anything else that writes
//! `rsp` (an `and rsp, -32` that aligns it) leaves the height unknown
//! until the frame pointer restores it. Calls are taken to return with
//! `rsp` where it was.

use crate::cfg::FunctionCode;
use iced_x86::{
    Code, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind, Register,
};

/// `rsp` and `rbp` relative to `rsp` at the entry (`None`: unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Heights {
    rsp: Option<i64>,
    rbp: Option<i64>,
}

/// The height of `rsp` before instruction `at` (an index into the
/// function's instructions): its offset from the entry's `rsp`, `Some(0)`
/// where the frame is gone. `None` where the code does not say (a block
/// reached only from outside, such as a landing pad, or heights that
/// disagree where paths join).
pub(crate) fn rsp_before(code: &FunctionCode, at: usize) -> Option<i64> {
    let blocks = code.blocks();
    let insns = code.instructions();
    let bi = blocks.iter().position(|b| b.first <= at && at < b.last)?;
    let entry_block = blocks.iter().position(|b| b.start == code.start())?;
    let mut factory = InstructionInfoFactory::new();
    // Forward over the CFG from the entry; a block reached with two
    // different heights is unknown.
    let mut at_start: Vec<Option<Heights>> = vec![None; blocks.len()];
    at_start[entry_block] = Some(Heights {
        rsp: Some(0),
        rbp: None,
    });
    let mut work = vec![entry_block];
    while let Some(b) = work.pop() {
        let Some(mut h) = at_start[b] else { continue };
        for i in &insns[blocks[b].first..blocks[b].last] {
            h = step(h, i, &mut factory);
        }
        for &s in &blocks[b].succs {
            let merged = match at_start[s] {
                None => h,
                Some(old) => Heights {
                    rsp: old.rsp.filter(|&x| h.rsp == Some(x)),
                    rbp: old.rbp.filter(|&x| h.rbp == Some(x)),
                },
            };
            if at_start[s] != Some(merged) {
                at_start[s] = Some(merged);
                work.push(s);
            }
        }
    }
    let mut h = at_start[bi]?;
    for i in &insns[blocks[bi].first..at] {
        h = step(h, i, &mut factory);
    }
    h.rsp
}

/// The heights after `i`.
fn step(h: Heights, i: &Instruction, factory: &mut InstructionInfoFactory) -> Heights {
    let imm = || (i.op1_kind() != OpKind::Register).then(|| i.immediate(1) as i64);
    let reg0 = (i.op_count() > 0 && i.op0_kind() == OpKind::Register).then(|| i.op0_register());
    let lea_from = |base: Register| -> Option<i64> {
        let from = match base {
            Register::RSP => h.rsp,
            Register::RBP => h.rbp,
            _ => None,
        };
        (i.memory_index() == Register::None)
            .then_some(from)
            .flatten()
            .map(|x| x + i.memory_displacement64() as i64)
    };
    match i.code() {
        Code::Sub_rm64_imm8 | Code::Sub_rm64_imm32 if reg0 == Some(Register::RSP) => Heights {
            rsp: h.rsp.zip(imm()).map(|(x, n)| x - n),
            ..h
        },
        Code::Add_rm64_imm8 | Code::Add_rm64_imm32 if reg0 == Some(Register::RSP) => Heights {
            rsp: h.rsp.zip(imm()).map(|(x, n)| x + n),
            ..h
        },
        Code::Lea_r64_m if reg0 == Some(Register::RSP) => Heights {
            rsp: lea_from(i.memory_base()),
            ..h
        },
        Code::Lea_r64_m if reg0 == Some(Register::RBP) => Heights {
            rbp: lea_from(i.memory_base()),
            ..h
        },
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64
            if i.op1_kind() == OpKind::Register
                && reg0 == Some(Register::RSP)
                && i.op1_register() == Register::RBP =>
        {
            Heights { rsp: h.rbp, ..h }
        }
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64
            if i.op1_kind() == OpKind::Register
                && reg0 == Some(Register::RBP)
                && i.op1_register() == Register::RSP =>
        {
            Heights { rbp: h.rsp, ..h }
        }
        Code::Leaveq => Heights {
            rsp: h.rbp.map(|x| x + 8),
            rbp: None,
        },
        _ if matches!(
            i.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        ) =>
        {
            h
        }
        _ => {
            let pushes = i.stack_pointer_increment() as i64;
            let mut writes_rsp = false;
            let mut writes_rbp = false;
            for u in factory.info(i).used_registers() {
                if matches!(
                    u.access(),
                    OpAccess::Read | OpAccess::CondRead | OpAccess::None
                ) {
                    continue;
                }
                match u.register().full_register() {
                    Register::RSP => writes_rsp = true,
                    Register::RBP => writes_rbp = true,
                    _ => {}
                }
            }
            Heights {
                // A push or pop writes rsp by exactly its increment.
                rsp: if pushes != 0 {
                    h.rsp.map(|x| x + pushes)
                } else if writes_rsp {
                    None
                } else {
                    h.rsp
                },
                rbp: if writes_rbp { None } else { h.rbp },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NoData;

    fn height_at_last(bytes: &[u8]) -> Option<i64> {
        let f = FunctionCode::analyze(0x1000, bytes, &NoData);
        rsp_before(&f, f.instructions().len() - 1)
    }

    #[test]
    fn an_epilogue_brings_rsp_back_to_the_entry() {
        // push rbp; push rbx; sub rsp, 8; add rsp, 8; pop rbx; pop rbp; jmp rax
        let bytes = [
            0x55, 0x53, 0x48, 0x83, 0xec, 0x08, 0x48, 0x83, 0xc4, 0x08, 0x5b, 0x5d, 0xff, 0xe0,
        ];
        assert_eq!(height_at_last(&bytes), Some(0));
        // Without the pop of rbp: one word still pushed.
        let mut short = bytes.to_vec();
        short.remove(11);
        assert_eq!(height_at_last(&short), Some(-8));
    }

    #[test]
    fn a_frame_pointer_restores_an_aligned_rsp() {
        // push rbp; mov rbp, rsp; and rsp, -32; sub rsp, 64; leave; jmp rax
        let bytes = [
            0x55, 0x48, 0x89, 0xe5, 0x48, 0x83, 0xe4, 0xe0, 0x48, 0x83, 0xec, 0x40, 0xc9, 0xff,
            0xe0,
        ];
        assert_eq!(height_at_last(&bytes), Some(0));
        // Aligned and never restored: unknown.
        // push rbp; and rsp, -32; pop rbp; jmp rax
        let bytes = [0x55, 0x48, 0x83, 0xe4, 0xe0, 0x5d, 0xff, 0xe0];
        assert_eq!(height_at_last(&bytes), None);
    }

    #[test]
    fn heights_that_disagree_where_paths_join_are_unknown() {
        // test edi, edi; je +1; push rax; jmp rax
        let bytes = [0x85, 0xff, 0x74, 0x01, 0x50, 0xff, 0xe0];
        assert_eq!(height_at_last(&bytes), None);
        // The same with the push on both ways: -8.
        // push rax; test edi, edi; je +0; jmp rax
        let bytes = [0x50, 0x85, 0xff, 0x74, 0x00, 0xff, 0xe0];
        assert_eq!(height_at_last(&bytes), Some(-8));
    }

    #[test]
    fn calls_return_with_rsp_where_it_was() {
        // sub rsp, 8; call +0; add rsp, 8; jmp [rip+0]
        let bytes = [
            0x48, 0x83, 0xec, 0x08, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x48, 0x83, 0xc4, 0x08, 0xff,
            0x25, 0x00, 0x00, 0x00, 0x00,
        ];
        assert_eq!(height_at_last(&bytes), Some(0));
    }
}
