//! Calls a thread leaves without returning. A program that makes its
//! point's call (`Primitive::MakeCall`) writes the call's one record after
//! it returns; a thread that a signal handler takes out of a blocked call
//! with `siglongjmp`, or that a cancellation or an exception unwinds
//! through it, never comes back there. So the call is also kept *open* in
//! the thread's block while it runs (`region::threads::OPEN_CALLS`): its
//! frame (the mini-trampoline's `rsp` at the `syscall`) and the image of
//! the record it would get if left, written before the call. The call's
//! return closes it again.
//!
//! The thread's next call finds the calls it left: an open call whose
//! frame lies below the stack pointer is no longer on the stack. One above
//! it is a call a signal handler interrupted, and is still open. A handler
//! on an alternate signal stack compares only frames on that stack; a
//! frame there is left once the thread runs elsewhere. The calls found
//! left have their records written then (the entry's instant inside, the
//! record's own time that of the finding), and are closed; so are calls a
//! return finds above its own. None of this runs unless the thread has a
//! call open when it makes another: a signal handler's call, or one after
//! a call left. It then asks the kernel where the alternate stack is
//! (`sigaltstack`), the one system call of weft's there.

use super::{Gen, MADE_NUMBER, MADE_TIME, SYSCALL_ARG_OFFSET};
use crate::region::ring as r;
use crate::region::threads as t;
use iced_x86::code_asm::*;
use weft_plan::LeftCall;

/// Bytes of the largest record an open call holds: the event and shape
/// words, then nr, six arguments, the user time, the entry's instant.
const MOST_BYTES: u64 = r::record_size(t::OPEN_VALUES_MAX as usize, 0);

/// `qword_ptr` of slot `k`'s field `field`, `k` in a register, the thread's
/// block in r11, as `base + k * OPEN_SIZE`: computes into `into`.
fn slot_address(
    a: &mut CodeAssembler,
    into: AsmRegister64,
    k: AsmRegister64,
) -> std::result::Result<(), IcedError> {
    a.imul_3(into, k, t::OPEN_SIZE as i32)?;
    a.lea(into, qword_ptr(r11 + into + t::OPEN_CALLS as i32))
}

