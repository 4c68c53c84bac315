//! Saving and restoring the status flags around generated code, cheaply.
//!
//! `pushfq`/`popfq` cost 10 to 13 ns a pair on this project's machines
//! (`popfq` is microcoded: it may change IF, TF, AC and more). The status
//! flags fit in two bytes: `lahf` gives SF, ZF, AF, PF and CF in `ah` and
//! `seto al` gives OF; back, `add al, 0x7f` sets OF exactly when `al` is 1
//! and `sahf` sets the other five from `ah` (DynamoRIO's sequence). The
//! system flags (DF, IF, TF, AC) are left alone: the code between never
//! changes them.
//!
//! The sequences use the stack word they fill (like `pushfq` would) and,
//! for `rax`, the word below it as a stash, which is free: a trampoline
//! runs below the red zone, and the kernel writes a signal frame below
//! the red zone of whatever `rsp` it interrupts, so a signal between two
//! of these instructions leaves the stash alone.

use iced_x86::{Code, Instruction, MemoryOperand, Register};

/// `mov [rsp + d], rax` or `mov rax, [rsp + d]`.
fn rax_at(d: i64, store: bool) -> Instruction {
    let at = MemoryOperand::with_base_displ(Register::RSP, d);
    let i = if store {
        Instruction::with2(Code::Mov_rm64_r64, at, Register::RAX)
    } else {
        Instruction::with2(Code::Mov_r64_rm64, Register::RAX, at)
    };
    i.expect("mov between rax and [rsp+d] is a valid instruction")
}

/// `lea rsp, [rsp + d]`: moves the stack pointer, flags untouched.
pub fn step_rsp(d: i64) -> Instruction {
    Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        MemoryOperand::with_base_displ(Register::RSP, d),
    )
    .expect("lea rsp,[rsp+d] is a valid instruction")
}

/// In place of `pushfq`: moves `rsp` down a word and stores the status
/// flags there; every register and flag keeps its value.
pub fn save_status_flags() -> Vec<Instruction> {
    vec![
        step_rsp(-8),
        rax_at(-8, true),
        Instruction::with1(Code::Seto_rm8, Register::AL).expect("seto al"),
        Instruction::with(Code::Lahf),
        rax_at(0, true),
        rax_at(-8, false),
    ]
}

/// In place of `popfq`: sets the status flags from the word at `rsp`
/// (stored by [`save_status_flags`]) and moves `rsp` up past it; every
/// register keeps its value.
pub fn restore_status_flags() -> Vec<Instruction> {
    vec![
        rax_at(-8, true),
        rax_at(0, false),
        Instruction::with2(Code::Add_AL_imm8, Register::AL, 0x7f).expect("add al, 0x7f"),
        Instruction::with(Code::Sahf),
        rax_at(-8, false),
        step_rsp(8),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `code` (which must end in `ret`) natively with the given flags
    /// and rax, and returns (flags, rax, rsp moved) after it.
    fn run_between(flags: u64, rax: u64, minus_one: bool) -> (u64, u64, i64) {
        let mut block = vec![];
        block.extend(save_status_flags());
        // Between the two, rax is used (and given back, as a trampoline
        // does) and the flags are set to 0 - 1's (CF SF AF PF) or 0's (ZF PF).
        block.push(Instruction::with1(Code::Push_r64, Register::RAX).unwrap());
        block.push(Instruction::with2(Code::Xor_r64_rm64, Register::RAX, Register::RAX).unwrap());
        if minus_one {
            block.push(Instruction::with2(Code::Sub_rm64_imm8, Register::RAX, 1).unwrap());
        }
        block.push(Instruction::with1(Code::Pop_r64, Register::RAX).unwrap());
        block.extend(restore_status_flags());
        block.push(Instruction::with(Code::Retnq));
        let code = iced_x86::BlockEncoder::encode(
            64,
            iced_x86::InstructionBlock::new(&block, 0),
            iced_x86::BlockEncoderOptions::NONE,
        )
        .unwrap()
        .code_buffer;
        // SAFETY: a private anonymous mapping of one page, made executable
        // after the code is copied in, called once as a function that keeps
        // every register but rax and the flags (which the asm below saves
        // and compares) and returns with `ret`; unmapped after.
        unsafe {
            let page = libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(page, libc::MAP_FAILED);
            std::ptr::copy_nonoverlapping(code.as_ptr(), page.cast::<u8>(), code.len());
            assert_eq!(
                libc::mprotect(page, 4096, libc::PROT_READ | libc::PROT_EXEC),
                0
            );
            let (out_flags, out_rax, moved): (u64, u64, i64);
            std::arch::asm!(
                "mov {rsp_before}, rsp",
                "push {flags}",
                "popfq",
                "call {f}",
                "pushfq",
                "pop {flags}",
                "sub {rsp_before}, rsp",
                f = in(reg) page,
                flags = inout(reg) flags => out_flags,
                rsp_before = out(reg) moved,
                inout("rax") rax => out_rax,
            );
            libc::munmap(page, 4096);
            (out_flags, out_rax, moved)
        }
    }

    #[test]
    fn every_status_flag_and_rax_come_back() {
        const STATUS: u64 = 0x8d5; // OF SF ZF AF PF CF
        for bits in 0..64u64 {
            // Spread the six bits over OF, SF, ZF, AF, PF, CF.
            let flags = [0x800u64, 0x80, 0x40, 0x10, 0x4, 0x1]
                .iter()
                .enumerate()
                .filter(|(i, _)| bits & (1 << i) != 0)
                .fold(0x2, |f, (_, b)| f | b);
            let rax = 0x1234_5678_9abc_def0 ^ bits;
            for minus_one in [false, true] {
                let (after, rax_after, moved) = run_between(flags, rax, minus_one);
                assert_eq!(
                    after & STATUS,
                    flags & STATUS,
                    "{flags:#x} came back {after:#x}"
                );
                assert_eq!(rax_after, rax);
                assert_eq!(moved, 0);
            }
        }
    }
}
