//! Calls kept open while they run, and the records of those a thread left
//! (`mini::open_calls`).

use super::*;
use crate::region::ring as r;
use std::sync::atomic::{AtomicU64, Ordering};

const GETPPID: u32 = 110;
const NANOSLEEP: u32 = 35;

/// Loads a program that makes its point's call, kept open (its left record
/// event 5), after a caller that puts `nr` in `rax`, as `calls.rs` does.
fn caller_of(mem: &Memory, nr: u32) -> Exec {
    let exec = Exec::new(8192);
    let program = vec![
        Guarded {
            predicate: None,
            // A slot, as a program's records need one.
            primitive: Primitive::AddThreadCounter(0, Expr::Const(1)),
        },
        Guarded {
            predicate: None,
            primitive: Primitive::MakeCall {
                left: Some(weft_plan::LeftCall {
                    event: 5,
                    site_number: u64::from(nr),
                    user_timer: None,
                }),
            },
        },
    ];
    let mini = mini_trampoline(exec.addr() + 256, mem.table(), &program).unwrap();
    let mut a = CodeAssembler::new(64).unwrap();
    a.mov(eax, nr).unwrap();
    a.call(exec.addr() + 256).unwrap();
    a.ret().unwrap();
    let mut code = a.assemble(exec.addr()).unwrap();
    code.resize(256, 0xcc);
    code.extend_from_slice(&mini);
    exec.load(&code);
    exec
}

/// Writes open call `k` into `block` as a program would: its frame, event
/// `event`, the number and arguments `1..=6` and the entry's instant (and
/// room for the result it had when left, written when it is found left).
fn open(block: u64, k: u64, frame: u64, event: u32, instant: u64) {
    let slot = block + t::OPEN_CALLS + k * t::OPEN_SIZE;
    let write = |at: u64, v: u64| {
        // SAFETY: `at` lies in the open calls of a block of the test's
        // table, which stays allocated while the test runs.
        unsafe { std::ptr::write_volatile(at as *mut u64, v) }
    };
    write(slot + t::OPEN_FRAME, frame);
    write(slot + t::OPEN_EVENT, u64::from(event) | 9 << 32);
    for v in 0..7 {
        write(slot + t::OPEN_VALUES + 8 * v, if v == 0 { 0 } else { v });
    }
    write(slot + t::OPEN_VALUES + 8 * 7, instant);
    write(block + t::OPEN_DEPTH, k + 1);
}

/// The records in this thread's ring: (time, event, values).
fn records(mem: &Memory) -> Vec<(u64, u32, Vec<u64>)> {
    let ring = mem.ring_of_this_thread();
    let (mut at, head) = (mem.read(ring + r::TAIL), mem.read(ring + r::HEAD));
    let mut out = Vec::new();
    while at < head {
        let rec = ring + r::HEADER + (at & (RING_DATA - 1));
        let word = mem.read(rec + r::R_EVENT);
        let (n, text) = r::shape((word >> 32) as u32);
        let values = (0..n as u64).map(|k| mem.read(rec + r::R_ARGS + 8 * k));
        out.push((mem.read(rec + r::R_TSC), word as u32, values.collect()));
        at += r::record_size(n, text);
    }
    out
}

/// The thread's alternate signal stack: (start, size), size 0 for none.
fn alternate_stack() -> (u64, u64) {
    // SAFETY: sigaltstack with a null new stack only reads the setting
    // into `old`.
    unsafe {
        let mut old: libc::stack_t = std::mem::zeroed();
        assert_eq!(libc::sigaltstack(std::ptr::null(), &mut old), 0);
        if old.ss_flags & libc::SS_DISABLE != 0 {
            return (0, 0);
        }
        (old.ss_sp as u64, old.ss_size as u64)
    }
}

