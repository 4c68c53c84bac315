//! The SIGSYS handler's part in signal deliveries (`weft_abi::delivery`):
//! the program's handlers installed behind the *delivery stub*, and the
//! stub.
//!
//! A dispatched `rt_sigaction` of a signal that may wait for its handler
//! (not a fault, not SIGKILL or SIGSTOP), in the process whose actions
//! the sync page keeps ([`sync::SIGNAL_OWNER`]), in a record
//! ([`sync::SIGNAL_MODE`]), so that the record holds the call as the
//! program made it:
//!
//! 1. blocks the signal until the handler returns (the frame's mask comes
//!    back then), so that none comes between the steps;
//! 2. gives the kernel the program's own action back, if the stub held
//!    its place ([`sync::SIGNAL_ACTIONS`]);
//! 3. is made as the program asked, at the dispatch function (recorded,
//!    or fed: the program's old action comes back as it set it);
//! 4. reads the action the kernel now holds into the table and, if it
//!    has a handler, installs the stub in its place, with the same mask,
//!    restorer and flags, `SA_SIGINFO` added (and in a rerun `SA_RESTART`
//!    added and `SA_RESETHAND` taken out: a dropped signal must neither
//!    interrupt a call nor reset the action).
//!
//! In a rerun, where the feed may raise a recorded delivery of that very
//! signal at the call (and a blocked one would come after it), the call is
//! made once, with the stub in the new action's place, and the old action
//! the kernel gives back is the table's when it is the stub.
//!
//! The stub, at a delivery: in a record, makes the delivery's call at the
//! dispatch function, where it is recorded like any call, then jumps to
//! the program's handler with the kernel's three arguments, the frame
//! untouched; in a rerun, jumps to it only for a signal the feed raised
//! ([`delivery::RAISED`], its recorded `si_code` put back), and returns
//! from any other at once (the record says where its signals came).

use super::{uc, Labels, COPY, SIGSYS};
use crate::region::{sync, threads};
use iced_x86::code_asm::*;
use weft_abi::delivery;
use weft_abi::sigaction::{SA_RESETHAND, SA_RESTART, SA_SIGINFO};
use weft_abi::syscall;

/// `getpid`'s and `rt_tgsigqueueinfo`'s numbers.
const GETPID: u32 = 39;
const RT_TGSIGQUEUEINFO: u32 = 297;
/// `tgkill`'s number.
const TGKILL: u32 = 234;
/// `rt_sigprocmask`'s `how` that adds to the blocked set.
const SIG_BLOCK: u32 = 0;
/// `syscall`'s encoding, as a little-endian word.
const SYSCALL_WORD: u32 = 0x050f;
/// `jmp rel32` and `ret`.
const JMP_REL32: u32 = 0xe9;
const RET: u32 = 0xc3;
/// `mov qword [r11 + RETURNED], 0` (REX.W+B, C7 /0, mod 10 rm r11,
/// disp32, imm32): its first 8 bytes as a little-endian word, and its
/// length (`crate::trampoline`'s clearing of `threads::RETURNED`).
const CLEAR_RETURNED_HEAD: u64 =
    0x49 | 0xc7 << 8 | 0x83 << 16 | (threads::RETURNED & 0xffff_ffff) << 24;
