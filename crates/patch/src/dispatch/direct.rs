//! The SIGSYS handler's direct entry: a call handed to the handler by a
//! rewritten site's program (`weft_plan::Primitive::ThroughHandler`)
//! instead of by the kernel, once a process's dispatch is off.
//!
//! The calls that install a signal mask or action need the handler
//! (SIGSYS taken out of every mask, the program's handlers put behind the
//! delivery stub, SIGSYS's and SIGTRAP's actions answered from weft's
//! tables), so a settled process, whose dispatch is off, has their sites
//! call this entry. It builds, on its stack, what the kernel would have
//! given the handler: a `siginfo_t` saying Syscall User Dispatch and a
//! `ucontext_t` with the program's registers at the site (`rip` after its
//! `syscall`, `rsp` the point's) and the thread's signal mask; runs the
//! handler's own entry on them; then does what `rt_sigreturn` would have:
//! installs the frame's mask (which the handler changes for
//! `rt_sigprocmask`, and which unblocks the signal an `rt_sigaction`
//! blocked across its steps) and returns the frame's `rax`. The mark a call
//! made at the dispatch function leaves in the thread's block
//! (`Primitive::MarkReturned`) stays until the site's trampoline clears it
//! as it goes back to the program, as after a call a site's program makes
//! itself, so that a signal anywhere in between reads as after the call
//! (clearing it here, as the handler's restorer does, left a dozen
//! instructions where one read as before the next call: a loop of
//! `sigprocmask` under a 1 ms timer reran to another trail in 1 of 2).

use super::{uc, Labels, SIGSYS, SYS_USER_DISPATCH};
use crate::region::threads;
use iced_x86::code_asm::*;
use weft_abi::syscall;

/// The frame's `ucontext_t` as far as the handler reads it (through
/// `uc_sigmask`), then the `siginfo_t`.
const UCONTEXT_BYTES: i32 = uc::SIGMASK + 8;
const SIGINFO: i32 = UCONTEXT_BYTES;
/// Where the frame keeps the stack pointer the entry had.
const OLD_RSP: i32 = SIGINFO + 128;
/// Bytes of the frame, a multiple of 16.
const FRAME: i32 = (OLD_RSP + 8 + 15) & !15;
/// The call's registers and their places in the frame: the arguments,
/// then the number (the result, as the handler leaves it).
const CALL_REGISTERS: [(i32, AsmRegister64); 7] = [
    (uc::RDI, rdi),
    (uc::RSI, rsi),
    (uc::RDX, rdx),
    (uc::R10, r10),
    (uc::R8, r8),
    (uc::R9, r9),
    (uc::RAX, rax),
];
/// `rt_sigprocmask`'s `how` that installs the set.
const SIG_SETMASK: u32 = 2;
/// `rt_sigprocmask`'s `how` that adds to the blocked set (adding none
/// reads it).
const SIG_BLOCK: u32 = 0;

/// The direct entry (`l.direct`), calling the handler at `l.entry`.
/// Entered by a `call` with rax the number, rdi, rsi, rdx, r10, r8, r9
/// the arguments, rcx the address after the site's `syscall` and r11 the
/// point's `rsp`; returns the result in rax and in r11 the thread's block
/// whose `threads::RETURNED` word the call marked (0 if none), every other
/// register but rcx (which a `syscall` clobbers) as it was.
pub(super) fn entry(a: &mut CodeAssembler, l: &mut Labels) -> Result<(), IcedError> {
    a.set_label(&mut l.direct)?;
    for r in [rbp, rbx, r12, r13, r14, r15] {
        a.push(r)?;
    }
    // Any alignment in, 16 bytes for the frame, the old rsp kept there
    // (r15 meanwhile).
    a.mov(r15, rsp)?;
    a.and(rsp, -16)?;
    a.sub(rsp, FRAME)?;
    a.mov(qword_ptr(rsp + OLD_RSP), r15)?;
    for (at, r) in CALL_REGISTERS {
        a.mov(qword_ptr(rsp + at), r)?;
    }
    a.mov(qword_ptr(rsp + uc::RIP), rcx)?;
    a.mov(qword_ptr(rsp + uc::RSP), r11)?;
    // The program's callee-saved registers, for an unwinder that reads
    // the frame (`crate::unwind::Rule::Dispatched`).
    for (at, k) in [(uc::RBP, 5), (uc::RBX, 4), (uc::R12, 3), (uc::R13, 2)] {
        a.mov(rax, qword_ptr(r15 + 8 * k))?;
        a.mov(qword_ptr(rsp + at), rax)?;
    }
    a.mov(rax, qword_ptr(r15 + 8))?;
    a.mov(qword_ptr(rsp + uc::R14), rax)?;
    a.mov(rax, qword_ptr(r15))?;
    a.mov(qword_ptr(rsp + uc::R15), rax)?;
    a.mov(dword_ptr(rsp + SIGINFO), SIGSYS)?;
    a.mov(dword_ptr(rsp + SIGINFO + 4), 0)?;
    a.mov(
        dword_ptr(rsp + SIGINFO + weft_abi::siginfo::CODE as i32),
        SYS_USER_DISPATCH,
    )?;
    // The thread's mask, as the kernel saves it in a signal frame.
    a.mov(edi, SIG_BLOCK)?;
    a.xor(esi, esi)?;
    a.lea(rdx, qword_ptr(rsp + uc::SIGMASK))?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGPROCMASK)?;
    a.syscall()?;
    a.mov(edi, SIGSYS as u32)?;
    a.lea(rsi, qword_ptr(rsp + SIGINFO))?;
    a.mov(rdx, rsp)?;
    a.call(l.entry)?;
    // What `rt_sigreturn` would do: the frame's mask (a signal it lets
    // come finds the call's mark still set: after the call), then the
    // registers back. The mark stays set until the site's trampoline
    // clears it on its way back to the program, as after a call the
    // site's program makes itself: r11 names the thread's block (the
    // mark's word less its offset), 0 if the call left no mark.
    a.mov(edi, SIG_SETMASK)?;
    a.lea(rsi, qword_ptr(rsp + uc::SIGMASK))?;
    a.xor(edx, edx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGPROCMASK)?;
    a.syscall()?;
    let mut unmarked = a.create_label();
    a.mov(r11, rbp)?;
    a.test(r11, r11)?;
    a.jz(unmarked)?;
    a.sub(r11, threads::RETURNED as i32)?;
    a.set_label(&mut unmarked)?;
    for (at, r) in CALL_REGISTERS {
        a.mov(r, qword_ptr(rsp + at))?;
    }
    a.mov(rsp, qword_ptr(rsp + OLD_RSP))?;
    for r in [r15, r14, r13, r12, rbx, rbp] {
        a.pop(r)?;
    }
    a.ret()
}
