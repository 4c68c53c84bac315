//! A program that makes its point's system call (`Primitive::MakeCall`).

use super::*;
use crate::mini::returns::Extra;

fn always(primitive: Primitive) -> Guarded {
    Guarded {
        predicate: None,
        primitive,
    }
}

/// Counter `k` := `e`.
fn set(mem: &Memory, k: usize, e: Expr) -> Guarded {
    always(Primitive::SetCounter(mem.counter(k), e))
}

/// Loads `mini` at `exec`'s address + 256, and before it a caller that
/// puts `nr` in `rax` and calls it, as a trampoline does at a `syscall`.
fn with_caller(exec: &Exec, nr: u32, mini: &[u8]) {
    let mut a = CodeAssembler::new(64).unwrap();
    a.mov(eax, nr).unwrap();
    a.call(exec.addr() + 256).unwrap();
    a.ret().unwrap();
    load_before(exec, a, mini);
}

/// Loads the caller `a` assembled at `exec`'s address, and `mini` 256
/// bytes after it.
fn load_before(exec: &Exec, mut a: CodeAssembler, mini: &[u8]) {
    let mut code = a.assemble(exec.addr()).unwrap();
    code.resize(256, 0xcc);
    code.extend_from_slice(mini);
    exec.load(&code);
}

/// `uname(buf)` made by the program: the kernel fills the buffer its
/// first argument names, the result and the number read back after it
/// are the call's, its instant lies between the TSC read before and
/// after it, and every primitive before and after runs.
#[test]
fn a_program_makes_its_points_call_between_its_two_halves() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let set = |k: usize, e: Expr| set(&mem, k, e);
    let program = vec![
        set(0, Expr::Reg(0)),
        always(Primitive::AddThreadCounter(0, Expr::Const(1))),
        always(Primitive::MakeCall { left: None }),
        set(1, Expr::Ret),
        set(2, Expr::MadeCallNumber),
        set(3, Expr::MadeCallTime),
        set(4, Expr::Arg(1)),
    ];
    let mini = mini_trampoline(exec.addr() + 256, mem.table(), &program).unwrap();
    const UNAME: u32 = 63;
    with_caller(&exec, UNAME, &mini);
    let mut buf = [0u8; 390];
    // SAFETY: rdtsc has no preconditions on x86-64.
    let before = unsafe { core::arch::x86_64::_rdtsc() };
    exec.call([buf.as_mut_ptr() as i64, 0, 0, 0, 0, 0]);
    // SAFETY: as above.
    let after = unsafe { core::arch::x86_64::_rdtsc() };
    assert_eq!(&buf[..5], b"Linux", "the kernel filled the buffer");
    assert_eq!(mem.read(mem.counter(0)), u64::from(UNAME), "rax before");
    assert_eq!(mem.read(mem.counter(1)), 0, "uname's result");
    assert_eq!(mem.read(mem.counter(2)), u64::from(UNAME));
    let at = mem.read(mem.counter(3));
    assert!(before < at && at < after, "{before} < {at} < {after}");
    assert_eq!(
        mem.read(mem.counter(4)),
        buf.as_ptr() as u64,
        "arguments kept"
    );
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(block + t::counter(0)), 1);
    // Where the call is made, for the unwinder: once with a slot, once
    // without.
    let made = assemble_mini(exec.addr() + 256, mem.table(), &program, Extra::None).unwrap();
    assert_eq!(made.bytes, mini);
    assert_eq!(made.made_calls.len(), 2);
    for &off in &made.made_calls {
        assert_eq!(mini[off as usize..off as usize + 2], [0x0f, 0x05]);
    }
    // Following the code from its entry says the same of the point's `rsp`
    // (and finds the thread's `gettid` as it claims a slot, with the
    // registers' saves alone above it).
    let at = exec.addr() + 256;
    let followed = system_calls_in(at, &mini);
    for off in &made.made_calls {
        assert!(
            followed.contains(&(at + off, MADE_CALL_CFA)),
            "{followed:?}"
        );
    }
    assert_eq!(followed.len(), 3, "{followed:?}");
    assert!(followed.contains(&(followed[0].0, FIXED_FRAME_RSP as u64)));
    // It goes back by a jump through its return address, not a `ret`
    // (the first after a system call misses); a program that makes no
    // call returns.
    let back_by_jump = |bytes: &[u8]| {
        let code = weft_code::FunctionCode::analyze(at, bytes, &weft_code::NoData);
        let text: Vec<String> = code.instructions().iter().map(|i| i.to_string()).collect();
        text.iter().any(|i| i == "jmp qword ptr [rsp-8]")
    };
    assert!(back_by_jump(&mini));
    let counting = [always(Primitive::AddThreadCounter(0, Expr::Const(1)))];
    assert!(!back_by_jump(
        &mini_trampoline(at, mem.table(), &counting).unwrap()
    ));
}