const CLEAR_RETURNED_LEN: i32 = 11;
/// `mov qword [r11 + RETURNED], 1`'s first 8 bytes (`mini::make_call`'s
/// marking, after its `pop r11`), and `pop r11`.
const MARK_RETURNED_HEAD: u64 = CLEAR_RETURNED_HEAD | 1 << 56;
const POP_R11: u32 = 0x5b41;
const _: () = assert!(threads::RETURNED > 127 && threads::RETURNED < 1 << 31);
/// Where the stub keeps, in the frame of a signal it hands to the
/// program's handler, the thread's block and the block's
/// `threads::RETURNED` word as the signal found it, with a check word
/// (the block's address xor [`KEPT_KEY`]): three of `uc_mcontext`'s
/// reserved words, which the kernel leaves alone.
const KEPT_BLOCK: i32 = weft_abi::sigaction::ucontext::RESERVED as i32;
const KEPT_RETURNED: i32 = KEPT_BLOCK + 8;
const KEPT_CHECK: i32 = KEPT_BLOCK + 16;
/// And the interrupted `rip`, for [`returned_from_here`].
const KEPT_RIP: i32 = KEPT_BLOCK + 24;
const KEPT_KEY: u64 = 0x5745_4654_5245_5455;
/// Bit of `SA_RESETHAND` in the flags.
const RESETHAND_BIT: u32 = SA_RESETHAND.trailing_zeros();

/// Where a rerun keeps the table's action of the signal as it was before
/// the call: its old action, if the kernel's is the stub.
const PREVIOUS: i32 = COPY + 40;
/// r15 after [`before_action`]: the record's steps 1 and 2 were taken.
const RECORDED: u32 = 1;
/// r15 after [`before_action`]: a rerun's call.
const RERUN: u32 = 2;

/// `rt_sigaction` of a signal that is not SIGSYS's or SIGTRAP's (r13: the
/// sync page; the arguments at [rsp]): steps 1 and 2 when they apply,
/// with r15 set to [`RECORDED`] for step 4 after the call; in a rerun,
/// the call's action behind the stub, with r15 [`RERUN`]. Clobbers rax,
/// rcx, rdx, rsi, rdi, r10, r11.
pub(super) fn before_action(a: &mut CodeAssembler, l: &mut Labels) -> Result<(), IcedError> {
    let mut as_it_is = a.create_label();
    let mut unwrapped = a.create_label();
    let mut rerun = a.create_label();
    // r15 held the table SIGSYS's and SIGTRAP's actions are kept in.
    a.xor(r15d, r15d)?;
    a.cmp(
        qword_ptr(r13 + sync::SIGNAL_MODE as i32),
        delivery::OFF as i32,
    )?;
    a.je(as_it_is)?;
    a.mov(rdx, qword_ptr(rsp))?;
    a.sub(rdx, 1)?;
    a.cmp(rdx, 63)?;
    a.ja(as_it_is)?;
    a.mov(rax, delivery::AS_THEY_COME)?;
    a.bt(rax, rdx)?;
    a.jc(as_it_is)?;
    a.mov(eax, GETPID)?;
    a.syscall()?;
    a.cmp(rax, qword_ptr(r13 + sync::SIGNAL_OWNER as i32))?;
    a.jne(as_it_is)?;
    a.cmp(
        qword_ptr(r13 + sync::SIGNAL_MODE as i32),
        delivery::RERUN as i32,
    )?;
    a.je(rerun)?;
    a.mov(r15d, RECORDED)?;
    // 1. rt_sigprocmask(SIG_BLOCK, {signal}, NULL, 8).
    a.mov(rcx, qword_ptr(rsp))?;
    a.sub(ecx, 1)?;
    a.mov(eax, 1)?;
    a.shl(rax, cl)?;
    a.mov(qword_ptr(rsp + COPY + 32), rax)?;
    a.mov(edi, SIG_BLOCK)?;
    a.lea(rsi, qword_ptr(rsp + COPY + 32))?;
    a.xor(edx, edx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGPROCMASK)?;
    a.syscall()?;
    // 2. rt_sigaction(signal, &kept, NULL, 8) if the stub holds its place.
    action_of(a, rsi)?;
    a.cmp(qword_ptr(rsi), 1)?;
    a.jbe(unwrapped)?;
    a.mov(rdi, qword_ptr(rsp))?;
    a.xor(edx, edx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGACTION)?;
    a.syscall()?;
    a.jmp(unwrapped)?;
    // A rerun: the table takes the new action, the kernel the stub in its
    // place (the table's old one kept for the old action).
    a.set_label(&mut rerun)?;
    a.mov(r15d, RERUN)?;
    action_of(a, rsi)?;
    copy(a, (rsi, 0), (rsp, PREVIOUS))?;
    a.mov(rax, qword_ptr(rsp + 8))?;
    a.test(rax, rax)?;
    a.jz(unwrapped)?;
    copy(a, (rax, 0), (rsi, 0))?;
    a.cmp(qword_ptr(rsi), 1)?;
    a.jbe(unwrapped)?;
    behind_the_stub(a, l, rsi)?;
    a.lea(rax, qword_ptr(rsp + COPY))?;
    a.mov(qword_ptr(rsp + 8), rax)?;
    a.jmp(l.call)?;
    a.set_label(&mut unwrapped)?;
    a.nop()?;
    a.set_label(&mut as_it_is)?;
    a.nop()
}

