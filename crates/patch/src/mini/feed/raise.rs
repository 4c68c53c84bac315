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
        self.raise_deliveries_then(when, when | f::RAISE_WITH_PREVIOUS)
    }

    /// [`Gen::raise_deliveries`], the entries after the first raise being
    /// those with one of the flags `then`.
    fn raise_deliveries_then(
        &mut self,
        when: u64,
        then: u64,
    ) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut again = a.create_label();
        let mut first = a.create_label();
        let mut raise = a.create_label();
        let mut out = a.create_label();
        // The first entry with one of the flags `when`; after a raise (its
        // handler has returned), also one to raise with the one before.
        for (label, flags) in [(&mut first, when), (&mut again, then)] {
            a.set_label(label)?;
            next_delivery(a, flags, out)?;
            a.jmp(raise)?;
        }
        a.set_label(&mut raise)?;
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
        send_delivery(a, TidFrom::Block)?;
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

impl Gen {
    /// At a call's return, after the deliveries raised there: if the
    /// thread feed's next entry is a delivery to raise where the signal
    /// came in the program's own code (`RAISE_AT_RIP`), waits for its
    /// waits, then arms a hardware breakpoint at the recorded `rip` for
    /// this thread, whose SIGTRAP raises it there (`crate::trap`). One the
    /// kernel will not arm is raised now; so is one whose `rip` is
    /// `returns_to` (not 0), the program's instruction after the call's
    /// `syscall`: this code runs there, before that instruction, as the
    /// call returns, and the rerun's splice at that address (the probe's
    /// own) has run already, so a breakpoint there would stop nothing
    /// (a signal that came there in the record, where the site's window
    /// ended before it, ran its handler one step late, before the next
    /// call). Registers as for [`Gen::raise_deliveries`].
    pub(super) fn arm_breakpoint(&mut self, returns_to: u64) -> std::result::Result<(), IcedError> {
        use weft_abi::perf as p;
        let a = &mut self.a;
        let mut top = a.create_label();
        let mut out = a.create_label();
        let mut failed = a.create_label();
        let mut here = a.create_label();
        let mut skip = a.create_label();
        a.set_label(&mut top)?;
        a.cmp(qword_ptr(rcx + f::THREAD_ARMED as i32), 0)?;
        a.jne(out)?;
        next_delivery(a, f::RAISE_AT_RIP, out)?;
        if returns_to != 0 {
            a.mov(rax, returns_to)?;
            a.cmp(qword_ptr(rdi + f::CALL_ARGS as i32), rax)?;
            a.je(here)?;
        }
        let kept = [rcx, rsi, r8, r9, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        a.mov(r9, rdi)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_FLAGS as i32))?;
        self.feed_wait(skip)?;
        let a = &mut self.a;
        let size = p::ATTR_SIZE as i32;
        a.sub(rsp, size)?;
        a.xor(eax, eax)?;
        for k in 0..size / 8 {
            a.mov(qword_ptr(rsp + 8 * k), rax)?;
        }
        a.mov(dword_ptr(rsp + p::TYPE as i32), p::TYPE_BREAKPOINT)?;
        a.mov(dword_ptr(rsp + p::SIZE as i32), p::ATTR_SIZE)?;
        a.mov(qword_ptr(rsp + p::SAMPLE_PERIOD as i32), 1)?;
        a.mov(
            rax,
            p::EXCLUDE_KERNEL | p::EXCLUDE_HV | p::REMOVE_ON_EXEC | p::SIGTRAP,
        )?;
        a.mov(qword_ptr(rsp + p::FLAGS as i32), rax)?;
        a.mov(dword_ptr(rsp + p::BP_TYPE as i32), p::BREAKPOINT_X)?;
        a.mov(rax, qword_ptr(r9 + f::CALL_ARGS as i32))?;
        a.mov(qword_ptr(rsp + p::BP_ADDR as i32), rax)?;
        a.mov(qword_ptr(rsp + p::BP_LEN as i32), 8)?;
        a.mov(rax, f::BREAKPOINT_MARK)?;
        a.or(rax, rcx)?;
        a.mov(qword_ptr(rsp + p::SIG_DATA as i32), rax)?;
        a.mov(rdi, rsp)?;
        a.xor(esi, esi)?; // this thread
        a.mov(rdx, -1i64)?; // any CPU
        a.mov(r10, -1i64)?; // no group
        a.mov(r8d, p::FLAG_FD_CLOEXEC as u32)?;
        a.mov(eax, p::PERF_EVENT_OPEN)?;
        a.syscall()?;
        a.add(rsp, size)?;
        a.mov(rdx, r9)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.test(rax, rax)?;
        a.js(failed)?;
        a.mov(qword_ptr(rcx + f::THREAD_ARMED_FD as i32), rax)?;
        a.mov(qword_ptr(rcx + f::THREAD_ARMED as i32), rdx)?;
        a.jmp(out)?;
        a.set_label(&mut skip)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.jmp(out)?;
        a.set_label(&mut failed)?;
        a.nop()?;
        self.raise_deliveries(f::RAISE_AT_RIP)?;
        if returns_to != 0 {
            // Raised here, with those to raise with it; then the
            // breakpoint for the next one, unless its handler's calls
            // armed it.
            self.a.jmp(out)?;
            self.a.set_label(&mut here)?;
            self.a.nop()?;
            self.raise_deliveries_then(f::RAISE_AT_RIP, f::RAISE_WITH_PREVIOUS)?;
            self.a.jmp(top)?;
        }
        self.a.set_label(&mut out)?;
        self.a.nop()
    }

    /// At a call's return (r8: the feed, r11: the block): in the thread
    /// that follows its feed (not a new child, whose slot still names its
    /// parent's), the deliveries raised there, then the breakpoint armed
    /// for the one after, if it waits where the program's code was.
    /// `thread` and `named_for`: the block's words naming the thread
    /// feed and the thread it is for; `returns_to`: the address of the
    /// program's instruction this return goes on at, if known (else 0).
    /// Jumps to `done` in another thread.
    pub(super) fn deliveries_at_return(
        &mut self,
        (thread, named_for): (i32, i32),
        returns_to: u64,
        done: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        a.mov(rcx, qword_ptr(r11 + thread))?;
        a.test(rcx, rcx)?;
        a.jz(done)?;
        a.mov(rax, qword_ptr(r11 + t::TID as i32))?;
        a.cmp(rax, qword_ptr(r11 + named_for))?;
        a.jne(done)?;
        self.raise_deliveries(f::RAISE_AT_RETURN)?;
        self.arm_breakpoint(returns_to)
    }

    /// Before the thread's next call (rcx: the thread feed, kept): takes
    /// off a breakpoint the thread armed and did not reach, so that the
    /// call finds its descriptors as the record had them; its delivery is
    /// raised next, with the others before the call. Clobbers rax and rdi.
    pub(super) fn disarm_breakpoint(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut none = a.create_label();
        a.cmp(qword_ptr(rcx + f::THREAD_ARMED as i32), 0)?;
        a.je(none)?;
        a.mov(qword_ptr(rcx + f::THREAD_ARMED as i32), 0)?;
        a.push(rcx)?;
        a.push(r11)?;
        a.mov(rdi, qword_ptr(rcx + f::THREAD_ARMED_FD as i32))?;
        a.mov(eax, weft_abi::syscall::CLOSE)?;
        a.syscall()?;
        a.pop(r11)?;
        a.pop(rcx)?;
        a.set_label(&mut none)?;
        a.nop()
    }
}

