//! Mini-trampolines: Paradyn's primitives and predicates as machine code.
//!
//! A base trampoline calls a point's mini-trampoline (after stepping below
//! the red zone, and saving the flags only if they are live there). The
//! mini-trampoline saves every caller-saved register, runs its guarded
//! primitives in order and returns. Its arguments are read from those saved
//! registers: `arg1` to `arg6` at an entry, `ret` at an exit. Predicates compile to
//! straight-line integer code over constants, arguments, the return
//! value, process-wide counters and per-thread counters, with
//! `+ - * / < > <= >= == != and or`. A division by zero yields 0.
//!
//! Per-thread state (timers, per-thread counters, the event ring) lives in
//! the thread table (see `region::threads`): the mini-trampoline finds its
//! thread's slot from the thread pointer `fs:0`, without a lock.
//!
//! One file per role: `expr` compiles expressions and predicates,
//! `threads` the thread's slot claim and its wall timers, `vclock` its
//! CPU timers (read from the per-thread CPU clock), `ring_writer` the
//! producer of ring records (emit, block/flight/discard, and the ring
//! function of rich events), `template` code assembled once per shape;
//! this file holds the frame and the driver.

mod expr;
pub(crate) mod feed;
mod frames;
mod open_calls;
pub mod returns;
mod ring_writer;
pub mod template;
#[cfg(test)]
mod tests;
mod threads;
mod vclock;

pub use crate::region::threads::RETIRED;
pub use ring_writer::ring_function;

use crate::region::threads as t;
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_plan::{Expr, Guarded, Primitive};

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
    /// Absolute address of the words naming the range whose system calls
    /// run under Syscall User Dispatch ([`crate::region::sync::DISPATCH_START`]
    /// and `DISPATCH_LEN`) in this cluster's view.
    pub dispatch: u64,
    /// Event timestamps: 0 for the TSC, else the address of the process's
    /// vDSO `clock_gettime`, called for CLOCK_MONOTONIC in nanoseconds.
    pub clock_gettime: u64,
    /// Where the C library keeps the thread's kernel id, as an offset from
    /// the thread pointer (glibc's `struct pthread`), or 0 if unknown. With
    /// it, a thread that finds its thread pointer's slot recorded under
    /// another id (a finished thread whose thread control block it reuses,
    /// or the parent of a forked child) passes that slot over and claims its own.
    pub tid_offset: u32,
    /// For code placed before the program set up its thread pointer (a
    /// `tid_offset` of 0 then): where it finds what weft learns later.
    pub startup: Option<Startup>,
    /// Absolute address of the word holding the address of the process's
    /// return stacks ([`crate::region::sync::RETURN_STACKS`]) in this
    /// cluster's view.
    pub return_stacks: u64,
    /// Where the process sees the per-thread CPU clock, if it maps one
    /// (CPU timers need it).
    pub vclock: Option<weft_abi::vclock::View>,
    /// The lanes of the process-wide counters: adds go to the running
    /// CPU's lane, reads sum the lanes, a set writes the first and clears
    /// the others.
    pub lanes: crate::lanes::Lanes,
}

/// What code placed at a program's first instruction, before the program
/// has a thread pointer of its own, needs (see
/// [`crate::region::sync::STARTUP_TCB`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Startup {
    /// Absolute address of [`crate::region::sync::TID_OFFSET`] in this
    /// cluster's view: the thread-id offset, once weft knows it.
    pub tid_offset_word: u64,
    /// Absolute address of [`crate::region::sync::STARTUP_SLOT`] in this
    /// cluster's view.
    pub slot_word: u64,
    /// The start-up thread control block's address (`fs` base, and the
    /// key of the slot claimed under it).
    pub tcb: u64,
}