/// Copies a kernel `struct sigaction` (32 bytes). Clobbers rdx.
fn copy(
    a: &mut CodeAssembler,
    from: (AsmRegister64, i32),
    to: (AsmRegister64, i32),
) -> Result<(), IcedError> {
    for w in 0..4 {
        a.mov(rdx, qword_ptr(from.0 + from.1 + 8 * w))?;
        a.mov(qword_ptr(to.0 + to.1 + 8 * w), rdx)?;
    }
    Ok(())
}

/// The action at [rcx] with the stub for its handler, at [rsp + COPY]:
/// its flags with `SA_SIGINFO` (in a rerun also `SA_RESTART`, without
/// `SA_RESETHAND`), its restorer, its mask without SIGSYS. Clobbers rax.
fn behind_the_stub(
    a: &mut CodeAssembler,
    l: &mut Labels,
    action: AsmRegister64,
) -> Result<(), IcedError> {
    a.lea(rax, qword_ptr(l.stub))?;
    a.mov(qword_ptr(rsp + COPY), rax)?;
    a.mov(rax, qword_ptr(action + 8))?;
    a.or(rax, SA_SIGINFO as i32)?;
    let mut recording = a.create_label();
    a.cmp(
        qword_ptr(r13 + sync::SIGNAL_MODE as i32),
        delivery::RERUN as i32,
    )?;
    a.jne(recording)?;
    a.or(rax, SA_RESTART as i32)?;
    a.btr(rax, RESETHAND_BIT)?;
    a.set_label(&mut recording)?;
    a.mov(qword_ptr(rsp + COPY + 8), rax)?;
    a.mov(rax, qword_ptr(action + 16))?;
    a.mov(qword_ptr(rsp + COPY + 16), rax)?;
    a.mov(rax, qword_ptr(action + 24))?;
    a.btr(rax, (SIGSYS - 1) as u32)?;
    a.mov(qword_ptr(rsp + COPY + 24), rax)
}

/// `reg` := the table's entry of the signal at [rsp].
fn action_of(a: &mut CodeAssembler, reg: AsmRegister64) -> Result<(), IcedError> {
    a.mov(reg, qword_ptr(rsp))?;
    a.shl(reg, 5)?;
    a.lea(reg, qword_ptr(r13 + reg + sync::SIGNAL_ACTIONS as i32))
}