/// The SIGTRAP handler's part for weft's breakpoints (`si_code`
/// `TRAP_PERF`, `si_perf_data` marked [`f::BREAKPOINT_MARK`], the thread
/// feed in its low bits; rsi: the `siginfo_t`): takes the breakpoint off
/// and raises the delivery it was armed for, and those right after it
/// that wait at the same `rip`, which then come before the instruction at
/// the breakpoint runs. Jumps to `other` for a SIGTRAP of another perf
/// event; returns from the handler otherwise.
pub(crate) fn breakpoint_hit(a: &mut CodeAssembler, other: CodeLabel) -> Result<(), IcedError> {
    let mut done = a.create_label();
    let mut each = a.create_label();
    let mut last = a.create_label();
    a.mov(rax, qword_ptr(rsi + weft_abi::siginfo::PERF_DATA as i32))?;
    a.mov(rcx, rax)?;
    a.shr(rcx, 48)?;
    a.cmp(rcx, (f::BREAKPOINT_MARK >> 48) as i32)?;
    a.jne(other)?;
    a.shl(rax, 16)?;
    a.shr(rax, 16)?;
    a.mov(r9, qword_ptr(rax + f::THREAD_ARMED as i32))?;
    a.test(r9, r9)?;
    a.jz(done)?;
    a.mov(qword_ptr(rax + f::THREAD_ARMED as i32), 0)?;
    // The kernel returns to the instruction with the resume flag set, so
    // that this breakpoint does not stop it again; it is taken off, and
    // one the next delivery's handler arms at the same place must stop it.
    let flags = weft_abi::sigaction::ucontext::EFL as i32;
    let resume = weft_abi::sigaction::ucontext::RESUME_FLAG;
    a.and(qword_ptr(rdx + flags), !(resume as i32))?;
    a.push(rax)?;
    a.mov(rdi, qword_ptr(rax + f::THREAD_ARMED_FD as i32))?;
    a.mov(eax, weft_abi::syscall::CLOSE)?;
    a.syscall()?;
    // [rsp]: the armed entry, +8: its index, +16: the thread feed (a
    // thread feed's entries lie one after the other); r9: the entry to
    // raise.
    a.mov(rax, qword_ptr(rsp))?;
    a.mov(rcx, qword_ptr(rax + f::THREAD_CURSOR as i32))?;
    a.push(rcx)?;
    a.push(r9)?;
    a.set_label(&mut each)?;
    a.mov(rax, qword_ptr(rsp + 16))?;
    a.add(qword_ptr(rax + f::THREAD_CURSOR as i32), 1)?;
    a.add(qword_ptr(rax + f::THREAD_RAISED as i32), 1)?;
    a.push(r9)?;
    a.mov(rdi, r9)?;
    send_delivery(a, TidFrom::Kernel)?;
    a.pop(r9)?;
    // Then the entry at the cursor (past the calls the handler made), if
    // it is to be raised with this one, or waits at the same place.
    a.mov(rax, qword_ptr(rsp + 16))?;
    a.mov(rcx, qword_ptr(rax + f::THREAD_CURSOR as i32))?;
    a.cmp(rcx, qword_ptr(rax + f::THREAD_COUNT_CALLS as i32))?;
    a.jae(last)?;
    a.mov(rdx, qword_ptr(r9 + f::CALL_ARGS as i32))?;
    a.sub(rcx, qword_ptr(rsp + 8))?;
    a.imul_3(rcx, rcx, f::CALL_SIZE as i32)?;
    a.add(rcx, qword_ptr(rsp))?;
    a.mov(r9, rcx)?;
    a.mov(rcx, qword_ptr(r9 + f::CALL_NR as i32))?;
    a.sub(rcx, (delivery::BASE + 1) as i32)?;
    a.cmp(rcx, 63)?;
    a.ja(last)?;
    a.test(
        qword_ptr(r9 + f::CALL_FLAGS as i32),
        f::RAISE_WITH_PREVIOUS as i32,
    )?;
    a.jnz(each)?;
    a.test(qword_ptr(r9 + f::CALL_FLAGS as i32), f::RAISE_AT_RIP as i32)?;
    a.jz(last)?;
    a.cmp(rdx, qword_ptr(r9 + f::CALL_ARGS as i32))?;
    a.je(each)?;
    a.set_label(&mut last)?;
    a.add(rsp, 24)?;
    a.set_label(&mut done)?;
    a.ret()
}

