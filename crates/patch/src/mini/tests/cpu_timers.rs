//! CPU timers against the kernel's own thread clock
//! (`CLOCK_THREAD_CPUTIME_ID`): generated code run in this process, on
//! the real per-thread CPU clock (BPF; without privileges the tests skip
//! loudly, and fail under `WEFT_CI`).

use super::*;
use std::time::{Duration, Instant};
use weft_vclock::{thread_cpu_ns, VirtualClock};

fn loaded() -> Option<VirtualClock> {
    match VirtualClock::load() {
        Ok(c) => Some(c),
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
                panic!("WEFT_CI is set, so a skip is a failure: {e}");
            }
            None
        }
    }
}

use weft_process::stolen_ns;

fn spin(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
}

/// Spins until this thread has run `d` on a CPU (however long that takes
/// on a loaded machine).
fn spin_cpu(d: Duration) {
    let until = thread_cpu_ns() + d.as_nanos() as u64;
    while thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// `mem`'s thread table, with the per-thread CPU clock.
fn clocked(mem: &Memory, clock: &VirtualClock) -> ThreadTable {
    ThreadTable {
        vclock: Some(clock.local_view()),
        ..mem.table()
    }
}

/// A start and a stop trampoline of CPU timer 5.
fn timer_pair(table: ThreadTable) -> (Exec, Exec) {
    let (start, stop) = (Exec::new(4096), Exec::new(4096));
    let one = |p| {
        vec![Guarded {
            predicate: None,
            primitive: p,
        }]
    };
    start.load(&mini_trampoline(start.addr(), table, &one(Primitive::StartCpuTimer(5))).unwrap());
    stop.load(&mini_trampoline(stop.addr(), table, &one(Primitive::StopCpuTimer(5))).unwrap());
    (start, stop)
}

#[test]
fn a_cpu_timer_is_refused_without_the_clock() {
    let mem = Memory::new(16);
    let start = vec![Guarded {
        predicate: None,
        primitive: Primitive::StartCpuTimer(0),
    }];
    assert!(matches!(
        mini_trampoline(0x1000, mem.table(), &start),
        Err(Error::NoCpuClock)
    ));
}

#[test]
fn cpu_timer_counts_spinning_not_sleeping_and_nests() {
    let Some(clock) = loaded() else { return };
    let mem = Memory::new(16);
    let table = clocked(&mem, &clock);
    let (start, stop) = timer_pair(table);
    start.call([0; 6]);
    let block = mem.block_of_this_thread();
    let timer = block + t::timer(5);
    // Nested: the inner pair does not touch the clock.
    start.call([0; 6]);
    stop.call([0; 6]);
    assert_eq!(mem.read(timer + t::TIMER_TOTAL), 0);
    let cpu_before = thread_cpu_ns();
    spin_cpu(Duration::from_millis(80));
    std::thread::sleep(Duration::from_millis(200));
    spin_cpu(Duration::from_millis(40));
    let cpu_after = thread_cpu_ns();
    stop.call([0; 6]);
    let total = mem.read(timer + t::TIMER_TOTAL);
    let kernel = cpu_after - cpu_before;
    eprintln!("timer {total} ns, kernel {kernel} ns");
    assert!(kernel > 110_000_000, "kernel {kernel} ns");
    assert!(
        total.abs_diff(kernel) <= (kernel / 100).max(1_000_000),
        "timer {total} ns, kernel {kernel} ns"
    );
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
    assert_eq!(mem.read(timer + t::TIMER_SEQ) % 2, 0);
    // The thread's entry is cached in its block, under its tid.
    let entry = mem.read(block + t::VCLOCK);
    assert_ne!(entry, 0);
    // SAFETY: the entry lies in the clock's mapping, alive with `clock`.
    let tid = unsafe { std::ptr::read_volatile(entry as *const u32) };
    assert_eq!(u64::from(tid), mem.read(block + t::TID));
}

/// A stop whose reading comes out below its start's (the calibration
/// off across the thread's switch out and in) adds nothing: before, it
/// added a wrapped negative, and a sleeping function's CPU time read
/// 18446744073 s.
#[test]
fn a_stop_that_reads_below_its_start_adds_nothing() {
    let Some(clock) = loaded() else { return };
    let mem = Memory::new(16);
    let table = clocked(&mem, &clock);
    let (start, stop) = timer_pair(table);
    start.call([0; 6]);
    let timer = mem.block_of_this_thread() + t::timer(5);
    let started = mem.read(timer + t::TIMER_START);
    assert!(started > 0, "the start read the clock");
    mem.write(timer + t::TIMER_START, started + 1_000_000_000);
    stop.call([0; 6]);
    assert_eq!(mem.read(timer + t::TIMER_TOTAL), 0);
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
}

/// A paused and resumed timer does not nest: a pause of a paused timer
/// and a resume of a running one do nothing, so a resume, two pauses
/// (a blocked call's and a signal handler's inside it), two resumes (the
/// handler's call's return and the blocked call's) and a pause time what
/// ran after the last resume, as a thread's user time between its system
/// calls should.
#[test]
fn a_paused_cpu_timer_does_not_nest() {
    let Some(clock) = loaded() else { return };
    let mem = Memory::new(16);
    let table = clocked(&mem, &clock);
    let (resume, pause) = (Exec::new(4096), Exec::new(4096));
    let one = |p| {
        vec![Guarded {
            predicate: None,
            primitive: p,
        }]
    };
    resume
        .load(&mini_trampoline(resume.addr(), table, &one(Primitive::ResumeCpuTimer(5))).unwrap());
    pause.load(&mini_trampoline(pause.addr(), table, &one(Primitive::PauseCpuTimer(5))).unwrap());
    resume.call([0; 6]);
    pause.call([0; 6]);
    pause.call([0; 6]);
    resume.call([0; 6]);
    resume.call([0; 6]);
    let timer = mem.block_of_this_thread() + t::timer(5);
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 1, "running once");
    let before = mem.read(timer + t::TIMER_TOTAL);
    let steal_before = stolen_ns();
    let cpu_before = thread_cpu_ns();
    spin_cpu(Duration::from_millis(60));
    let cpu_after = thread_cpu_ns();
    pause.call([0; 6]);
    let stolen = stolen_ns().saturating_sub(steal_before);
    let timed = mem.read(timer + t::TIMER_TOTAL) - before;
    let kernel = cpu_after - cpu_before;
    // Above the kernel by what the hypervisor stole meanwhile too: the
    // clock's stretch on the CPU is TSC time (docs/cpu-clock.md).
    let tolerance = (kernel / 100).max(1_000_000);
    assert!(
        timed <= kernel + tolerance + stolen && kernel <= timed + tolerance,
        "timer {timed} ns, kernel {kernel} ns, {stolen} ns stolen"
    );
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
    assert_eq!(mem.read(timer + t::TIMER_SEQ) % 2, 0);
}