/// Step 4, after the program's `rt_sigaction` (r13: the sync page; the
/// arguments at [rsp]), then on to `done`.
pub(super) fn after_action(a: &mut CodeAssembler, l: &mut Labels) -> Result<(), IcedError> {
    let mut rerun = a.create_label();
    a.set_label(&mut l.rewrap)?;
    a.cmp(r15d, RERUN)?;
    a.je(rerun)?;
    a.mov(rdi, qword_ptr(rsp))?;
    a.xor(esi, esi)?;
    action_of(a, rdx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGACTION)?;
    a.syscall()?;
    action_of(a, rcx)?;
    a.cmp(qword_ptr(rcx), 1)?;
    a.jbe(l.done)?;
    behind_the_stub(a, l, rcx)?;
    a.mov(rdi, qword_ptr(rsp))?;
    a.lea(rsi, qword_ptr(rsp + COPY))?;
    a.xor(edx, edx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGACTION)?;
    a.syscall()?;
    a.jmp(l.done)?;
    // A rerun's call: a failed one leaves the table as it was; the old
    // action the kernel gave, if the stub, is the program's.
    a.set_label(&mut rerun)?;
    action_of(a, rcx)?;
    let mut done = a.create_label();
    let mut succeeded = a.create_label();
    a.cmp(qword_ptr(rbx + uc::RAX), 0)?;
    a.je(succeeded)?;
    copy(a, (rsp, PREVIOUS), (rcx, 0))?;
    a.jmp(done)?;
    a.set_label(&mut succeeded)?;
    a.mov(rax, qword_ptr(rsp + 16))?;
    a.test(rax, rax)?;
    a.jz(done)?;
    a.lea(rcx, qword_ptr(l.stub))?;
    a.cmp(qword_ptr(rax), rcx)?;
    a.jne(done)?;
    copy(a, (rsp, PREVIOUS), (rax, 0))?;
    a.set_label(&mut done)?;
    a.jmp(l.done)
}

/// A marked `siginfo_t` at rsi (`delivery::RAISED`) as it was sent: its
/// `si_errno` cleared, its code put back. Clobbers rax.
fn restore_code(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(dword_ptr(rsi + 4), 0)?;
    a.mov(eax, dword_ptr(rsi + delivery::CODE_KEPT as i32))?;
    a.mov(dword_ptr(rsi + 8), eax)?;
    a.mov(dword_ptr(rsi + delivery::CODE_KEPT as i32), 0)
}

