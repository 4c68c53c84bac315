//! Whether a thread left a frame of weft's code: one of a call it keeps
//! open (`open_calls`), or of a record it was writing (the block's
//! `WRITING` word). A signal handler that leaves with `siglongjmp`, or a
//! cancellation that unwinds the thread, takes it out of weft's code
//! without coming back, and what that code had begun stays begun.
//!
//! The thread's stack grows down, so a frame below the stack pointer of
//! code that runs later is no longer on the stack: it was left. A frame
//! above it belongs to code that a signal interrupted, whose handler runs
//! now, below it. On an alternate signal stack (`sigaltstack`) the stacks
//! cannot be compared: a handler running there takes every frame on the
//! thread's own stack as interrupted, and one on the alternate stack
//! compares as above; code running on the thread's stack takes a frame on
//! the alternate stack as left. Frames are stored 8 bytes below the `rsp`
//! they stand for, so that code at the same depth later finds them
//! below its own.
//!
//! Asking the kernel where the alternate stack is costs a system call;
//! it is made only when something begun is found, which a thread that
//! leaves nothing and takes no signal in weft's code never does.

use super::Gen;
use crate::region::threads as t;
use iced_x86::code_asm::*;

/// `sigaltstack`'s number, and its flags: running on the stack, and no
/// stack.
const SIGALTSTACK: u32 = 131;
const SS_ONSTACK: i32 = 1;
const SS_DISABLE: i32 = 2;
/// `rt_sigprocmask`'s `how` that takes a set out of the mask.
const SIG_UNBLOCK: u32 = 1;

impl Gen {
    /// r8 .. r8 + r9: the thread's alternate signal stack (empty if it has
    /// none); r10d: 1 if the thread runs on it now, else 0. Keeps rdx and
    /// r11; clobbers rax, rcx, rsi and rdi.
    pub(super) fn alternate_stack(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        a.push(r11)?;
        a.sub(rsp, 24)?; // stack_t
        a.xor(edi, edi)?;
        a.mov(rsi, rsp)?;
        a.mov(eax, SIGALTSTACK)?;
        a.syscall()?;
        a.mov(r8, qword_ptr(rsp))?;
        a.mov(r10d, dword_ptr(rsp + 8))?;
        a.mov(r9, qword_ptr(rsp + 16))?;
        a.add(rsp, 24)?;
        a.pop(r11)?;
        let mut none = a.create_label();
        let mut known = a.create_label();
        a.test(rax, rax)?;
        a.jnz(none)?;
        a.test(r10d, SS_DISABLE)?;
        a.jz(known)?;
        a.set_label(&mut none)?;
        a.xor(r8d, r8d)?;
        a.xor(r9d, r9d)?;
        a.xor(r10d, r10d)?;
        a.set_label(&mut known)?;
        a.and(r10d, SS_ONSTACK)
    }

    /// Jumps to `left` if the thread left `frame` (as the module says),
    /// its code now running with `rsp` at `now`; falls through if not.
    /// Needs [`Gen::alternate_stack`]'s registers; clobbers `scratch`.
    pub(super) fn branch_if_left(
        &mut self,
        frame: AsmRegister64,
        now: AsmRegister64,
        scratch: AsmRegister64,
        left: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut open = a.create_label();
        let mut on_alternate = a.create_label();
        a.mov(scratch, frame)?;
        a.sub(scratch, r8)?;
        a.cmp(scratch, r9)?;
        a.jb(on_alternate)?;
        // A frame on the thread's stack: open while a handler runs on the
        // alternate stack, else while it lies above the stack pointer.
        a.test(r10d, r10d)?;
        a.jnz(open)?;
        a.cmp(frame, now)?;
        a.jb(left)?;
        a.jmp(open)?;
        // A frame on the alternate stack: left once the thread runs
        // elsewhere, else the same.
        a.set_label(&mut on_alternate)?;
        a.test(r10d, r10d)?;
        a.jz(left)?;
        a.cmp(frame, now)?;
        a.jb(left)?;
        a.set_label(&mut open)?;
        a.nop()
    }

