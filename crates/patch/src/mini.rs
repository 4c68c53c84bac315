//! Mini-trampolines: Paradyn's primitives and predicates as machine code.
//!
//! A base trampoline calls a point's mini-trampoline (after stepping below
//! the red zone, and saving the flags only if they are live there). The
//! mini-trampoline saves every caller-saved register, runs its guarded
//! primitives in order and returns. Its arguments are read from those saved registers: `arg1` to
//! `arg6` at an entry, `ret` at an exit. Predicates compile to
//! straight-line integer code over constants, arguments, the return
//! value, process-wide counters and per-thread counters, with
//! `+ - * / < > <= >= == != and or`. A division by zero yields 0.
//!
//! Per-thread state (timers, per-thread counters) lives in the thread table
//! (see `region::threads`): the mini-trampoline finds its thread's slot
//! from the thread pointer `fs:0`, without a lock. A thread claims a free
//! slot once with `lock cmpxchg` and records its tid then (one `gettid`).
//! Wall timers read the TSC and nest: only the outermost start and the
//! matching stop touch the clock, so recursion is counted once (Paradyn's
//! timer semantics). The owning thread updates a timer between two
//! increments of its sequence number, so a sampler never reads a torn
//! value: it retries while the number is odd or has changed.

use crate::region::threads as t;
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_plan::{BinOp, Expr, Guarded, Primitive};

/// Where the thread table is, as the mini-trampoline sees it.
#[derive(Debug, Clone, Copy)]
pub struct ThreadTable {
    /// Absolute address of the table (its keys) in this cluster's view.
    pub addr: u64,
    /// Number of slots (a power of two).
    pub slots: u64,
    /// Absolute address of the block-mode deadline word
    /// ([`crate::region::sync::RING_WAIT_UNTIL`]) in this cluster's view.
    pub ring_wait_until: u64,
    /// Absolute address of the flight-mode word
    /// ([`crate::region::sync::RING_OVERWRITE`]) in this cluster's view.
    pub ring_overwrite: u64,
    /// Bytes of data in each ring (`Header::ring_data`, a power of two).
    pub ring_data: u64,
    /// Absolute address of the word counting executions that found no
    /// free thread slot ([`crate::region::sync::NO_SLOT`]) in this
    /// cluster's view.
    pub no_slot: u64,
    /// Event timestamps: 0 for the TSC, else the address of the process's
    /// vDSO `clock_gettime`, called for CLOCK_MONOTONIC in nanoseconds.
    pub clock_gettime: u64,
    /// Where the C library keeps the thread's kernel id, as an offset from
    /// the thread pointer (glibc's `struct pthread`), or 0 if unknown. With
    /// it, a thread that finds its thread pointer's slot recorded under
    /// another id (a finished thread whose thread control block it reuses,
    /// or the parent of a forked child) retires that slot and claims its own.
    pub tid_offset: u32,
}

/// The key of a retired slot: never a thread pointer, never free.
pub const RETIRED: u64 = 1;

impl ThreadTable {
    /// Bytes of one thread's block.
    fn block(&self) -> i32 {
        t::block_size(self.ring_data) as i32
    }
}

/// The clock id of CLOCK_MONOTONIC.
const CLOCK_MONOTONIC: u32 = 1;

/// `sched_yield`, which block mode calls while a ring stays full.
const SYS_SCHED_YIELD: u32 = 24;

/// Saved registers, pushed in this order after the flags.
const SAVED: usize = 9;
/// Offsets from rsp (after the saves) of saved rdi, rsi, rdx, rcx, r8, r9 = args 1-6.
const ARG_OFFSET: [i32; 6] = [32, 40, 48, 56, 24, 16];
/// Offset of saved rax (the return value at an exit).
const RAX_OFFSET: i32 = 64;
/// With the fixed frame (red zone, flags, return address, nine saves), the
/// point's rsp is this far above the mini-trampoline's.
pub const FIXED_FRAME_RSP: i32 = 72 + 8 + 8 + 128;

struct Gen {
    a: CodeAssembler,
    literals: Vec<(CodeLabel, u64)>,
    /// Where the thread table and the ring-mode words are.
    table: ThreadTable,
}

impl Gen {
    fn literal(&mut self, value: u64) -> CodeLabel {
        let l = self.a.create_label();
        self.literals.push((l, value));
        l
    }

    /// rax := e. `depth` temporaries are on the stack above the saves.
    fn expr(&mut self, e: &Expr, depth: i32) -> std::result::Result<(), IcedError> {
        match e {
            Expr::Const(c) => self.a.mov(rax, *c)?,
            Expr::Arg(n) => {
                let off = ARG_OFFSET[(*n as usize).clamp(1, 6) - 1] + depth * 8;
                self.a.mov(rax, qword_ptr(rsp + off))?
            }
            Expr::Ret => self.a.mov(rax, qword_ptr(rsp + RAX_OFFSET + depth * 8))?,
            Expr::Counter(addr) => {
                let l = self.literal(*addr);
                self.a.mov(rax, qword_ptr(l))?;
                self.a.mov(rax, qword_ptr(rax))?;
            }
            Expr::ThreadCounter(n) => self.a.mov(rax, qword_ptr(r11 + t::counter(*n) as i32))?,
            Expr::Tid => self.a.mov(rax, qword_ptr(r11 + t::TID as i32))?,
            Expr::Reg(n) => self.reg_value(*n, depth)?,
            Expr::Load {
                base,
                index,
                disp,
                size,
                signed,
            } => {
                // rax := address, then load through it.
                match base {
                    Some(b) => self.reg_value(*b, depth)?,
                    None => self.a.xor(eax, eax)?,
                }
                if let Some((i, scale)) = index {
                    self.a.push(rax)?;
                    self.reg_value(*i, depth + 1)?;
                    self.a.imul_3(rax, rax, *scale as i32)?;
                    self.a.pop(rcx)?;
                    self.a.add(rax, rcx)?;
                }
                self.a.mov(rcx, *disp)?;
                self.a.add(rax, rcx)?;
                match (size, signed) {
                    (1, true) => self.a.movsx(rax, byte_ptr(rax))?,
                    (1, false) => self.a.movzx(eax, byte_ptr(rax))?,
                    (2, true) => self.a.movsx(rax, word_ptr(rax))?,
                    (2, false) => self.a.movzx(eax, word_ptr(rax))?,
                    (4, true) => self.a.movsxd(rax, dword_ptr(rax))?,
                    (4, false) => self.a.mov(eax, dword_ptr(rax))?,
                    _ => self.a.mov(rax, qword_ptr(rax))?,
                }
            }
            Expr::Narrow(e, size, signed) => {
                self.expr(e, depth)?;
                match (size, signed) {
                    (1, true) => self.a.movsx(rax, al)?,
                    (1, false) => self.a.movzx(eax, al)?,
                    (2, true) => self.a.movsx(rax, ax)?,
                    (2, false) => self.a.movzx(eax, ax)?,
                    (4, true) => self.a.movsxd(rax, eax)?,
                    (4, false) => self.a.mov(eax, eax)?,
                    _ => {}
                }
            }
            Expr::Bin(op, l, r) => {
                self.expr(r, depth)?;
                self.a.push(rax)?;
                self.expr(l, depth + 1)?;
                self.a.pop(rcx)?;
                self.op(*op)?;
            }
        }
        Ok(())
    }