/// In a record, a signal that comes while the thread writes a record of
/// weft's (its block's `WRITING` frame above the interrupted stack
/// pointer) would have its delivery's record, and its handler's calls',
/// dropped (a ring has one writer at a time): it is put off instead. Its
/// signal is sent again to the thread, marked, and blocked in the
/// interrupted code's mask, the mask before kept in the block
/// (`threads::DEFERRED_MASK`); the stub returns at once (`drop`), and the
/// writer, done, puts the mask back (`Gen::release_writing`), so that the
/// signal comes right after the record, where it is recorded as any. The
/// thread's block is found as generated code finds it, by its thread
/// pointer, and counts only if the slot names this thread. Entered with
/// rdi, rsi, rdx (the handler's arguments) pushed; leaves them pushed
/// when it goes on, and r8 the thread's block (0 if it has none).
/// Clobbers rax, rcx, rdx, r9 to r12, r14.
fn put_off_while_writing(a: &mut CodeAssembler, drop: CodeLabel) -> Result<(), IcedError> {
    let mut go_on = a.create_label();
    let mut probe = a.create_label();
    let mut found = a.create_label();
    let (signal, info, context) = (qword_ptr(rsp + 16), qword_ptr(rsp + 8), qword_ptr(rsp));
    a.xor(r8d, r8d)?;
    a.mov(r10, qword_ptr(r13 + sync::SIGNAL_THREADS as i32))?;
    a.test(r10, r10)?;
    a.jz(go_on)?;
    a.mov(eax, syscall::GETTID)?;
    a.syscall()?;
    a.mov(r14, rax)?;
    a.mov(r10, qword_ptr(r13 + sync::SIGNAL_THREADS as i32))?;
    a.mov(r12, qword_ptr(r13 + sync::SIGNAL_SLOTS as i32))?;
    a.sub(r12, 1)?; // the slots' mask
    a.mov(rax, qword_ptr(0u64).fs())?;
    a.test(rax, rax)?;
    a.jz(go_on)?;
    a.imul_3(rcx, rax, 0x2545_f491)?;
    a.shr(rcx, 16)?;
    a.and(rcx, r12)?;
    a.lea(r9, qword_ptr(r12 + 1))?;
    a.set_label(&mut probe)?;
    a.mov(r11, qword_ptr(r10 + rcx * 8))?;
    a.cmp(r11, rax)?;
    a.je(found)?;
    a.test(r11, r11)?;
    a.jz(go_on)?;
    a.add(rcx, 1)?;
    a.and(rcx, r12)?;
    a.sub(r9, 1)?;
    a.jnz(probe)?;
    a.jmp(go_on)?;
    a.set_label(&mut found)?;
    a.imul_2(rcx, qword_ptr(r13 + sync::SIGNAL_BLOCK as i32))?;
    a.lea(r11, qword_ptr(r10 + rcx))?;
    a.lea(r11, qword_ptr(r11 + r12 * 8 + 8))?;
    a.cmp(r14, qword_ptr(r11 + threads::TID as i32))?;
    a.jne(go_on)?;
    a.mov(r8, r11)?;
    a.mov(rax, qword_ptr(r11 + threads::WRITING as i32))?;
    a.test(rax, rax)?;
    a.jz(go_on)?;
    // The frame is 8 bytes below the writer's stack pointer: at or above
    // the interrupted one's, less 8, while the writer runs.
    a.mov(rdx, context)?;
    a.mov(rcx, qword_ptr(rdx + uc::RSP))?;
    a.sub(rcx, 8)?;
    a.cmp(rax, rcx)?;
    a.jb(go_on)?;
    // Put off: the signal added to the set the writer unblocks when it is
    // done (one instruction: a signal put off in between cannot lose
    // its bit), and blocked in the interrupted code. Not the mask the
    // interrupted code had, put back whole: several signals that come
    // at once stack their frames, and the second one's stub, put off
    // first, found the first one's stub interrupted, its own signal
    // blocked there; the writer then blocked that signal for good (a
    // session-30 trial: queued real-time signals lost under load).
    a.mov(rcx, signal)?;
    a.sub(ecx, 1)?;
    a.bts(qword_ptr(r11 + threads::DEFERRED_MASK as i32), rcx)?;
    a.mov(qword_ptr(r11 + threads::DEFERRED as i32), 1)?;
    a.bts(qword_ptr(rdx + uc::SIGMASK), rcx)?;
    // Blocked in the stub too, before it is sent again: an action with
    // `SA_NODEFER` leaves it unblocked here, and the signal sent would
    // come at once, into the stub again, put off again, until the stack
    // ran out (the program killed by SIGSEGV).
    a.mov(eax, 1)?;
    a.shl(rax, cl)?;
    a.push(rax)?;
    a.mov(edi, SIG_BLOCK)?;
    a.mov(rsi, rsp)?;
    a.xor(edx, edx)?;
    a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGPROCMASK)?;
    a.syscall()?;
    a.add(rsp, 8)?;
    // Sent again, marked (SI_QUEUE, which a thread may send itself).
    a.mov(rax, info)?;
    a.sub(rsp, 128)?;
    a.xor(ecx, ecx)?;
    for w in 0..16 {
        a.mov(qword_ptr(rsp + 8 * w), rcx)?;
    }
    for w in [2, 3, 4] {
        a.mov(rcx, qword_ptr(rax + 8 * w))?;
        a.mov(qword_ptr(rsp + 8 * w), rcx)?;
    }
    a.mov(ecx, dword_ptr(rax + 8))?;
    a.mov(dword_ptr(rsp + delivery::CODE_KEPT as i32), ecx)?;
    a.mov(dword_ptr(rsp + 8), delivery::SI_QUEUE)?;
    a.mov(rcx, qword_ptr(rsp + 128 + 16))?;
    a.mov(dword_ptr(rsp), ecx)?;
    a.mov(dword_ptr(rsp + 4), delivery::RAISED)?;
    a.mov(r12, rcx)?;
    a.mov(eax, GETPID)?;
    a.syscall()?;
    a.mov(rdi, rax)?;
    a.mov(rsi, r14)?;
    a.mov(rdx, r12)?;
    a.mov(r10, rsp)?;
    a.mov(eax, RT_TGSIGQUEUEINFO)?;
    a.syscall()?;
    a.add(rsp, 128)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    a.jmp(drop)?;
    a.set_label(&mut go_on)?;
    a.nop()
}