/// A feed's own calls (its waits for other threads' calls, its exit when
/// the rerun diverged, the raise of a recorded signal delivery) are found
/// with the point's `rsp` above each: within the fixed frame and what the
/// feed pushes (at most a raise's six registers, `siginfo_t` and signal set), never
/// below it. After the instruction, with the address the program goes on
/// at known, a delivery recorded there is raised at the return: more
/// calls of a raise, found alike.
#[test]
fn a_feeds_own_calls_are_found_with_the_points_stack() {
    let mem = Memory::new(16);
    let mut raises = Vec::new();
    for (returning, returns_to) in [(false, 0), (true, 0), (true, 0x5555_5555_52b0)] {
        let program = vec![always(Primitive::Feed(weft_plan::Feed {
            returning,
            base: mem.counter(0),
            state: 0,
            site: 7,
            returns_to,
            vdso: None,
        }))];
        let at = 0x7000_0000_0000;
        let mini = mini_trampoline(at, mem.table(), &program).unwrap();
        let calls = system_calls_in(at, &mini);
        assert!(!calls.is_empty(), "returning {returning}");
        raises.push(calls.len());
        for (call, cfa) in calls {
            let off = (call - at) as usize;
            assert_eq!(mini[off..off + 2], [0x0f, 0x05]);
            assert!(
                (FIXED_FRAME_RSP as u64..=FIXED_FRAME_RSP as u64 + 216).contains(&cfa),
                "{cfa} at {off:#x}"
            );
        }
    }
    assert!(raises[2] > raises[1], "{raises:?}");
}

/// A call that fails gives its error as the result, and a program whose
/// thread finds no slot still makes it (with no instant).
#[test]
fn the_call_is_made_when_the_thread_has_no_slot() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let table = mem.table();
    // Every slot belongs to some other thread.
    for slot in 0..table.slots {
        mem.write(table.addr + slot * 8, 0x1000 + slot);
    }
    let set = |k: usize, e: Expr| set(&mem, k, e);
    let program = vec![
        always(Primitive::AddThreadCounter(0, Expr::Const(1))),
        always(Primitive::MakeCall { left: None }),
        set(1, Expr::Ret),
        set(2, Expr::MadeCallTime),
    ];
    let mini = mini_trampoline(exec.addr() + 256, table, &program).unwrap();
    const CLOSE: u32 = 3;
    with_caller(&exec, CLOSE, &mini);
    exec.call([-1, 0, 0, 0, 0, 0]);
    const EBADF: i64 = 9;
    assert_eq!(mem.read(mem.counter(1)) as i64, -EBADF);
    assert_eq!(mem.read(mem.counter(2)), 0);
    assert_eq!(mem.read(table.no_slot), 1);
}

/// The call's instant is the one the primitive before it read (one
/// `rdtsc` for both): a record written before the call and the instant
/// kept across it agree.
#[test]
fn the_calls_instant_is_the_record_befores() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let program = vec![
        always(Primitive::Emit(4, vec![Expr::Reg(0)], Strings::NONE)),
        always(Primitive::MakeCall { left: None }),
        always(Primitive::Emit(
            5,
            vec![Expr::MadeCallTime, Expr::Ret],
            Strings::NONE,
        )),
    ];
    let mini = mini_trampoline(exec.addr() + 256, mem.table(), &program).unwrap();
    const GETPID: u32 = 39;
    with_caller(&exec, GETPID, &mini);
    exec.call([0; 6]);
    let first = mem.ring_of_this_thread() + r::HEADER;
    let second = first + r::record_size(1, 0);
    assert_eq!(mem.read(first + r::R_ARGS), u64::from(GETPID));
    assert_eq!(mem.read(second + r::R_ARGS), mem.read(first + r::R_TSC));
    assert_eq!(
        mem.read(second + r::R_ARGS + 8),
        u64::from(std::process::id())
    );
    assert!(mem.read(second + r::R_TSC) > mem.read(first + r::R_TSC));
}

/// What [`sum_into`] saw.
static SEEN: std::sync::Mutex<Vec<i64>> = std::sync::Mutex::new(Vec::new());

/// A function as the point's code from the entry on: keeps its six
/// arguments, writes their sum where the first points, returns it + 1.
extern "C" fn sum_into(out: *mut i64, b: i64, c: i64, d: i64, e: i64, f: i64) -> i64 {
    SEEN.lock().unwrap().extend([out as i64, b, c, d, e, f]);
    let sum = out as i64 + b + c + d + e + f;
    // SAFETY: the test passes a pointer to an i64 it owns.
    unsafe { *out = sum };
    sum + 1
}

