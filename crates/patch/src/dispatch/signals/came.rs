//! Where a signal the delivery stub records came (`weft_abi::delivery`'s
//! kinds): at or right after a `syscall`, in weft's code after a call
//! the program made (its thread block's `RETURNED` word, the marking in
//! rbp, the trampoline's clearing just before its jump back), elsewhere
//! in weft's code or the vDSO, or in the program's own code. The record
//! keeps the kind, and a rerun raises the delivery where it says
//! (`weft_syscalls::reexec`'s `raise_at`).

use super::super::{uc, Labels};
use super::*;

/// r9d := the kind of place the interrupted `rip` (rcx) is (rbx: the
/// frame's `ucontext_t`, r8: the thread's block or 0, r13: the sync
/// page). Keeps rcx; clobbers rax and rdx.
pub(super) fn where_it_came(a: &mut CodeAssembler, l: &mut Labels) -> Result<(), IcedError> {
    let mut not_at = a.create_label();
    let mut found = a.create_label();
    a.mov(r9d, delivery::ELSEWHERE as u32)?;
    a.cmp(word_ptr(rcx), SYSCALL_WORD)?;
    a.jne(not_at)?;
    a.mov(r9d, delivery::AT_SYSCALL as u32)?;
    a.set_label(&mut not_at)?;
    // At the dispatch function's instruction after its `syscall`
    // (the `jmp` that splices the call's return there), to which the
    // trampoline that made the call jumps back: after the call.
    {
        let mut not_there = a.create_label();
        a.mov(rax, qword_ptr(l.function_lit))?;
        a.add(rax, super::super::AFTER_FUNCTION_SYSCALL)?;
        a.cmp(rcx, rax)?;
        a.jne(not_there)?;
        a.mov(r9d, delivery::AFTER_SYSCALL as u32)?;
        a.jmp(found)?;
        a.set_label(&mut not_there)?;
        a.nop()?;
    }
    // rip - 2 is readable when it is in rip's page.
    a.mov(eax, ecx)?;
    a.and(eax, 0xfff)?;
    a.cmp(eax, 2)?;
    a.jb(found)?;
    a.cmp(word_ptr(rcx - 2), SYSCALL_WORD)?;
    a.jne(found)?;
    a.mov(r9d, delivery::AFTER_SYSCALL as u32)?;
    // Right after one of weft's own calls in its code (a mask put
    // back after a record, the records of calls left before the
    // point's call) rather than the point's (whose result goes to
    // its slot, then `pop r11`): after the point's call only while
    // the thread's block says so.
    {
        a.mov(rax, rcx)?;
        a.sub(rax, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
        a.cmp(rax, qword_ptr(r13 + sync::DISPATCH_LEN as i32))?;
        a.jae(found)?;
        a.cmp(word_ptr(rcx + 5), POP_R11)?;
        a.je(found)?;
        a.cmp(word_ptr(rcx + 8), POP_R11)?;
        a.je(found)?;
        // Or the dispatch function's own, in its splice's trampoline,
        // whose `jmp` back to the function comes next: the call is
        // made, and the return's marking is not reached yet. Read as
        // weft's own code (or, back at the function, as the
        // program's), a signal a `sigprocmask` call let in there was
        // raised before the call in a rerun, while the signal was
        // still blocked; a second one right after it then took the
        // first off as the rerun's own (a 1 ms timer loop lost
        // handler runs under load in 10 reruns of 10).
        {
            let mut not_function = a.create_label();
            a.cmp(byte_ptr(rcx), JMP_REL32)?;
            a.jne(not_function)?;
            a.movsxd(rax, dword_ptr(rcx + 1))?;
            a.lea(rax, qword_ptr(rcx + rax + 5))?;
            a.sub(rax, qword_ptr(l.function_lit))?;
            a.cmp(rax, super::super::AFTER_FUNCTION_SYSCALL)?;
            a.je(found)?;
            a.set_label(&mut not_function)?;
            a.nop()?;
        }
        // (A thread without a block has no point's call either.)
        a.test(r8, r8)?;
        a.jz(found)?;
        a.cmp(qword_ptr(r8 + threads::RETURNED as i32), 0)?;
        a.jne(found)?;
        marked_in_rbp(a, found)?;
        a.mov(r9d, delivery::IN_WEFT as u32)?;
    }
    a.set_label(&mut found)?;
    a.nop()?;
    // Elsewhere in weft's code (a call's program before its call, or
    // after it while the thread's block says so: `RETURNED`), or in
    // the vDSO: the dispatch cluster's code area or one of the
    // unrecorded ranges.
    let mut program = a.create_label();
    let mut weft = a.create_label();
    let mut next = a.create_label();
    let mut each = a.create_label();
    a.cmp(r9d, delivery::ELSEWHERE as u32)?;
    a.jne(program)?;
    a.mov(rax, rcx)?;
    a.sub(rax, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
    a.cmp(rax, qword_ptr(r13 + sync::DISPATCH_LEN as i32))?;
    a.jb(weft)?;
    a.xor(eax, eax)?;
    a.set_label(&mut each)?;
    a.lea(rdx, qword_ptr(r13 + rax))?;
    a.cmp(rcx, qword_ptr(rdx + sync::UNRECORDED_RANGES as i32))?;
    a.jb(next)?;
    a.cmp(rcx, qword_ptr(rdx + (sync::UNRECORDED_RANGES + 8) as i32))?;
    a.jb(weft)?;
    a.set_label(&mut next)?;
    a.add(rax, 16)?;
    a.cmp(rax, (16 * sync::UNRECORDED_RANGE_COUNT) as i32)?;
    a.jb(each)?;
    a.jmp(program)?;
    a.set_label(&mut weft)?;
    a.mov(r9d, delivery::IN_WEFT as u32)?;
    // After a call a program made, before the thread is back in the
    // program's code: while its block says so (`RETURNED`), or at
    // the jump or `ret` that takes it back right after the trampoline
    // cleared that word (`mov qword [r11 + RETURNED], 0`, its bytes
    // just before rip).
    let mut after = a.create_label();
    let mut cleared = a.create_label();
    let mut by_ret = a.create_label();
    let mut target = a.create_label();
    a.test(r8, r8)?;
    a.jz(cleared)?;
    a.cmp(qword_ptr(r8 + threads::RETURNED as i32), 0)?;
    a.jne(after)?;
    a.mov(rax, rcx)?;
    a.sub(rax, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
    a.cmp(rax, qword_ptr(r13 + sync::DISPATCH_LEN as i32))?;
    a.jae(cleared)?;
    marked_in_rbp(a, after)?;
    a.set_label(&mut cleared)?;
    // In the SIGSYS handler's restorer, between its clearing of the
    // word a call made at the dispatch function set (rbp still names
    // it) and its `rt_sigreturn` (the `nop` the clearing ends with,
    // then `mov eax, 15`): after that call. Pending signals come
    // there as often as anywhere, in 1 record of 5 of a loop of such
    // calls under a 1 ms timer.
    {
        let mut not_tail = a.create_label();
        a.lea(rax, qword_ptr(l.restorer_tail))?;
        a.sub(rax, rcx)?;
        a.cmp(rax, 1)?;
        a.ja(not_tail)?;
        a.cmp(qword_ptr(rbx + uc::RBP), 0)?;
        a.jne(after)?;
        a.set_label(&mut not_tail)?;
        a.nop()?;
    }
    // At the marking of `RETURNED` itself, or at the `pop r11` just
    // before it (the call's result already in its slot).
    {
        let mut not_mark = a.create_label();
        let mut not_pop = a.create_label();
        a.mov(rax, MARK_RETURNED_HEAD)?;
        a.cmp(qword_ptr(rcx), rax)?;
        a.jne(not_mark)?;
        a.cmp(dword_ptr(rcx + 7), 1)?;
        a.je(after)?;
        a.set_label(&mut not_mark)?;
        a.cmp(word_ptr(rcx), POP_R11)?;
        a.jne(not_pop)?;
        a.cmp(qword_ptr(rcx + 2), rax)?;
        a.jne(not_pop)?;
        a.cmp(dword_ptr(rcx + 9), 1)?;
        a.je(after)?;
        a.set_label(&mut not_pop)?;
        a.nop()?;
    }
    a.mov(rax, rcx)?;
    a.sub(rax, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
    a.cmp(rax, CLEAR_RETURNED_LEN)?;
    a.jb(program)?;
    a.mov(rax, CLEAR_RETURNED_HEAD)?;
    a.cmp(qword_ptr(rcx - CLEAR_RETURNED_LEN), rax)?;
    a.jne(program)?;
    a.cmp(dword_ptr(rcx - 4), 0)?;
    a.jne(program)?;
    a.cmp(byte_ptr(rcx), JMP_REL32)?;
    a.jne(by_ret)?;
    a.movsxd(rax, dword_ptr(rcx + 1))?;
    a.lea(rax, qword_ptr(rcx + rax + 5))?;
    a.jmp(target)?;
    a.set_label(&mut by_ret)?;
    a.cmp(byte_ptr(rcx), RET)?;
    a.jne(program)?;
    a.mov(rax, qword_ptr(rbx + uc::RSP))?;
    a.mov(rax, qword_ptr(rax))?;
    a.set_label(&mut target)?;
    a.sub(rax, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
    a.cmp(rax, qword_ptr(r13 + sync::DISPATCH_LEN as i32))?;
    a.jb(program)?;
    a.set_label(&mut after)?;
    a.mov(r9d, delivery::AFTER_CALL as u32)?;
    a.set_label(&mut program)?;
    a.nop()?;
    Ok(())
}