impl Gen {
    /// Before the point's call (r11: the block; the call's instant and
    /// number in their slots of the frame): writes the records of the
    /// calls the thread left, then keeps this one open. Nothing without
    /// a slot or a ring.
    pub(super) fn open_call(&mut self, left: &LeftCall) -> std::result::Result<(), IcedError> {
        if !self.has_slot || self.table.ring_data == 0 {
            return Ok(());
        }
        let mut keep = self.a.create_label();
        let mut rare = self.a.create_label();
        let mut kept = self.a.create_label();
        self.a.cmp(qword_ptr(r11 + t::OPEN_DEPTH as i32), 0)?;
        self.a.jne(rare)?;
        self.a.set_label(&mut keep)?;
        let a = &mut self.a;
        a.mov(rcx, qword_ptr(r11 + t::OPEN_DEPTH as i32))?;
        a.cmp(rcx, t::OPEN_SLOTS as i32)?;
        a.jae(kept)?; // calls nested deeper are not kept
                      // The slot is taken before it is written: its frame, then the
                      // depth, its record's shape 0 (none) until its values are whole.
                      // A signal handler's call made meanwhile takes the next slot and
                      // finds this one open; one that leaves with `siglongjmp` leaves a
                      // slot later found left, with no record (the call was not made).
        a.lea(rax, qword_ptr(rcx + 1))?;
        slot_address(a, rcx, rcx)?;
        a.mov(qword_ptr(rcx + t::OPEN_EVENT as i32), 0)?;
        a.lea(rdx, qword_ptr(rsp - 8))?; // rsp at the call, r11 pushed
        a.mov(qword_ptr(rcx + t::OPEN_FRAME as i32), rdx)?;
        a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), rax)?;
        // nr, six arguments, the user time, the entry's instant, and the
        // result it had when left (written when it is found left).
        let values = 1 + 6 + u64::from(left.user_timer.is_some()) + 1 + 1;
        let value = |k: u64| qword_ptr(rcx + (t::OPEN_VALUES + 8 * k) as i32);
        a.mov(rax, qword_ptr(rsp + MADE_NUMBER))?;
        a.mov(value(0), rax)?;
        for (k, off) in SYSCALL_ARG_OFFSET.into_iter().enumerate() {
            a.mov(rax, qword_ptr(rsp + off))?;
            a.mov(value(1 + k as u64), rax)?;
        }
        if let Some(n) = left.user_timer {
            a.mov(rax, qword_ptr(r11 + (t::timer(n) + t::TIMER_TOTAL) as i32))?;
            a.mov(value(7), rax)?;
        }
        a.mov(rax, qword_ptr(rsp + MADE_TIME))?;
        a.mov(value(values - 2), rax)?;
        let mut same = a.create_label();
        a.mov(rax, u64::from(left.event) | (values << 32))?;
        a.cmp(qword_ptr(rsp + MADE_NUMBER), left.site_number as i32)?;
        a.je(same)?;
        // Another number (`restart_syscall`): its entry wrote its record.
        a.xor(eax, eax)?;
        a.set_label(&mut same)?;
        a.mov(qword_ptr(rcx + t::OPEN_EVENT as i32), rax)?;
        a.jmp(kept)?;
        self.a.set_label(&mut rare)?;
        self.write_left_calls_now(keep)?;
        self.a.set_label(&mut kept)?;
        self.a.nop()
    }

    /// After the point's call (r11: the block): closes it, and any call
    /// kept open above it, which the thread left inside a signal handler
    /// that then returned here (their records written). A call that was
    /// not kept (too deeply nested) closes nothing.
    pub(super) fn close_call(&mut self) -> std::result::Result<(), IcedError> {
        if !self.has_slot || self.table.ring_data == 0 {
            return Ok(());
        }
        let mut done = self.a.create_label();
        let mut search = self.a.create_label();
        let mut write = self.a.create_label();
        let a = &mut self.a;
        a.mov(rcx, qword_ptr(r11 + t::OPEN_DEPTH as i32))?;
        a.lea(rdx, qword_ptr(rsp - 8))?; // this call's frame
        a.set_label(&mut search)?;
        a.sub(rcx, 1)?;
        a.js(done)?;
        slot_address(a, rax, rcx)?;
        a.cmp(qword_ptr(rax + t::OPEN_FRAME as i32), rdx)?;
        a.jne(search)?;
        // rcx: this call's index; the calls above it were left.
        a.lea(rax, qword_ptr(rcx + 1))?;
        a.cmp(rax, qword_ptr(r11 + t::OPEN_DEPTH as i32))?;
        a.jne(write)?;
        a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), rcx)?;
        a.jmp(done)?;
        a.set_label(&mut write)?;
        let mut busy = a.create_label();
        a.push(rcx)?;
        self.take_writing(busy)?;
        let a = &mut self.a;
        a.pop(rcx)?;
        a.push(rcx)?;
        a.add(rcx, 1)?;
        self.write_open_calls()?;
        let a = &mut self.a;
        a.pop(rcx)?;
        self.release_writing()?;
        let a = &mut self.a;
        let mut closed = a.create_label();
        a.jmp(closed)?;
        a.set_label(&mut busy)?;
        a.pop(rcx)?;
        a.set_label(&mut closed)?;
        a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), rcx)?;
        a.set_label(&mut done)?;
        a.nop()
    }

    /// `Primitive::WriteLeftCalls`: the records of the calls the thread
    /// left, before a record of a call's entry; all of them where the call
    /// ends the thread (`ending`).
    pub(super) fn write_left_calls(&mut self, ending: bool) -> std::result::Result<(), IcedError> {
        if !self.has_slot || self.table.ring_data == 0 {
            return Ok(());
        }
        let mut done = self.a.create_label();
        if ending {
            // A record this thread was writing when a signal took it
            // elsewhere (an asynchronous cancellation) is never finished
            // once the thread ends: its next records, this call's among
            // them, are written over it.
            self.a.mov(qword_ptr(r11 + t::WRITING as i32), 0)?;
        }
        self.a.cmp(qword_ptr(r11 + t::OPEN_DEPTH as i32), 0)?;
        self.a.je(done)?;
        if ending {
            self.take_writing(done)?;
            self.a.xor(ecx, ecx)?;
            self.write_open_calls()?;
            self.a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), 0)?;
            self.a.mov(qword_ptr(r11 + t::WRITING as i32), 0)?;
            self.a.jmp(done)?;
        } else {
            self.write_left_calls_now(done)?;
        }
        self.a.set_label(&mut done)?;
        self.a.nop()
    }

    /// With calls open: finds those the thread left (from the innermost
    /// out, while their frames are no longer on the stack), writes their
    /// records, closes them, and jumps to `then`. Skipped while the thread
    /// writes a record (this is a signal handler's call inside weft's
    /// code): every call is then taken as still open.
    fn write_left_calls_now(&mut self, then: CodeLabel) -> std::result::Result<(), IcedError> {
        self.take_writing(then)?;
        self.alternate_stack()?;
        // rcx: how many calls stay open.
        let a = &mut self.a;
        let mut walk = a.create_label();
        let mut walked = a.create_label();
        let mut left = a.create_label();
        a.mov(rcx, qword_ptr(r11 + t::OPEN_DEPTH as i32))?;
        a.set_label(&mut walk)?;
        a.test(rcx, rcx)?;
        a.jz(walked)?;
        a.imul_3(rax, rcx, t::OPEN_SIZE as i32)?;
        a.mov(
            rax,
            qword_ptr(r11 + rax + (t::OPEN_CALLS - t::OPEN_SIZE + t::OPEN_FRAME) as i32),
        )?;
        self.branch_if_left(rax, rsp, rdx, left)?;
        let a = &mut self.a;
        a.jmp(walked)?;
        a.set_label(&mut left)?;
        a.sub(rcx, 1)?;
        a.jmp(walk)?;
        a.set_label(&mut walked)?;
        a.push(rcx)?;
        self.write_open_calls()?;
        let a = &mut self.a;
        a.pop(rcx)?;
        a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), rcx)?;
        self.release_writing()?;
        self.a.jmp(then)
    }

    /// The result the call of slot rdi had when its thread left it, into
    /// the record's last value: the `rax` of the signal frame that took
    /// the thread out, which stays on the stack below the call's frame
    /// until something else is written there. Its place follows from the
    /// call's frame (`crate::sigframe`), and it counts only if it says
    /// the thread was at that frame (`rsp`), its FPU state where the
    /// kernel put it, and past the `syscall` instruction (`rip`; one to
    /// be restarted points at it); an interrupted call (`EINTR`) has no
    /// result. A frame that says the thread was still loading the call's
    /// registers says the call was not made: it gets no record (the
    /// slot's shape word cleared). Read with `process_vm_readv`, which
    /// fails rather than faults where nothing is mapped (the frame may
    /// have gone to an alternate signal stack). Keeps rdi, rsi and r11.
    fn left_result(&mut self) -> std::result::Result<(), IcedError> {
        use crate::sigframe as sf;
        const EINTR: i32 = -4;
        const SYSCALL_BYTES: i32 = 0x050F;
        const POP_R11_BYTES: i32 = 0x5B41;
        const READ: i32 = 88; // from the frame's rax to its FPU state pointer
        let a = &mut self.a;
        // r10 := where the value goes: the record's last.
        a.mov(eax, dword_ptr(rdi + (t::OPEN_EVENT + 4) as i32))?;
        a.lea(r10, qword_ptr(rdi + rax * 8 + (t::OPEN_VALUES - 8) as i32))?;
        a.mov(rax, t::LEFT_RESULT_UNKNOWN)?;
        a.mov(qword_ptr(r10), rax)?;
        let Some(fpu_size) = sf::fpu_size() else {
            return Ok(());
        };
        let mut unknown = a.create_label();
        // rax := the frame's rsp, rdx := its FPU state, r8 := the frame.
        a.mov(rax, qword_ptr(rdi + t::OPEN_FRAME as i32))?;
        a.lea(rdx, qword_ptr(rax - (128 + fpu_size as i32)))?;
        a.and(rdx, -64)?;
        a.lea(r8, qword_ptr(rdx - 440))?;
        a.and(r8, -16)?;
        a.sub(r8, 8)?;
        for r in [r11, rsi, rdi, r10, rax, rdx] {
            a.push(r)?;
        }
        // [rsp, +88): the frame's words from rax on; +96: the local iovec;
        // +112: the remote one; +128: rdx, rax, r10, rdi, rsi, r11.
        a.sub(rsp, 128)?;
        a.mov(qword_ptr(rsp + 96), rsp)?;
        a.mov(qword_ptr(rsp + 104), READ)?;
        a.lea(rax, qword_ptr(r8 + sf::RAX as i32))?;
        a.mov(qword_ptr(rsp + 112), rax)?;
        a.mov(qword_ptr(rsp + 120), READ)?;
        a.mov(eax, weft_abi::syscall::GETPID)?;
        a.syscall()?;
        a.mov(edi, eax)?;
        a.lea(rsi, qword_ptr(rsp + 96))?;
        a.mov(edx, 1)?;
        a.lea(r10, qword_ptr(rsp + 112))?;
        a.mov(r8d, 1)?;
        a.xor(r9d, r9d)?;
        a.mov(eax, weft_abi::syscall::PROCESS_VM_READV)?;
        a.syscall()?;
        a.cmp(rax, READ)?;
        a.jne(unknown)?;
        let word = |off: u64| qword_ptr(rsp + (off - sf::RAX) as i32);
        a.mov(rax, word(sf::RSP))?;
        a.cmp(rax, qword_ptr(rsp + 136))?;
        a.jne(unknown)?;
        a.mov(rax, word(sf::FPSTATE))?;
        a.cmp(rax, qword_ptr(rsp + 128))?;
        a.jne(unknown)?;
        // Just past the `syscall`, or at the `pop r11` after the store of
        // its result (`make_call`): made, its result in rax. At it: to be
        // restarted, or not made yet. Anywhere else at this frame (the
        // argument registers being loaded): not made, and no record.
        let mut made = a.create_label();
        a.mov(rdx, word(sf::RIP))?;
        a.cmp(word_ptr(rdx - 2), SYSCALL_BYTES)?;
        a.je(made)?;
        a.cmp(word_ptr(rdx), POP_R11_BYTES)?;
        a.je(made)?;
        a.cmp(word_ptr(rdx), SYSCALL_BYTES)?;
        a.je(unknown)?;
        a.mov(rax, qword_ptr(rsp + 152))?;
        a.mov(dword_ptr(rax + (t::OPEN_EVENT + 4) as i32), 0)?;
        a.jmp(unknown)?;
        a.set_label(&mut made)?;
        a.mov(rax, word(sf::RAX))?;
        a.cmp(rax, EINTR)?;
        a.je(unknown)?;
        a.mov(r10, qword_ptr(rsp + 144))?;
        a.mov(qword_ptr(r10), rax)?;
        a.set_label(&mut unknown)?;
        a.add(rsp, 128)?;
        for r in [rdx, rax, r10, rdi, rsi, r11] {
            a.pop(r)?;
        }
        Ok(())
    }

    /// Writes the records of open calls rcx .. the block's depth (each
    /// stamped now, its values the slot's), oldest first, with the
    /// thread's `WRITING` word already taken; leaves the depth as it is.
    /// Clobbers rax, rcx, rdx, rsi, rdi, r8, r9 and r10.
    fn write_open_calls(&mut self) -> std::result::Result<(), IcedError> {
        let data = self.table.ring_data;
        let mut next = self.a.create_label();
        let mut done = self.a.create_label();
        let mut skip = self.a.create_label();
        // The records' time is read afresh, not the primitive before's.
        self.stamp_ready = false;
        self.a.set_label(&mut next)?;
        self.a.cmp(rcx, qword_ptr(r11 + t::OPEN_DEPTH as i32))?;
        self.a.jae(done)?;
        self.a.push(rcx)?;
        self.a.push(rcx)?; // the stack stays 16-byte aligned for the clock
        self.event_time()?;
        let a = &mut self.a;
        a.mov(rsi, rax)?;
        a.mov(rcx, qword_ptr(rsp))?;
        slot_address(a, rdi, rcx)?;
        a.cmp(dword_ptr(rdi + (t::OPEN_EVENT + 4) as i32), 0)?;
        a.je(skip)?;
        self.left_result()?;
        let a = &mut self.a;
        a.cmp(dword_ptr(rdi + (t::OPEN_EVENT + 4) as i32), 0)?;
        a.je(skip)?;
        a.lea(r8, qword_ptr(r11 + t::RING as i32))?;
        a.mov(r9, qword_ptr(r8 + r::HEAD as i32))?;
        let mut full = a.create_label();
        let mut check = a.create_label();
        a.set_label(&mut check)?;
        a.mov(rax, r9)?;
        a.sub(rax, qword_ptr(r8 + r::TAIL as i32))?;
        a.cmp(rax, (data - MOST_BYTES) as i32)?;
        a.ja(full)?;
        a.mov(r10, r9)?;
        a.and(r10, (data - 1) as i32)?;
        a.lea(r10, qword_ptr(r8 + r10 + r::HEADER as i32))?;
        a.mov(qword_ptr(r10 + r::R_TSC as i32), rsi)?;
        for w in 0..=t::OPEN_VALUES_MAX {
            a.mov(rax, qword_ptr(rdi + (t::OPEN_EVENT + 8 * w) as i32))?;
            a.mov(qword_ptr(r10 + (r::R_EVENT + 8 * w) as i32), rax)?;
        }
        a.mov(eax, dword_ptr(rdi + (t::OPEN_EVENT + 4) as i32))?;
        a.lea(r9, qword_ptr(r9 + rax * 8 + r::R_ARGS as i32))?;
        a.mov(qword_ptr(r8 + r::HEAD as i32), r9)?; // publish the record
        a.jmp(skip)?;
        // The ring is full: in block mode wait for weft until its
        // deadline, yielding, as a record does; else drop it, counted.
        a.set_label(&mut full)?;
        let mut drop = a.create_label();
        a.mov(rdx, self.table.ring_wait_until)?;
        a.mov(rcx, qword_ptr(rdx))?;
        a.test(rcx, rcx)?;
        a.jz(drop)?;
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.cmp(rax, rcx)?;
        a.jae(drop)?;
        a.push(r11)?;
        a.push(rdi)?;
        a.mov(eax, weft_abi::syscall::SCHED_YIELD)?;
        a.syscall()?;
        a.pop(rdi)?;
        a.pop(r11)?;
        a.jmp(check)?;
        a.set_label(&mut drop)?;
        a.add(qword_ptr(r8 + r::DROPPED as i32), 1)?;
        a.set_label(&mut skip)?;
        a.pop(rcx)?;
        a.pop(rcx)?;
        a.add(rcx, 1)?;
        a.jmp(next)?;
        a.set_label(&mut done)?;
        a.nop()
    }
}
