//! CPU timers: Paradyn's nesting timers on the per-thread virtual CPU
//! clock (`weft_abi::vclock`), read without a system call.
//!
//! On its first read a thread claims its entry in the clock's table (`lock
//! cmpxchg` of its tid, probing from its home as the BPF program does) and
//! keeps the entry's address in its block ([`t::VCLOCK`]). A read is the
//! entry's nanoseconds plus the TSC time since the CPU's last switch
//! (the CPU from the rseq area, `rdpid` or `rdtscp`), converted to nanoseconds with
//! the clock's calibration, retried if the entry's sequence number moved
//! (the thread was switched out meanwhile). Timers keep the same layout as
//! wall timers, in nanoseconds instead of ticks.

use super::Gen;
use crate::region::threads as t;
use iced_x86::code_asm::*;
use weft_abi::vclock as v;

impl Gen {
    /// rax := the calling thread's CPU time in ns (r11: its block);
    /// jumps to `fail` if it has no entry and none is free. Leaves the TSC
    /// it used in the block's [`t::STAMP`]; with `reuse`, first tries the
    /// one there (read by the primitive before, 0 for none), which is good
    /// unless the thread was switched out since: then the CPU's last
    /// switch comes after it, and a fresh one is read. Clobbers rcx, rdx,
    /// rsi, rdi, r9 and r10; keeps r8 and r11.
    fn cpu_clock(&mut self, fail: CodeLabel, reuse: bool) -> std::result::Result<(), IcedError> {
        let view = self
            .table
            .vclock
            .expect("mini_trampoline_with checks that the clock is mapped");
        let table = self.literal(view.thread(0));
        let cpus = self.literal(view.cpu(0));
        let tsc_base = self.literal(view.conversion.tsc_base);
        let ns_base = self.literal(view.conversion.ns_base);
        let mult = self.literal(view.conversion.mult);
        let cpu = self.table.lanes.cpu_into(iced_x86::Register::ECX);
        let reuse = reuse && cpu.is_some();
        let a = &mut self.a;
        let mut probe = a.create_label();
        let mut next = a.create_label();
        let mut found = a.create_label();
        let mut retry = a.create_label();
        let mut again = a.create_label();
        let mut have_tsc = a.create_label();
        let mut done = a.create_label();
        a.mov(rsi, qword_ptr(r11 + t::VCLOCK as i32))?;
        a.test(rsi, rsi)?;
        a.jnz(retry)?;
        // Find or claim the entry of this thread's tid.
        a.mov(edi, dword_ptr(r11 + t::TID as i32))?;
        a.imul_3(ecx, edi, v::HASH as i32)?;
        a.shr(ecx, 32 - v::SLOT_BITS)?;
        a.mov(r9d, v::PROBES)?;
        a.mov(r10, qword_ptr(table))?;
        a.set_label(&mut probe)?;
        a.and(ecx, (v::SLOTS - 1) as u32)?;
        a.mov(esi, ecx)?;
        a.shl(rsi, v::ENTRY_SIZE.trailing_zeros())?;
        a.add(rsi, r10)?;
        a.mov(edx, dword_ptr(rsi + v::TID as i32))?;
        a.cmp(edx, edi)?;
        a.je(found)?;
        a.test(edx, edx)?;
        a.jnz(next)?;
        a.xor(eax, eax)?;
        a.lock().cmpxchg(dword_ptr(rsi + v::TID as i32), edi)?;
        a.je(found)?;
        a.set_label(&mut next)?;
        a.add(ecx, 1)?;
        a.sub(r9d, 1)?;
        a.jnz(probe)?;
        a.jmp(fail)?;
        a.set_label(&mut found)?;
        a.mov(qword_ptr(r11 + t::VCLOCK as i32), rsi)?;
        a.set_label(&mut retry)?;
        a.mov(r9d, dword_ptr(rsi + v::SEQ as i32))?;
        a.mov(r10, qword_ptr(rsi + v::NS as i32))?;
        // The CPU from the C library's rseq area or `rdpid` where there is
        // one (a load, or half a nanosecond), else from `rdtscp` (twice the
        // cost of `rdtsc` on this VM's host). Read apart from the TSC, the
        // two still agree: a thread that moves between them was switched
        // out, which the sequence number catches.
        match cpu {
            Some(cpu) => {
                a.add_instruction(cpu)?;
                if reuse {
                    // edi: 1 while the TSC is the reused one.
                    a.mov(edi, 1)?;
                    a.mov(rax, qword_ptr(r11 + t::STAMP as i32))?;
                    a.test(rax, rax)?;
                    a.jnz(have_tsc)?;
                    a.xor(edi, edi)?;
                }
                a.rdtsc()?;
            }
            None => a.rdtscp()?,
        }
        a.shl(rdx, 32)?;
        a.or(rax, rdx)?;
        a.set_label(&mut have_tsc)?;
        a.mov(qword_ptr(r11 + t::STAMP as i32), rax)?;
        a.and(ecx, (v::CPUS - 1) as u32)?;
        a.shl(ecx, v::ENTRY_SIZE.trailing_zeros())?;
        a.add(rcx, qword_ptr(cpus))?;
        a.sub(rax, qword_ptr(tsc_base))?;
        a.mul(qword_ptr(mult))?;
        a.shrd(rax, rdx, view.conversion.shift)?;
        a.add(rax, qword_ptr(ns_base))?;
        if reuse {
            // A reused TSC from before the CPU's last switch (this
            // thread's own switch in): the thread was away since; read a
            // fresh one. (A fresh one is never checked: one that converts
            // a little before the switch, the calibration being off by
            // that much, must not loop.)
            let mut checked = a.create_label();
            a.test(edi, edi)?;
            a.jz(checked)?;
            a.cmp(rax, qword_ptr(rcx + v::NS as i32))?;
            a.jb(again)?;
            a.set_label(&mut checked)?;
            a.nop()?;
        }
        a.add(rax, r10)?;
        a.sub(rax, qword_ptr(rcx + v::NS as i32))?;
        a.cmp(r9d, dword_ptr(rsi + v::SEQ as i32))?;
        a.je(done)?;
        // Switched out meanwhile: again, with a fresh TSC.
        a.set_label(&mut again)?;
        a.mov(qword_ptr(r11 + t::STAMP as i32), 0)?;
        a.jmp(retry)?;
        a.set_label(&mut done)?;
        Ok(())
    }

