//! Running a [`Plan`]: a replay process per recorded process (forked where
//! the record forked, from the replay process of its parent), a thread per
//! recorded thread, and a table shared by all of them (an anonymous
//! shared mapping made before the first fork) with a slot per call: done
//! or not (a futex word the dependent calls wait on), its result, when it
//! began and ended. weft watches the table: a replay that makes no
//! progress for the stall limit is killed and reported with the calls it
//! waits for.

use crate::issue::{issue, Fds, Issued};
use crate::sandbox::{Paths, Sandbox};
use crate::{Error, Plan, Start};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weft_syscalls::Call;

/// One call's slot in the shared table.
#[repr(C)]
struct Slot {
    /// [`DONE`] once the call is done (made, skipped or passed over);
    /// [`WAITED`] while not and a thread sleeps on it; 0 before.
    done: AtomicU32,
    /// 1: made; 2: made, other bytes read; 3 and up: skipped, for
    /// [`REASONS`]` [state - 3]`.
    state: AtomicU32,
    /// The result of the call made.
    result: AtomicI64,
    /// Nanoseconds (`CLOCK_MONOTONIC`) when it was made and when it
    /// returned.
    began: AtomicU64,
    ended: AtomicU64,
}

/// The table, shared by every replay process.
struct Table {
    slots: *mut Slot,
    len: usize,
}

// SAFETY: the table is a fixed mapping of atomics; every access goes
// through `&Slot` and atomic operations.
unsafe impl Send for Table {}
// SAFETY: as above.
unsafe impl Sync for Table {}

impl Table {
    fn new(len: usize) -> Result<Table, Error> {
        let bytes = (len.max(1) * std::mem::size_of::<Slot>()).next_multiple_of(4096);
        // SAFETY: a new anonymous shared mapping, zeroed by the kernel
        // (every slot not done); nothing else refers to it.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Io {
                what: "mapping the replay's shared table".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        Ok(Table {
            slots: p.cast(),
            len,
        })
    }

    fn slot(&self, k: usize) -> &Slot {
        assert!(k < self.len, "call {k} of {}", self.len);
        // SAFETY: `k` is inside the mapping, which lives as long as the
        // table (never unmapped: the replay processes end with it), and
        // `Slot` is atomics only.
        unsafe { &*self.slots.add(k) }
    }

    /// Waits until call `k` is done (sleeping on its futex word, marked
    /// [`WAITED`] so that only a call someone waits for wakes anyone).
    fn wait(&self, k: usize) {
        let slot = self.slot(k);
        loop {
            match slot.done.load(Ordering::Acquire) {
                DONE => return,
                0 if slot
                    .done
                    .compare_exchange(0, WAITED, Ordering::AcqRel, Ordering::Acquire)
                    .is_err() =>
                {
                    continue
                }
                _ => {}
            }
            let _ = rustix::thread::futex::wait(
                &slot.done,
                rustix::thread::futex::Flags::empty(),
                WAITED,
                None,
            );
        }
    }

    /// Whether call `k` is done.
    fn is_done(&self, k: usize) -> bool {
        self.slot(k).done.load(Ordering::Acquire) == DONE
    }

    /// Call `k` is done with `outcome`, between `began` and now.
    fn finish(&self, k: usize, outcome: Issued, began: u64) {
        let slot = self.slot(k);
        let (state, result) = match outcome {
            Issued::Made(r) => (1, r),
            Issued::OtherBytes(r) => (2, r),
            Issued::Skipped(why) => (
                REASONS.iter().position(|&r| r == why).unwrap_or(0) as u32 + 3,
                0,
            ),
        };
        slot.result.store(result, Ordering::Relaxed);
        slot.state.store(state, Ordering::Relaxed);
        slot.began.store(began, Ordering::Relaxed);
        slot.ended.store(now_ns(), Ordering::Relaxed);
        if slot.done.swap(DONE, Ordering::AcqRel) == WAITED {
            let _ = rustix::thread::futex::wake(
                &slot.done,
                rustix::thread::futex::Flags::empty(),
                i32::MAX as u32,
            );
        }
    }

    fn done(&self) -> usize {
        (0..self.len).filter(|&k| self.is_done(k)).count()
    }
}

/// A slot's `done` word: the call is done.
const DONE: u32 = 1;
/// A slot's `done` word: not done, and a thread sleeps until it is.
const WAITED: u32 = 2;

