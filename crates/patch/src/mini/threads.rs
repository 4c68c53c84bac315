//! The thread's slot and its timers: the code that finds (and on first use
//! claims) the calling thread's block in the thread table (see
//! `region::threads`), and Paradyn's nesting wall timers kept in it.
//!
//! A thread claims a free slot once with `lock cmpxchg` and records its tid
//! then (read from its thread control block, or one `gettid`). Wall timers read the TSC and nest: only the
//! outermost start and the matching stop touch the clock, so recursion is
//! counted once. The owning thread updates a timer between two increments
//! of its sequence number, so a sampler never reads a torn value: it
//! retries while the number is odd or has changed.

use super::{Gen, ThreadTable};
use crate::region::returns as r;
use crate::region::threads as t;
use iced_x86::code_asm::*;

impl ThreadTable {
    /// Bytes of one thread's block.
    fn block(&self) -> i32 {
        t::block_size(self.ring_data) as i32
    }
}

impl Gen {
    /// r11 := this thread's block, claiming a slot on first use; jumps to
    /// `full` when the table has no free slot. Code placed at a program's
    /// start (`table.startup`) learns the thread-id offset at run time,
    /// and hands a start-up slot's state over (see
    /// `region::sync::STARTUP_SLOT`). Clobbers rax, rcx, rdx,
    /// rsi, rdi, r8, r9 and r10.
    pub(super) fn thread_block(
        &mut self,
        table: ThreadTable,
        full: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        let keys = self.literal(table.addr);
        let stacks = self.literal(table.return_stacks);
        let startup = table.startup.filter(|_| table.tid_offset == 0);
        let tid_word = startup.map(|s| self.literal(s.tid_offset_word));
        let slot_word = startup.map(|s| self.literal(s.slot_word));
        let a = &mut self.a;
        let mut probe = a.create_label();
        let mut next = a.create_label();
        let mut claim = a.create_label();
        let mut found = a.create_label();
        let mut have = a.create_label();
        let mask = (table.slots - 1) as i32;
        a.mov(rax, qword_ptr(0u64).fs())?; // the thread pointer: fs:0 points to itself
        a.mov(r10, qword_ptr(keys))?;
        a.imul_3(rcx, rax, 0x2545_f491)?;
        a.shr(rcx, 16)?;
        a.and(rcx, mask)?;
        a.mov(r9d, table.slots as u32)?;
        a.xor(edi, edi)?; // 1 + the index of a slot passed over below, if any
        a.set_label(&mut probe)?;
        a.mov(rdx, qword_ptr(r10 + rcx * 8))?;
        a.cmp(rdx, rax)?;
        a.je(found)?;
        a.test(rdx, rdx)?;
        a.jz(claim)?;
        a.set_label(&mut next)?;
        a.add(rcx, 1)?;
        a.and(rcx, mask)?;
        a.sub(r9d, 1)?;
        a.jnz(probe)?;
        a.jmp(full)?;
        a.set_label(&mut claim)?;
        a.mov(r8, rax)?;
        a.xor(eax, eax)?;
        a.lock().cmpxchg(qword_ptr(r10 + rcx * 8), r8)?;
        a.mov(rax, r8)?;
        a.jnz(probe)?; // another thread took it: look at it again
        a.mov(r9, rcx)?; // the slot index survives the system call in r9
                         // The thread's id: from its thread control block where the C
                         // library keeps it (set by the kernel before the thread runs), else
                         // one `gettid`, once per thread. The system call would be a place
                         // where the scheduler preempts the thread, inside whatever the
                         // probe's program times.
        let mut have_tid = a.create_label();
        let mut ask_kernel = a.create_label();
        if table.tid_offset != 0 {
            a.mov(eax, dword_ptr(u64::from(table.tid_offset)).fs())?;
            a.test(eax, eax)?;
            a.jnz(have_tid)?;
        } else if let Some(lit) = tid_word {
            // Placed before weft knew the offset: read it now, if known.
            a.mov(rax, qword_ptr(lit))?;
            a.mov(eax, dword_ptr(rax))?;
            a.test(eax, eax)?;
            a.jz(ask_kernel)?;
            a.mov(eax, dword_ptr(rax).fs())?;
            a.test(eax, eax)?;
            a.jnz(have_tid)?;
        }
        a.set_label(&mut ask_kernel)?;
        a.mov(eax, weft_abi::syscall::GETTID)?;
        a.syscall()?; // clobbers rcx and r11
        a.set_label(&mut have_tid)?;
        a.imul_3(r11, r9, table.block())?;
        a.lea(r11, qword_ptr(r10 + r11 + (table.slots * 8) as i32))?;
        a.mov(qword_ptr(r11 + t::TID as i32), rax)?;
        a.mov(qword_ptr(r11 + t::SLOT as i32), r9)?;
        // A slot a thread had when it died in the middle of a record.
        a.mov(qword_ptr(r11 + t::WRITING as i32), 0)?;
        a.mov(qword_ptr(r11 + t::DEFERRED as i32), 0)?;
        a.mov(qword_ptr(r11 + t::DEFERRED_MASK as i32), 0)?;
        a.mov(qword_ptr(r11 + t::OPEN_DEPTH as i32), 0)?;
        if let (Some(s), Some(slot_word)) = (table.startup, slot_word) {
            // r8: the key claimed under; rax: the tid.
            let mut handed = a.create_label();
            let mut later = a.create_label();
            a.mov(rdx, qword_ptr(slot_word))?;
            a.mov(rsi, s.tcb)?;
            a.cmp(r8, rsi)?;
            a.jne(later)?;
            a.lea(rsi, qword_ptr(r9 + 1))?;
            a.mov(qword_ptr(rdx), rsi)?;
            a.jmp(handed)?;
            // The thread that claimed a slot under the start-up thread
            // control block, now under its own: it takes over that
            // slot's timers and counters, its CPU clock entry and stamp.
            a.set_label(&mut later)?;
            a.mov(rsi, qword_ptr(rdx))?;
            a.test(rsi, rsi)?;
            a.jz(handed)?;
            a.sub(rsi, 1)?;
            a.imul_3(rsi, rsi, table.block())?;
            a.lea(rsi, qword_ptr(r10 + rsi + (table.slots * 8) as i32))?;
            a.cmp(rax, qword_ptr(rsi + t::TID as i32))?;
            a.jne(handed)?;
            a.mov(qword_ptr(rdx), 0)?;
            a.mov(ecx, (t::TID / 8) as u32)?;
            let mut copy = a.create_label();
            a.set_label(&mut copy)?;
            a.mov(r8, qword_ptr(rsi + rcx * 8 - 8))?;
            a.mov(qword_ptr(r11 + rcx * 8 - 8), r8)?;
            a.sub(ecx, 1)?;
            a.jnz(copy)?;
            for word in [t::VCLOCK, t::STAMP] {
                a.mov(r8, qword_ptr(rsi + word as i32))?;
                a.mov(qword_ptr(r11 + word as i32), r8)?;
            }
            a.set_label(&mut handed)?;
        }
        // A forked child (or a thread reusing a finished one's thread
        // control block) that passed over the slot of its thread pointer
        // starts from that slot's return stack: the child's copy of it
        // matches the child's copy of the stack. The parent keeps its slot
        // and its stack.
        a.test(rdi, rdi)?;
        a.jz(have)?;
        a.mov(rax, qword_ptr(stacks))?;
        a.mov(rax, qword_ptr(rax))?;
        a.test(rax, rax)?;
        a.jz(have)?;
        a.lea(rsi, qword_ptr(rdi - 1))?;
        a.shl(rsi, r::SHIFT)?;
        a.add(rsi, rax)?;
        a.mov(rdi, r9)?;
        a.shl(rdi, r::SHIFT)?;
        a.add(rdi, rax)?;
        a.mov(ecx, (r::BYTES_PER_THREAD / 8) as u32)?;
        let mut copy = a.create_label();
        a.set_label(&mut copy)?;
        a.mov(rax, qword_ptr(rsi))?;
        a.mov(qword_ptr(rdi), rax)?;
        a.add(rsi, 8)?;
        a.add(rdi, 8)?;
        a.sub(ecx, 1)?;
        a.jnz(copy)?;
        a.jmp(have)?;
        a.set_label(&mut found)?;
        a.imul_3(r11, rcx, table.block())?;
        a.lea(r11, qword_ptr(r10 + r11 + (table.slots * 8) as i32))?;
        if table.tid_offset != 0 || tid_word.is_some() {
            // The slot is this thread's only if it was claimed under this
            // thread's id; else (a forked child finding its parent's slot,
            // or a thread reusing a finished one's thread control block)
            // pass it over, never take it from its owner, and look
            // further; remember the first such slot, whose return stack a
            // slot claimed below starts from.
            let mut keep_first = a.create_label();
            match tid_word {
                Some(lit) if table.tid_offset == 0 => {
                    // Unchecked while weft does not know the offset (the
                    // program's start-up: one thread).
                    a.mov(rdx, qword_ptr(lit))?;
                    a.mov(edx, dword_ptr(rdx))?;
                    a.test(edx, edx)?;
                    a.jz(have)?;
                    a.mov(edx, dword_ptr(rdx).fs())?;
                }
                _ => a.mov(edx, dword_ptr(u64::from(table.tid_offset)).fs())?,
            }
            a.cmp(edx, dword_ptr(r11 + t::TID as i32))?;
            a.je(have)?;
            a.test(rdi, rdi)?;
            a.jnz(keep_first)?;
            a.mov(rdi, qword_ptr(r11 + t::SLOT as i32))?;
            a.add(rdi, 1)?;
            a.set_label(&mut keep_first)?;
            a.jmp(next)?;
        }
        a.set_label(&mut have)?;
        Ok(())
    }