/// Saved registers, pushed in this order after the flags.
const SAVED: usize = 9;
/// Offsets from rsp (after the saves) of saved rdi, rsi, rdx, rcx, r8, r9 = args 1-6.
const ARG_OFFSET: [i32; 6] = [32, 40, 48, 56, 24, 16];
/// Offset of saved rax (the return value at an exit).
const RAX_OFFSET: i32 = 64;
/// Offset of saved r10 (a system call's fourth argument).
const R10_OFFSET: i32 = 8;
/// Offsets from rsp (after the saves) of the saved argument registers of
/// a system call: `rdi`, `rsi`, `rdx`, `r10`, `r8`, `r9`.
const SYSCALL_ARG_OFFSET: [i32; 6] = [
    ARG_OFFSET[0],
    ARG_OFFSET[1],
    ARG_OFFSET[2],
    R10_OFFSET,
    ARG_OFFSET[4],
    ARG_OFFSET[5],
];
/// Where a program that makes its point's call keeps the call's instant
/// and number across it (`Primitive::MakeCall`, `CallFunction`): the
/// slots of saved r11 and rcx, which a `syscall` clobbers (as a function
/// may: `CallFunction`, for which rcx is an argument, keeps no number).
const MADE_TIME: i32 = 0;
const MADE_NUMBER: i32 = 56;
/// With the fixed frame (red zone, flags, return address, nine saves), the
/// point's rsp is this far above the mini-trampoline's.
pub const FIXED_FRAME_RSP: i32 = 72 + 8 + 8 + 128;

struct Gen {
    a: CodeAssembler,
    literals: Vec<(CodeLabel, u64)>,
    /// Where the thread table and the ring-mode words are.
    table: ThreadTable,
    /// Whether the code compiled last left the thread's block's
    /// [`t::STAMP`] word holding the TSC it read, or 0, on every path: the
    /// next primitive may then take its time from there (see
    /// [`Gen::guarded`]).
    stamp_ready: bool,
    /// Whether r11 holds the thread's block (false in the code run when
    /// every slot is taken).
    has_slot: bool,
    /// A label at each `syscall` that makes the point's call.
    made_calls: Vec<CodeLabel>,
    /// The routine that tells whether the thread left a record it was
    /// writing, once a primitive calls it (see [`frames`]).
    writer_left: Option<CodeLabel>,
    /// The routine that lets a signal the delivery stub put off come
    /// ([`Gen::deferred_routine`]), once some code needs it.
    deferred: Option<CodeLabel>,
    /// Whether the program made a call it keeps open, to close at its end.
    close_pending: bool,
}

impl Gen {
    fn literal(&mut self, value: u64) -> CodeLabel {
        let l = self.a.create_label();
        self.literals.push((l, value));
        l
    }

    /// Compiles one primitive under its predicate, if any. A primitive
    /// that reads the TSC (an event's timestamp, a CPU timer's clock)
    /// leaves the value in the thread's [`t::STAMP`] word, and one that
    /// runs right after it reuses it instead of reading the TSC again
    /// (`rdtsc` costs 10 ns on this project's machines), unless a
    /// predicate may have skipped the first.
    fn guarded(&mut self, x: &Guarded) -> std::result::Result<(), IcedError> {
        let mut skip = self.a.create_label();
        let ready_before = self.stamp_ready;
        if let Some(p) = &x.predicate {
            self.branch_unless(p, skip)?;
        }
        self.primitive(&x.primitive)?;
        if x.predicate.is_some() {
            // Skipped, the primitive left the stamp word as it was: still
            // this instant's if it was before, and if the primitive keeps
            // it when it runs.
            self.stamp_ready &= ready_before;
        }
        self.a.set_label(&mut skip)?;
        self.a.nop()?; // a label needs an instruction of its own
        Ok(())
    }