/// Why calls are not made again (what [`Issued::Skipped`] says).
const REASONS: &[&str] = &[
    crate::issue::NOT_FILES,
    crate::issue::NO_DESCRIPTOR,
    crate::issue::NO_PATH,
    crate::issue::NO_MEMORY,
    crate::issue::INTERRUPTED,
    crate::issue::DELIVERY,
    DID_NOT_RETURN,
    MADE_NOTHING,
    NOT_MADE_HERE,
    REAPED_NOTHING,
];
const DID_NOT_RETURN: &str = "it did not return in the record";
const MADE_NOTHING: &str = "the record holds no call of what it made";
const NOT_MADE_HERE: &str = "a process the replay did not make";
const REAPED_NOTHING: &str = "it failed in the record and reaped no child";

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every replay process.
fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What became of one call in the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Made again, with this result.
    Made(i64),
    /// Made again, with this result, and read other bytes than recorded.
    OtherBytes(i64),
    /// Not made again.
    Skipped,
    /// Never reached (the replay was stopped).
    NotReached,
}

/// What a replay did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Per call.
    pub outcomes: Vec<Outcome>,
    /// Per call, when it began and ended (ns since the replay began).
    pub times: Vec<(u64, u64)>,
    /// The record's elapsed time, first call to last return (ns).
    pub recorded_ns: u64,
    /// The replay's, likewise (ns).
    pub replayed_ns: u64,
    /// Calls not made again, by name, with the reason.
    pub skipped: BTreeMap<(String, &'static str), usize>,
    /// Set when the replay was stopped, for making no progress or on a
    /// signal: why, the calls still waiting and what they wait for.
    pub stalled: Option<String>,
}

/// Options of a replay.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    /// A replay that makes no progress this long is stopped.
    pub stall: Duration,
    /// The control group to run the replay in (its limits).
    pub group: Option<&'a crate::Group>,
    /// Set (by a signal handler) to stop the replay.
    pub stop: Option<&'a std::sync::atomic::AtomicBool>,
    /// Per recorded process, the bytes of anonymous memory it held
    /// resident at its most, and of those the most only it had written:
    /// its replay process holds as many, written once at its start, so
    /// that a memory limit presses on the replay as on the program (whose
    /// heap and stacks the replay does not otherwise have). A process the
    /// record saw made holds its own pages only: a forked one shares the
    /// rest with its parent, whose replay process holds them already, and
    /// shares them with the child as the kernel shares the program's.
    pub resident: &'a HashMap<i32, (u64, u64)>,
}