/// A call whose frame lies below the stack pointer of the thread's next
/// call was left: that call writes its record (the open call's event and
/// values, stamped then) and closes it; one whose frame lies above (a
/// call a signal handler interrupted) stays open, and the new call opens
/// and closes above it.
#[test]
fn a_call_left_open_is_recorded_by_the_threads_next_call() {
    let mem = Memory::new(16);
    let exec = caller_of(&mem, GETPPID);
    exec.call([0; 6]);
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(block + t::OPEN_DEPTH), 0, "opened and closed");
    assert!(records(&mem).is_empty());

    open(block, 0, 0x1000, 77, 4242);
    // SAFETY: rdtsc has no preconditions on x86-64.
    let before = unsafe { core::arch::x86_64::_rdtsc() };
    exec.call([0; 6]);
    // SAFETY: as above.
    let after = unsafe { core::arch::x86_64::_rdtsc() };
    assert_eq!(mem.read(block + t::OPEN_DEPTH), 0, "the left call closed");
    let got = records(&mem);
    assert_eq!(got.len(), 1, "{got:?}");
    let (time, event, values) = &got[0];
    assert_eq!(*event, 77);
    assert_eq!(values, &[0, 1, 2, 3, 4, 5, 6, 4242, t::LEFT_RESULT_UNKNOWN]);
    assert!(before < *time && *time < after, "stamped when found");

    // Above every stack this test runs on: interrupted, still open.
    let (alt, alt_size) = alternate_stack();
    let high = 0x7fff_ffff_f000;
    assert!(!(alt..alt + alt_size).contains(&high));
    open(block, 0, high, 78, 1);
    exec.call([0; 6]);
    assert_eq!(mem.read(block + t::OPEN_DEPTH), 1, "still open");
    assert_eq!(records(&mem).len(), 1, "nothing more written");

    // A frame on the alternate signal stack while the thread runs on its
    // own: left, wherever the alternate stack lies.
    if alt_size > 0 {
        open(block, 1, alt + alt_size - 64, 79, 2);
        exec.call([0; 6]);
        assert_eq!(mem.read(block + t::OPEN_DEPTH), 1);
        let got = records(&mem);
        assert_eq!(got.last().map(|g| g.1), Some(79), "{got:?}");
    }
}

/// A call's return closes the calls kept open above it, which a signal
/// handler left and then returned from, writing their records.
#[test]
fn a_return_closes_the_calls_a_handler_left_above_it() {
    static BLOCK: AtomicU64 = AtomicU64::new(0);
    extern "C" fn handler(_: i32) {
        let block = BLOCK.load(Ordering::SeqCst);
        // SAFETY: the block is the test thread's, allocated while the
        // test runs; the open call below it is the sleep's.
        let depth = unsafe { std::ptr::read_volatile((block + t::OPEN_DEPTH) as *const u64) };
        open(block, depth, 0x1000, 91, 7);
    }
    let signal = libc::SIGRTMIN() + 7;
    // SAFETY: installs a handler for a real-time signal no other test
    // uses; the handler writes only the test's own memory.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        assert_eq!(libc::sigaction(signal, &action, std::ptr::null_mut()), 0);
    }
    let mem = Memory::new(16);
    let exec = caller_of(&mem, NANOSLEEP);
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    exec.call([&zero as *const _ as i64, 0, 0, 0, 0, 0]);
    BLOCK.store(mem.block_of_this_thread(), Ordering::SeqCst);
    // SAFETY: gettid and getpid have no preconditions.
    let (pid, tid) = unsafe { (libc::getpid(), libc::gettid()) };
    let waker = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(50));
        // SAFETY: signals this test's own thread, which waits below.
        unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
    });
    let long = libc::timespec {
        tv_sec: 5,
        tv_nsec: 0,
    };
    let started = std::time::Instant::now();
    exec.call([&long as *const _ as i64, 0, 0, 0, 0, 0]);
    waker.join().unwrap();
    assert!(started.elapsed().as_secs() < 5, "the signal cut the sleep");
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(block + t::OPEN_DEPTH), 0, "both closed");
    let got = records(&mem);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].1, got[0].2.get(7)), (91, Some(&7)));
}