    /// Compiles one primitive (r11: the thread's block, if it uses one).
    fn primitive(&mut self, p: &Primitive) -> std::result::Result<(), IcedError> {
        let stamps = matches!(
            p,
            Primitive::Emit(..)
                | Primitive::StartCpuTimer(_)
                | Primitive::StopCpuTimer(_)
                | Primitive::ResumeCpuTimer(_)
                | Primitive::PauseCpuTimer(_)
        );
        match p {
            Primitive::SetCounter(addr, e)
            | Primitive::AddCounter(addr, e)
            | Primitive::SubCounter(addr, e) => {
                self.expr(e, 0)?;
                let l = self.literal(*addr);
                self.a.mov(rcx, qword_ptr(l))?;
                let lanes = self.table.lanes;
                match p {
                    Primitive::SetCounter(..) => {
                        self.a.mov(qword_ptr(rcx), rax)?;
                        for lane in 1..lanes.count {
                            let at = (lane * lanes.stride) as i32;
                            self.a.mov(qword_ptr(rcx + at), 0)?;
                        }
                    }
                    _ => {
                        if lanes.spread() {
                            for i in lanes.offset_into(iced_x86::Register::RDX) {
                                self.a.add_instruction(i)?;
                            }
                            self.a.add(rcx, rdx)?;
                        }
                        match p {
                            Primitive::AddCounter(..) => self.a.lock().add(qword_ptr(rcx), rax)?,
                            _ => self.a.lock().sub(qword_ptr(rcx), rax)?,
                        }
                    }
                }
            }
            Primitive::AddThreadCounter(n, e) => {
                self.expr(e, 0)?;
                self.a.add(qword_ptr(r11 + t::counter(*n) as i32), rax)?;
            }
            Primitive::Emit(event, args, strings) => self.emit(*event, args, strings)?,
            Primitive::StartTimer(n) => self.start_timer(*n)?,
            Primitive::StopTimer(n) => self.stop_timer(*n)?,
            Primitive::StartCpuTimer(n) => self.start_cpu_timer(*n, true)?,
            Primitive::StopCpuTimer(n) => self.stop_cpu_timer(*n, true)?,
            Primitive::ResumeCpuTimer(n) => self.start_cpu_timer(*n, false)?,
            Primitive::PauseCpuTimer(n) => self.stop_cpu_timer(*n, false)?,
            Primitive::Feed(feed) => self.feed(feed)?,
            Primitive::EnableDispatch => self.enable_dispatch()?,
            Primitive::MarkReturned => {
                self.mark_returned()?;
                if self.has_slot {
                    self.a.lea(rbp, qword_ptr(r11 + t::RETURNED as i32))?;
                }
            }
            Primitive::MakeCall { left } => self.make_call(left.as_ref())?,
            Primitive::WriteLeftCalls { ending } => self.write_left_calls(*ending)?,
            Primitive::CallFunction { code } => self.call_function(*code)?,
            Primitive::ThroughHandler { site } => self.through_handler(*site)?,
        }
        self.stamp_ready = stamps && self.table.clock_gettime == 0;
        Ok(())
    }
}

impl Gen {
    /// The point's system call, from the saved registers (`rax` and the
    /// six argument registers, which the primitives before may have
    /// changed in their slots); its result goes into the saved `rax`.
    /// First keeps the call's number and instant in the slots of saved
    /// r11 and rcx (`MADE_NUMBER`, `MADE_TIME`); keeps r11, the thread's
    /// block, on the stack across the call, where the kernel's restart
    /// of an interrupted call finds it too (the restart runs the
    /// `syscall` instruction again, with the same stack).
    /// With `left`, the call is kept open across it (see [`open_calls`]).
    fn make_call(
        &mut self,
        left: Option<&weft_plan::LeftCall>,
    ) -> std::result::Result<(), IcedError> {
        if self.has_slot {
            self.event_time()?;
        } else {
            self.a.xor(eax, eax)?;
        }
        let a = &mut self.a;
        a.mov(qword_ptr(rsp + MADE_TIME), rax)?;
        a.mov(rax, qword_ptr(rsp + RAX_OFFSET))?;
        a.mov(qword_ptr(rsp + MADE_NUMBER), rax)?;
        if let Some(left) = left {
            self.open_call(left)?;
        }
        let a = &mut self.a;
        a.push(r11)?;
        call_registers_from_slots(a)?;
        let mut call = a.create_label();
        a.set_label(&mut call)?;
        a.syscall()?;
        self.made_calls.push(call);
        let a = &mut self.a;
        a.mov(qword_ptr(rsp + RAX_OFFSET + 8), rax)?;
        a.pop(r11)?;
        self.mark_returned()?;
        // The call is closed once the program has written its record (see
        // `open_calls`): a thread a signal handler takes out of the code
        // after the call leaves it open.
        self.close_pending |= left.is_some();
        Ok(())
    }