/// Keeps the thread's `threads::RETURNED` word in the signal's frame
/// (rbx: its `ucontext_t`, its check word 0; r8: the thread's block, or
/// 0) and clears it while the program's handler runs, in the program's
/// code: a handler's calls end clearing it anyway, and a signal in
/// weft's code before one of them came before that call. The handler's
/// return puts it back ([`put_returned_back`]), so that a signal pending
/// as the handler returns, which comes where the first one came, reads
/// as the first one did (before, the handler's `write` had cleared it,
/// and such a signal in weft's code after a call read as before the next
/// call: a loop's counter one step ahead in the rerun). Clobbers rax.
fn keep_returned(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut none = a.create_label();
    a.test(r8, r8)?;
    a.jz(none)?;
    a.mov(rax, qword_ptr(r8 + threads::RETURNED as i32))?;
    a.mov(qword_ptr(rbx + KEPT_RETURNED), rax)?;
    a.mov(qword_ptr(rbx + KEPT_BLOCK), r8)?;
    a.mov(rax, qword_ptr(rbx + uc::RIP))?;
    a.mov(qword_ptr(rbx + KEPT_RIP), rax)?;
    a.mov(rax, KEPT_KEY)?;
    a.xor(rax, r8)?;
    a.mov(qword_ptr(rbx + KEPT_CHECK), rax)?;
    a.mov(qword_ptr(r8 + threads::RETURNED as i32), 0)?;
    a.set_label(&mut none)?;
    a.nop()
}

/// At a handler's return (`rt_sigreturn`; rax: the frame's `ucontext_t`),
/// puts back the `threads::RETURNED` word [`keep_returned`] kept in the
/// frame, if the frame's check word says the stub kept it there, and
/// wipes the check, so that no later frame at the same place finds it.
/// Clobbers rcx and rdx.
pub(super) fn put_returned_back(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut not_kept = a.create_label();
    a.mov(rdx, qword_ptr(rax + KEPT_BLOCK))?;
    a.mov(rcx, KEPT_KEY)?;
    a.xor(rcx, rdx)?;
    a.cmp(rcx, qword_ptr(rax + KEPT_CHECK))?;
    a.jne(not_kept)?;
    a.mov(rcx, qword_ptr(rax + KEPT_RETURNED))?;
    a.mov(qword_ptr(rdx + threads::RETURNED as i32), rcx)?;
    a.mov(qword_ptr(rax + KEPT_CHECK), 0)?;
    a.set_label(&mut not_kept)?;
    a.nop()
}

/// At a delivery (rdx: its frame's `ucontext_t`): where the frame holds
/// what [`keep_returned`] kept in an earlier frame at the very same place
/// for the very same interrupted `rip`, and the thread's `RETURNED` word
/// is 0, puts the kept word back; then marks the frame as keeping
/// nothing. The kernel builds the frame of a signal pending as a handler
/// returns (`rt_sigreturn`) where the handler's was, and leaves the
/// reserved words as they were: that signal comes where the first one
/// came, and reads as it did. The SIGSYS handler does this at the
/// `rt_sigreturn` itself ([`put_returned_back`]), which a settled
/// process's threads make without dispatch; then the check word is gone
/// and nothing happens here. A frame at the same place later, for the
/// same `rip`, finds the word as that instruction has it anyway.
/// Clobbers rax and rcx.
fn returned_from_here(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut none = a.create_label();
    a.mov(rax, qword_ptr(rdx + KEPT_BLOCK))?;
    a.mov(rcx, KEPT_KEY)?;
    a.xor(rcx, rax)?;
    a.cmp(rcx, qword_ptr(rdx + KEPT_CHECK))?;
    a.jne(none)?;
    a.mov(rcx, qword_ptr(rdx + KEPT_RIP))?;
    a.cmp(rcx, qword_ptr(rdx + uc::RIP))?;
    a.jne(none)?;
    a.cmp(qword_ptr(rax + threads::RETURNED as i32), 0)?;
    a.jne(none)?;
    a.mov(rcx, qword_ptr(rdx + KEPT_RETURNED))?;
    a.mov(qword_ptr(rax + threads::RETURNED as i32), rcx)?;
    a.set_label(&mut none)?;
    a.mov(qword_ptr(rdx + KEPT_CHECK), 0)
}