/// The result a left call had comes from the signal frame the kernel
/// left below its frame (`crate::sigframe`): one here that says the
/// thread was at the call's frame, just past a `syscall` instruction (or
/// at the `pop r11` after it), with `rax` 42. None for a frame that says
/// another `rsp`, a call to be restarted (`rip` at the instruction) or
/// interrupted (`EINTR`), or where nothing is mapped (the frame at 0x1000
/// above). A frame that says the thread was before the instruction: no
/// record at all, the call was not made.
#[test]
fn a_left_calls_result_comes_from_its_signal_frame() {
    use crate::sigframe as sf;
    // nop nop nop nop; syscall; pop r11; nop nop; pop r11
    static CODE: [u8; 12] = [
        0x90, 0x90, 0x90, 0x90, 0x0f, 0x05, 0x41, 0x5b, 0x90, 0x90, 0x41, 0x5b,
    ];
    let fpu = sf::fpu_size().expect("this machine's signal frames are understood");
    let mem = Memory::new(16);
    let exec = caller_of(&mem, GETPPID);
    exec.call([0; 6]);
    let block = mem.block_of_this_thread();
    // A stack below this thread's: a heap buffer (left, below its rsp).
    let mut stack = vec![0u64; 4096];
    let top = (stack.as_mut_ptr() as u64 + 8 * 4096 - 64) & !15;
    let (frame, fpstate) = sf::frame_for(top, fpu);
    let code = CODE.as_ptr() as u64;
    let cases = [
        (top, code + 6, 42u64, Some(42u64)),
        (top, code + 10, 42, Some(42)),
        (top + 16, code + 6, 42, Some(t::LEFT_RESULT_UNKNOWN)),
        (top, code + 4, 0, Some(t::LEFT_RESULT_UNKNOWN)),
        (top, code + 6, -4i64 as u64, Some(t::LEFT_RESULT_UNKNOWN)),
        (top, code + 2, 0, None),
    ];
    let mut written = 0;
    for (k, (at_rsp, at_rip, in_rax, expected)) in cases.into_iter().enumerate() {
        let put = |at: u64, v: u64| {
            // SAFETY: `at` lies in `stack`, alive here: the frame lies
            // between its start and `top`.
            unsafe { std::ptr::write_volatile(at as *mut u64, v) }
        };
        put(frame + sf::RAX, in_rax);
        put(frame + sf::RSP, at_rsp);
        put(frame + sf::RIP, at_rip);
        put(frame + sf::FPSTATE, fpstate);
        open(block, 0, top, 80, 5);
        exec.call([0; 6]);
        assert_eq!(mem.read(block + t::OPEN_DEPTH), 0, "case {k}: closed");
        let got = records(&mem);
        written += usize::from(expected.is_some());
        assert_eq!(got.len(), written, "case {k}: {got:?}");
        if let Some(expected) = expected {
            assert_eq!(got[k].2.last(), Some(&expected), "case {k}: {:?}", got[k]);
        }
    }
    drop(stack);
}

/// A record the thread began and left (its frame below the next writer's
/// stack pointer: a handler's `siglongjmp`, a cancellation, took the thread
/// out of weft's code) does not stop the thread's later records: the next
/// one is written over it. One still being written (its frame above: the
/// next writer is a signal handler that interrupted it) is not, and the
/// record begun meanwhile is dropped and counted.
#[test]
fn a_record_the_thread_left_half_written_is_written_over() {
    let mem = Memory::new(16);
    let exec = emitter(mem.table(), 7, 1, Strings::NONE);
    exec.call([1, 0, 0, 0, 0, 0]);
    let block = mem.block_of_this_thread();
    let ring = mem.ring_of_this_thread();
    assert_eq!(mem.read(block + t::WRITING), 0, "free after a record");

    mem.write(block + t::WRITING, 0x7fff_ffff_f000);
    exec.call([2, 0, 0, 0, 0, 0]);
    assert_eq!(mem.read(ring + r::DROPPED), 1, "inside one being written");
    assert_eq!(
        mem.read(block + t::WRITING),
        0x7fff_ffff_f000,
        "left as it was"
    );

    mem.write(block + t::WRITING, 0x1000);
    exec.call([3, 0, 0, 0, 0, 0]);
    assert_eq!(mem.read(ring + r::DROPPED), 2, "the record left, lost");
    assert_eq!(mem.read(block + t::WRITING), 0, "taken, then freed");
    let values: Vec<u64> = records(&mem).iter().map(|r| r.2[0]).collect();
    assert_eq!(values, [1, 3]);
}