    /// Hands the point's call, at the `syscall` instruction at `site`, to
    /// the SIGSYS handler's direct entry (`crate::dispatch::direct`):
    /// the number and the six argument registers from their slots, rcx
    /// the address after the instruction, r11 the point's `rsp` (the
    /// fixed frame's); its result goes into the saved `rax`. Without a
    /// direct entry (0) the call is made here, unrecorded.
    fn through_handler(&mut self, site: u64) -> std::result::Result<(), IcedError> {
        use crate::region::sync;
        let direct = self
            .table
            .dispatch
            .wrapping_add(sync::DISPATCH_DIRECT - sync::DISPATCH_START);
        let word = self.literal(direct);
        let scratch = self.scratch();
        let a = &mut self.a;
        let mut none = a.create_label();
        let mut done = a.create_label();
        a.mov(rax, qword_ptr(word))?;
        a.push(qword_ptr(rax))?;
        call_registers_from_slots(a)?;
        a.cmp(qword_ptr(rsp), 0)?;
        a.je(none)?;
        a.mov(rcx, site.wrapping_add(2))?;
        a.lea(r11, qword_ptr(rsp + FIXED_FRAME_RSP + 8))?;
        a.call(qword_ptr(rsp))?;
        a.test(r11, r11)?;
        a.jnz(done)?;
        a.set_label(&mut none)?;
        // (Without a direct entry the call is made here; r11 then names no
        // block.)
        a.syscall()?;
        a.mov(r11, scratch)?;
        a.set_label(&mut done)?;
        a.lea(rsp, qword_ptr(rsp + 8))?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), rax)
    }

    /// A word the trampoline of a program that makes its point's call
    /// may clear as if it were a block's `t::RETURNED`, for a thread with
    /// no block: r11 is set to it less that offset.
    fn scratch(&self) -> u64 {
        self.table
            .no_slot
            .wrapping_add(crate::region::sync::RETURNED_SCRATCH)
            .wrapping_sub(crate::region::sync::NO_SLOT)
            .wrapping_sub(t::RETURNED)
    }

    /// Calls the point's function, its code relocated at `code`, with the
    /// argument registers from their slots, on a stack aligned to 16
    /// bytes; its result goes into the saved `rax`. First keeps the
    /// instant in the slot of saved r11 (`MADE_TIME`); keeps r11, the
    /// thread's block, on the stack across the call.
    fn call_function(&mut self, code: u64) -> std::result::Result<(), IcedError> {
        if self.has_slot {
            self.event_time()?;
        } else {
            self.a.xor(eax, eax)?;
        }
        let code = self.literal(code);
        let a = &mut self.a;
        a.mov(qword_ptr(rsp + MADE_TIME), rax)?;
        a.push(r11)?;
        a.mov(rax, rsp)?;
        a.and(rsp, -16)?;
        a.push(rax)?;
        a.push(rax)?; // the old rsp twice: the stack stays 16-byte aligned
        let slot = |off: i32| qword_ptr(rax + off + 8);
        for (reg, k) in [rdi, rsi, rdx, rcx, r8, r9].into_iter().zip(0..) {
            a.mov(reg, slot(ARG_OFFSET[k]))?;
        }
        a.mov(rax, slot(RAX_OFFSET))?;
        a.call(qword_ptr(code))?;
        a.mov(rsp, qword_ptr(rsp))?;
        a.mov(qword_ptr(rsp + RAX_OFFSET + 8), rax)?;
        a.pop(r11)?;
        self.mark_returned()
    }

    /// Right after the point's call returned (r11: the block, with a
    /// slot): sets the block's [`t::RETURNED`] word, which the point's
    /// trampoline clears as it goes back to the program's code, so that a
    /// signal's delivery stub can tell weft's code after the call from
    /// its code before one.
    fn mark_returned(&mut self) -> std::result::Result<(), IcedError> {
        if !self.has_slot {
            return Ok(());
        }
        self.a.mov(qword_ptr(r11 + t::RETURNED as i32), 1)
    }

    /// `prctl(PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON, start,
    /// len, NULL)` with the sync page's range, if it names one and the
    /// process is not settled (see `crate::dispatch`). Keeps r11, the
    /// thread's block.
    fn enable_dispatch(&mut self) -> std::result::Result<(), IcedError> {
        use crate::dispatch::{PR_SET_SYSCALL_USER_DISPATCH, PR_SYS_DISPATCH_ON};
        use crate::region::sync;
        let mut off = self.a.create_label();
        self.a.push(r11)?;
        self.a.mov(rax, self.table.dispatch)?;
        let settled = (sync::DISPATCH_SETTLED - sync::DISPATCH_START) as i32;
        self.a.cmp(qword_ptr(rax + settled), 0)?;
        self.a.jne(off)?;
        self.a.mov(rdx, qword_ptr(rax))?;
        self.a.mov(r10, qword_ptr(rax + 8))?;
        self.a.test(r10, r10)?;
        self.a.jz(off)?;
        self.a.mov(edi, PR_SET_SYSCALL_USER_DISPATCH)?;
        self.a.mov(esi, PR_SYS_DISPATCH_ON)?;
        self.a.xor(r8d, r8d)?;
        self.a.mov(eax, 157u32)?; // prctl
        self.a.syscall()?;
        self.a.set_label(&mut off)?;
        self.a.pop(r11)
    }
}