/// Jumps to `after` if the interrupted rbp (rbx: the frame's
/// `ucontext_t`; r8: the thread's block, not 0) names the block's
/// `threads::RETURNED` word, as it does in weft's dispatch code from the
/// mark of a call made at the dispatch function
/// (`weft_plan::Primitive::MarkReturned`, rbp 0 before it) to the end of
/// the SIGSYS handler's restorer or of its direct entry: after that call,
/// whatever the word says. In a settled thread the word may say 0 there:
/// a handler that ran for a signal after the call cleared it
/// ([`keep_returned`]) and its return, not the SIGSYS handler's, did not
/// put it back; a second signal, held until the direct entry installed
/// the frame's mask, then read as before the next call (a `sigprocmask`
/// loop under a 1 ms timer beside two busy loops reran one step late in
/// 1 record of about 40). Only for an `rip` in the dispatch code, which
/// keeps rbp so. Clobbers rax.
fn marked_in_rbp(a: &mut CodeAssembler, after: CodeLabel) -> Result<(), IcedError> {
    a.lea(rax, qword_ptr(r8 + threads::RETURNED as i32))?;
    a.cmp(qword_ptr(rbx + uc::RBP), rax)?;
    a.je(after)
}

/// Clears the `threads::RETURNED` word a call made at the dispatch
/// function set (`weft_plan::Primitive::MarkReturned`, its address in
/// rbp; 0 if none), as weft's code goes back to the program's.
pub(super) fn clear_marked_return(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut none = a.create_label();
    a.test(rbp, rbp)?;
    a.jz(none)?;
    a.mov(qword_ptr(rbp), 0)?;
    a.set_label(&mut none)?;
    a.nop()
}

