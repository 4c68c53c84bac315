//! The ring writer: the producer side of the event rings (see
//! `region::ring`). [`Gen::emit`] compiles an `Emit` primitive: reserve room
//! for the record in the calling thread's ring, stamp it (TSC or the vDSO's
//! CLOCK_MONOTONIC), write the event id and values, copy the text of string
//! values, and publish the record by storing the ring's head. A full ring
//! drops the record and counts it (discard mode), waits for weft until a
//! deadline (block mode), or overwrites the oldest records (flight mode),
//! as the sync words say (`region::sync`). [`ring_function`] gives rich
//! events (`include/weft/event.h`, which writes the same records in C) the
//! calling thread's ring.

use super::{Gen, ThreadTable};
use crate::region::ring as r;
use crate::region::threads as t;
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_plan::{Expr, Strings};

/// The clock id of CLOCK_MONOTONIC, as `mov edi` loads it.
pub(super) const CLOCK_MONOTONIC: u32 = weft_abi::clock::MONOTONIC as u32;

impl Gen {
    /// rax := an event's timestamp when the clock is not the TSC:
    /// CLOCK_MONOTONIC in ns from the vDSO. The call keeps r8-r11 and
    /// aligns the stack as the ABI asks; rcx, rdx, rsi and rdi (saved by
    /// the mini-trampoline) are clobbered.
    fn monotonic_timestamp(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
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

    /// rax := the event clock now: the TSC the primitive before read
    /// (the block's stamp word) if it read one, else a fresh one, kept in
    /// the stamp word for the primitive after; CLOCK_MONOTONIC from the
    /// vDSO where records are stamped with it. r11: the thread's block.
    pub(super) fn event_time(&mut self) -> std::result::Result<(), IcedError> {
        if self.table.clock_gettime != 0 {
            return self.monotonic_timestamp();
        }
        let mut have = self.a.create_label();
        if self.stamp_ready {
            self.a.mov(rax, qword_ptr(r11 + t::STAMP as i32))?;
            self.a.test(rax, rax)?;
            self.a.jnz(have)?;
        }
        self.a.rdtsc()?;
        self.a.shl(rdx, 32)?;
        self.a.or(rax, rdx)?;
        self.a.mov(qword_ptr(r11 + t::STAMP as i32), rax)?;
        self.a.set_label(&mut have)?;
        self.a.nop()
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
        strings: &Strings,
        cap: u64,
    ) -> std::result::Result<(), IcedError> {
        let (sized, gathered) = (strings.sized, strings.gathered);
        let text_start = (r::R_ARGS + 8 * nargs as u64) as i32;
        let a = &mut self.a;
        a.lea(rdi, qword_ptr(r10 + text_start))?;
        for &i in slots {
            let slot = r::R_ARGS as i32 + 8 * i as i32;
            if gathered & (1 << i) != 0 && i + 2 < nargs {
                copy_gathered(a, slot, cap)?;
                continue;
            }
            if sized & (1 << i) != 0 && i + 1 < nargs {
                copy_sized(a, slot, cap)?;
                continue;
            }
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
            a.add(rcx, r::TEXT_ALIGN as i32 - 1)?;
            a.and(rcx, -(r::TEXT_ALIGN as i32))?;
            a.add(rdi, rcx)?;
        }
        // Shape word: text bytes in the high half, values in the low.
        a.mov(rax, rdi)?;
        a.sub(rax, r10)?;
        a.sub(eax, text_start)?;
        a.shl(eax, r::SHAPE_TEXT_SHIFT)?;
        a.or(eax, nargs as i32)?;
        a.mov(dword_ptr(r10 + r::R_NARGS as i32), eax)?;
        // The record's size.
        a.sub(rdi, r10)?;
        a.add(r9, rdi)?;
        Ok(())
    }

    /// Writes event `event` with values `args` (the strings among them as
    /// `strings` says) into the calling thread's ring (r11: its block).
    pub(super) fn emit(
        &mut self,
        event: u32,
        args: &[Expr],
        strings: &Strings,
    ) -> std::result::Result<(), IcedError> {
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
        let mut nested = self.a.create_label();
        let mut after = self.a.create_label();
        // A record begun under one being written (a signal handler's, on
        // this thread) is dropped: the ring's head is read, the record
        // written, the head stored, and a second writer in between would
        // write over the first's record.
        self.take_writing(nested)?;
        // With the TSC for a clock, the event's time is read before
        // anything else, or taken from the primitive before (see
        // `Gen::guarded`), and kept in the block's stamp word for the
        // record and for the primitive after.
        let tsc = self.table.clock_gettime == 0;
        if tsc {
            self.event_time()?;
        }
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
        if tsc {
            self.a.mov(rax, qword_ptr(r11 + t::STAMP as i32))?;
        } else {
            self.monotonic_timestamp()?;
        }
        self.a.mov(qword_ptr(r10 + r::R_TSC as i32), rax)?;
        self.a.mov(dword_ptr(r10 + r::R_EVENT as i32), event)?;
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
            self.copy_strings(nargs, &string_slots, strings, text_cap)?;
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
        self.a.mov(eax, weft_abi::syscall::SCHED_YIELD)?; // block mode: the ring stays full
        self.a.syscall()?;
        self.a.pop(r11)?;
        self.a.mov(rdx, self.table.ring_wait_until)?;
        self.a.mov(rcx, qword_ptr(rdx))?;
        self.a.set_label(&mut check)?;
        self.a.rdtsc()?;
        self.a.shl(rdx, 32)?;
        self.a.or(rax, rdx)?;
        if self.table.clock_gettime == 0 {
            // The record, and a timer after it, take the time the wait
            // ended, as without one: the wait is not the program's time.
            self.a.mov(qword_ptr(r11 + t::STAMP as i32), rax)?;
        }
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
        self.a.and(edx, r::SHAPE_VALUES as i32)?;
        self.a.shl(edx, 3)?;
        self.a.shr(ecx, r::SHAPE_TEXT_SHIFT)?;
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
        self.release_writing()?;
        self.a.jmp(after)?;
        self.a.set_label(&mut nested)?;
        self.a
            .add(qword_ptr(r11 + (t::RING + r::DROPPED) as i32), 1)?;
        self.a.set_label(&mut after)?;
        self.a.nop()?;
        Ok(())
    }
}

/// The count of a sized value `slot` of the record at r10 (its next
/// value), as a copy takes it: rsi := the value (the address; jumps to
/// `null` if 0), rcx := the count, none when 0 or less, `cap` at most,
/// and rax := rcx, flagged truncated when the count was more.
fn sized_count(
    a: &mut CodeAssembler,
    slot: i32,
    cap: u64,
    null: CodeLabel,
) -> std::result::Result<(), IcedError> {
    let mut some = a.create_label();
    let mut fits = a.create_label();
    let mut counted = a.create_label();
    a.mov(rsi, qword_ptr(r10 + slot))?;
    a.mov(rcx, qword_ptr(r10 + slot + 8))?;
    a.test(rsi, rsi)?;
    a.jz(null)?;
    a.test(rcx, rcx)?;
    a.jg(some)?;
    a.xor(ecx, ecx)?;
    a.set_label(&mut some)?;
    a.cmp(rcx, cap as i32)?;
    a.jbe(fits)?;
    a.mov(ecx, cap as u32)?;
    a.mov(rax, r::STR_TRUNCATED as i64)?;
    a.or(rax, rcx)?;
    a.jmp(counted)?;
    a.set_label(&mut fits)?;
    a.mov(rax, rcx)?;
    a.set_label(&mut counted)?;
    a.nop()
}

/// Copies rcx bytes from rsi to rdi, thirty-two then eight a step while
/// that many remain, then one at a time: no read past the buffer's end, and no string
/// instruction (whose direction would be the program's flag's). rsi and
/// rdi end past the bytes, rcx at 0; uses rdx.
fn copy_bytes(a: &mut CodeAssembler) -> std::result::Result<(), IcedError> {
    let mut blocks = a.create_label();
    let mut words = a.create_label();
    let mut bytes = a.create_label();
    let mut copied = a.create_label();
    // Four words a round while 32 bytes are left: a round's loads do not
    // wait for each other, and a `read` of 64 bytes is two rounds.
    a.set_label(&mut blocks)?;
    a.cmp(rcx, 32)?;
    a.jb(words)?;
    for k in 0..4 {
        a.mov(rdx, qword_ptr(rsi + 8 * k))?;
        a.mov(qword_ptr(rdi + 8 * k), rdx)?;
    }
    a.add(rsi, 32)?;
    a.add(rdi, 32)?;
    a.sub(rcx, 32)?;
    a.jmp(blocks)?;
    a.set_label(&mut words)?;
    a.cmp(rcx, 8)?;
    a.jb(bytes)?;
    a.mov(rdx, qword_ptr(rsi))?;
    a.mov(qword_ptr(rdi), rdx)?;
    a.add(rsi, 8)?;
    a.add(rdi, 8)?;
    a.sub(rcx, 8)?;
    a.jmp(words)?;
    a.set_label(&mut bytes)?;
    a.test(rcx, rcx)?;
    a.jz(copied)?;
    a.mov(dl, byte_ptr(rsi))?;
    a.mov(byte_ptr(rdi), dl)?;
    a.add(rsi, 1)?;
    a.add(rdi, 1)?;
    a.sub(rcx, 1)?;
    a.jmp(bytes)?;
    a.set_label(&mut copied)?;
    a.nop()
}

/// Moves rdi past the padding after the bytes value `slot` of the record
/// at r10 counts (its word, flags aside), to the text's alignment. Uses
/// rcx.
fn pad_text(a: &mut CodeAssembler, slot: i32) -> std::result::Result<(), IcedError> {
    a.mov(rcx, r::STR_TRUNCATED as i64 - 1)?;
    a.and(rcx, qword_ptr(r10 + slot))?;
    a.neg(rcx)?;
    a.and(rcx, r::TEXT_ALIGN as i32 - 1)?;
    a.add(rdi, rcx)
}

/// Copies the bytes value `slot` of the record at r10 points to, as many as
/// the next value says (none for 0 or less, `cap` at most, flagged
/// truncated beyond), to rdi; replaces the pointer by the count and flags
/// (`STR_NULL` for a null pointer) and moves rdi past the bytes, aligned.
/// Uses rax, rcx, rdx and rsi (saved by the mini-trampoline).
fn copy_sized(a: &mut CodeAssembler, slot: i32, cap: u64) -> std::result::Result<(), IcedError> {
    let mut null = a.create_label();
    let mut end = a.create_label();
    sized_count(a, slot, cap, null)?;
    a.mov(qword_ptr(r10 + slot), rax)?;
    copy_bytes(a)?;
    pad_text(a, slot)?;
    a.jmp(end)?;
    a.set_label(&mut null)?;
    a.mov(rax, r::STR_NULL as i64)?;
    a.mov(qword_ptr(r10 + slot), rax)?;
    a.set_label(&mut end)?;
    a.nop()
}

/// Copies the bytes an array of `struct iovec` holds, as [`copy_sized`]
/// copies one buffer's: value `slot` of the record at r10 is the array's
/// address, the next value how many bytes to take (from the first entry
/// on, each entry's length at most), the one after it how many entries
/// the array has. Replaces the address by the count copied and flags.
/// Uses rax, rcx, rdx and rsi, and r8 and r9 saved on the stack.
fn copy_gathered(a: &mut CodeAssembler, slot: i32, cap: u64) -> std::result::Result<(), IcedError> {
    let mut entry = a.create_label();
    let mut within = a.create_label();
    let mut done = a.create_label();
    let mut null = a.create_label();
    let mut end = a.create_label();
    sized_count(a, slot, cap, null)?;
    a.mov(qword_ptr(r10 + slot), rax)?;
    // r8: the next entry; r9: the entries left; rax: the bytes left.
    a.push(r8)?;
    a.push(r9)?;
    a.mov(r8, rsi)?;
    a.mov(r9, qword_ptr(r10 + slot + 16))?;
    a.mov(rax, rcx)?;
    a.set_label(&mut entry)?;
    a.test(rax, rax)?;
    a.jz(done)?;
    a.test(r9, r9)?;
    a.jle(done)?;
    a.mov(rsi, qword_ptr(r8))?;
    a.mov(rcx, qword_ptr(r8 + 8))?;
    a.add(r8, 16)?;
    a.sub(r9, 1)?;
    a.cmp(rcx, rax)?;
    a.jbe(within)?;
    a.mov(rcx, rax)?;
    a.set_label(&mut within)?;
    a.sub(rax, rcx)?;
    copy_bytes(a)?;
    a.jmp(entry)?;
    // Entries that held fewer bytes than the count said: the word says
    // how many were copied.
    a.set_label(&mut done)?;
    a.sub(qword_ptr(r10 + slot), rax)?;
    a.pop(r9)?;
    a.pop(r8)?;
    pad_text(a, slot)?;
    a.jmp(end)?;
    a.set_label(&mut null)?;
    a.mov(rax, r::STR_NULL as i64)?;
    a.mov(qword_ptr(r10 + slot), rax)?;
    a.set_label(&mut end)?;
    a.nop()
}

/// Generates, at address `at`, a C-callable function `void *f(void)` that
/// returns the calling thread's event ring (its block's ring header),
/// claiming a slot on first use, or null when every slot is taken (counted
/// in [`ThreadTable::no_slot`]). Rich events (`include/weft/event.h`) call
/// it and then write their record themselves. It clobbers only registers
/// the System V ABI lets a callee clobber.
pub fn ring_function(at: u64, table: ThreadTable) -> Result<Vec<u8>> {
    let enc = Error::Encode;
    let mut g = Gen {
        a: CodeAssembler::new(64).map_err(enc)?,
        literals: vec![],
        table,
        stamp_ready: false,
        has_slot: true,
        made_calls: Vec::new(),
        writer_left: None,
        deferred: None,
        close_pending: false,
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
