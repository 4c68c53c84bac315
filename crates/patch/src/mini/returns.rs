//! Return hooks: the code that runs a function's exit probes when its
//! call returns to the caller, also when it left through a tail call (`jmp
//! g`, after which `g` returns to the caller in its place), and when the
//! frame is left by `longjmp`, an exception or the thread's end.
//!
//! The work is done by mini-trampolines with an [`Extra`] part, so that a
//! point looks its thread up once:
//!
//! * at the function's entry, [`Extra::Follow`] pushes an entry on the
//!   thread's return stack (see `region::returns`) after the entry
//!   probes, and for a function that tail-calls (*armed*) replaces the
//!   return address with the function's return stub ([`return_stub`]);
//! * whatever returns through an armed slot lands in the stub, which calls
//!   the function's exit mini-trampoline with [`Extra::PopReturn`]: the
//!   exit probes, then the pop that gives back the original address;
//! * the function's own `ret`s and tail calls run a mini-trampoline with
//!   [`Extra::GuardedExit`]: nothing when the slot holds the stub (the stub
//!   will), else the exit probes and the pop of the call's entry (a call
//!   whose function only returns by `ret`, or one left unhooked).
//!
//! [`unwind_hook`]s at the entries of the functions that leave frames keep
//! the stacks true: before an unwinder reads return addresses they are put
//! back (it could not find unwind information for the stub); when a
//! handler catches, the entries of the frames left are popped (their exits
//! run then) and the rest armed again; `longjmp` pops the entries below the
//! stack pointer it restores.

use super::{Gen, ThreadTable, FIXED_FRAME_RSP};
use crate::region::returns as r;
use crate::region::threads as t;
use crate::{Error, Result};
use iced_x86::code_asm::*;

/// What an [`unwind_hook`] does before the function it hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnwindHook {
    /// An unwinder is about to walk the stack (`_Unwind_RaiseException`,
    /// `_Unwind_Resume`, `_Unwind_Backtrace`, ...): the original return
    /// addresses go back into their slots.
    Disarm,
    /// A handler catches (`__cxa_begin_catch`, called in the catching
    /// frame): the entries of frames below it are popped, their exits run,
    /// and the others' slots get their stubs again.
    Rearm,
    /// The thread unwinds to its end (`_Unwind_ForcedUnwind`, for
    /// `pthread_exit` and cancellation): every entry is popped, its exits
    /// run, its slot restored.
    ForcedUnwind,
    /// `longjmp` (`siglongjmp`, `__longjmp_chk`): the entries below the
    /// stack pointer saved in the `jmp_buf` (glibc's mangled `JB_RSP`) are
    /// popped, their exits run.
    Longjmp,
}

/// What a mini-trampoline does after its primitives, for return hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extra {
    /// Nothing.
    None,
    /// At a function's entry (called with the fixed frame): push an entry
    /// for the call (its exits for a frame left without returning behind
    /// the thunk `left`) and, with `arm`, write `stub` into its return
    /// slot. If an unwinder disarmed the stack and no handler re-armed it,
    /// the frames at or below this call's slot are gone: they are popped
    /// (their exits run, late) and the others armed again first.
    Follow {
        /// The function's return stub.
        stub: u64,
        /// Its thunk to the exits of a frame left without returning.
        left: u64,
        /// Replace the return address (the function tail-calls).
        arm: bool,
    },
    /// At a function's `ret` or tail call (called with the fixed frame):
    /// when the return slot holds `stub`, nothing at all (not even the
    /// primitives); else, after them, pop the call's entry if it has one.
    GuardedExit {
        /// The function's return stub.
        stub: u64,
    },
    /// The exits of a return stub: after the primitives, pop the entry of
    /// the stub's slot and hand its return address back in rdi (0 if the
    /// entry is gone).
    PopReturn,
}

