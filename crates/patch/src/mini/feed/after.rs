//! The feed's code after a `syscall` instruction: an answered call's
//! recorded result and bytes, a clamped read read on, a reaping `wait4` a
//! signal interrupted made again, the program's argument registers given
//! back, the rerun's ids turned into the recorded ones, a new thread or
//! process named in the id map.

use super::{map_entries, recorded_tid, EINTR, WAIT4};
use crate::mini::SYSCALL_ARG_OFFSET;
use crate::mini::{Gen, RAX_OFFSET};
use iced_x86::code_asm::*;
use weft_abi::feed as f;

impl Gen {
    /// After the instruction (r8: the feed); last, a recorded signal
    /// delivery that came as the call returned is raised. `returns_to`:
    /// the address of the program's instruction after the `syscall` (0
    /// where unknown).
    pub(super) fn feed_after(
        &mut self,
        (site, returns_to): (u32, u64),
        (thread, named_for): (i32, i32),
        current: i32,
        (parent_of, made_at): (i32, i32),
        mut done: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        self.exact_child_after(current)?;
        let a = &mut self.a;
        let mut end = a.create_label();
        let mut children = a.create_label();
        a.mov(r9, qword_ptr(r11 + current))?;
        a.test(r9, r9)?;
        a.jz(children)?;
        a.mov(rax, qword_ptr(r9 + f::CALL_OUTER as i32))?;
        a.mov(qword_ptr(r11 + current), rax)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_FLAGS as i32))?;
        a.test(rsi, f::ANSWER as i32)?;
        a.jz(children)?;
        a.mov(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
        // The recorded bytes into the buffer of argument (flags >> 16) - 1.
        let mut filled = a.create_label();
        a.mov(rax, rsi)?;
        a.shr(rax, f::FILL_SHIFT as u32)?;
        a.and(eax, 0xff)?;
        a.jz(filled)?;
        // rdi: the argument; rdx: the next one (a vector's entries).
        for (i, off) in SYSCALL_ARG_OFFSET.iter().enumerate() {
            let mut other = a.create_label();
            a.cmp(eax, i as u32 + 1)?;
            a.jne(other)?;
            a.mov(rdi, qword_ptr(rsp + *off))?;
            if let Some(next) = SYSCALL_ARG_OFFSET.get(i + 1) {
                a.mov(rdx, qword_ptr(rsp + *next))?;
            }
            a.set_label(&mut other)?;
            a.nop()?;
        }
        a.mov(rax, rsi)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_DATA as i32))?;
        a.add(rsi, r8)?;
        a.mov(rcx, qword_ptr(r9 + f::CALL_DATA_LEN as i32))?;
        let mut scatter = a.create_label();
        a.test(eax, f::SCATTER as i32)?;
        a.jnz(scatter)?;
        a.rep().movsb()?;
        a.jmp(filled)?;
        // Through the vector: r10 the next entry, rdx the entries left,
        // rax the bytes left.
        a.set_label(&mut scatter)?;
        {
            let mut entry = a.create_label();
            let mut within = a.create_label();
            let mut last = a.create_label();
            a.push(r10)?;
            a.mov(r10, rdi)?;
            a.mov(rax, rcx)?;
            a.set_label(&mut entry)?;
            a.test(rax, rax)?;
            a.jz(last)?;
            a.test(rdx, rdx)?;
            a.jle(last)?;
            a.mov(rdi, qword_ptr(r10))?;
            a.mov(rcx, qword_ptr(r10 + 8))?;
            a.add(r10, 16)?;
            a.sub(rdx, 1)?;
            a.cmp(rcx, rax)?;
            a.jbe(within)?;
            a.mov(rcx, rax)?;
            a.set_label(&mut within)?;
            a.sub(rax, rcx)?;
            a.rep().movsb()?;
            a.jmp(entry)?;
            a.set_label(&mut last)?;
            a.pop(r10)?;
        }
        a.set_label(&mut filled)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_FLAGS as i32))?;
        give_back_args(a)?;
        self.feed_done(thread)?;
        let a = &mut self.a;
        a.jmp(end)?;
        // The parent's return from a call that made a thread or a process
        // (at the site of that call, with the child's id) names the child
        // in the id map. A child returns 0 there first: one that shares
        // its parent's thread (vfork) makes calls of its own on the same
        // slot before its parent returns, so the call that made it is kept
        // apart from the call under way.
        a.set_label(&mut children)?;
        // A clamped read that took fewer bytes than in the record (a
        // stream socket's data arrives in pieces the rerun's timing
        // cuts): it reads on until it has them, or the end, or an error.
        {
            let mut whole = a.create_label();
            let mut again = a.create_label();
            a.test(r9, r9)?;
            a.jz(whole)?;
            a.test(rsi, f::CLAMP as i32)?;
            a.jz(whole)?;
            a.set_label(&mut again)?;
            a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?;
            a.test(rax, rax)?;
            a.jle(whole)?;
            a.cmp(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
            a.jge(whole)?;
            call_again(a, |a, pushed| {
                a.mov(rdi, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[0]))?;
                a.mov(rsi, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[1]))?;
                a.add(rsi, rax)?;
                a.mov(rdx, qword_ptr(r9 + f::CALL_RESULT as i32))?;
                a.sub(rdx, rax)?;
                a.mov(r10, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[3]))?;
                a.mov(rax, qword_ptr(r9 + f::CALL_NR as i32))?;
                a.xor(r8d, r8d)?;
                a.xor(r9d, r9d)
            })?;
            a.test(rax, rax)?;
            a.jle(whole)?;
            a.add(qword_ptr(rsp + RAX_OFFSET), rax)?;
            a.jmp(again)?;
            a.set_label(&mut whole)?;
            a.nop()?;
        }
        // A reaping wait4 a signal interrupted (the recorded one reaped):
        // made again here, as a program that asked not to wait, or does
        // not retry, would not make it again itself.
        {
            let mut whole = a.create_label();
            let mut again = a.create_label();
            a.test(r9, r9)?;
            a.jz(whole)?;
            a.test(rsi, f::REAP as i32)?;
            a.jz(whole)?;
            a.set_label(&mut again)?;
            a.cmp(qword_ptr(rsp + RAX_OFFSET), EINTR)?;
            a.jne(whole)?;
            call_again(a, |a, pushed| {
                for (i, r) in [rdi, rsi, rdx, r10].into_iter().enumerate() {
                    a.mov(r, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[i]))?;
                }
                a.mov(eax, WAIT4)
            })?;
            a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
            a.jmp(again)?;
            a.set_label(&mut whole)?;
            a.nop()?;
        }
        // A call a signal interrupted (`EINTR`) where the recorded one
        // was not. When the rerun runs the handlers where the record has
        // them, the signal was one it dropped, which the program must not
        // see: the call is made again here. Else the program makes it
        // again, which the same recorded call stands for.
        {
            let mut whole = a.create_label();
            let mut by_program = a.create_label();
            let mut again = a.create_label();
            a.test(r9, r9)?;
            a.jz(whole)?;
            a.cmp(qword_ptr(rsp + RAX_OFFSET), EINTR)?;
            a.jne(whole)?;
            a.cmp(qword_ptr(r9 + f::CALL_RESULT as i32), EINTR)?;
            a.je(whole)?;
            a.cmp(qword_ptr(r8 + f::SIGNALS_FED as i32), 0)?;
            a.je(by_program)?;
            a.set_label(&mut again)?;
            call_again(a, |a, pushed| {
                // A left call's is `pause`, the rerun's stand-in.
                let mut number = a.create_label();
                a.mov(rax, qword_ptr(r9 + f::CALL_NR as i32))?;
                a.test(qword_ptr(r9 + f::CALL_FLAGS as i32), f::LEFT as i32)?;
                a.jz(number)?;
                a.mov(eax, f::PAUSE as u32)?;
                a.set_label(&mut number)?;
                for (r, off) in [rdi, rsi, rdx, r10, r8, r9]
                    .into_iter()
                    .zip(SYSCALL_ARG_OFFSET)
                {
                    a.mov(r, qword_ptr(rsp + pushed + off))?;
                }
                Ok(())
            })?;
            a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
            a.cmp(rax, EINTR)?;
            a.je(again)?;
            a.jmp(whole)?;
            a.set_label(&mut by_program)?;
            a.mov(rax, qword_ptr(r11 + thread))?;
            a.sub(qword_ptr(rax + f::THREAD_CURSOR as i32), 1)?;
            a.set_label(&mut whole)?;
            a.nop()?;
        }
        {
            let mut none = a.create_label();
            a.test(r9, r9)?;
            a.jz(none)?;
            self.feed_done(thread)?;
            self.a.set_label(&mut none)?;
            self.a.nop()?;
        }
        let a = &mut self.a;
        // The count a clamped read asked for, back in its register.
        {
            let mut whole = a.create_label();
            a.test(r9, r9)?;
            a.jz(whole)?;
            a.test(rsi, f::CLAMP as i32)?;
            a.jz(whole)?;
            a.mov(rax, qword_ptr(r9 + f::CALL_RERUN_COUNT as i32))?;
            a.mov(qword_ptr(rsp + SYSCALL_ARG_OFFSET[2]), rax)?;
            a.set_label(&mut whole)?;
            a.nop()?;
        }
        {
            let mut none = a.create_label();
            a.test(r9, r9)?;
            a.jz(none)?;
            give_back_args(a)?;
            a.set_label(&mut none)?;
            a.nop()?;
        }
        // An id the kernel returned (`wait4`'s child): the recorded one.
        {
            let mut kept = a.create_label();
            let mut scan = a.create_label();
            let mut next = a.create_label();
            a.test(r9, r9)?;
            a.jz(kept)?;
            a.test(rsi, f::TRANSLATE_RESULT as i32)?;
            a.jz(kept)?;
            a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?;
            a.test(rax, rax)?;
            a.jle(kept)?;
            map_entries(a)?;
            a.set_label(&mut scan)?;
            a.test(rdx, rdx)?;
            a.jz(kept)?;
            a.cmp(rax, qword_ptr(rdi + f::ENTRY_TID as i32))?;
            a.jne(next)?;
            a.mov(rcx, qword_ptr(rdi + f::ENTRY_FEED as i32))?;
            a.test(rcx, rcx)?;
            a.jz(next)?;
            recorded_tid(a, rcx)?;
            a.mov(qword_ptr(rsp + RAX_OFFSET), rcx)?;
            a.jmp(kept)?;
            a.set_label(&mut next)?;
            a.add(rdi, f::MAP_ENTRY as i32)?;
            a.sub(rdx, 1)?;
            a.jmp(scan)?;
            a.set_label(&mut kept)?;
            a.nop()?;
        }
        a.mov(r9, qword_ptr(r11 + parent_of))?;
        a.test(r9, r9)?;
        a.jz(end)?;
        a.cmp(qword_ptr(r11 + made_at), site as i32)?;
        a.jne(end)?;
        a.mov(rdx, qword_ptr(rsp + RAX_OFFSET))?;
        a.test(rdx, rdx)?;
        a.jz(end)?;
        a.mov(qword_ptr(r11 + parent_of), 0)?;
        a.jl(end)?;
        a.mov(eax, 1)?;
        a.lock().xadd(qword_ptr(r8 + f::MAP_USED as i32), rax)?;
        a.cmp(rax, qword_ptr(r8 + f::MAP_CAPACITY as i32))?;
        a.jae(end)?;
        a.shl(rax, f::MAP_ENTRY.trailing_zeros())?;
        a.add(rax, qword_ptr(r8 + f::MAP as i32))?;
        a.add(rax, r8)?;
        a.mov(rcx, qword_ptr(r9 + f::CALL_CHILD as i32))?;
        a.add(rcx, 1)?;
        a.mov(qword_ptr(rax + f::ENTRY_FEED as i32), rcx)?;
        a.mov(qword_ptr(rax + f::ENTRY_TID as i32), rdx)?;
        // The program goes on with the recorded id.
        a.mov(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
        // The deliveries at this return.
        a.set_label(&mut end)?;
        a.nop()?;
        self.deliveries_at_return((thread, named_for), returns_to, done)?;
        let a = &mut self.a;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }
}