/// The point's system call number and arguments into `rax` and the
/// argument registers, from their slots, with one word pushed since the
/// saves.
fn call_registers_from_slots(a: &mut CodeAssembler) -> std::result::Result<(), IcedError> {
    let slot = |off: i32| qword_ptr(rsp + off + 8);
    a.mov(rax, slot(RAX_OFFSET))?;
    a.mov(rdi, slot(ARG_OFFSET[0]))?;
    a.mov(rsi, slot(ARG_OFFSET[1]))?;
    a.mov(rdx, slot(ARG_OFFSET[2]))?;
    a.mov(r10, slot(R10_OFFSET))?;
    a.mov(r8, slot(ARG_OFFSET[4]))?;
    a.mov(r9, slot(ARG_OFFSET[5]))
}

/// Generates the mini-trampoline for `actions` at address `at`.
pub fn mini_trampoline(at: u64, table: ThreadTable, actions: &[Guarded]) -> Result<Vec<u8>> {
    mini_trampoline_with(at, table, actions, returns::Extra::None)
}

/// Generates the mini-trampoline for `actions` at address `at`, doing
/// `extra` for return hooks too (see [`returns`]).
pub fn mini_trampoline_with(
    at: u64,
    table: ThreadTable,
    actions: &[Guarded],
    extra: returns::Extra,
) -> Result<Vec<u8>> {
    Ok(assemble_mini(at, table, actions, extra)?.bytes)
}

/// The point's `rsp` seen from the `syscall` that a mini-trampoline
/// called with the fixed frame makes (`Primitive::MakeCall`): the fixed
/// frame and the thread's block kept on the stack across the call.
pub const MADE_CALL_CFA: u64 = FIXED_FRAME_RSP as u64 + 8;

/// The point's `rsp` seen from a mini-trampoline's entry when it is
/// called with the fixed frame (red zone, flags, return address).
pub const FIXED_FRAME_ENTRY: u64 = FIXED_FRAME_RSP as u64 - 8 * SAVED as u64;

/// Each `syscall` instruction of the mini-trampoline `bytes` placed at
/// `at` (called with the fixed frame) where the code alone says how far
/// the point's `rsp` is: its address and that distance. Found by
/// following the code from its entry (`weft_code::FunctionCode`), so it
/// holds for the feed's own calls, whose frames its loops push and pop.
pub fn system_calls_in(at: u64, bytes: &[u8]) -> Vec<(u64, u64)> {
    let code = weft_code::FunctionCode::analyze(at, bytes, &weft_code::NoData);
    code.instructions()
        .iter()
        .filter(|i| i.mnemonic() == iced_x86::Mnemonic::Syscall)
        .filter_map(|i| {
            let height = code.rsp_height_before(i.ip())?;
            Some((i.ip(), FIXED_FRAME_ENTRY.checked_add_signed(-height)?))
        })
        .collect()
}

/// A mini-trampoline's code, and where in it the point's call is made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mini {
    pub bytes: Vec<u8>,
    /// Offsets from the first byte of each `syscall` that makes the
    /// point's call (`Primitive::MakeCall`; one with a thread slot, one
    /// without), where [`MADE_CALL_CFA`] says the point's `rsp` is.
    pub made_calls: Vec<u64>,
}