    /// Starts the thread's timer `n` (r11: its block); only the outermost
    /// start reads the clock.
    pub(super) fn start_timer(&mut self, n: u64) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut done = a.create_label();
        a.lea(r8, qword_ptr(r11 + t::timer(n) as i32))?;
        a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?; // odd: updating
        a.mov(rax, qword_ptr(r8 + t::TIMER_COUNT as i32))?;
        a.add(rax, 1)?;
        a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), rax)?;
        a.cmp(rax, 1)?;
        a.jne(done)?;
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.mov(qword_ptr(r8 + t::TIMER_START as i32), rax)?;
        a.set_label(&mut done)?;
        a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?; // even: consistent
        Ok(())
    }

    /// Stops the thread's timer `n` (r11: its block); only the outermost
    /// stop reads the clock, and a stop without a start is ignored.
    pub(super) fn stop_timer(&mut self, n: u64) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut done = a.create_label();
        let mut unmatched = a.create_label();
        a.lea(r8, qword_ptr(r11 + t::timer(n) as i32))?;
        a.mov(rax, qword_ptr(r8 + t::TIMER_COUNT as i32))?;
        a.test(rax, rax)?;
        a.jz(unmatched)?; // a stop without a start (started before weft came)
        a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?;
        a.sub(rax, 1)?;
        a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), rax)?;
        a.jnz(done)?;
        a.rdtsc()?;
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.sub(rax, qword_ptr(r8 + t::TIMER_START as i32))?;
        a.add(qword_ptr(r8 + t::TIMER_TOTAL as i32), rax)?;
        a.set_label(&mut done)?;
        a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?;
        a.set_label(&mut unmatched)?;
        a.nop()?;
        Ok(())
    }
}