/// A system call of the feed's own after the instruction, made with the
/// registers `setup` sets (given how far the saves it pushes moved the
/// stack), keeping r8, r9, r11 and rsi; rax holds its result.
pub(super) fn call_again(
    a: &mut CodeAssembler,
    setup: impl FnOnce(&mut CodeAssembler, i32) -> std::result::Result<(), IcedError>,
) -> std::result::Result<(), IcedError> {
    let kept = [r8, r9, r11, rsi];
    for r in kept {
        a.push(r)?;
    }
    setup(a, 8 * kept.len() as i32)?;
    a.syscall()?;
    for r in kept.into_iter().rev() {
        a.pop(r)?;
    }
    Ok(())
}

/// The program's argument registers back, after a call whose arguments
/// the feed changed (r9: the call, rsi: its flags; clobbers rax).
fn give_back_args(a: &mut CodeAssembler) -> std::result::Result<(), IcedError> {
    let mut unchanged = a.create_label();
    a.test(rsi, (f::TRANSLATE_IDS | f::REAP) as i32)?;
    a.jz(unchanged)?;
    for (i, off) in SYSCALL_ARG_OFFSET[..3].iter().enumerate() {
        a.mov(
            rax,
            qword_ptr(r9 + (f::CALL_GIVEN_ARGS + 8 * i as u64) as i32),
        )?;
        a.mov(qword_ptr(rsp + *off), rax)?;
    }
    a.set_label(&mut unchanged)?;
    a.nop()
}