    /// rax := the value register `n` had at the point.
    fn reg_value(&mut self, n: u8, depth: i32) -> std::result::Result<(), IcedError> {
        // Saved caller-saved registers, in push order rax..r11 (r11 last, at rsp).
        let saved = |n: u8| -> Option<i32> {
            [
                (0u8, 64),
                (1, 56),
                (2, 48),
                (6, 40),
                (7, 32),
                (8, 24),
                (9, 16),
                (10, 8),
                (11, 0),
            ]
            .iter()
            .find(|(r, _)| *r == n)
            .map(|(_, off)| *off)
        };
        match n {
            4 => self
                .a
                .lea(rax, qword_ptr(rsp + FIXED_FRAME_RSP + depth * 8))?,
            n if saved(n).is_some() => self
                .a
                .mov(rax, qword_ptr(rsp + saved(n).unwrap_or(0) + depth * 8))?,
            3 => self.a.mov(rax, rbx)?,
            5 => self.a.mov(rax, rbp)?,
            12 => self.a.mov(rax, r12)?,
            13 => self.a.mov(rax, r13)?,
            14 => self.a.mov(rax, r14)?,
            _ => self.a.mov(rax, r15)?,
        }
        Ok(())
    }

    /// rax := rax op rcx.
    fn op(&mut self, op: BinOp) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        match op {
            BinOp::Add => a.add(rax, rcx)?,
            BinOp::Sub => a.sub(rax, rcx)?,
            BinOp::Mul => a.imul_2(rax, rcx)?,
            BinOp::Div => {
                let mut zero = a.create_label();
                let mut negate = a.create_label();
                let mut done = a.create_label();
                a.test(rcx, rcx)?;
                a.jz(zero)?;
                a.cmp(rcx, -1)?;
                a.je(negate)?; // avoids the overflow fault of i64::MIN / -1
                a.cqo()?;
                a.idiv(rcx)?;
                a.jmp(done)?;
                a.set_label(&mut negate)?;
                a.neg(rax)?;
                a.jmp(done)?;
                a.set_label(&mut zero)?;
                a.xor(eax, eax)?;
                a.set_label(&mut done)?;
            }
            BinOp::Lt | BinOp::Gt | BinOp::Le | BinOp::Ge | BinOp::Eq | BinOp::Ne => {
                a.cmp(rax, rcx)?;
                match op {
                    BinOp::Lt => a.setl(al)?,
                    BinOp::Gt => a.setg(al)?,
                    BinOp::Le => a.setle(al)?,
                    BinOp::Ge => a.setge(al)?,
                    BinOp::Eq => a.sete(al)?,
                    _ => a.setne(al)?,
                }
                a.movzx(eax, al)?;
            }
            BinOp::And | BinOp::Or => {
                a.test(rax, rax)?;
                a.setne(al)?;
                a.test(rcx, rcx)?;
                a.setne(cl)?;
                if op == BinOp::And {
                    a.and(al, cl)?;
                } else {
                    a.or(al, cl)?;
                }
                a.movzx(eax, al)?;
            }
        }
        Ok(())
    }

    /// r11 := this thread's block, claiming a slot on first use; jumps to
    /// `full` when the table has no free slot.
    fn thread_block(
        &mut self,
        table: ThreadTable,
        full: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        let keys = self.literal(table.addr);
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
        a.mov(eax, 186)?; // gettid, once per thread
        a.syscall()?; // clobbers rcx and r11
        a.imul_3(r11, r9, table.block())?;
        a.lea(r11, qword_ptr(r10 + r11 + (table.slots * 8) as i32))?;
        a.mov(qword_ptr(r11 + t::TID as i32), rax)?;
        a.jmp(have)?;
        a.set_label(&mut found)?;
        a.imul_3(r11, rcx, table.block())?;
        a.lea(r11, qword_ptr(r10 + r11 + (table.slots * 8) as i32))?;
        if table.tid_offset != 0 {
            // The slot is this thread's only if it was claimed under this
            // thread's id; else retire it (its records stay for weft to
            // read under the old id) and look further.
            a.mov(edx, dword_ptr(u64::from(table.tid_offset)).fs())?;
            a.cmp(edx, dword_ptr(r11 + t::TID as i32))?;
            a.je(have)?;
            a.mov(r8, rax)?;
            a.mov(edx, RETIRED as u32)?;
            a.lock().cmpxchg(qword_ptr(r10 + rcx * 8), rdx)?;
            a.mov(rax, r8)?;
            a.jmp(next)?;
        }
        a.set_label(&mut have)?;
        Ok(())
    }

    /// rax := an event's timestamp: the TSC, or CLOCK_MONOTONIC in ns from
    /// the vDSO. The call keeps r8-r11 and aligns the stack as the ABI asks;
    /// rcx, rdx, rsi and rdi (saved by the mini-trampoline) are clobbered.
    fn timestamp(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        if self.table.clock_gettime == 0 {
            a.rdtsc()?;
            a.shl(rdx, 32)?;
            a.or(rax, rdx)?;
            return Ok(());
        }
        for r in [r8, r9, r10, r11] {
            a.push(r)?;
        }
        a.mov(rax, rsp)?;
        a.and(rsp, -16)?;
        a.sub(rsp, 16)?; // struct timespec
        a.push(rax)?;
        a.push(rax)?; // the old rsp twice: the stack stays 16-byte aligned
        a.lea(rsi, qword_ptr(rsp + 16))?;
        a.mov(edi, CLOCK_MONOTONIC)?;
        a.mov(rax, self.table.clock_gettime)?;
        a.call(rax)?;
        a.imul_3(rax, qword_ptr(rsp + 16), 1_000_000_000)?;
        a.add(rax, qword_ptr(rsp + 24))?;
        a.mov(rsp, qword_ptr(rsp))?;
        for r in [r11, r10, r9, r8] {
            a.pop(r)?;
        }
        Ok(())
    }

    /// Copies the text of the string values of the record at r10 (whose
    /// value slots hold the pointers) after its values, replaces each
    /// pointer by its length and flags, writes the shape word and advances
    /// r9 (the head) past the record. Uses rax, rcx, rsi and rdi (saved by
    /// the mini-trampoline); r8-r11 survive.
    fn copy_strings(
        &mut self,
        nargs: usize,
        slots: &[usize],
        cap: u64,
    ) -> std::result::Result<(), IcedError> {
        use crate::region::ring as r;
        let text_start = (r::R_ARGS + 8 * nargs as u64) as i32;
        let a = &mut self.a;
        a.lea(rdi, qword_ptr(r10 + text_start))?;
        for &i in slots {
            let slot = r::R_ARGS as i32 + 8 * i as i32;
            let mut copy = a.create_label();
            let mut end = a.create_label();
            let mut longer = a.create_label();
            let mut null = a.create_label();
            let mut store = a.create_label();
            a.mov(rsi, qword_ptr(r10 + slot))?;
            a.xor(ecx, ecx)?;
            a.test(rsi, rsi)?;
            a.jz(null)?;
            a.set_label(&mut copy)?;
            a.movzx(eax, byte_ptr(rsi + rcx))?;
            a.test(al, al)?;
            a.jz(end)?;
            a.cmp(ecx, cap as i32)?;
            a.jae(longer)?;
            a.mov(byte_ptr(rdi + rcx), al)?;
            a.add(ecx, 1)?;
            a.jmp(copy)?;
            a.set_label(&mut longer)?;
            a.mov(rax, r::STR_TRUNCATED as i64)?;
            a.or(rax, rcx)?;
            a.jmp(store)?;
            a.set_label(&mut null)?;
            a.mov(rax, r::STR_NULL as i64)?;
            a.jmp(store)?;
            a.set_label(&mut end)?;
            a.mov(rax, rcx)?;
            a.set_label(&mut store)?;
            a.mov(qword_ptr(r10 + slot), rax)?;
            a.add(rcx, 7)?;
            a.and(rcx, -8)?;
            a.add(rdi, rcx)?;
        }
        // Shape word: text bytes in the high half, values in the low.
        a.mov(rax, rdi)?;
        a.sub(rax, r10)?;
        a.sub(eax, text_start)?;
        a.shl(eax, 16)?;
        a.or(eax, nargs as i32)?;
        a.mov(dword_ptr(r10 + r::R_NARGS as i32), eax)?;
        // The record's size.
        a.sub(rdi, r10)?;
        a.add(r9, rdi)?;
        Ok(())
    }

    fn primitive(&mut self, p: &Primitive) -> std::result::Result<(), IcedError> {
        match p {
            Primitive::SetCounter(addr, e)
            | Primitive::AddCounter(addr, e)
            | Primitive::SubCounter(addr, e) => {
                self.expr(e, 0)?;
                let l = self.literal(*addr);
                self.a.mov(rcx, qword_ptr(l))?;
                match p {
                    Primitive::SetCounter(..) => self.a.mov(qword_ptr(rcx), rax)?,
                    Primitive::AddCounter(..) => self.a.lock().add(qword_ptr(rcx), rax)?,
                    _ => self.a.lock().sub(qword_ptr(rcx), rax)?,
                }
            }
            Primitive::AddThreadCounter(n, e) => {
                self.expr(e, 0)?;
                self.a.add(qword_ptr(r11 + t::counter(*n) as i32), rax)?;
            }
            Primitive::Emit(event, args, strings) => {
                use crate::region::ring as r;
                let nargs = args.len().min(r::MAX_ARGS);
                let string_slots: Vec<usize> = (0..nargs)
                    .filter(|i| strings.mask & (1 << i) != 0)
                    .collect();
                // Bytes copied at most from each string: the request's cap,
                // within the text a record may carry.
                let text_cap = u64::from(strings.cap.div_ceil(8) * 8)
                    .min(r::MAX_TEXT / string_slots.len().max(1) as u64 / 8 * 8);
                // Room for the longest record this point can write.
                let size = r::record_size(nargs, string_slots.len() as u64 * text_cap);
                let data = self.table.ring_data;
                let mut drop = self.a.create_label();
                let mut done = self.a.create_label();
                self.a.lea(r8, qword_ptr(r11 + t::RING as i32))?;
                self.a.mov(r9, qword_ptr(r8 + r::HEAD as i32))?;
                self.a.mov(rax, r9)?;
                self.a.sub(rax, qword_ptr(r8 + r::TAIL as i32))?;
                self.a.cmp(rax, (data - size) as i32)?;
                let mut full = self.a.create_label();
                let mut room = self.a.create_label();
                self.a.ja(full)?;
                self.a.set_label(&mut room)?;
                self.a.mov(r10, r9)?;
                self.a.and(r10, (data - 1) as i32)?;
                self.a.lea(r10, qword_ptr(r8 + r10 + r::HEADER as i32))?;
                self.timestamp()?;
                self.a.mov(qword_ptr(r10 + r::R_TSC as i32), rax)?;
                self.a.mov(dword_ptr(r10 + r::R_EVENT as i32), *event)?;
                self.a
                    .mov(dword_ptr(r10 + r::R_NARGS as i32), nargs as u32)?;
                for (i, e) in args.iter().take(nargs).enumerate() {
                    // expr uses rax and rcx (rdx for a division); r8-r11 survive.
                    self.expr(e, 0)?;
                    self.a
                        .mov(qword_ptr(r10 + (r::R_ARGS as i32 + 8 * i as i32)), rax)?;
                }
                if string_slots.is_empty() {
                    self.a.add(r9, size as i32)?;
                } else {
                    self.copy_strings(nargs, &string_slots, text_cap)?;
                }
                self.a.mov(qword_ptr(r8 + r::HEAD as i32), r9)?; // publish the record
                self.a.jmp(done)?;
                // The ring is full. In block mode wait until weft makes room
                // or its deadline passes, yielding the processor (the one
                // system call on this path) so that weft's consumer can run
                // even when writers outnumber the cores.
                let mut check = self.a.create_label();
                let mut overwrite = self.a.create_label();
                self.a.set_label(&mut full)?;
                self.a.mov(rdx, self.table.ring_overwrite)?;
                self.a.cmp(qword_ptr(rdx), 0)?;
                self.a.jne(overwrite)?;
                self.a.mov(rdx, self.table.ring_wait_until)?;
                self.a.mov(rcx, qword_ptr(rdx))?;
                self.a.test(rcx, rcx)?;
                self.a.jz(drop)?;
                self.a.jmp(check)?;
                let mut wait = self.a.create_label();
                self.a.set_label(&mut wait)?;
                self.a.push(r11)?; // syscall clobbers rcx and r11
                self.a.mov(eax, SYS_SCHED_YIELD)?;
                self.a.syscall()?;
                self.a.pop(r11)?;
                self.a.mov(rdx, self.table.ring_wait_until)?;
                self.a.mov(rcx, qword_ptr(rdx))?;
                self.a.set_label(&mut check)?;
                self.a.rdtsc()?;
                self.a.shl(rdx, 32)?;
                self.a.or(rax, rdx)?;
                self.a.cmp(rax, rcx)?;
                self.a.jae(drop)?;
                self.a.mov(rax, r9)?;
                self.a.sub(rax, qword_ptr(r8 + r::TAIL as i32))?;
                self.a.cmp(rax, (data - size) as i32)?;
                self.a.jbe(room)?;
                self.a.jmp(wait)?;
                // Flight mode: move the tail past the oldest records, whole
                // ones, counting them, until this record fits. Only this
                // thread writes its ring, so only it moves the tail now;
                // the tail moves before their bytes are overwritten, so a
                // reader that checks the tail after copying knows which
                // records it copied whole (see `Session::snapshot_events`).
                let mut skip = self.a.create_label();
                self.a.set_label(&mut overwrite)?;
                self.a.mov(rax, qword_ptr(r8 + r::TAIL as i32))?;
                self.a.set_label(&mut skip)?;
                self.a.mov(rcx, rax)?;
                self.a.and(rcx, (data - 1) as i32)?;
                self.a
                    .mov(ecx, dword_ptr(r8 + rcx + (r::HEADER + r::R_NARGS) as i32))?;
                self.a.mov(edx, ecx)?;
                self.a.and(edx, 0xffff)?;
                self.a.shl(edx, 3)?;
                self.a.shr(ecx, 16)?;
                self.a.add(ecx, edx)?;
                self.a.add(ecx, r::R_ARGS as i32)?;
                self.a.add(rax, rcx)?;
                self.a.add(qword_ptr(r8 + r::DROPPED as i32), 1)?;
                self.a.mov(rcx, r9)?;
                self.a.sub(rcx, rax)?;
                self.a.cmp(rcx, (data - size) as i32)?;
                self.a.ja(skip)?;
                self.a.mov(qword_ptr(r8 + r::TAIL as i32), rax)?;
                self.a.jmp(room)?;
                self.a.set_label(&mut drop)?;
                self.a.add(qword_ptr(r8 + r::DROPPED as i32), 1)?;
                self.a.set_label(&mut done)?;
                self.a.nop()?;
            }
            Primitive::StartTimer(n) => {
                let a = &mut self.a;
                let mut done = a.create_label();
                a.lea(r8, qword_ptr(r11 + t::timer(*n) as i32))?;
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
            }
            Primitive::StopTimer(n) => {
                let a = &mut self.a;
                let mut done = a.create_label();
                let mut unmatched = a.create_label();
                a.lea(r8, qword_ptr(r11 + t::timer(*n) as i32))?;
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
            }
        }
        Ok(())
    }
}

