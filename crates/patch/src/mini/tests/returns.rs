//! Return hooks run in this process: a function that tail-calls another
//! gets its exits when the callee returns to the caller, a call left
//! unhooked gets them at its tail call, and the unwind hooks put return
//! addresses back, pop the frames left and arm the rest again.

use super::*;
use crate::mini::mini_trampoline_with;
use crate::mini::returns::{self as rh, Extra, UnwindHook};
use crate::region::returns as r;
use crate::Snippet;
use iced_x86::code_asm::*;

/// A process-like setup: return stacks, and in one executable mapping a
/// function's counting exit mini-trampolines (for a call that returned,
/// which pops it, and for one left), its stub, its guarded exit and entry
/// hook, and `f`, which tail-calls `g`.
struct Setup {
    mem: Memory,
    stacks: Vec<u64>,
    exec: Exec,
    thunk: u64,
    stub: u64,
    f: u64,
}

const G_RETURNS: u64 = 42;

impl Setup {
    fn new() -> Setup {
        let mem = Memory::new(16);
        let stacks = vec![0u64; (r::area_size(16) / 8) as usize];
        let table = mem.table();
        mem.write(table.return_stacks, stacks.as_ptr() as u64);
        let exec = Exec::new(1 << 16);
        let base = exec.addr();
        let mut code = vec![0xccu8; 1 << 16];
        let mut put = |off: u64, bytes: Vec<u8>| {
            code[off as usize..off as usize + bytes.len()].copy_from_slice(&bytes);
            base + off
        };
        let count = [Guarded {
            predicate: None,
            primitive: Primitive::AddCounter(mem.counter(0), Expr::Const(1)),
        }];
        let left = put(0, mini_trampoline(base, table, &count).unwrap());
        let returned = put(
            0x400,
            mini_trampoline_with(base + 0x400, table, &count, Extra::PopReturn).unwrap(),
        );
        let word = put(
            0x1000,
            rh::return_stub(base + 0x1000, returned, left).unwrap(),
        );
        let stub = word + rh::STUB_CODE;
        let thunk = word + rh::STUB_LEFT_THUNK;
        let guarded = put(
            0x1400,
            mini_trampoline_with(base + 0x1400, table, &count, Extra::GuardedExit { stub })
                .unwrap(),
        );
        let follow = Extra::Follow {
            stub,
            left: thunk,
            arm: true,
        };
        let hook = put(
            0x1800,
            mini_trampoline_with(base + 0x1800, table, &[], follow).unwrap(),
        );
        let g = {
            let mut a = CodeAssembler::new(64).unwrap();
            a.mov(rax, G_RETURNS).unwrap();
            a.ret().unwrap();
            put(0x2000, a.assemble(base + 0x2000).unwrap())
        };
        // f: the entry's trampoline calls the hook, the tail call's calls
        // the guarded exit, then f jumps to g.
        let mut f = Snippet::call_mini_fixed_frame(hook).instructions;
        f.extend(Snippet::call_mini_fixed_frame(guarded).instructions);
        f.push(iced_x86::Instruction::with_branch(iced_x86::Code::Jmp_rel32_64, g).unwrap());
        let f_at = base + 0x2100;
        let bytes = iced_x86::BlockEncoder::encode(
            64,
            iced_x86::InstructionBlock::new(&f, f_at),
            iced_x86::BlockEncoderOptions::NONE,
        )
        .unwrap()
        .code_buffer;
        let f = put(0x2100, bytes);
        exec.load(&code);
        Setup {
            mem,
            stacks,
            exec,
            thunk,
            stub,
            f,
        }
    }

    /// Calls `code` as a C function of no argument returning a u64.
    fn call(&self, code: u64) -> u64 {
        assert!(code >= self.exec.addr() && code < self.exec.addr() + (1 << 16));
        // SAFETY: `code` is f, a hook or a function built above, each
        // keeping the callee-saved registers and the stack balanced.
        let f: extern "C" fn() -> u64 = unsafe { std::mem::transmute(code) };
        f()
    }

    fn exits(&self) -> u64 {
        self.mem.read(self.mem.counter(0))
    }

    /// This thread's return stack.
    fn stack(&self) -> u64 {
        let slot = self.mem.read(self.mem.block_of_this_thread() + t::SLOT);
        self.stacks.as_ptr() as u64 + slot * r::BYTES_PER_THREAD
    }