/// The delivery stub (rdi: the signal, rsi: its `siginfo_t`, rdx: the
/// frame's `ucontext_t`; [rsp]: the return into the restorer).
pub(super) fn stub(a: &mut CodeAssembler, l: &mut Labels) -> Result<(), IcedError> {
    let mut rerun = a.create_label();
    let mut chain = a.create_label();
    let mut drop = a.create_label();
    a.set_label(&mut l.stub)?;
    a.mov(r13, qword_ptr(l.sync_lit))?;
    a.cmp(
        qword_ptr(r13 + sync::SIGNAL_MODE as i32),
        delivery::RERUN as i32,
    )?;
    a.je(rerun)?;
    // A record: a signal put off (below) comes back marked, its code
    // kept aside.
    {
        let mut fresh = a.create_label();
        a.cmp(dword_ptr(rsi + 4), delivery::RAISED)?;
        a.jne(fresh)?;
        restore_code(a)?;
        a.set_label(&mut fresh)?;
        a.nop()?;
    }
    // No `RETURNED` kept in this frame yet (a signal put off returns
    // through `drop`, which puts back a kept one), once what an earlier
    // frame here kept is back.
    returned_from_here(a)?;
    a.push(rdi)?;
    a.push(rsi)?;
    a.push(rdx)?;
    put_off_while_writing(a, drop)?;
    // The delivery's call, with the registers the dispatch function's
    // probes read: rbx the frame (for an unwinder), r14 the number, rcx
    // the site (here the interrupted rip).
    a.mov(rbx, rdx)?;
    a.mov(r15, rsi)?;
    a.mov(r12, rdi)?;
    a.mov(rcx, qword_ptr(rbx + uc::RIP))?;
    came::where_it_came(a, l)?;
    keep_returned(a)?;
    a.shl(r9, 32)?;
    a.or(r9, r12)?;
    a.mov(rdx, r9)?;
    a.mov(rdi, rcx)?;
    a.mov(rsi, qword_ptr(rbx + uc::RAX))?;
    a.mov(r10, qword_ptr(r15 + 8))?;
    a.mov(r8, qword_ptr(r15 + 16))?;
    a.mov(r9, qword_ptr(r15 + 24))?;
    a.lea(r14, qword_ptr(r12 + delivery::BASE as i32))?;
    a.mov(rax, r14)?;
    a.xor(ebp, ebp)?;
    a.call(qword_ptr(l.function_lit))?;
    // The delivery's record marked the thread's block as after a call:
    // the program's handler runs with the word 0 (`keep_returned`), and
    // with rbp no longer naming it ([`marked_in_rbp`]).
    clear_marked_return(a)?;
    a.xor(ebp, ebp)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    a.jmp(chain)?;
    // A rerun: the feed's signals only, their recorded code put back.
    // An action the program set with `SA_RESETHAND` that a delivery reset
    // (the table's handler 0; the rerun's stub keeps its place): any
    // signal now gets the default action, as in the record, where the
    // kernel had reset it.
    a.set_label(&mut rerun)?;
    {
        let mut handled = a.create_label();
        a.mov(rcx, rdi)?;
        a.shl(rcx, 5)?;
        a.cmp(qword_ptr(r13 + rcx + sync::SIGNAL_ACTIONS as i32), 0)?;
        a.jne(handled)?;
        a.mov(r12, rdi)?;
        a.xor(eax, eax)?;
        for _ in 0..4 {
            a.push(rax)?;
        }
        a.mov(rsi, rsp)?;
        a.xor(edx, edx)?;
        a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
        a.mov(eax, syscall::RT_SIGACTION)?;
        a.syscall()?;
        a.add(rsp, 32)?;
        a.mov(eax, syscall::GETTID)?;
        a.syscall()?;
        a.mov(r14, rax)?;
        a.mov(eax, GETPID)?;
        a.syscall()?;
        a.mov(rdi, rax)?;
        a.mov(rsi, r14)?;
        a.mov(rdx, r12)?;
        a.mov(eax, TGKILL)?;
        a.syscall()?;
        a.jmp(drop)?;
        a.set_label(&mut handled)?;
        a.nop()?;
    }
    a.cmp(dword_ptr(rsi + 4), delivery::RAISED)?;
    a.jne(drop)?;
    restore_code(a)?;
    // The program's handler, as the kernel would have entered it; an
    // action that resets itself is the default one from now on.
    a.set_label(&mut chain)?;
    a.mov(rcx, rdi)?;
    a.shl(rcx, 5)?;
    a.lea(rcx, qword_ptr(r13 + rcx + sync::SIGNAL_ACTIONS as i32))?;
    a.mov(r11, qword_ptr(rcx))?;
    a.cmp(r11, 1)?;
    a.jbe(drop)?;
    {
        let mut kept = a.create_label();
        a.bt(qword_ptr(rcx + 8), RESETHAND_BIT)?;
        a.jnc(kept)?;
        a.mov(qword_ptr(rcx), 0)?;
        a.set_label(&mut kept)?;
        a.nop()?;
    }
    a.xor(eax, eax)?;
    a.jmp(r11)?;
    // Dropped: back to where the signal came.
    a.set_label(&mut drop)?;
    a.add(rsp, 8)?;
    a.mov(rax, rsp)?;
    put_returned_back(a)?;
    a.mov(eax, syscall::RT_SIGRETURN)?;
    a.syscall()?;
    a.int3()
}

mod came;
#[cfg(test)]
mod tests;
