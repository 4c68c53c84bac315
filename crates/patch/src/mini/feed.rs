//! Re-execution's feed (`weft_abi::feed`) at a `syscall` instruction:
//! the code that follows each thread of a rerun through its recorded
//! calls, without a lock or a system call of its own.
//!
//! Before the instruction: the thread finds its thread feed (kept in its
//! slot's feed state; looked up in the id map by its kernel id the first
//! time, and again in a forked child, whose slot is a copy under another
//! id), takes its next recorded call and compares it with the one the
//! program makes (the number, and the arguments the record says to
//! compare). A call that differs, one past the record's end, or a thread
//! the map never names, is a divergence: the first thread to diverge
//! writes what it was asked and its registers into the feed's header, and
//! every diverging thread spins there until weft ends the rerun, as does
//! every other thread at its next call, saying so in its thread feed. A call
//! the record answers becomes number -1, which the kernel refuses at once
//! with `ENOSYS`, doing nothing.
//!
//! After the instruction: such a call gets the recorded result, and the
//! recorded bytes in the buffer its argument names; a call that made a
//! thread or a process adds its child (the result, its kernel id) to the
//! id map with the feed the record gives the child, and returns the
//! recorded id. Ids go through the map both ways: a recorded id in the
//! arguments of `kill`, `wait4` and the like becomes the rerun's, and
//! the rerun's id that `wait4` returns the recorded one.
//!
//! At a vDSO function (`weft_plan::VdsoCall`) the same check runs at its
//! entry, with the number the function stands for; an answered call keeps
//! the address of its buffer, runs, and gets the recorded result and bytes
//! at its return, over what it computed.

use super::{Gen, ARG_OFFSET, FIXED_FRAME_RSP, RAX_OFFSET, SYSCALL_ARG_OFFSET};
use crate::region::threads as t;
use iced_x86::code_asm::*;
use weft_abi::feed as f;
use weft_plan::Feed;

mod after;
mod exact;
pub(crate) mod raise;

/// `futex`'s number, and its wake operation (shared between processes:
/// not `FUTEX_PRIVATE_FLAG`; waiting is 0).
const FUTEX: u32 = 202;
const FUTEX_WAKE: u32 = 1;

/// Pauses a thread stopped after a divergence waits for weft to end its
/// process before it ends it itself (`exit_group`): some seconds.
const STOPPED_PAUSES: u32 = 1 << 27;
/// `exit_group`'s and `exit`'s numbers, and the status a stopped process
/// or thread ends with (SIGKILL's, as a shell reports it).
const EXIT_GROUP: u32 = 231;
const EXIT: u32 = 60;
const STOPPED_STATUS: u32 = 137;

/// `wait4`'s number and its `WNOHANG` option.
const WAIT4: u32 = 61;
const WNOHANG: i32 = 1;

/// `rt_sigpending`'s number.
const RT_SIGPENDING: u32 = 127;

/// `-EINTR`, as `rax` holds it.
const EINTR: i32 = -4;

/// Pauses a thread waits at most for its parent to name it in the id
/// map (the parent does so as soon as its `clone` returns) before the
/// thread counts as one the record does not have: some seconds.
const NAMING_PAUSES: u32 = 1 << 26;