    fn set_entry(&self, i: u64, slot: u64, ret: u64) {
        let e = self.stack() + r::ENTRIES + i * r::ENTRY_SIZE;
        self.mem.write(e + r::E_SLOT, slot);
        self.mem.write(e + r::E_RET, ret);
        self.mem.write(e + r::E_STUB, self.stub);
        self.mem.write(e + r::E_EXIT, self.thunk);
    }

    /// An unwind hook that then returns to its caller.
    fn unwind(&self, kind: UnwindHook, at: u64) -> u64 {
        let ret = self.exec.addr() + at + 0x300;
        let mut code = rh::unwind_hook(self.exec.addr() + at, self.mem.table(), kind, ret).unwrap();
        code.resize(0x300, 0xcc);
        code.push(0xc3);
        // SAFETY: a region of the mapping nothing else uses.
        unsafe {
            std::ptr::copy_nonoverlapping(
                code.as_ptr(),
                (self.exec.addr() + at) as *mut u8,
                code.len(),
            )
        };
        self.exec.addr() + at
    }
}

#[test]
fn a_tail_call_returns_through_the_stub_and_runs_the_exits_once() {
    let s = Setup::new();
    assert_eq!(s.call(s.f), G_RETURNS);
    assert_eq!(s.exits(), 1, "the exits ran when g returned");
    assert_eq!(s.mem.read(s.stack() + r::DEPTH), 0, "the entry was popped");
    for _ in 0..99 {
        assert_eq!(s.call(s.f), G_RETURNS);
    }
    assert_eq!(s.exits(), 100);
}

#[test]
fn a_call_the_full_stack_leaves_unhooked_runs_its_exits_at_the_tail_call() {
    let s = Setup::new();
    assert_eq!(s.call(s.f), G_RETURNS);
    s.mem.write(s.stack() + r::DEPTH, r::CAPACITY);
    for i in 0..r::CAPACITY {
        s.set_entry(i, u64::MAX, 0);
    }
    assert_eq!(s.call(s.f), G_RETURNS);
    assert_eq!(s.exits(), 2);
    assert_eq!(s.mem.read(s.stack() + r::OVERFLOW), 1);
    assert_eq!(s.mem.read(s.stack() + r::DEPTH), r::CAPACITY);
}

#[test]
fn unwind_hooks_restore_pop_and_rearm() {
    let s = Setup::new();
    assert_eq!(s.call(s.f), G_RETURNS); // claims this thread's slot
                                        // An entry of a live frame (a slot on this stack, above the hooks'
                                        // stack pointer) armed, and above it one of a frame left by an
                                        // exception (a slot below: on the heap).
    let live_slot = [s.stub];
    let live = live_slot.as_ptr() as u64;
    let left_slot = Box::new(s.stub);
    let left = &*left_slot as *const u64 as u64;
    s.set_entry(0, live, 0x1234);
    s.set_entry(1, left, 0x5678);
    s.mem.write(s.stack() + r::DEPTH, 2);
    let disarm = s.unwind(UnwindHook::Disarm, 0x3000);
    s.call(disarm);
    assert_eq!(s.mem.read(live), 0x1234, "the original address is back");
    assert_eq!(s.mem.read(left), 0x5678);
    assert_eq!(s.mem.read(s.stack() + r::DISARMED), 1);
    assert_eq!(s.exits(), 1, "no frame left yet");
    let rearm = s.unwind(UnwindHook::Rearm, 0x4000);
    s.call(rearm);
    assert_eq!(
        s.mem.read(s.stack() + r::DEPTH),
        1,
        "the frame below popped"
    );
    assert_eq!(s.exits(), 2, "its exits ran");
    assert_eq!(s.mem.read(live), s.stub, "the live frame is armed again");
    assert_eq!(s.mem.read(s.stack() + r::DISARMED), 0);
    let forced = s.unwind(UnwindHook::ForcedUnwind, 0x5000);
    s.call(forced);
    assert_eq!(s.mem.read(s.stack() + r::DEPTH), 0);
    assert_eq!(s.exits(), 3);
    assert_eq!(s.mem.read(live), 0x1234);
}