/// Generates the mini-trampoline for `actions` at address `at`.
pub fn mini_trampoline(at: u64, table: ThreadTable, actions: &[Guarded]) -> Result<Vec<u8>> {
    let enc = |e: IcedError| Error::Encode(e.to_string());
    let mut g = Gen {
        a: CodeAssembler::new(64).map_err(enc)?,
        literals: vec![],
        table,
    };
    (|| -> std::result::Result<(), IcedError> {
        let mut exit = g.a.create_label();
        let mut no_slot = g.a.create_label();
        for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11] {
            g.a.push(r)?;
        }
        let needs_thread = actions.iter().any(|x| {
            x.primitive.uses_thread_state()
                || x.predicate.as_ref().is_some_and(Expr::uses_thread_state)
        });
        if needs_thread {
            g.thread_block(table, no_slot)?;
        }
        for x in actions {
            let mut skip = g.a.create_label();
            if let Some(p) = &x.predicate {
                g.expr(p, 0)?;
                g.a.test(rax, rax)?;
                g.a.jz(skip)?;
            }
            g.primitive(&x.primitive)?;
            g.a.set_label(&mut skip)?;
            g.a.nop()?; // a label needs an instruction of its own
        }
        if needs_thread {
            // Every slot is taken: count what this thread could not do.
            g.a.jmp(exit)?;
            g.a.set_label(&mut no_slot)?;
            g.a.mov(rax, table.no_slot)?;
            g.a.lock().add(qword_ptr(rax), 1)?;
        }
        g.a.set_label(&mut exit)?;
        for r in [r11, r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
            g.a.pop(r)?;
        }
        g.a.ret()?;
        for (mut l, v) in std::mem::take(&mut g.literals) {
            g.a.set_label(&mut l)?;
            g.a.dq(&[v])?;
        }
        Ok(())
    })()
    .map_err(enc)?;
    debug_assert_eq!(SAVED, 9);
    g.a.assemble(at).map_err(enc)
}