/// A replay process's state.
struct Process {
    fds: Mutex<Fds>,
    /// Recorded child pid to the replay's.
    pids: Mutex<HashMap<i32, i32>>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

/// What every replay thread shares.
struct Context {
    calls: Vec<Call>,
    plan: Plan,
    table: Table,
    paths: Paths,
    /// See [`Options::resident`].
    resident: HashMap<i32, (u64, u64)>,
}

/// Replays `calls` (their `plan`) in `sandbox`.
pub fn replay(
    calls: &[Call],
    plan: &Plan,
    sandbox: &Sandbox,
    options: Options<'_>,
) -> Result<Report, Error> {
    if calls.is_empty() {
        return Err(Error::Empty);
    }
    let ctx = Arc::new(Context {
        calls: calls.to_vec(),
        plan: plan.clone(),
        table: Table::new(calls.len())?,
        paths: sandbox.paths(),
        resident: options.resident.clone(),
    });
    let start_dir = sandbox.start_dir();
    let begin = now_ns();
    let mut roots: Vec<i32> = Vec::new();
    for (_, threads) in plan.initial() {
        // The child waits until weft has put it in the control group.
        let mut go = [0i32; 2];
        // SAFETY: `go` has room for the two descriptors.
        if unsafe { libc::pipe2(go.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(Error::Io {
                what: "starting a replay process".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: the child only runs the replay (its own threads, raw
        // calls, allocation through glibc, which fork keeps consistent)
        // and leaves with `_exit`.
        match unsafe { libc::fork() } {
            -1 => {
                return Err(Error::Io {
                    what: "starting a replay process".into(),
                    source: std::io::Error::last_os_error(),
                })
            }
            0 => {
                let mut byte = 0u8;
                // SAFETY: reads one byte into `byte`, then lets the pipe go.
                unsafe {
                    libc::close(go[1]);
                    libc::read(go[0], (&mut byte as *mut u8).cast(), 1);
                    libc::close(go[0]);
                }
                if byte != 1 {
                    // SAFETY: weft could not place it: leave at once.
                    unsafe { libc::_exit(1) }
                }
                // SAFETY: own process group, so that weft can stop the
                // whole replay.
                unsafe { libc::setpgid(0, 0) };
                let _ = std::env::set_current_dir(&start_dir);
                let process = Arc::new(Process {
                    fds: Mutex::new(standard_streams()),
                    pids: Mutex::new(HashMap::new()),
                    threads: Mutex::new(Vec::new()),
                });
                run_process(&ctx, &process, &threads)
            }
            pid => {
                roots.push(pid);
                let placed = options.group.map_or(Ok(()), |g| g.add(pid));
                let byte = u8::from(placed.is_ok());
                // SAFETY: writes one byte from `byte`, then lets the pipe go.
                unsafe {
                    libc::close(go[0]);
                    libc::write(go[1], (&byte as *const u8).cast(), 1);
                    libc::close(go[1]);
                }
                if let Err(e) = placed {
                    let _ = watch(&ctx, &roots, &options);
                    return Err(e.into());
                }
            }
        }
    }
    let table = &ctx.table;
    let mut stalled = watch(&ctx, &roots, &options);
    // A replay cut short by the kernel says so, and has no elapsed time.
    let killed = options.group.map_or(0, |g| g.oom_kills());
    if killed > 0 && stalled.is_none() {
        stalled = Some(format!(
            "killed: the kernel's OOM killer ended {killed} replay process(es) under the \
             group's memory limit, and the replay was cut short (the program's memory, \
             which each replay process holds as the record says, and weft's own do not fit)"
        ));
    }
    let mut outcomes = Vec::with_capacity(calls.len());
    let mut times = Vec::with_capacity(calls.len());
    let mut skipped: BTreeMap<(String, &'static str), usize> = BTreeMap::new();
    for (k, call) in calls.iter().enumerate() {
        let slot = table.slot(k);
        let outcome = match (table.is_done(k), slot.state.load(Ordering::Relaxed)) {
            (false, _) => Outcome::NotReached,
            (_, 1) => Outcome::Made(slot.result.load(Ordering::Relaxed)),
            (_, 2) => Outcome::OtherBytes(slot.result.load(Ordering::Relaxed)),
            (_, code) => {
                let why = REASONS.get(code as usize - 3).copied().unwrap_or("?");
                // A signal's delivery is no call to count as skipped.
                if why != crate::issue::DELIVERY {
                    *skipped
                        .entry((weft_syscalls::name(call.nr).to_string(), why))
                        .or_default() += 1;
                }
                Outcome::Skipped
            }
        };
        outcomes.push(outcome);
        times.push((
            slot.began.load(Ordering::Relaxed).saturating_sub(begin),
            slot.ended.load(Ordering::Relaxed).saturating_sub(begin),
        ));
    }
    // As the record's: from the first call to the last return.
    let first = times
        .iter()
        .map(|t| t.0)
        .filter(|&b| b > 0)
        .min()
        .unwrap_or(0);
    let last = times.iter().map(|t| t.1).max().unwrap_or(0);
    Ok(Report {
        outcomes,
        times,
        recorded_ns: plan.recorded_ns,
        replayed_ns: last.saturating_sub(first),
        skipped,
        stalled,
    })
}

/// The workload's standard streams in the replay: `/dev/null`.
fn standard_streams() -> Fds {
    let mut fds = Fds::default();
    for fd in 0..3 {
        let flags = match fd {
            0 => libc::O_RDONLY,
            _ => libc::O_WRONLY,
        };
        // Not close-on-exec: they stay across the workload's execs, as
        // inherited streams do.
        // SAFETY: a constant NUL-terminated path.
        let real = unsafe { libc::open(c"/dev/null".as_ptr(), flags) };
        if real >= 0 {
            fds.map.insert(fd, real);
        }
    }
    fds
}

/// Runs a replay process's first `threads` (the first on this thread),
/// waits for every thread and child process it made, and ends the
/// process.
fn run_process(ctx: &Arc<Context>, process: &Arc<Process>, threads: &[usize]) -> ! {
    let held = hold(threads.first().map_or(0, |&t| {
        let thread = &ctx.plan.threads[t];
        match (ctx.resident.get(&thread.pid), thread.start) {
            (None, _) => 0,
            (Some(&(anon, _)), crate::Start::Initial) => anon,
            (Some(&(_, private)), _) => private,
        }
    }));
    for &t in threads.iter().skip(1) {
        spawn(ctx, process, t);
    }
    if let Some(&first) = threads.first() {
        run_thread(ctx, process, first);
    }
    loop {
        let Some(handle) = process.threads.lock().expect("unpoisoned").pop() else {
            break;
        };
        let _ = handle.join();
    }
    // The workload ends when its last process does.
    // SAFETY: null status pointer: not written.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::__WALL) } > 0 {}
    drop(held);
    // SAFETY: leaves the replay process without weft's exit handlers.
    unsafe { libc::_exit(0) }
}

/// `bytes` of memory of this process's own, each page written once (so
/// resident, and charged to its control group), held until dropped.
fn hold(bytes: u64) -> Vec<u8> {
    const PAGE: usize = 4096;
    let mut memory = vec![0u8; bytes as usize];
    for at in (0..memory.len()).step_by(PAGE) {
        memory[at] = 1;
    }
    std::hint::black_box(memory)
}

/// Starts recorded thread `t` on a thread of `process`.
fn spawn(ctx: &Arc<Context>, process: &Arc<Process>, t: usize) {
    let (ctx, p) = (ctx.clone(), process.clone());
    let handle = std::thread::spawn(move || run_thread(&ctx, &p, t));
    process.threads.lock().expect("unpoisoned").push(handle);
}

/// Gaps shorter than this are spun on the wall clock (the vDSO's, no
/// system call): a thread is rarely switched out in so short a time, and
/// reading its CPU clock is a system call (about a microsecond here).
const SHORT_NS: u64 = 50_000;

/// Runs on the CPU until this thread has used `ns` more of it: the time
/// the recorded thread ran between calls. CPU time, not wall-clock time,
/// so that a replay under a CPU limit, or sharing the CPUs with more
/// threads than they have, takes as long as the work would.
fn think(ns: u64) {
    if ns == 0 {
        return;
    }
    if ns < SHORT_NS {
        let until = now_ns().saturating_add(ns);
        while now_ns() < until {
            std::hint::spin_loop();
        }
        return;
    }
    let until = thread_cpu_ns().saturating_add(ns);
    let mut s: u64 = 1;
    loop {
        // About 10 µs of work between reads of the clock.
        for i in 0..8192u64 {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(i);
        }
        std::hint::black_box(s);
        if thread_cpu_ns() >= until {
            break;
        }
    }
}

/// This thread's CPU time in nanoseconds (`CLOCK_THREAD_CPUTIME_ID`).
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Runs recorded thread `t`'s calls.
fn run_thread(ctx: &Arc<Context>, process: &Arc<Process>, t: usize) {
    let plan = &ctx.plan;
    for &k in &plan.threads[t].calls {
        let call = &ctx.calls[k];
        think(plan.think_ns[k]);
        for &w in &plan.waits[k] {
            ctx.table.wait(w);
        }
        let began = now_ns();
        let outcome = match call.nr {
            // The thread, or its process, ends with its plan.
            60 | 231 => Issued::Made(0),
            _ if call.exit.is_none() => Issued::Skipped(DID_NOT_RETURN),
            56 | 57 | 58 | 435 => make(ctx, process, k),
            61 if call.exit.is_some_and(|e| e.result < 0) => Issued::Skipped(REAPED_NOTHING),
            61 => wait4(call, process),
            _ => issue(call, &process.fds, &ctx.paths, plan.took_ns[k]),
        };
        ctx.table.finish(k, outcome, began);
    }
}

/// A fork-like call: the processes and threads it made in the record.
fn make(ctx: &Arc<Context>, process: &Arc<Process>, k: usize) -> Issued {
    let made = ctx.plan.made_by(k);
    let Some(&child) = made.first() else {
        return Issued::Skipped(MADE_NOTHING);
    };
    let recorded = ctx.calls[k].exit.map_or(0, |e| e.result);
    if let Start::Thread(_) = ctx.plan.threads[child].start {
        spawn(ctx, process, child);
        return Issued::Made(recorded);
    }
    // Hold the tables across the fork, so that no other thread of this
    // process holds them in the child's copy.
    let fds = process.fds.lock().expect("unpoisoned");
    let copy = fds.clone();
    // SAFETY: as in `replay`: the child runs the replay and `_exit`s.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let child_process = Arc::new(Process {
            fds: Mutex::new(copy),
            pids: Mutex::new(HashMap::new()),
            threads: Mutex::new(Vec::new()),
        });
        run_process(ctx, &child_process, &made)
    }
    drop(fds);
    if pid < 0 {
        return Issued::Made(-(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64));
    }
    process
        .pids
        .lock()
        .expect("unpoisoned")
        .insert(recorded as i32, pid);
    // vfork, or clone with CLONE_VFORK: the parent waits until the child
    // execs or ends.
    let call = &ctx.calls[k];
    if call.nr == 58 || call.nr == 56 && call.args[0] & 0x4000 != 0 {
        let calls = &ctx.plan.threads[child].calls;
        let until = calls
            .iter()
            .find(|&&c| matches!(ctx.calls[c].nr, 59 | 322))
            .or(calls.last());
        if let Some(&c) = until {
            ctx.table.wait(c);
        }
    }
    Issued::Made(pid as i64)
}

/// `wait4`: reaps the replay's child that stands for the child the
/// recorded call reaped (waiting for it, even where the recorded call
/// asked for any child, or did not wait: the same child is reaped at the
/// same point); a `WNOHANG` call that found none finds none. The result
/// is given back as the recorded pid.
fn wait4(call: &Call, process: &Process) -> Issued {
    let reaped = call.exit.map_or(0, |e| e.result) as i32;
    if reaped == 0 {
        return Issued::Made(0);
    }
    let pids = process.pids.lock().expect("unpoisoned").clone();
    let asked = call.args[0] as i32;
    let target = match pids.get(&reaped).or_else(|| pids.get(&asked)) {
        Some(&real) => real,
        None if asked > 0 => return Issued::Skipped(NOT_MADE_HERE),
        None => asked,
    };
    let mut status = 0;
    let options = call.args[2] as i32 & !libc::WNOHANG;
    // SAFETY: `status` is a valid int to write.
    let r = unsafe { libc::waitpid(target, &mut status, options) };
    if r < 0 {
        return Issued::Made(-(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64));
    }
    let back = pids
        .iter()
        .find(|(_, &real)| real == r)
        .map_or(r, |(&rec, _)| rec);
    Issued::Made(back as i64)
}

/// Watches the table until every replay process has ended; kills them
/// all if nothing finishes for `stall`, and says what was waiting.
/// Watches the table until every replay process has ended. Stops them
/// all (their process groups) if nothing finishes for the stall limit,
/// or when `options.stop` is set (weft was interrupted), and says what
/// was waiting.
fn watch(ctx: &Context, roots: &[i32], options: &Options<'_>) -> Option<String> {
    let table = &ctx.table;
    let mut left: Vec<i32> = roots.to_vec();
    let mut last = (table.done(), std::time::Instant::now());
    let mut stopped = None;
    while !left.is_empty() {
        left.retain(|&pid| {
            let mut status = 0;
            // SAFETY: `status` is a valid int to write.
            unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) == 0 }
        });
        let done = table.done();
        let interrupted = options.stop.is_some_and(|s| s.load(Ordering::Relaxed));
        if done != last.0 {
            last = (done, std::time::Instant::now());
        }
        let stalled = last.1.elapsed() > options.stall;
        if (interrupted || stalled) && stopped.is_none() {
            let why = match interrupted {
                true => "interrupted",
                false => "stalled",
            };
            stopped = Some(format!(
                "{why}, and stopped: {}",
                waiting(table, &ctx.plan, &ctx.calls)
            ));
            for &pid in &left {
                // SAFETY: signals the replay's own process groups.
                unsafe { libc::kill(-pid, libc::SIGKILL) };
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    stopped
}

/// The first calls not done, per thread, and what they wait for: `thread
/// 12 at its call 40 (read; line 97 of show), waiting for its call 38
/// (write; line 95 of show) of thread 13`, or `in its call ...` when it
/// waits for nothing (a call that blocks). A thread's calls count from 1,
/// as `reexec` counts them; the line is `weft syscalls show`'s.
fn waiting(table: &Table, plan: &Plan, calls: &[Call]) -> String {
    let mut place: HashMap<usize, usize> = HashMap::new();
    for t in &plan.threads {
        for (p, &k) in t.calls.iter().enumerate() {
            place.insert(k, p + 1);
        }
    }
    let call = |k: usize| {
        format!(
            "its call {} ({}; line {} of show)",
            place.get(&k).copied().unwrap_or(0),
            weft_syscalls::name(calls[k].nr),
            k + 1
        )
    };
    let mut out = Vec::new();
    for t in &plan.threads {
        let Some(&k) = t.calls.iter().find(|&&k| !table.is_done(k)) else {
            continue;
        };
        let on: Vec<String> = plan.waits[k]
            .iter()
            .filter(|&&w| !table.is_done(w))
            .map(|&w| format!("{} of thread {}", call(w), calls[w].tid))
            .collect();
        out.push(match on.is_empty() {
            true => format!("thread {} in {}", t.tid, call(k)),
            false => format!(
                "thread {} at {}, waiting for {}",
                t.tid,
                call(k),
                on.join(", ")
            ),
        });
    }
    out.join("; ")
}