/// A program that calls the point's function: the function gets the
/// entry's six arguments, the program's code after it sees its result,
/// the arguments as they were and the instant before the call, and the
/// program returns the function's result.
#[test]
fn a_program_calls_its_points_function_between_its_two_halves() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let set = |k: usize, e: Expr| set(&mem, k, e);
    let program = vec![
        always(Primitive::AddThreadCounter(0, Expr::Const(1))),
        always(Primitive::CallFunction {
            code: sum_into as *const () as u64,
        }),
        set(1, Expr::Ret),
        set(2, Expr::MadeCallTime),
        set(3, Expr::Arg(1)),
        set(4, Expr::Arg(6)),
    ];
    exec.load(&mini_trampoline(exec.addr(), mem.table(), &program).unwrap());
    let mut out = 0i64;
    let first = &mut out as *mut i64 as i64;
    // SAFETY: rdtsc has no preconditions on x86-64.
    let before = unsafe { core::arch::x86_64::_rdtsc() };
    // SAFETY: as in Exec::call; the program returns the function's result.
    let f: extern "C" fn(i64, i64, i64, i64, i64, i64) -> i64 =
        unsafe { std::mem::transmute(exec.ptr) };
    let returned = f(first, 2, 3, 4, 5, 6);
    // SAFETY: as above.
    let after = unsafe { core::arch::x86_64::_rdtsc() };
    let sum = first + 20;
    assert_eq!(*SEEN.lock().unwrap(), [first, 2, 3, 4, 5, 6]);
    assert_eq!(out, sum);
    assert_eq!(returned, sum + 1);
    assert_eq!(mem.read(mem.counter(1)) as i64, sum + 1);
    let at = mem.read(mem.counter(2));
    assert!(before < at && at < after, "{before} < {at} < {after}");
    assert_eq!(mem.read(mem.counter(3)) as i64, first);
    assert_eq!(mem.read(mem.counter(4)), 6);
}

/// A program that made its point's call returns with r11 at the thread's
/// block, whose `RETURNED` word the call's return set, for the point's
/// trampoline to clear as it goes back to the program (the instruction of
/// `crate::trampoline::clear_returned`, which the delivery stub looks
/// for); without a slot, at a scratch word as if it were a block.
#[test]
fn a_program_that_made_its_call_returns_with_its_block_marked_returned() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let program = vec![
        always(Primitive::AddThreadCounter(0, Expr::Const(1))),
        always(Primitive::MakeCall { left: None }),
    ];
    let mini = mini_trampoline(exec.addr() + 256, mem.table(), &program).unwrap();
    let (seen, marked) = (mem.counter(0), mem.counter(1));
    let mut a = CodeAssembler::new(64).unwrap();
    const GETPPID: u32 = 110;
    a.mov(eax, GETPPID).unwrap();
    a.call(exec.addr() + 256).unwrap();
    a.mov(rax, seen).unwrap();
    a.mov(qword_ptr(rax), r11).unwrap();
    a.mov(rcx, qword_ptr(r11 + t::RETURNED as i32)).unwrap();
    a.mov(rax, marked).unwrap();
    a.mov(qword_ptr(rax), rcx).unwrap();
    a.add_instruction(crate::trampoline::clear_returned().unwrap())
        .unwrap();
    a.ret().unwrap();
    load_before(&exec, a, &mini);
    exec.call([0; 6]);
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(seen), block, "r11 at the block");
    assert_eq!(mem.read(marked), 1, "marked as the call returned");
    assert_eq!(mem.read(block + t::RETURNED), 0, "cleared going back");
    assert_eq!(mem.read(block + t::STAMP), 0, "no stamp left behind");
}

/// The return of a call made at weft's dispatch function marks the
/// thread's block as returned and leaves the word's address in rbp, for
/// the SIGSYS handler's restorer (or the delivery stub) to clear; rbp
/// stays as it was for a thread without a slot's block.
#[test]
fn a_dispatched_calls_return_marks_the_block_and_names_the_word_in_rbp() {
    let mem = Memory::new(16);
    let exec = Exec::new(4096);
    let program = vec![always(Primitive::MarkReturned)];
    let mini = mini_trampoline(exec.addr() + 256, mem.table(), &program).unwrap();
    let (named, marked) = (mem.counter(0), mem.counter(1));
    let mut a = CodeAssembler::new(64).unwrap();
    a.push(rbp).unwrap();
    a.xor(ebp, ebp).unwrap();
    a.call(exec.addr() + 256).unwrap();
    a.mov(rax, named).unwrap();
    a.mov(qword_ptr(rax), rbp).unwrap();
    a.mov(rcx, qword_ptr(rbp)).unwrap();
    a.mov(rax, marked).unwrap();
    a.mov(qword_ptr(rax), rcx).unwrap();
    a.mov(qword_ptr(rbp), 0).unwrap();
    a.pop(rbp).unwrap();
    a.ret().unwrap();
    load_before(&exec, a, &mini);
    exec.call([0; 6]);
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(named), block + t::RETURNED, "rbp at the word");
    assert_eq!(mem.read(marked), 1, "marked");
    assert_eq!(mem.read(block + t::RETURNED), 0, "cleared by the caller");
}