/// Generates, at address `at`, a C-callable function `void *f(void)` that
/// returns the calling thread's event ring (its block's ring header),
/// claiming a slot on first use, or null when every slot is taken (counted
/// in [`ThreadTable::no_slot`]). Rich events (`include/weft/event.h`) call
/// it and then write their record themselves. It clobbers only registers
/// the System V ABI lets a callee clobber.
pub fn ring_function(at: u64, table: ThreadTable) -> Result<Vec<u8>> {
    let enc = |e: IcedError| Error::Encode(e.to_string());
    let mut g = Gen {
        a: CodeAssembler::new(64).map_err(enc)?,
        literals: vec![],
        table,
    };
    (|| -> std::result::Result<(), IcedError> {
        let mut no_slot = g.a.create_label();
        g.thread_block(table, no_slot)?;
        g.a.lea(rax, qword_ptr(r11 + t::RING as i32))?;
        g.a.ret()?;
        g.a.set_label(&mut no_slot)?;
        g.a.mov(rax, table.no_slot)?;
        g.a.lock().add(qword_ptr(rax), 1)?;
        g.a.xor(eax, eax)?;
        g.a.ret()?;
        for (mut l, v) in std::mem::take(&mut g.literals) {
            g.a.set_label(&mut l)?;
            g.a.dq(&[v])?;
        }
        Ok(())
    })()
    .map_err(enc)?;
    g.a.assemble(at).map_err(enc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_plan::{BinOp, Strings};

    /// Executable memory for running generated code in this process.
    struct Exec {
        ptr: *mut u8,
        len: usize,
    }

    impl Exec {
        fn new(len: usize) -> Exec {
            // SAFETY: an anonymous private mapping; checked for failure.
            let ptr = unsafe { libc_mmap(len) };
            Exec { ptr, len }
        }
        fn load(&self, code: &[u8]) {
            assert!(code.len() <= self.len);
            // SAFETY: the mapping is writable and at least code.len() long.
            unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), self.ptr, code.len()) };
        }
        fn addr(&self) -> u64 {
            self.ptr as u64
        }
        /// Calls the code as `fn(a1..a6)`.
        fn call(&self, args: [i64; 6]) {
            // SAFETY: the code is a mini-trampoline: it preserves every
            // register, keeps the stack balanced and returns with `ret`, so
            // it behaves as a C function of six integer arguments.
            let f: extern "C" fn(i64, i64, i64, i64, i64, i64) =
                unsafe { std::mem::transmute(self.ptr) };
            f(args[0], args[1], args[2], args[3], args[4], args[5]);
        }
    }

    /// mmap(len, RWX) without the libc crate (patch does not depend on it).
    unsafe fn libc_mmap(len: usize) -> *mut u8 {
        extern "C" {
            fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
                -> *mut u8;
        }
        // PROT_READ|WRITE|EXEC = 7, MAP_PRIVATE|MAP_ANONYMOUS = 0x22
        // SAFETY: plain anonymous mapping request.
        let p = unsafe { mmap(std::ptr::null_mut(), len, 7, 0x22, -1, 0) };
        assert!(!p.is_null() && p as isize != -1, "mmap failed");
        p
    }

    /// A mini-trampoline that emits event `event` with arguments 1 to
    /// `nargs`, loaded and ready to call.
    fn emitter(table: ThreadTable, event: u32, nargs: u8, strings: Strings) -> Exec {
        let exec = Exec::new(4096);
        let emit = vec![Guarded {
            predicate: None,
            primitive: Primitive::Emit(event, (1..=nargs).map(Expr::Arg).collect(), strings),
        }];
        exec.load(&mini_trampoline(exec.addr(), table, &emit).unwrap());
        exec
    }

    /// The ring size the tests use.
    const RING_DATA: u64 = crate::region::ring::DEFAULT_DATA;

    /// Counters and a thread table in one heap block, with stable addresses.
    struct Memory {
        words: Vec<u64>,
    }

    impl Memory {
        fn new(slots: u64) -> Memory {
            let bytes = slots * 8 + slots * t::block_size(RING_DATA) + 4096;
            Memory {
                words: vec![0; (bytes / 8) as usize],
            }
        }
        fn base(&self) -> u64 {
            self.words.as_ptr() as u64
        }
        fn counter(&self, i: usize) -> u64 {
            self.base() + (i as u64) * 8
        }
        fn table(&self) -> ThreadTable {
            ThreadTable {
                addr: self.base() + 4096,
                slots: 16,
                ring_wait_until: self.base() + 4096 - 8,
                ring_overwrite: self.base() + 4096 - 16,
                ring_data: RING_DATA,
                no_slot: self.base() + 4096 - 24,
                clock_gettime: 0,
                tid_offset: 0,
            }
        }
        fn read(&self, addr: u64) -> u64 {
            // SAFETY: addr lies inside `words` (checked by the tests' layout).
            unsafe { std::ptr::read_volatile(addr as *const u64) }
        }
        fn write(&self, addr: u64, value: u64) {
            // SAFETY: addr lies inside `words`; the tests write only fields
            // that generated code reads (a ring's tail, the deadline).
            unsafe { std::ptr::write_volatile(addr as *mut u64, value) }
        }
        fn block_of_this_thread(&self) -> u64 {
            let table = self.table();
            (0..table.slots)
                .find(|&s| self.read(table.addr + s * 8) > RETIRED)
                .map(|s| table.addr + table.slots * 8 + s * t::block_size(RING_DATA))
                .expect("a claimed slot")
        }
        fn ring_of_this_thread(&self) -> u64 {
            self.block_of_this_thread() + t::RING
        }
    }

    #[test]
    fn predicated_counters_on_arguments() {
        let mem = Memory::new(16);
        let exec = Exec::new(4096);
        let c0 = mem.counter(0);
        let c1 = mem.counter(1);
        let actions = vec![
            // c0 += arg3 when arg1 == 5 and arg2 > 10
            Guarded {
                predicate: Some(Expr::bin(
                    BinOp::And,
                    Expr::bin(BinOp::Eq, Expr::Arg(1), Expr::Const(5)),
                    Expr::bin(BinOp::Gt, Expr::Arg(2), Expr::Const(10)),
                )),
                primitive: Primitive::AddCounter(c0, Expr::Arg(3)),
            },
            // c1 += (arg4 * 2 - 1) / arg5   (division by zero gives 0)
            Guarded {
                predicate: None,
                primitive: Primitive::AddCounter(
                    c1,
                    Expr::bin(
                        BinOp::Div,
                        Expr::bin(
                            BinOp::Sub,
                            Expr::bin(BinOp::Mul, Expr::Arg(4), Expr::Const(2)),
                            Expr::Const(1),
                        ),
                        Expr::Arg(5),
                    ),
                ),
            },
        ];
        exec.load(&mini_trampoline(exec.addr(), mem.table(), &actions).unwrap());
        exec.call([5, 11, 7, 10, 3, 0]); // c0 += 7; c1 += 19/3 = 6
        exec.call([5, 10, 7, 10, 0, 0]); // predicate false; c1 += 19/0 = 0
        exec.call([4, 99, 7, 1, -1, 0]); // predicate false; c1 += 1/-1 = -1
        assert_eq!(mem.read(c0), 7);
        assert_eq!(mem.read(c1) as i64, 5);
    }

    #[test]
    fn nested_timer_counts_outermost_interval_and_thread_counters() {
        let mem = Memory::new(16);
        let start = Exec::new(4096);
        let stop = Exec::new(4096);
        let inc = vec![
            Guarded {
                predicate: None,
                primitive: Primitive::StartTimer(3),
            },
            Guarded {
                predicate: None,
                primitive: Primitive::AddThreadCounter(2, Expr::Const(1)),
            },
        ];
        let dec = vec![
            Guarded {
                predicate: None,
                primitive: Primitive::AddThreadCounter(2, Expr::Const(-1)),
            },
            Guarded {
                predicate: None,
                primitive: Primitive::StopTimer(3),
            },
        ];
        start.load(&mini_trampoline(start.addr(), mem.table(), &inc).unwrap());
        stop.load(&mini_trampoline(stop.addr(), mem.table(), &dec).unwrap());
        start.call([0; 6]);
        start.call([0; 6]); // nested (recursion)
        let block = mem.block_of_this_thread();
        let timer = block + t::timer(3);
        assert_eq!(mem.read(timer + t::TIMER_COUNT), 2);
        assert_eq!(mem.read(block + t::counter(2)), 2);
        stop.call([0; 6]);
        assert_eq!(
            mem.read(timer + t::TIMER_TOTAL),
            0,
            "inner stop does not read the clock"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
        stop.call([0; 6]);
        assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
        assert!(mem.read(timer + t::TIMER_TOTAL) > 0);
        assert_eq!(
            mem.read(timer + t::TIMER_SEQ) % 2,
            0,
            "sequence even when idle"
        );
        assert_eq!(mem.read(block + t::counter(2)), 0);
        stop.call([0; 6]); // unmatched stop: ignored
        assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
        // The slot records this thread's tid.
        assert!(mem.read(block + t::TID) > 0);
        // Another thread gets another slot.
        let (sa, sb) = (start.addr(), stop.addr());
        std::thread::spawn(move || {
            // SAFETY: as in Exec::call; the code stays mapped for the test's life.
            let f: extern "C" fn() = unsafe { std::mem::transmute(sa as *const u8) };
            f();
            // SAFETY: as above.
            let g: extern "C" fn() = unsafe { std::mem::transmute(sb as *const u8) };
            g();
        })
        .join()
        .unwrap();
        let table = mem.table();
        let claimed = (0..table.slots)
            .filter(|&s| mem.read(table.addr + s * 8) != 0)
            .count();
        assert_eq!(claimed, 2);
    }

    #[test]
    fn records_near_the_end_of_the_ring_stay_whole() {
        use crate::region::ring as r;
        let mem = Memory::new(16);
        let table = mem.table();
        let exec = emitter(table, 3, 3, Strings::NONE);
        // 40-byte records do not divide the data, so some straddle its end;
        // consuming after each one lets the ring go round three times.
        let size = r::record_size(3, 0);
        assert_eq!(size, 40);
        let mut straddled = 0;
        for i in 0..3 * RING_DATA / size {
            exec.call([i as i64, 2 * i as i64, 3 * i as i64, 0, 0, 0]);
            let ring = mem.ring_of_this_thread();
            let pos = mem.read(ring + r::TAIL);
            assert_eq!(mem.read(ring + r::HEAD), pos + size);
            let offset = pos & (RING_DATA - 1);
            straddled += u64::from(offset + size > RING_DATA);
            let rec = ring + r::HEADER + offset;
            assert_eq!(mem.read(rec + r::R_EVENT), 3 | 3 << 32);
            let args: Vec<u64> = (0..3).map(|k| mem.read(rec + r::R_ARGS + 8 * k)).collect();
            assert_eq!(args, [i, 2 * i, 3 * i]);
            mem.write(ring + r::TAIL, pos + size);
        }
        assert!(straddled >= 2, "records crossed the end {straddled} times");
        assert_eq!(mem.read(mem.ring_of_this_thread() + r::DROPPED), 0);
    }

    #[test]
    fn events_go_into_the_thread_ring_and_overflow_is_counted() {
        use crate::region::ring as r;
        let mem = Memory::new(16);
        let table = mem.table();
        let exec = emitter(table, 7, 2, Strings::NONE);
        for i in 0..5 {
            exec.call([i, 100 + i, 0, 0, 0, 0]);
        }
        let ring = mem.ring_of_this_thread();
        let size = r::record_size(2, 0);
        assert_eq!(size, 32);
        assert_eq!(mem.read(ring + r::HEAD), 5 * size);
        let mut last_tsc = 0;
        for i in 0..5u64 {
            let rec = ring + r::HEADER + i * size;
            assert!(mem.read(rec + r::R_TSC) >= last_tsc);
            last_tsc = mem.read(rec + r::R_TSC);
            assert_eq!(mem.read(rec + r::R_EVENT) & 0xffff_ffff, 7);
            assert_eq!(mem.read(rec + r::R_EVENT) >> 32, 2, "argument count");
            assert_eq!(
                (mem.read(rec + r::R_ARGS), mem.read(rec + r::R_ARGS + 8)),
                (i, 100 + i)
            );
        }
        // Nobody consumes: the ring fills, then events are dropped and counted.
        let capacity = RING_DATA / size;
        for i in 0..capacity + 10 {
            exec.call([i as i64, 0, 0, 0, 0, 0]);
        }
        // 5 + capacity + 10 events in all; the ring holds `capacity` records.
        assert_eq!(mem.read(ring + r::HEAD), RING_DATA);
        assert_eq!(mem.read(ring + r::DROPPED), 15);
    }

    #[test]
    fn string_values_carry_their_text() {
        use crate::region::ring as r;
        let mem = Memory::new(16);
        let table = mem.table();
        let exec = emitter(
            table,
            9,
            3,
            Strings {
                mask: 0b101,
                cap: 16,
            },
        );
        let short = b"main.py\0";
        let exact = b"0123456789abcdef\0";
        let long = b"0123456789abcdefXYZ\0";
        let cases: [(&[u8], u64, &[u8], u64); 3] = [
            (short, 7, b"main.py", 8),
            (exact, 16, b"0123456789abcdef", 16),
            (long, 16 | r::STR_TRUNCATED, b"0123456789abcdef", 16),
        ];
        let mut pos = 0;
        for (text, word, copied, padded) in cases {
            exec.call([text.as_ptr() as i64, 42, 0, 0, 0, 0]);
            let ring = mem.ring_of_this_thread();
            let rec = ring + r::HEADER + pos;
            // The second string is null: no text, flagged.
            let shape = (mem.read(rec + r::R_EVENT) >> 32) as u32;
            assert_eq!(r::shape(shape), (3, padded));
            assert_eq!(mem.read(rec + r::R_ARGS), word);
            assert_eq!(mem.read(rec + r::R_ARGS + 8), 42);
            assert_eq!(mem.read(rec + r::R_ARGS + 16), r::STR_NULL);
            let start = rec + r::R_ARGS + 24;
            // SAFETY: the record lies in `mem`, `copied.len()` bytes after its values.
            let got = unsafe { std::slice::from_raw_parts(start as *const u8, copied.len()) };
            assert_eq!(got, copied);
            pos += r::record_size(3, padded);
            assert_eq!(mem.read(ring + r::HEAD), pos);
        }
    }

    #[test]
    fn flight_mode_overwrites_the_oldest_records() {
        use crate::region::ring as r;
        let mem = Memory::new(16);
        let table = mem.table();
        // Records of two sizes (a string of 1 or 20 bytes), so that the
        // writer skips records of a size other than its own.
        let exec = emitter(
            table,
            5,
            2,
            Strings {
                mask: 0b10,
                cap: 32,
            },
        );
        mem.write(table.ring_overwrite, 1);
        let texts: [&[u8]; 2] = [b"x\0", b"twenty bytes of text\0"];
        let total = 3 * RING_DATA / 48;
        for i in 0..total {
            exec.call([
                i as i64,
                texts[(i % 2) as usize].as_ptr() as i64,
                0,
                0,
                0,
                0,
            ]);
        }
        let ring = mem.ring_of_this_thread();
        let (head, tail) = (mem.read(ring + r::HEAD), mem.read(ring + r::TAIL));
        assert!(head - tail <= RING_DATA && head - tail > RING_DATA - 64);
        // Walk the surviving records: consecutive, ending with the last.
        let mut pos = tail;
        let mut expected = None;
        let mut kept = 0;
        while pos < head {
            let rec = ring + r::HEADER + (pos & (RING_DATA - 1));
            let (nargs, text) = r::shape((mem.read(rec + r::R_EVENT) >> 32) as u32);
            let i = mem.read(rec + r::R_ARGS);
            if let Some(e) = expected {
                assert_eq!(i, e);
            }
            assert_eq!(mem.read(rec + r::R_ARGS + 8), [1, 20][(i % 2) as usize]);
            expected = Some(i + 1);
            kept += 1;
            pos += r::record_size(nargs, text);
        }
        assert_eq!(pos, head);
        assert_eq!(expected, Some(total));
        assert_eq!(
            kept + mem.read(ring + r::DROPPED),
            total,
            "every record kept or counted"
        );
    }

    #[test]
    fn a_thread_without_a_slot_is_counted() {
        let mem = Memory::new(16);
        let table = mem.table();
        // Every slot belongs to some other thread.
        for slot in 0..table.slots {
            mem.write(table.addr + slot * 8, 0x1000 + slot);
        }
        let exec = emitter(table, 1, 1, Strings::NONE);
        for i in 0..3 {
            exec.call([i, 0, 0, 0, 0, 0]);
        }
        assert_eq!(mem.read(table.no_slot), 3);
    }

    #[test]
    fn the_ring_function_returns_this_threads_ring() {
        let mem = Memory::new(16);
        let table = mem.table();
        let exec = Exec::new(4096);
        exec.load(&ring_function(exec.addr(), table).unwrap());
        // SAFETY: ring_function generates a System V function of no
        // arguments returning a pointer, preserving callee-saved registers.
        let f: extern "C" fn() -> u64 = unsafe { std::mem::transmute(exec.addr()) };
        let ring = f();
        assert_eq!(ring, mem.ring_of_this_thread());
        assert_eq!(f(), ring, "the same slot again");
        let other = std::thread::scope(|scope| scope.spawn(move || f()).join().unwrap());
        assert!(other != 0 && other != ring, "another thread, another ring");
        // Every slot taken by other threads (a new thread may reuse a
        // finished one's thread pointer, so replace the keys): null, counted.
        for slot in 0..table.slots {
            mem.write(table.addr + slot * 8, 0x1000 + slot);
        }
        let third = std::thread::scope(|scope| scope.spawn(move || f()).join().unwrap());
        assert_eq!((third, mem.read(table.no_slot)), (0, 1));
    }

    #[test]
    fn monotonic_timestamps_come_from_clock_gettime() {
        use crate::region::ring as r;
        #[repr(C)]
        struct Timespec {
            sec: i64,
            nsec: i64,
        }
        extern "C" {
            fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
        }
        let now = || {
            let mut ts = Timespec { sec: 0, nsec: 0 };
            // SAFETY: a valid clock id and a pointer to a live timespec.
            unsafe { clock_gettime(CLOCK_MONOTONIC as i32, &mut ts) };
            (ts.sec * 1_000_000_000 + ts.nsec) as u64
        };
        let mem = Memory::new(16);
        let table = ThreadTable {
            clock_gettime: clock_gettime as *const () as u64,
            ..mem.table()
        };
        let exec = emitter(table, 2, 2, Strings::NONE);
        let before = now();
        exec.call([11, 22, 0, 0, 0, 0]);
        let after = now();
        let rec = mem.ring_of_this_thread() + r::HEADER;
        let stamp = mem.read(rec + r::R_TSC);
        assert!(
            before <= stamp && stamp <= after,
            "{before} <= {stamp} <= {after}"
        );
        // The values survive the call.
        assert_eq!(
            (mem.read(rec + r::R_ARGS), mem.read(rec + r::R_ARGS + 8)),
            (11, 22)
        );
    }

    /// Offsets from the thread pointer where this thread's id lies (glibc
    /// keeps it in `struct pthread`).
    fn tid_offsets() -> Vec<u32> {
        extern "C" {
            fn gettid() -> i32;
        }
        let tp: u64;
        // SAFETY: reads fs:0, the thread pointer, which the x86-64 TLS ABI
        // makes point to itself.
        unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp) };
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { gettid() } as u32;
        (8..0x400u32)
            .step_by(4)
            .filter(|&off| {
                // SAFETY: glibc's struct pthread spans more than 0x400
                // bytes from the thread pointer, all mapped.
                unsafe { std::ptr::read_volatile((tp + u64::from(off)) as *const u32) == tid }
            })
            .collect()
    }

    #[test]
    fn a_slot_claimed_under_another_thread_id_is_retired() {
        // The offset where two threads both find their own id.
        let mine = tid_offsets();
        let theirs = std::thread::spawn(tid_offsets).join().unwrap();
        let offset = *mine
            .iter()
            .find(|o| theirs.contains(o))
            .expect("glibc's tid field");
        let mem = Memory::new(16);
        let table = ThreadTable {
            tid_offset: offset,
            ..mem.table()
        };
        let exec = emitter(table, 1, 1, Strings::NONE);
        exec.call([1, 0, 0, 0, 0, 0]);
        exec.call([2, 0, 0, 0, 0, 0]);
        let first = mem.block_of_this_thread();
        let ring = first + t::RING;
        assert_eq!(
            mem.read(ring + crate::region::ring::HEAD),
            48,
            "one slot, two events"
        );
        // As if another thread had claimed this slot with the same thread pointer.
        mem.write(first + t::TID, 999_999);
        exec.call([3, 0, 0, 0, 0, 0]);
        let keys: Vec<u64> = (0..table.slots)
            .map(|s| mem.read(table.addr + s * 8))
            .collect();
        assert_eq!(
            keys.iter().filter(|&&k| k == RETIRED).count(),
            1,
            "{keys:?}"
        );
        assert_eq!(keys.iter().filter(|&&k| k > RETIRED).count(), 1, "{keys:?}");
        assert_eq!(
            mem.read(ring + crate::region::ring::HEAD),
            48,
            "the old ring kept"
        );
        let new = mem.block_of_this_thread();
        assert_ne!(new, first);
        assert_eq!(mem.read(new + t::RING + crate::region::ring::HEAD), 24);
    }

    fn now_tsc() -> u64 {
        // SAFETY: rdtsc exists on every x86-64 processor and has no memory effects.
        unsafe { core::arch::x86_64::_rdtsc() }
    }

    #[test]
    fn block_mode_waits_for_room_until_the_deadline() {
        use crate::region::ring as r;
        let mem = Memory::new(16);
        let table = mem.table();
        let exec = emitter(table, 1, 1, Strings::NONE);
        let size = r::record_size(1, 0);
        for i in 0..RING_DATA / size {
            exec.call([i as i64, 0, 0, 0, 0, 0]);
        }
        let ring = mem.ring_of_this_thread();
        let full = mem.read(ring + r::HEAD);
        assert!(full > RING_DATA - size, "the ring is full");
        let ticks_per_ms = {
            let (t0, c0) = (std::time::Instant::now(), now_tsc());
            std::thread::sleep(std::time::Duration::from_millis(20));
            (now_tsc() - c0) / t0.elapsed().as_millis().max(1) as u64
        };

        // A consumer makes room after 30 ms: the writer waits, then records.
        mem.write(table.ring_wait_until, now_tsc() + 5000 * ticks_per_ms);
        let waited = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(std::time::Duration::from_millis(30));
                mem.write(ring + r::TAIL, size);
            });
            let started = std::time::Instant::now();
            exec.call([-1, 0, 0, 0, 0, 0]);
            started.elapsed()
        });
        assert!(waited >= std::time::Duration::from_millis(25), "{waited:?}");
        assert_eq!(mem.read(ring + r::DROPPED), 0);
        assert_eq!(mem.read(ring + r::HEAD), full + size);
        let rec = ring + r::HEADER + (full & (RING_DATA - 1));
        assert_eq!(mem.read(rec + r::R_ARGS), u64::MAX, "the waiting event");

        // Nobody consumes: the writer gives up at the deadline and counts a drop.
        mem.write(table.ring_wait_until, now_tsc() + 40 * ticks_per_ms);
        let started = std::time::Instant::now();
        exec.call([-2, 0, 0, 0, 0, 0]);
        let waited = started.elapsed();
        assert!(waited >= std::time::Duration::from_millis(30), "{waited:?}");
        assert_eq!(mem.read(ring + r::DROPPED), 1);
    }
}