/// [`mini_trampoline_with`], saying where the point's call is made.
pub fn assemble_mini(
    at: u64,
    table: ThreadTable,
    actions: &[Guarded],
    extra: returns::Extra,
) -> Result<Mini> {
    let cpu_timer = |x: &Guarded| {
        matches!(
            x.primitive,
            Primitive::StartCpuTimer(_)
                | Primitive::StopCpuTimer(_)
                | Primitive::ResumeCpuTimer(_)
                | Primitive::PauseCpuTimer(_)
        )
    };
    if table.vclock.is_none() && actions.iter().any(cpu_timer) {
        return Err(Error::NoCpuClock);
    }
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
        let mut exit = g.a.create_label();
        let mut no_slot = g.a.create_label();
        for r in [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11] {
            g.a.push(r)?;
        }
        g.extra_prologue(extra, exit)?;
        let needs_thread = extra != returns::Extra::None
            || actions.iter().any(|x| {
                x.primitive.uses_thread_state()
                    || x.predicate.as_ref().is_some_and(Expr::uses_thread_state)
            });
        if needs_thread {
            g.thread_block(table, no_slot)?;
        }
        g.has_slot = needs_thread;
        for x in actions {
            g.guarded(x)?;
        }
        if std::mem::take(&mut g.close_pending) {
            g.close_call()?;
        }
        g.extra_epilogue(extra)?;
        // A program that makes its point's call, which a signal handler's
        // may run inside of, leaves no stamp behind: a program that a
        // handler interrupted between a stamp and its reuse then reads
        // the clock afresh (`event_time`) instead of taking the handler's
        // last instant for its own.
        let replaces = actions.iter().any(|x| {
            matches!(
                x.primitive,
                Primitive::MakeCall { .. }
                    | Primitive::CallFunction { .. }
                    | Primitive::ThroughHandler { .. }
            )
        });
        if replaces && needs_thread {
            g.a.mov(qword_ptr(r11 + t::STAMP as i32), 0)?;
        }
        // A program that makes its point's call returns with r11 at the
        // thread's block, or at a scratch word as if it were one, for its
        // trampoline to clear `t::RETURNED` there as it goes back to the
        // program (which may take r11 as the call left it: clobbered).
        let scratch = g.scratch();
        // A program that hands its call to the SIGSYS handler has r11 at
        // the block the call marked, or at the scratch word, already.
        let through_handler = actions
            .iter()
            .any(|x| matches!(x.primitive, Primitive::ThroughHandler { .. }));
        let makes_system_call = through_handler
            || actions
                .iter()
                .any(|x| matches!(x.primitive, Primitive::MakeCall { .. }));
        if needs_thread {
            // Every slot is taken: count what this thread could not do,
            // and still do what needs no slot.
            g.a.jmp(exit)?;
            g.a.set_label(&mut no_slot)?;
            g.a.mov(rax, table.no_slot)?;
            g.a.lock().add(qword_ptr(rax), 1)?;
            g.stamp_ready = false;
            g.has_slot = false;
            for x in actions.iter().filter(|x| {
                !x.primitive.uses_thread_state()
                    && !x.predicate.as_ref().is_some_and(Expr::uses_thread_state)
            }) {
                g.guarded(x)?;
            }
            g.extra_without_slot(extra)?;
        }
        if replaces && !through_handler {
            // A slot's path jumps past this, r11 at its block.
            g.a.mov(r11, scratch)?;
        }
        g.a.set_label(&mut exit)?;
        if replaces {
            g.a.lea(rsp, qword_ptr(rsp + 8))?;
        } else {
            g.a.pop(r11)?;
        }
        for r in [r10, r9, r8, rdi, rsi, rdx, rcx, rax] {
            g.a.pop(r)?;
        }
        if makes_system_call {
            // The first `ret` a thread runs after a system call misses
            // the return stack buffer the kernel left (about 20 ns after
            // a `read` here, 6 after a `getppid`: `bench/RESULTS.md`,
            // session 32), and the program's `ret` would be one more
            // than the original code runs. So it goes back by a jump,
            // through its return address, which stays intact below
            // `rsp`: the kernel puts a signal frame 128 bytes below
            // (the red zone). The call's entry left in the return stack
            // buffer is no worse than what the kernel left there.
            g.a.lea(rsp, qword_ptr(rsp + 8))?;
            g.a.jmp(qword_ptr(rsp - 8))?;
        } else {
            g.a.ret()?;
        }
        g.writer_left_routine()?;
        g.deferred_routine()?;
        for (mut l, v) in std::mem::take(&mut g.literals) {
            g.a.set_label(&mut l)?;
            g.a.dq(&[v])?;
        }
        Ok(())
    })()
    .map_err(enc)?;
    debug_assert_eq!(SAVED, 9);
    let done =
        g.a.assemble_options(
            at,
            iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )
        .map_err(enc)?;
    let made_calls = g
        .made_calls
        .iter()
        .map(|l| done.label_ip(l).map(|ip| ip - at))
        .collect::<std::result::Result<_, _>>()
        .map_err(enc)?;
    Ok(Mini {
        bytes: done.inner.code_buffer,
        made_calls,
    })
}