/// rax := the thread feed's cursor, rdi := its entry there (r8: the feed,
/// rcx: the thread feed), rdx := the signal - 1, if that entry is a
/// delivery with one of the flags `flags`; else jumps to `none`.
fn next_delivery(a: &mut CodeAssembler, flags: u64, none: CodeLabel) -> Result<(), IcedError> {
    a.mov(rax, qword_ptr(rcx + f::THREAD_CURSOR as i32))?;
    a.cmp(rax, qword_ptr(rcx + f::THREAD_COUNT_CALLS as i32))?;
    a.jae(none)?;
    a.imul_3(rdi, rax, f::CALL_SIZE as i32)?;
    a.add(rdi, qword_ptr(rcx + f::THREAD_CALLS as i32))?;
    a.add(rdi, r8)?;
    a.mov(rdx, qword_ptr(rdi + f::CALL_NR as i32))?;
    a.sub(rdx, (delivery::BASE + 1) as i32)?;
    a.cmp(rdx, 63)?;
    a.ja(none)?;
    a.test(qword_ptr(rdi + f::CALL_FLAGS as i32), flags as i32)?;
    a.jz(none)
}

/// Where [`send_delivery`] finds the id of the thread it sends to.
pub(crate) enum TidFrom {
    /// The thread's block, in r11.
    Block,
    /// The kernel (`gettid`), where no block is at hand (a signal
    /// handler).
    Kernel,
}