/// From a mini-trampoline called by a return stub (nine saves and the
/// return address, then the stub's rdi, rax and flags): the slot.
const STUB_SLOT: i32 = 72 + 8 + 24;
/// Where a mini-trampoline saved rdi (fifth of nine pushes).
const SAVED_RDI: i32 = 32;

/// glibc's `jmp_buf` slot of the stack pointer (`JB_RSP`).
const JB_RSP: i32 = 6 * 8;
/// Where glibc's pointer guard lies from the thread pointer
/// (`tcbhead_t.pointer_guard`), which mangles the `jmp_buf`'s pointers.
const POINTER_GUARD: u64 = 0x30;
/// The rotation of glibc's `PTR_MANGLE` on x86-64.
const MANGLE_ROTATION: u32 = 0x11;

impl Gen {
    fn with_table(table: ThreadTable) -> Result<Gen> {
        Ok(Gen {
            a: CodeAssembler::new(64).map_err(Error::Encode)?,
            literals: vec![],
            table,
            stamp_ready: false,
            has_slot: true,
            made_calls: Vec::new(),
            writer_left: None,
            deferred: None,
            close_pending: false,
        })
    }

    fn finish(mut self, at: u64) -> Result<Vec<u8>> {
        (|| -> std::result::Result<(), IcedError> {
            self.writer_left_routine()?;
            self.deferred_routine()?;
            for (mut l, v) in std::mem::take(&mut self.literals) {
                self.a.set_label(&mut l)?;
                self.a.dq(&[v])?;
            }
            Ok(())
        })()
        .map_err(Error::Encode)?;
        self.a.assemble(at).map_err(Error::Encode)
    }

    /// rdi := this thread's return stack (r11: its block); jumps to `none`
    /// while the process has no return stacks. Clobbers rax.
    fn return_stack(&mut self, none: CodeLabel) -> std::result::Result<(), IcedError> {
        let stacks = self.literal(self.table.return_stacks);
        let a = &mut self.a;
        a.mov(rdi, qword_ptr(stacks))?;
        a.mov(rdi, qword_ptr(rdi))?;
        a.test(rdi, rdi)?;
        a.jz(none)?;
        a.mov(rax, qword_ptr(r11 + t::SLOT as i32))?;
        a.shl(rax, r::SHIFT)?;
        a.add(rdi, rax)?;
        Ok(())
    }