    /// Takes the thread's block for a record (its `WRITING` word := a
    /// frame below `rsp`), or jumps to `busy` if a record is being written
    /// by code the thread has not left (a signal came in the middle of
    /// it). A record the thread left half-written is written over (it
    /// was never published) and counted as dropped. Clobbers rax (and, when the word is taken,
    /// what [`Gen::writer_left_routine`] clobbers).
    pub(super) fn take_writing(&mut self, busy: CodeLabel) -> std::result::Result<(), IcedError> {
        let routine = *self
            .writer_left
            .get_or_insert_with(|| self.a.create_label());
        let a = &mut self.a;
        let mut take = a.create_label();
        a.cmp(qword_ptr(r11 + t::WRITING as i32), 0)?;
        a.je(take)?;
        a.call(routine)?;
        a.test(eax, eax)?;
        a.jz(busy)?;
        // The record left half-written is lost: counted as dropped.
        a.add(
            qword_ptr(r11 + (t::RING + crate::region::ring::DROPPED) as i32),
            1,
        )?;
        a.set_label(&mut take)?;
        a.lea(rax, qword_ptr(rsp - 8))?;
        a.mov(qword_ptr(r11 + t::WRITING as i32), rax)
    }

    /// Gives the thread's `WRITING` word back (r11: the block); then, if
    /// the delivery stub put signals off meanwhile (`t::DEFERRED_MASK`),
    /// unblocks them, which lets them come now. The signals put off are
    /// blocked in this code's own mask, so this code must be the one that
    /// unblocks them: one that comes once the word is given back is not
    /// put off, and its stub's record, a writer nested in this one, would
    /// take the set and leave them blocked here. So the word is given
    /// back here only when none was put off, and the set checked again
    /// after (one put off just before); else the routine gives the word
    /// back. Keeps every register.
    pub(super) fn release_writing(&mut self) -> std::result::Result<(), IcedError> {
        let routine = *self.deferred.get_or_insert_with(|| self.a.create_label());
        let a = &mut self.a;
        let mut none = a.create_label();
        let mut put_off = a.create_label();
        a.cmp(qword_ptr(r11 + t::DEFERRED_MASK as i32), 0)?;
        a.jne(put_off)?;
        a.mov(qword_ptr(r11 + t::WRITING as i32), 0)?;
        a.cmp(qword_ptr(r11 + t::DEFERRED_MASK as i32), 0)?;
        a.je(none)?;
        a.set_label(&mut put_off)?;
        a.call(routine)?;
        a.set_label(&mut none)?;
        a.nop()
    }

    /// The routine [`Gen::release_writing`] calls (r11: the block): takes
    /// the set of signals put off (`xchg`, one instruction), gives the
    /// `WRITING` word back, takes what was put off in between too, and
    /// unblocks them (`rt_sigprocmask`). Placed once, after the
    /// mini-trampoline's code; keeps every register.
    pub(super) fn deferred_routine(&mut self) -> std::result::Result<(), IcedError> {
        let Some(mut routine) = self.deferred else {
            return Ok(());
        };
        let a = &mut self.a;
        a.set_label(&mut routine)?;
        let kept = [rax, rcx, rdx, rsi, rdi, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        a.xor(eax, eax)?;
        a.xchg(qword_ptr(r11 + t::DEFERRED_MASK as i32), rax)?;
        a.push(rax)?;
        a.mov(qword_ptr(r11 + t::WRITING as i32), 0)?;
        a.xor(eax, eax)?;
        a.xchg(qword_ptr(r11 + t::DEFERRED_MASK as i32), rax)?;
        a.or(qword_ptr(rsp), rax)?;
        a.mov(qword_ptr(r11 + t::DEFERRED as i32), 0)?;
        a.mov(edi, SIG_UNBLOCK)?;
        a.mov(rsi, rsp)?;
        a.xor(edx, edx)?;
        a.mov(r10d, 8)?;
        a.mov(eax, weft_abi::syscall::RT_SIGPROCMASK)?;
        a.syscall()?;
        // (Not `lea`: a `pop r11` 5 bytes after a `syscall` is what the
        // delivery stub takes for the point's call.)
        a.add(rsp, 8)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.ret()
    }

    /// The routine [`Gen::take_writing`] calls when the `WRITING` word is
    /// taken: eax := 1 if the thread left the code that took it, else 0.
    /// Placed once, after the mini-trampoline's code; r11: the block.
    /// Clobbers rax, rcx, rdx, rsi, rdi, r8, r9 and r10.
    pub(super) fn writer_left_routine(&mut self) -> std::result::Result<(), IcedError> {
        let Some(mut routine) = self.writer_left else {
            return Ok(());
        };
        self.a.set_label(&mut routine)?;
        self.alternate_stack()?;
        let a = &mut self.a;
        let mut left = a.create_label();
        a.mov(rax, qword_ptr(r11 + t::WRITING as i32))?;
        a.lea(rcx, qword_ptr(rsp + 8))?; // the caller's rsp
        self.branch_if_left(rax, rcx, rdx, left)?;
        let a = &mut self.a;
        a.xor(eax, eax)?;
        a.ret()?;
        a.set_label(&mut left)?;
        a.mov(eax, 1)?;
        a.ret()
    }
}