impl Gen {
    /// The feed primitive (r11: the thread's block, kept).
    pub(super) fn feed(&mut self, feed: &Feed) -> std::result::Result<(), IcedError> {
        let base = self.literal(feed.base);
        let state = |i: u64| (t::counter(feed.state + i)) as i32;
        let (thread, named_for, current) = (state(0), state(1), state(2));
        let (parent_of, made_at) = (state(3), state(4));
        let a = &mut self.a;
        let mut done = a.create_label();
        // r8 := the feed, if this process has one.
        a.mov(rax, qword_ptr(base))?;
        a.mov(r8, qword_ptr(rax))?;
        a.test(r8, r8)?;
        a.jz(done)?;
        if let (true, Some(vdso)) = (feed.returning, feed.vdso) {
            let buffer = t::counter(vdso.buffer) as i32;
            return self.feed_vdso_return(current, buffer, (thread, named_for), done);
        }
        if feed.returning {
            let named_for = state(1);
            return self.feed_after(
                (feed.site, feed.returns_to),
                (thread, named_for),
                current,
                (parent_of, made_at),
                done,
            );
        }
        let mut diverge = a.create_label();
        let mut have = a.create_label();
        let mut lookup = a.create_label();
        // rcx := the thread's feed, looked up in the id map if the slot
        // has none for this thread's id.
        a.mov(rdx, qword_ptr(r11 + t::TID as i32))?;
        a.mov(rcx, qword_ptr(r11 + thread))?;
        a.test(rcx, rcx)?;
        a.jz(lookup)?;
        a.cmp(rdx, qword_ptr(r11 + named_for))?;
        a.je(have)?;
        a.set_label(&mut lookup)?;
        {
            let mut again = a.create_label();
            let mut scan = a.create_label();
            let mut not_yet = a.create_label();
            let mut found = a.create_label();
            a.mov(r9d, NAMING_PAUSES)?;
            a.set_label(&mut again)?;
            a.mov(rsi, qword_ptr(r8 + f::MAP_USED as i32))?;
            a.cmp(rsi, qword_ptr(r8 + f::MAP_CAPACITY as i32))?;
            a.cmova(rsi, qword_ptr(r8 + f::MAP_CAPACITY as i32))?;
            a.mov(rdi, qword_ptr(r8 + f::MAP as i32))?;
            a.add(rdi, r8)?;
            a.set_label(&mut scan)?;
            a.test(rsi, rsi)?;
            a.jz(not_yet)?;
            a.cmp(rdx, qword_ptr(rdi + f::ENTRY_TID as i32))?;
            a.je(found)?;
            a.add(rdi, f::MAP_ENTRY as i32)?;
            a.sub(rsi, 1)?;
            a.jmp(scan)?;
            a.set_label(&mut not_yet)?;
            // The rerun diverged meanwhile: a thread no one will name
            // ends (itself only: weft may still be reading the diverged
            // thread of its process).
            let mut waiting = a.create_label();
            a.cmp(qword_ptr(r8 + f::DIVERGED as i32), 0)?;
            a.je(waiting)?;
            a.mov(eax, EXIT)?;
            a.mov(edi, STOPPED_STATUS)?;
            a.syscall()?;
            a.set_label(&mut waiting)?;
            a.pause()?;
            a.sub(r9d, 1)?;
            a.jnz(again)?;
            a.mov(eax, f::UNKNOWN_THREAD as u32)?;
            a.mov(rcx, -1i64)?;
            a.xor(r10d, r10d)?;
            a.jmp(diverge)?;
            a.set_label(&mut found)?;
            a.mov(rcx, qword_ptr(rdi + f::ENTRY_FEED as i32))?;
            a.sub(rcx, 1)?;
            a.shl(rcx, f::THREAD_SIZE.trailing_zeros())?;
            a.add(rcx, qword_ptr(r8 + f::THREADS as i32))?;
            a.add(rcx, r8)?;
            a.mov(qword_ptr(r11 + thread), rcx)?;
            a.mov(qword_ptr(r11 + named_for), rdx)?;
            a.mov(qword_ptr(rcx + f::THREAD_RERUN_TID as i32), rdx)?;
        }
        a.set_label(&mut have)?;
        // After a divergence every thread stops at its next call.
        let mut stop = a.create_label();
        a.cmp(qword_ptr(r8 + f::DIVERGED as i32), 0)?;
        a.jne(stop)?;
        // r9 := its next call, the cursor moved past it.
        let mut beyond = a.create_label();
        let mut next_call = a.create_label();
        a.set_label(&mut next_call)?;
        a.nop()?;
        // A recorded signal delivery here comes first (`raise`), a vDSO
        // function's call too; one a breakpoint waits for that the thread
        // did not reach, too.
        self.disarm_breakpoint()?;
        self.raise_deliveries(
            f::RAISE_DURING
                | f::RAISE_AT_RETURN
                | f::RAISE_NEXT
                | f::RAISE_AT_RIP
                | f::RAISE_WITH_PREVIOUS,
        )?;
        let a = &mut self.a;
        a.mov(r10, qword_ptr(rcx + f::THREAD_CURSOR as i32))?;
        a.cmp(r10, qword_ptr(rcx + f::THREAD_COUNT_CALLS as i32))?;
        a.jae(beyond)?;
        a.lea(rax, qword_ptr(r10 + 1))?;
        a.mov(qword_ptr(rcx + f::THREAD_CURSOR as i32), rax)?;
        a.imul_3(r9, r10, f::CALL_SIZE as i32)?;
        a.add(r9, qword_ptr(rcx + f::THREAD_CALLS as i32))?;
        a.add(r9, r8)?;
        // The number, then the arguments the record compares.
        let mut differs = a.create_label();
        match feed.vdso {
            Some(v) => a.mov(rax, v.nr)?,
            None => a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?,
        }
        a.cmp(rax, qword_ptr(r9 + f::CALL_NR as i32))?;
        a.jne(differs)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_FLAGS as i32))?;
        for (i, off) in SYSCALL_ARG_OFFSET.iter().enumerate() {
            let mut same = a.create_label();
            a.bt(rsi, (f::COMPARE_SHIFT + i as u64) as u32)?;
            a.jnc(same)?;
            a.mov(rax, qword_ptr(rsp + *off))?;
            a.cmp(rax, qword_ptr(r9 + (f::CALL_ARGS + 8 * i as u64) as i32))?;
            a.jne(differs)?;
            a.set_label(&mut same)?;
            a.nop()?;
        }
        let mut compared = a.create_label();
        a.set_label(&mut compared)?;
        // The program's arguments, kept for after the call, when the
        // feed changes them.
        {
            let mut unchanged = a.create_label();
            a.test(rsi, (f::TRANSLATE_IDS | f::REAP) as i32)?;
            a.jz(unchanged)?;
            for (i, off) in SYSCALL_ARG_OFFSET[..3].iter().enumerate() {
                a.mov(rax, qword_ptr(rsp + *off))?;
                a.mov(
                    qword_ptr(r9 + (f::CALL_GIVEN_ARGS + 8 * i as u64) as i32),
                    rax,
                )?;
            }
            a.set_label(&mut unchanged)?;
            a.nop()?;
        }
        // A `wait4` that reaped a child in the record waits for that one.
        {
            let mut any = a.create_label();
            a.test(rsi, f::REAP as i32)?;
            a.jz(any)?;
            a.mov(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
            a.mov(qword_ptr(rsp + SYSCALL_ARG_OFFSET[0]), rax)?;
            a.and(qword_ptr(rsp + SYSCALL_ARG_OFFSET[2]), !WNOHANG)?;
            a.set_label(&mut any)?;
            a.nop()?;
        }
        // Ids the program got from answered calls are the recorded ones:
        // the rerun's own, for the calls that take them.
        {
            let mut kept = a.create_label();
            a.test(rsi, f::TRANSLATE_IDS as i32)?;
            a.jz(kept)?;
            for off in &SYSCALL_ARG_OFFSET[..2] {
                let mut scan = a.create_label();
                let mut next = a.create_label();
                let mut end = a.create_label();
                map_entries(a)?;
                a.set_label(&mut scan)?;
                a.test(rdx, rdx)?;
                a.jz(end)?;
                // The recorded id of the entry's feed.
                a.mov(rax, qword_ptr(rdi + f::ENTRY_FEED as i32))?;
                a.test(rax, rax)?;
                a.jz(next)?;
                recorded_tid(a, rax)?;
                a.cmp(rax, qword_ptr(rsp + *off))?;
                a.jne(next)?;
                a.mov(rax, qword_ptr(rdi + f::ENTRY_TID as i32))?;
                a.mov(qword_ptr(rsp + *off), rax)?;
                a.jmp(end)?;
                a.set_label(&mut next)?;
                a.add(rdi, f::MAP_ENTRY as i32)?;
                a.sub(rdx, 1)?;
                a.jmp(scan)?;
                a.set_label(&mut end)?;
                a.nop()?;
            }
            a.set_label(&mut kept)?;
            a.nop()?;
        }
        self.feed_wait(stop)?;
        // A delivery that came while the call was under way: its handler
        // runs before the call is made.
        if feed.vdso.is_none() {
            self.raise_deliveries(f::RAISE_DURING)?;
            self.masked_wait()?;
        }
        let a = &mut self.a;
        // A read that takes at most what it took in the record.
        {
            let mut whole = a.create_label();
            let count = SYSCALL_ARG_OFFSET[2];
            a.test(rsi, f::CLAMP as i32)?;
            a.jz(whole)?;
            a.mov(rax, qword_ptr(rsp + count))?;
            a.mov(qword_ptr(r9 + f::CALL_RERUN_COUNT as i32), rax)?;
            a.mov(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
            a.cmp(qword_ptr(rsp + count), rax)?;
            a.jbe(whole)?;
            a.mov(qword_ptr(rsp + count), rax)?;
            a.set_label(&mut whole)?;
            a.nop()?;
        }
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.mov(qword_ptr(r9 + f::CALL_RERUN_BEGAN as i32), rax)?;
        a.mov(rax, qword_ptr(r11 + current))?;
        a.mov(qword_ptr(r9 + f::CALL_OUTER as i32), rax)?;
        a.mov(qword_ptr(r11 + current), r9)?;
        {
            let mut childless = a.create_label();
            a.test(rsi, f::HAS_CHILD as i32)?;
            a.jz(childless)?;
            a.mov(qword_ptr(r11 + parent_of), r9)?;
            a.mov(qword_ptr(r11 + made_at), feed.site as i32)?;
            a.set_label(&mut childless)?;
            a.nop()?;
        }
        if feed.vdso.is_none() {
            self.exact_child_before()?;
            let a = &mut self.a;
            let mut made = a.create_label();
            a.test(rsi, f::LEFT as i32)?;
            a.jz(made)?;
            a.mov(qword_ptr(rsp + RAX_OFFSET), f::PAUSE as i32)?;
            a.jmp(done)?;
            a.set_label(&mut made)?;
        }
        let a = &mut self.a;
        a.test(rsi, f::ANSWER as i32)?;
        a.jz(done)?;
        match feed.vdso {
            // The function runs; its return gets the recorded bytes at
            // the address of argument (flags >> 16) - 1, kept till then.
            Some(v) => {
                let buffer = t::counter(v.buffer) as i32;
                a.mov(qword_ptr(r11 + buffer), 0)?;
                a.shr(rsi, f::FILL_SHIFT as u32)?;
                a.and(esi, 0xff)?;
                for (i, off) in ARG_OFFSET.iter().enumerate() {
                    let mut other = a.create_label();
                    a.cmp(esi, i as u32 + 1)?;
                    a.jne(other)?;
                    a.mov(rax, qword_ptr(rsp + *off))?;
                    a.mov(qword_ptr(r11 + buffer), rax)?;
                    a.set_label(&mut other)?;
                    a.nop()?;
                }
            }
            None => a.mov(qword_ptr(rsp + RAX_OFFSET), -1)?,
        }
        a.add(qword_ptr(rcx + f::THREAD_ANSWERED as i32), 1)?;
        a.jmp(done)?;

        a.set_label(&mut beyond)?;
        a.mov(eax, f::BEYOND as u32)?;
        a.jmp(diverge)?;
        a.set_label(&mut differs)?;
        a.nop()?; // a label needs an instruction of its own
        {
            // A futex the record does not have here, or one it has that
            // the rerun's thread did not need: timing (THREAD_EXTRA).
            let mut not_extra = a.create_label();
            let mut really = a.create_label();
            if feed.vdso.is_none() {
                a.cmp(qword_ptr(rsp + RAX_OFFSET), FUTEX as i32)?;
                a.jne(not_extra)?;
                a.mov(qword_ptr(rcx + f::THREAD_CURSOR as i32), r10)?;
                a.add(qword_ptr(rcx + f::THREAD_EXTRAS_MADE as i32), 1)?;
                a.mov(r9, qword_ptr(rcx + f::THREAD_EXTRA as i32))?;
                a.add(r9, r8)?;
                a.xor(esi, esi)?;
                a.jmp(compared)?;
            }
            a.set_label(&mut not_extra)?;
            a.cmp(qword_ptr(r9 + f::CALL_NR as i32), FUTEX as i32)?;
            a.jne(really)?;
            a.add(qword_ptr(rcx + f::THREAD_FUTEXES_SKIPPED as i32), 1)?;
            a.jmp(next_call)?;
            a.set_label(&mut really)?;
        }
        a.mov(eax, f::DIFFERS as u32)?;
        // The first thread to diverge says where (rax: the kind, rcx: its
        // thread feed or -1, r10: the call's index); every diverging
        // thread then waits here for weft to end the rerun.
        a.set_label(&mut diverge)?;
        {
            let mut wait = a.create_label();
            a.mov(rsi, rax)?;
            a.mov(edx, 1)?;
            a.xor(eax, eax)?;
            a.lock().cmpxchg(qword_ptr(r8 + f::DIVERGED as i32), rdx)?;
            a.jnz(wait)?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_KIND as i32), rsi)?;
            a.mov(rax, -1i64)?;
            a.cmp(rcx, rax)?;
            let mut no_feed = a.create_label();
            a.je(no_feed)?;
            a.sub(rcx, r8)?;
            a.sub(rcx, qword_ptr(r8 + f::THREADS as i32))?;
            a.shr(rcx, f::THREAD_SIZE.trailing_zeros())?;
            a.mov(rax, rcx)?;
            a.set_label(&mut no_feed)?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_FEED as i32), rax)?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_CALL as i32), r10)?;
            a.mov(rax, qword_ptr(r11 + t::TID as i32))?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_TID as i32), rax)?;
            match feed.vdso {
                Some(v) => a.mov(rax, v.nr)?,
                None => a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?,
            }
            a.mov(qword_ptr(r8 + f::DIVERGENCE_NR as i32), rax)?;
            let args = match feed.vdso {
                Some(_) => &ARG_OFFSET,
                None => &SYSCALL_ARG_OFFSET,
            };
            for (i, off) in args.iter().enumerate() {
                a.mov(rax, qword_ptr(rsp + *off))?;
                a.mov(
                    qword_ptr(r8 + (f::DIVERGENCE_ARGS + 8 * i as u64) as i32),
                    rax,
                )?;
            }
            a.mov(rax, u64::from(feed.site))?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_SITE as i32), rax)?;
            a.lea(rax, qword_ptr(rsp + FIXED_FRAME_RSP))?;
            a.mov(qword_ptr(r8 + f::DIVERGENCE_RSP as i32), rax)?;
            for (i, r) in [rbx, rbp, r12, r13, r14, r15].into_iter().enumerate() {
                a.mov(
                    qword_ptr(r8 + (f::DIVERGENCE_CALLEE_SAVED + 8 * i as u64) as i32),
                    r,
                )?;
            }
            a.jmp(wait)?;
            a.set_label(&mut stop)?;
            a.mov(qword_ptr(rcx + f::THREAD_STOPPED as i32), 1)?;
            a.set_label(&mut wait)?;
            // weft ends the process once it read what it reports; if it
            // is gone, the process ends itself, some seconds on.
            let mut spin = a.create_label();
            a.mov(ecx, STOPPED_PAUSES)?;
            a.set_label(&mut spin)?;
            a.pause()?;
            a.sub(ecx, 1)?;
            a.jnz(spin)?;
            a.mov(eax, EXIT_GROUP)?;
            a.mov(edi, STOPPED_STATUS)?;
            a.syscall()?;
        }
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// A masked wait (`f::MASKED_WAIT`; r9: the call, rsi: its flags,
    /// kept but for `ANSWER`): answered with its recorded `EINTR` when the
    /// delivery raised before it (the next entry) is no longer pending.
    fn masked_wait(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut made = a.create_label();
        a.test(rsi, f::MASKED_WAIT as i32)?;
        a.jz(made)?;
        let kept = [rcx, rsi, r8, r9, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        // rt_sigpending(&set, 8) into a word of the stack.
        a.push(0)?;
        a.mov(rdi, rsp)?;
        a.mov(esi, 8)?;
        a.mov(eax, RT_SIGPENDING)?;
        a.syscall()?;
        a.pop(rdx)?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.mov(rax, qword_ptr(r9 + (f::CALL_SIZE + f::CALL_NR) as i32))?;
        a.sub(rax, (weft_abi::delivery::BASE + 1) as i32)?;
        a.bt(rdx, rax)?;
        a.jc(made)?;
        a.or(rsi, f::ANSWER as i32)?;
        a.or(qword_ptr(r9 + f::CALL_FLAGS as i32), f::ANSWER as i32)?;
        a.set_label(&mut made)?;
        a.nop()
    }

    /// Before a call (r8: the feed, r9: the call, rcx: the thread feed,
    /// rsi: the call's flags, kept): waits until each thread feed the
    /// call waits for has returned the call it waits for (spinning, then
    /// sleeping on its done word; 10 s at most); after a divergence
    /// elsewhere the thread stops (`stop`) instead of making the call.
    fn feed_wait(&mut self, stop: CodeLabel) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut none = a.create_label();
        let mut entry = a.create_label();
        let mut check = a.create_label();
        let mut sleep = a.create_label();
        let mut awake = a.create_label();
        let mut gave_up = a.create_label();
        let mut over = a.create_label();
        a.cmp(qword_ptr(r9 + f::CALL_WAIT_COUNT as i32), 0)?;
        a.je(none)?;
        a.push(rsi)?;
        a.mov(rdx, qword_ptr(r9 + f::CALL_WAIT_COUNT as i32))?;
        a.mov(rdi, qword_ptr(r9 + f::CALL_WAITS as i32))?;
        a.add(rdi, r8)?;
        a.set_label(&mut entry)?;
        // rax := the thread feed waited for, rsi := its done count then.
        a.mov(rax, qword_ptr(rdi + f::WAIT_FEED as i32))?;
        a.shl(rax, f::THREAD_SIZE.trailing_zeros())?;
        a.add(rax, qword_ptr(r8 + f::THREADS as i32))?;
        a.add(rax, r8)?;
        a.mov(rsi, qword_ptr(rdi + f::WAIT_UNTIL as i32))?;
        a.push(rdx)?;
        a.push(rdi)?;
        // Sleeps left, at [rsp].
        a.push(f::WAIT_ROUNDS as i32)?;
        a.mov(edx, f::WAIT_SPINS)?;
        a.set_label(&mut check)?;
        a.cmp(qword_ptr(rax + f::THREAD_DONE as i32), rsi)?;
        a.jae(over)?;
        a.cmp(qword_ptr(r8 + f::DIVERGED as i32), 0)?;
        a.jne(over)?;
        a.sub(edx, 1)?;
        a.jz(sleep)?;
        a.pause()?;
        a.jmp(check)?;
        a.set_label(&mut sleep)?;
        a.sub(qword_ptr(rsp), 1)?;
        a.jz(gave_up)?;
        // Said before the done word is read again: a thread that
        // returns after this read sees a sleeper and wakes it.
        a.lock().add(qword_ptr(rax + f::THREAD_WAITERS as i32), 1)?;
        a.mov(rdx, qword_ptr(rax + f::THREAD_DONE as i32))?;
        a.cmp(rdx, rsi)?;
        a.jae(awake)?;
        // futex(&done, FUTEX_WAIT, the low half seen, 10 ms): returns at
        // once if the word changed since.
        let kept = [rax, rcx, rsi, r8, r9, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        a.lea(rdi, qword_ptr(rax + f::THREAD_DONE as i32))?;
        a.xor(esi, esi)?;
        a.lea(r10, qword_ptr(r8 + f::WAIT_TIMEOUT as i32))?;
        a.xor(r8d, r8d)?;
        a.xor(r9d, r9d)?;
        a.mov(eax, FUTEX)?;
        a.syscall()?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.set_label(&mut awake)?;
        a.lock().sub(qword_ptr(rax + f::THREAD_WAITERS as i32), 1)?;
        a.mov(edx, 1)?;
        a.jmp(check)?;
        a.set_label(&mut gave_up)?;
        a.add(qword_ptr(rcx + f::THREAD_WAITS_GIVEN_UP as i32), 1)?;
        a.set_label(&mut over)?;
        a.add(rsp, 8)?;
        a.pop(rdi)?;
        a.pop(rdx)?;
        a.add(rdi, f::WAIT_ENTRY as i32)?;
        a.sub(rdx, 1)?;
        a.jnz(entry)?;
        a.pop(rsi)?;
        a.cmp(qword_ptr(r8 + f::DIVERGED as i32), 0)?;
        a.jne(stop)?;
        a.set_label(&mut none)?;
        a.nop()?;
        Ok(())
    }

    /// After a call of the thread's feed returned (r11: the thread's
    /// block, r9: the call): the call's result and return time, the feed's done count
    /// becomes its cursor, and the threads asleep on it, if any, are
    /// woken. Clobbers rax, rdx and rdi.
    fn feed_done(&mut self, thread: i32) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut quiet = a.create_label();
        a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?;
        a.mov(qword_ptr(r9 + f::CALL_RERUN_RESULT as i32), rax)?;
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.mov(qword_ptr(r9 + f::CALL_RERUN_ENDED as i32), rax)?;
        a.mov(rax, qword_ptr(r11 + thread))?;
        a.mov(rdx, qword_ptr(rax + f::THREAD_CURSOR as i32))?;
        // A locked exchange: the waiters are read after the store.
        a.xchg(qword_ptr(rax + f::THREAD_DONE as i32), rdx)?;
        a.cmp(qword_ptr(rax + f::THREAD_WAITERS as i32), 0)?;
        a.je(quiet)?;
        let kept = [rcx, rsi, r8, r9, r10, r11];
        for r in kept {
            a.push(r)?;
        }
        a.lea(rdi, qword_ptr(rax + f::THREAD_DONE as i32))?;
        a.mov(esi, FUTEX_WAKE)?;
        a.mov(edx, i32::MAX as u32)?;
        a.mov(eax, FUTEX)?;
        a.syscall()?;
        for r in kept.into_iter().rev() {
            a.pop(r)?;
        }
        a.set_label(&mut quiet)?;
        a.nop()?;
        Ok(())
    }

    /// At a return of a vDSO function (r8: the feed): an answered call
    /// gets the recorded result and bytes, over the function's own; then
    /// the deliveries at its return are raised, as at a `syscall`'s.
    fn feed_vdso_return(
        &mut self,
        current: i32,
        buffer: i32,
        (thread, named_for): (i32, i32),
        mut done: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut answered = a.create_label();
        a.mov(r9, qword_ptr(r11 + current))?;
        a.test(r9, r9)?;
        a.jz(answered)?;
        a.mov(rax, qword_ptr(r9 + f::CALL_OUTER as i32))?;
        a.mov(qword_ptr(r11 + current), rax)?;
        a.test(qword_ptr(r9 + f::CALL_FLAGS as i32), f::ANSWER as i32)?;
        a.jz(answered)?;
        a.mov(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
        a.mov(rdi, qword_ptr(r11 + buffer))?;
        a.test(rdi, rdi)?;
        a.jz(answered)?;
        a.mov(rsi, qword_ptr(r9 + f::CALL_DATA as i32))?;
        a.add(rsi, r8)?;
        a.mov(rcx, qword_ptr(r9 + f::CALL_DATA_LEN as i32))?;
        a.rep().movsb()?;
        a.set_label(&mut answered)?;
        a.nop()?;
        self.deliveries_at_return((thread, named_for), 0, done)?;
        let a = &mut self.a;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }
}

/// rdi := the id map's first entry, rdx := how many entries are taken (at
/// most its capacity) (r8: the feed).
fn map_entries(a: &mut CodeAssembler) -> std::result::Result<(), IcedError> {
    a.mov(rdi, qword_ptr(r8 + f::MAP as i32))?;
    a.add(rdi, r8)?;
    a.mov(rdx, qword_ptr(r8 + f::MAP_USED as i32))?;
    a.cmp(rdx, qword_ptr(r8 + f::MAP_CAPACITY as i32))?;
    a.cmova(rdx, qword_ptr(r8 + f::MAP_CAPACITY as i32))?;
    Ok(())
}

/// `reg` := the recorded thread id of thread feed `reg - 1` (an id map
/// entry's feed field) (r8: the feed).
fn recorded_tid(a: &mut CodeAssembler, reg: AsmRegister64) -> std::result::Result<(), IcedError> {
    a.sub(reg, 1)?;
    a.shl(reg, f::THREAD_SIZE.trailing_zeros())?;
    a.add(reg, qword_ptr(r8 + f::THREADS as i32))?;
    a.mov(reg, qword_ptr(r8 + reg + f::THREAD_TID as i32))?;
    Ok(())
}