    /// Pops, top first, the entries of the return stack at rbx whose slot
    /// lies at or below r12 (frames left without returning: a function
    /// called where a frame was has its return slot where that frame's
    /// was), each popped before its exit routine runs. Clobbers rax, rcx,
    /// rdx and the flags.
    fn pop_below(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut next = a.create_label();
        let mut done = a.create_label();
        a.set_label(&mut next)?;
        a.mov(rcx, qword_ptr(rbx + r::DEPTH as i32))?;
        a.test(rcx, rcx)?;
        a.jz(done)?;
        a.sub(rcx, 1)?;
        a.mov(rax, rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.lea(rax, qword_ptr(rbx + rax + r::ENTRIES as i32))?;
        a.cmp(qword_ptr(rax + r::E_SLOT as i32), r12)?;
        a.ja(done)?;
        a.mov(rdx, qword_ptr(rax + r::E_EXIT as i32))?;
        a.mov(qword_ptr(rbx + r::DEPTH as i32), rcx)?;
        a.call(rdx)?; // an exit routine keeps every register but the flags
        a.jmp(next)?;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// For every entry of the return stack at rbx whose slot still holds
    /// the stub (`disarm`) or the original address (re-arming), writes the
    /// other. Clobbers rax, rcx, rdx, rsi and the flags.
    fn rewrite_slots(&mut self, disarm: bool) -> std::result::Result<(), IcedError> {
        let (from, to) = if disarm {
            (r::E_STUB, r::E_RET)
        } else {
            (r::E_RET, r::E_STUB)
        };
        let a = &mut self.a;
        let mut next = a.create_label();
        let mut skip = a.create_label();
        let mut done = a.create_label();
        a.xor(ecx, ecx)?;
        a.set_label(&mut next)?;
        a.cmp(rcx, qword_ptr(rbx + r::DEPTH as i32))?;
        a.jae(done)?;
        a.mov(rax, rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.lea(rax, qword_ptr(rbx + rax + r::ENTRIES as i32))?;
        // An entry without a stub is only followed, never armed.
        a.cmp(qword_ptr(rax + r::E_STUB as i32), 0)?;
        a.je(skip)?;
        a.mov(rdx, qword_ptr(rax + r::E_SLOT as i32))?;
        a.mov(rsi, qword_ptr(rax + from as i32))?;
        a.cmp(qword_ptr(rdx), rsi)?;
        a.jne(skip)?;
        a.mov(rsi, qword_ptr(rax + to as i32))?;
        a.mov(qword_ptr(rdx), rsi)?;
        a.set_label(&mut skip)?;
        a.add(rcx, 1)?;
        a.jmp(next)?;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }
}

impl Gen {
    /// Before anything of a mini-trampoline (nine registers saved): with
    /// [`Extra::GuardedExit`], jump to `skip` when the return slot holds
    /// the stub; with [`Extra::PopReturn`], start the answer at 0.
    pub(super) fn extra_prologue(
        &mut self,
        extra: Extra,
        skip: CodeLabel,
    ) -> std::result::Result<(), IcedError> {
        match extra {
            Extra::GuardedExit { stub } => {
                self.a.mov(rax, stub)?;
                self.a.cmp(qword_ptr(rsp + FIXED_FRAME_RSP), rax)?;
                self.a.je(skip)?;
            }
            Extra::PopReturn => self.a.mov(qword_ptr(rsp + SAVED_RDI), 0)?,
            Extra::None | Extra::Follow { .. } => {}
        }
        Ok(())
    }

    /// After a mini-trampoline's primitives (r11: the thread's block).
    pub(super) fn extra_epilogue(&mut self, extra: Extra) -> std::result::Result<(), IcedError> {
        let mut done = self.a.create_label();
        match extra {
            Extra::None => return Ok(()),
            Extra::Follow { stub, left, arm } => {
                self.return_stack(done)?;
                self.follow(stub, left, arm)?;
            }
            Extra::GuardedExit { .. } => {
                self.return_stack(done)?;
                self.pop_entry(FIXED_FRAME_RSP, false)?;
            }
            Extra::PopReturn => {
                self.return_stack(done)?;
                self.pop_entry(STUB_SLOT, true)?;
            }
        }
        self.a.set_label(&mut done)?;
        self.a.nop()?;
        Ok(())
    }

    /// What `extra` does for a thread that found no free slot:
    /// a return stub's pop still finds the call's entry, on whichever
    /// thread's stack it is (a forked child's copy of its parent's, when
    /// the child could claim no slot of its own).
    pub(super) fn extra_without_slot(
        &mut self,
        extra: Extra,
    ) -> std::result::Result<(), IcedError> {
        if extra != Extra::PopReturn {
            return Ok(());
        }
        let stacks = self.literal(self.table.return_stacks);
        let slots = self.table.slots;
        let a = &mut self.a;
        let mut next_stack = a.create_label();
        let mut search = a.create_label();
        let mut done = a.create_label();
        a.mov(rsi, qword_ptr(stacks))?;
        a.mov(rsi, qword_ptr(rsi))?;
        a.test(rsi, rsi)?;
        a.jz(done)?;
        a.lea(rdx, qword_ptr(rsp + STUB_SLOT))?;
        a.mov(r8, slots)?;
        a.set_label(&mut next_stack)?;
        a.test(r8, r8)?;
        a.jz(done)?;
        a.sub(r8, 1)?;
        a.mov(rdi, r8)?;
        a.shl(rdi, r::SHIFT)?;
        a.add(rdi, rsi)?;
        a.mov(rcx, qword_ptr(rdi + r::DEPTH as i32))?;
        a.cmp(rcx, r::CAPACITY as i32)?;
        a.ja(next_stack)?;
        a.set_label(&mut search)?;
        a.test(rcx, rcx)?;
        a.jz(next_stack)?;
        a.sub(rcx, 1)?;
        a.mov(rax, rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.cmp(qword_ptr(rdi + rax + (r::ENTRIES + r::E_SLOT) as i32), rdx)?;
        a.jne(search)?;
        a.mov(rax, qword_ptr(rdi + rax + (r::ENTRIES + r::E_RET) as i32))?;
        a.mov(qword_ptr(rdi + r::DEPTH as i32), rcx)?;
        a.mov(qword_ptr(rsp + SAVED_RDI), rax)?;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// Pushes the entry of the call whose return slot is the point's (the
    /// fixed frame's), rdi: the thread's return stack. See [`Extra::Follow`].
    fn follow(&mut self, stub: u64, left: u64, arm: bool) -> std::result::Result<(), IcedError> {
        let mut armed = self.a.create_label();
        let mut full = self.a.create_label();
        let mut taken = self.a.create_label();
        let mut done = self.a.create_label();
        self.a.cmp(qword_ptr(rdi + r::DISARMED as i32), 0)?;
        self.a.je(armed)?;
        self.a.push(rbx)?;
        self.a.push(r12)?;
        self.a.mov(rbx, rdi)?;
        self.a.lea(r12, qword_ptr(rsp + FIXED_FRAME_RSP + 16))?;
        self.pop_below()?;
        self.rewrite_slots(false)?;
        self.a.mov(qword_ptr(rbx + r::DISARMED as i32), 0)?;
        self.a.mov(rdi, rbx)?;
        self.a.pop(r12)?;
        self.a.pop(rbx)?;
        self.a.set_label(&mut armed)?;
        let a = &mut self.a;
        a.mov(rax, qword_ptr(rdi + r::DEPTH as i32))?;
        a.cmp(rax, r::CAPACITY as i32)?;
        a.jae(full)?;
        // Reserve the entry before filling it: a signal handler that runs
        // in between uses the next one.
        a.mov(r9, rax)?;
        a.lea(rcx, qword_ptr(rax + 1))?;
        a.mov(qword_ptr(rdi + r::DEPTH as i32), rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.lea(rax, qword_ptr(rdi + rax + r::ENTRIES as i32))?;
        a.lea(rcx, qword_ptr(rsp + FIXED_FRAME_RSP))?;
        a.mov(qword_ptr(rax + r::E_SLOT as i32), rcx)?;
        a.mov(rdx, qword_ptr(rcx))?;
        a.mov(qword_ptr(rax + r::E_RET as i32), rdx)?;
        a.mov(rdx, stub)?;
        // Hooked already (a second hook at one entry): leave it.
        a.cmp(qword_ptr(rcx), rdx)?;
        a.je(taken)?;
        if !arm {
            // Followed only: no stub for unwinders to swap.
            a.xor(edx, edx)?;
        }
        a.mov(qword_ptr(rax + r::E_STUB as i32), rdx)?;
        a.mov(r8, left)?;
        a.mov(qword_ptr(rax + r::E_EXIT as i32), r8)?;
        if arm {
            a.mov(qword_ptr(rcx), rdx)?;
        }
        a.jmp(done)?;
        a.set_label(&mut taken)?;
        a.mov(qword_ptr(rdi + r::DEPTH as i32), r9)?;
        a.jmp(done)?;
        a.set_label(&mut full)?;
        a.add(qword_ptr(rdi + r::OVERFLOW as i32), 1)?;
        a.set_label(&mut done)?;
        a.nop()?;
        Ok(())
    }

    /// Finds the entry whose slot is at `rsp + slot` on the return stack at
    /// rdi, pops it and, above it, the entries of frames left without
    /// returning (their exits run); nothing if there is none. With
    /// `answer`, its return address goes into the saved rdi. Clobbers
    /// rax, rcx, rdx, rsi and the flags.
    fn pop_entry(&mut self, slot: i32, answer: bool) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut search = a.create_label();
        let mut stale = a.create_label();
        let mut last = a.create_label();
        let mut none = a.create_label();
        a.push(rbx)?;
        a.push(r12)?;
        a.mov(rbx, rdi)?;
        a.lea(r12, qword_ptr(rsp + slot + 16))?;
        a.mov(rcx, qword_ptr(rbx + r::DEPTH as i32))?;
        a.set_label(&mut search)?;
        a.test(rcx, rcx)?;
        a.jz(none)?;
        a.sub(rcx, 1)?;
        a.mov(rax, rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.cmp(qword_ptr(rbx + rax + (r::ENTRIES + r::E_SLOT) as i32), r12)?;
        a.jne(search)?;
        // rcx: the entry. Those above it belong to frames left without
        // returning: pop each, then run its exits.
        a.set_label(&mut stale)?;
        a.mov(rdx, qword_ptr(rbx + r::DEPTH as i32))?;
        a.sub(rdx, 1)?;
        a.cmp(rdx, rcx)?;
        a.je(last)?;
        a.mov(rax, rdx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.mov(rsi, qword_ptr(rbx + rax + (r::ENTRIES + r::E_EXIT) as i32))?;
        a.mov(qword_ptr(rbx + r::DEPTH as i32), rdx)?;
        a.call(rsi)?; // an exit routine keeps every register but the flags
        a.jmp(stale)?;
        a.set_label(&mut last)?;
        a.mov(rax, rcx)?;
        a.shl(rax, r::ENTRY_SHIFT)?;
        a.mov(rax, qword_ptr(rbx + rax + (r::ENTRIES + r::E_RET) as i32))?;
        a.mov(qword_ptr(rbx + r::DEPTH as i32), rcx)?;
        if answer {
            a.mov(qword_ptr(rsp + SAVED_RDI + 16), rax)?;
        }
        a.set_label(&mut none)?;
        a.pop(r12)?;
        a.pop(rbx)?;
        Ok(())
    }
}

const SAVED: [AsmRegister64; 9] = [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11];

/// Offset in a return stub's bytes of the thunk that jumps to the
/// function's exit routine through the word at offset 0 (its exits for a
/// call that returned), which weft rewrites when the function's exit
/// probes change.
pub const STUB_RETURN_THUNK: u64 = 16;
/// Offset of the thunk that jumps through the word at offset 8 to the
/// routine of the exits for a call left without returning (by `longjmp`,
/// an exception, a thread's end): the exits but plain exit counts, which
/// count returns. Return stack entries name this thunk.
pub const STUB_LEFT_THUNK: u64 = 24;
/// Offset of the code a hooked return lands in.
pub const STUB_CODE: u64 = 32;

/// A function's return stub at `at`: the words with the addresses of its
/// exit mini-trampolines (`returned`, with [`Extra::PopReturn`], and
/// `left`), their thunks at `STUB_RETURN_THUNK` and `STUB_LEFT_THUNK`,
/// then, at `at + STUB_CODE`, the code a hooked return lands in. It steps
/// back onto the return slot, runs the exits with the return registers
/// intact, which pop the entry and give back the original return address,
/// writes it into the slot and returns there, every register as the
/// function left them (the flags are dead at a return). A return whose entry is gone (it cannot happen
/// while the stacks are kept true) stops at `ud2`.
pub fn return_stub(at: u64, returned: u64, left: u64) -> Result<Vec<u8>> {
    let mut a = CodeAssembler::new(64).map_err(Error::Encode)?;
    (|| -> std::result::Result<(), IcedError> {
        let mut words = a.create_label();
        let mut left_word = a.create_label();
        let mut thunk = a.create_label();
        let mut lost = a.create_label();
        a.set_label(&mut words)?;
        a.dq(&[returned])?;
        a.set_label(&mut left_word)?;
        a.dq(&[left])?;
        a.set_label(&mut thunk)?;
        a.jmp(qword_ptr(words))?;
        a.int3()?;
        a.int3()?;
        a.jmp(qword_ptr(left_word))?;
        a.int3()?;
        a.int3()?;
        // Back onto the return slot, and a word where the flags would be:
        // no caller expects flags kept across a call.
        a.lea(rsp, qword_ptr(rsp - 16))?;
        a.push(rax)?;
        a.push(rdi)?;
        a.call(thunk)?;
        a.test(rdi, rdi)?;
        a.jz(lost)?;
        a.mov(qword_ptr(rsp + 24), rdi)?;
        a.pop(rdi)?;
        a.pop(rax)?;
        a.lea(rsp, qword_ptr(rsp + 8))?;
        a.ret()?;
        a.set_label(&mut lost)?;
        a.ud2()?;
        Ok(())
    })()
    .map_err(Error::Encode)?;
    let bytes = a.assemble(at).map_err(Error::Encode)?;
    for thunk in [STUB_RETURN_THUNK, STUB_LEFT_THUNK] {
        let at = thunk as usize;
        debug_assert_eq!(&bytes[at..at + 2], &[0xff, 0x25], "jmp [rip+disp32]");
    }
    debug_assert_eq!(bytes[STUB_CODE as usize], 0x48, "lea rsp at STUB_CODE");
    Ok(bytes)
}

/// The hook at the entry of an unwinding function (see [`UnwindHook`]),
/// then a jump to `next` (the function's own trampoline). Keeps every
/// register and the flags.
pub fn unwind_hook(at: u64, table: ThreadTable, kind: UnwindHook, next: u64) -> Result<Vec<u8>> {
    // Saved: the flags, nine registers, rbx and r12.
    const SAVES: i32 = 12 * 8;
    const SAVED_RDI: i32 = 6 * 8;
    let mut g = Gen::with_table(table)?;
    (|| -> std::result::Result<(), IcedError> {
        let mut done = g.a.create_label();
        g.a.pushfq()?;
        for reg in SAVED.iter().chain(&[rbx, r12]) {
            g.a.push(*reg)?;
        }
        g.thread_block(table, done)?;
        g.return_stack(done)?;
        g.a.mov(rbx, rdi)?;
        match kind {
            UnwindHook::Disarm => {
                g.rewrite_slots(true)?;
                g.a.mov(qword_ptr(rbx + r::DISARMED as i32), 1)?;
            }
            UnwindHook::Rearm => {
                g.a.lea(r12, qword_ptr(rsp + SAVES))?;
                g.pop_below()?;
                g.rewrite_slots(false)?;
                g.a.mov(qword_ptr(rbx + r::DISARMED as i32), 0)?;
            }
            UnwindHook::ForcedUnwind => {
                g.rewrite_slots(true)?;
                g.a.mov(r12, u64::MAX)?;
                g.pop_below()?;
                g.a.mov(qword_ptr(rbx + r::DISARMED as i32), 0)?;
            }
            UnwindHook::Longjmp => {
                g.a.mov(rax, qword_ptr(rsp + SAVED_RDI))?;
                g.a.mov(r12, qword_ptr(rax + JB_RSP))?;
                g.a.ror(r12, MANGLE_ROTATION)?;
                g.a.xor(r12, qword_ptr(POINTER_GUARD).fs())?;
                g.pop_below()?;
            }
        }
        g.a.set_label(&mut done)?;
        for reg in SAVED.iter().chain(&[rbx, r12]).rev() {
            g.a.pop(*reg)?;
        }
        g.a.popfq()?;
        g.a.jmp(next)?;
        Ok(())
    })()
    .map_err(Error::Encode)?;
    g.finish(at)
}