/// The CPU sources generated code may read the CPU number from besides
/// `rdtscp`: `rdpid`, where this CPU has it.
fn cpu_sources() -> Vec<crate::lanes::CpuSource> {
    let mut sources = vec![crate::lanes::CpuSource::None];
    let flags = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if flags.split_whitespace().any(|f| f == "rdpid") {
        sources.push(crate::lanes::CpuSource::Rdpid);
    }
    sources
}

#[test]
fn many_short_cpu_timer_pairs_sum_exactly() {
    let Some(clock) = loaded() else { return };
    for source in cpu_sources() {
        short_pairs(&clock, source);
    }
}

fn short_pairs(clock: &VirtualClock, source: crate::lanes::CpuSource) {
    let mem = Memory::new(16);
    let mut table = clocked(&mem, clock);
    table.lanes.source = source;
    let (start, stop) = timer_pair(table);
    start.call([0; 6]);
    stop.call([0; 6]);
    let block = mem.block_of_this_thread();
    let base = mem.read(block + t::timer(5) + t::TIMER_TOTAL);
    // 50,000 intervals of 2 µs each, far shorter than a scheduler tick,
    // with almost nothing between them.
    let steal_before = stolen_ns();
    let cpu_before = thread_cpu_ns();
    for _ in 0..50_000 {
        start.call([0; 6]);
        spin(Duration::from_micros(2));
        stop.call([0; 6]);
    }
    let kernel = thread_cpu_ns() - cpu_before;
    let stolen = stolen_ns().saturating_sub(steal_before);
    let total = mem.read(block + t::timer(5) + t::TIMER_TOTAL) - base;
    eprintln!("{source:?}: timer {total} ns, the loop's CPU time {kernel} ns, {stolen} ns stolen");
    // The loop's own CPU time holds the intervals and the little between
    // them (the calls, half of each trampoline). An interval within one
    // stretch on the CPU is TSC time, which counts what the hypervisor
    // stole meanwhile (docs/cpu-clock.md), and the kernel's clock does
    // not: the timer may pass the kernel's clock by 1 %, and by what the
    // hypervisor stole from the CPUs meanwhile.
    let steal_allowance = (kernel / 100).max(1_000_000) + stolen;
    assert!(
        total <= kernel + steal_allowance && total >= kernel - kernel / 20,
        "{source:?}: timer {total} ns, the loop's CPU time {kernel} ns"
    );
}
