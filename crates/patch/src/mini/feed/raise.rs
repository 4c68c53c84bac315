//! The feed's recorded signal deliveries (`weft_abi::delivery`): a thread
//! whose cursor reaches one sends the signal to itself, so that the
//! delivery stub in weft's SIGSYS handler runs the program's handler
//! there (in a rerun the stub runs it for such a signal alone, and drops
//! the signals the rerun's processes send). Where the cursor reaches one
//! is the record's order; when the raise runs, the delivery's flags say:
//! before a call's waits end and it is made (`RAISE_DURING`), at a call's
//! return (`RAISE_AT_RETURN`), or before the thread's next call
//! (`RAISE_NEXT`; any delivery there).

use crate::mini::Gen;
use crate::region::threads as t;
use iced_x86::code_asm::*;
use weft_abi::delivery;
use weft_abi::feed as f;

/// `getpid`, `rt_sigtimedwait` and `rt_tgsigqueueinfo`.
const GETPID: u32 = 39;
const RT_SIGTIMEDWAIT: u32 = 128;
const RT_TGSIGQUEUEINFO: u32 = 297;
/// Bytes of a `siginfo_t`.
const SIGINFO: i32 = 128;
/// Below the `siginfo_t`: a signal set and a zero `struct timespec`.
const SET: i32 = SIGINFO;
const NO_WAIT: i32 = SIGINFO + 8;
/// The first real-time signal: those before it are not queued twice.
const SIGRTMIN: i32 = 32;

impl Gen {
    /// While the thread feed's next entry is a recorded delivery with one
    /// of the flags `when`, moves the cursor past it and raises its signal
    /// in the thread (r8: the feed, rcx: the thread feed, r11: the thread's
    /// block). The program's handler runs as the raise returns, its calls
    /// following the feed on. Keeps every register but rax, rdx and rdi.
    pub(super) fn raise_deliveries(&mut self, when: u64) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut again = a.create_label();
        let mut out = a.create_label();
        a.set_label(&mut again)?;
        a.mov(rax, qword_ptr(rcx + f::THREAD_CURSOR as i32))?;
        a.cmp(rax, qword_ptr(rcx + f::THREAD_COUNT_CALLS as i32))?;
        a.jae(out)?;
        a.imul_3(rdi, rax, f::CALL_SIZE as i32)?;
        a.add(rdi, qword_ptr(rcx + f::THREAD_CALLS as i32))?;
        a.add(rdi, r8)?;
        // rdx := the signal - 1, if the entry is a delivery.
        a.mov(rdx, qword_ptr(rdi + f::CALL_NR as i32))?;
        a.sub(rdx, (delivery::BASE + 1) as i32)?;
        a.cmp(rdx, 63)?;
        a.ja(out)?;
        a.test(qword_ptr(rdi + f::CALL_FLAGS as i32), when as i32)?;
        a.jz(out)?;
        a.add(rax, 1)?;
        a.mov(qword_ptr(rcx + f::THREAD_CURSOR as i32), rax)?;
        let kept = [rcx, rsi, r8, r9, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        // Not before what caused it, in other threads (its waits); after
        // a divergence elsewhere, not at all.
        let mut skip = a.create_label();
        a.mov(r9, rdi)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_FLAGS as i32))?;
        self.feed_wait(skip)?;
        let a = &mut self.a;
        a.add(qword_ptr(rcx + f::THREAD_RAISED as i32), 1)?;
        a.mov(rdi, r9)?;
        a.mov(rdx, qword_ptr(rdi + f::CALL_NR as i32))?;
        a.sub(rdx, (delivery::BASE + 1) as i32)?;
        // The siginfo: the signal, RAISED, SI_QUEUE, the recorded sender
        // and value (the record's fifth and sixth arguments), the recorded
        // code where the stub puts it back from.
        a.sub(rsp, NO_WAIT + 16)?;
        a.xor(eax, eax)?;
        for k in 0..(NO_WAIT + 16) / 8 {
            a.mov(qword_ptr(rsp + 8 * k), rax)?;
        }
        a.lea(r9, qword_ptr(rdx + 1))?;
        // A signal of the same number the rerun's processes sent, pending
        // while the program blocks it, would make the kernel discard the
        // raised one (a signal below SIGRTMIN is pending once at most):
        // taken off first (`rt_sigtimedwait` that does not wait).
        {
            let mut queued = a.create_label();
            a.cmp(r9d, SIGRTMIN)?;
            a.jae(queued)?;
            a.mov(ecx, edx)?;
            a.mov(eax, 1)?;
            a.shl(rax, cl)?;
            a.mov(qword_ptr(rsp + SET), rax)?;
            // The call clobbers r11 (the block) and rcx.
            a.push(rdi)?;
            a.push(r11)?;
            a.lea(rdi, qword_ptr(rsp + 16 + SET))?;
            a.xor(esi, esi)?;
            a.lea(rdx, qword_ptr(rsp + 16 + NO_WAIT))?;
            a.mov(r10d, 8)?;
            a.mov(eax, RT_SIGTIMEDWAIT)?;
            a.syscall()?;
            a.pop(r11)?;
            a.pop(rdi)?;
            a.set_label(&mut queued)?;
            a.nop()?;
        }
        a.mov(rax, u64::from(delivery::RAISED) << 32)?;
        a.or(rax, r9)?;
        a.mov(qword_ptr(rsp), rax)?;
        a.mov(dword_ptr(rsp + 8), delivery::SI_QUEUE)?;
        a.mov(rax, qword_ptr(rdi + (f::CALL_ARGS + 24) as i32))?;
        a.mov(dword_ptr(rsp + delivery::CODE_KEPT as i32), eax)?;
        for word in [2, 3] {
            a.mov(rax, qword_ptr(rdi + (f::CALL_ARGS + 8 * (word + 2)) as i32))?;
            a.mov(qword_ptr(rsp + 8 * word as i32), rax)?;
        }
        a.mov(rsi, qword_ptr(r11 + t::TID as i32))?;
        a.mov(eax, GETPID)?;
        a.syscall()?;
        a.mov(rdi, rax)?;
        a.mov(rdx, r9)?;
        a.mov(r10, rsp)?;
        a.mov(eax, RT_TGSIGQUEUEINFO)?;
        a.syscall()?;
        a.add(rsp, NO_WAIT + 16)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.jmp(again)?;
        a.set_label(&mut skip)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.set_label(&mut out)?;
        a.nop()
    }
}