/// Sends the recorded delivery at rdi (a feed call entry whose number is
/// a delivery's) to the calling thread: the signal, marked `RAISED`, with
/// the recorded sender, value and code (which the delivery stub puts
/// back), after taking off a pending one of the same number that the
/// rerun's own processes sent. Clobbers rax, rcx, rdx, rsi, rdi, r9, r10
/// and r11.
pub(crate) fn send_delivery(a: &mut CodeAssembler, tid: TidFrom) -> Result<(), IcedError> {
    match tid {
        TidFrom::Block => a.mov(rsi, qword_ptr(r11 + t::TID as i32))?,
        TidFrom::Kernel => {
            a.mov(eax, weft_abi::syscall::GETTID)?;
            a.syscall()?;
            a.mov(rsi, rax)?;
        }
    }
    a.push(rsi)?;
    a.mov(rdx, qword_ptr(rdi + f::CALL_NR as i32))?;
    a.sub(rdx, (delivery::BASE + 1) as i32)?;
    // The siginfo: the signal, RAISED, SI_QUEUE, the recorded sender and
    // value (the record's fifth and sixth arguments), the recorded code
    // where the stub puts it back from.
    a.sub(rsp, NO_WAIT + 16)?;
    a.xor(eax, eax)?;
    for k in 0..(NO_WAIT + 16) / 8 {
        a.mov(qword_ptr(rsp + 8 * k), rax)?;
    }
    a.lea(r9, qword_ptr(rdx + 1))?;
    // A signal of the same number the rerun's processes sent, pending
    // while the program blocks it, would make the kernel discard the
    // raised one (a signal below SIGRTMIN is pending once at most): taken
    // off first (`rt_sigtimedwait` that does not wait).
    {
        let mut queued = a.create_label();
        a.cmp(r9d, SIGRTMIN)?;
        a.jae(queued)?;
        a.mov(ecx, edx)?;
        a.mov(eax, 1)?;
        a.shl(rax, cl)?;
        a.mov(qword_ptr(rsp + SET), rax)?;
        a.push(rdi)?;
        a.lea(rdi, qword_ptr(rsp + 8 + SET))?;
        a.xor(esi, esi)?;
        a.lea(rdx, qword_ptr(rsp + 8 + NO_WAIT))?;
        a.mov(r10d, 8)?;
        a.mov(eax, RT_SIGTIMEDWAIT)?;
        a.syscall()?;
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
    a.mov(eax, GETPID)?;
    a.syscall()?;
    a.mov(rdi, rax)?;
    a.mov(rsi, qword_ptr(rsp + NO_WAIT + 16))?;
    a.mov(rdx, r9)?;
    a.mov(r10, rsp)?;
    a.mov(eax, RT_TGSIGQUEUEINFO)?;
    a.syscall()?;
    a.add(rsp, NO_WAIT + 24)?;
    Ok(())
}