    /// Starts the thread's CPU timer `n` (r11: its block); only the
    /// outermost start reads the clock. A thread that finds no free entry
    /// in the clock's table counts itself in the no-slot word and leaves
    /// the timer stopped. Not `nesting`, a start of a running timer does
    /// nothing and the timer runs once (`ResumeCpuTimer`).
    pub(super) fn start_cpu_timer(
        &mut self,
        n: u64,
        nesting: bool,
    ) -> std::result::Result<(), IcedError> {
        let mut done = self.a.create_label();
        let mut full = self.a.create_label();
        let no_slot = self.table.no_slot;
        let reuse = self.stamp_ready;
        if !reuse {
            self.a.mov(qword_ptr(r11 + t::STAMP as i32), 0)?;
        }
        self.a.lea(r8, qword_ptr(r11 + t::timer(n) as i32))?;
        self.a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?; // odd: updating
        self.a.mov(rax, qword_ptr(r8 + t::TIMER_COUNT as i32))?;
        if nesting {
            self.a.add(rax, 1)?;
            self.a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), rax)?;
            self.a.cmp(rax, 1)?;
            self.a.jne(done)?;
        } else {
            self.a.test(rax, rax)?;
            self.a.jnz(done)?;
            self.a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), 1)?;
        }
        self.cpu_clock(full, reuse)?;
        self.a.mov(qword_ptr(r8 + t::TIMER_START as i32), rax)?;
        self.a.jmp(done)?;
        self.a.set_label(&mut full)?;
        self.a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), 0)?;
        self.a.mov(rax, no_slot)?;
        self.a.lock().add(qword_ptr(rax), 1)?;
        self.a.set_label(&mut done)?;
        self.a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?; // even: consistent
        Ok(())
    }

    /// Stops the thread's CPU timer `n` (r11: its block); only the
    /// outermost stop reads the clock, and a stop without a start is
    /// ignored. Not `nesting`, any stop of a running timer stops it
    /// (`PauseCpuTimer`).
    pub(super) fn stop_cpu_timer(
        &mut self,
        n: u64,
        nesting: bool,
    ) -> std::result::Result<(), IcedError> {
        let mut done = self.a.create_label();
        let mut unmatched = self.a.create_label();
        let reuse = self.stamp_ready;
        if !reuse {
            self.a.mov(qword_ptr(r11 + t::STAMP as i32), 0)?;
        }
        self.a.lea(r8, qword_ptr(r11 + t::timer(n) as i32))?;
        self.a.mov(rax, qword_ptr(r8 + t::TIMER_COUNT as i32))?;
        self.a.test(rax, rax)?;
        self.a.jz(unmatched)?;
        self.a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?;
        if nesting {
            self.a.sub(rax, 1)?;
            self.a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), rax)?;
            self.a.jnz(done)?;
        } else {
            self.a.mov(qword_ptr(r8 + t::TIMER_COUNT as i32), 0)?;
        }
        // The start claimed the entry, so the clock cannot fail here.
        self.cpu_clock(done, reuse)?;
        // A reading right after the thread's switch in can come out a
        // little below the one its start took before the switch out (the
        // calibration off by that much): nothing, never a wrapped negative.
        let mut forward = self.a.create_label();
        self.a.sub(rax, qword_ptr(r8 + t::TIMER_START as i32))?;
        self.a.jae(forward)?;
        self.a.xor(eax, eax)?;
        self.a.set_label(&mut forward)?;
        self.a.add(qword_ptr(r8 + t::TIMER_TOTAL as i32), rax)?;
        self.a.set_label(&mut done)?;
        self.a.add(qword_ptr(r8 + t::TIMER_SEQ as i32), 1)?;
        self.a.set_label(&mut unmatched)?;
        self.a.nop()?;
        Ok(())
    }
}
