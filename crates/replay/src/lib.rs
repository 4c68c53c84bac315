//! Replaying a recorded workload (ULTra's replay, issue 13): one process
//! per recorded process and one thread per recorded thread, each
//! reissuing its thread's calls in order with the recorded arguments,
//! spinning for the time the thread spent between calls, and waiting for
//! the dependencies `weft_syscalls::deps` found with futexes on a table
//! shared by every replay process.
//!
//! [`Plan`] (here, pure) says who creates whom and what each thread waits
//! for; [`sandbox`] decides where paths go; `issue` turns a recorded call
//! into the call the replay makes; `run` runs it all, in a control group
//! of [`limits`] when asked (ULTra's prediction under another
//! configuration).

mod issue;
pub mod limits;
mod run;
pub mod sandbox;

pub use limits::{Group, Limits};
pub use run::{replay, Options, Outcome, Report};

use std::collections::{BTreeMap, HashMap};
use weft_syscalls::deps::Edge;
use weft_syscalls::Call;

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The trace holds no call.
    #[error("the trace holds no system call to replay")]
    Empty,
    /// A sandbox given with --root lacks a file the workload read.
    #[error("the sandbox {root} lacks {path}, which the workload reads ({call}): copy it there, or leave out --root and weft makes a sandbox from this machine's files")]
    MissingFile {
        root: String,
        path: String,
        call: String,
    },
    /// --root names no directory.
    #[error("the sandbox {0} is not a directory: give --root a directory holding the files the workload reads, or leave it out and weft makes one")]
    NotADirectory(String),
    /// The limits could not be set.
    #[error(transparent)]
    Limits(#[from] limits::LimitError),
    /// Making the sandbox, the shared table or a process failed.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

/// How one recorded thread comes to exist in the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// At the start: a thread the record did not see made (the workload's
    /// first, or an attached process's).
    Initial,
    /// Made by this call (an index) of another thread: a process of its
    /// own (`fork`, `vfork`, `clone` without `CLONE_THREAD`) ...
    Process(usize),
    /// ... or a thread of its creator's process.
    Thread(usize),
}

/// One recorded thread's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadPlan {
    /// Its id in the record.
    pub tid: i32,
    /// Its process in the record.
    pub pid: i32,
    /// How it starts.
    pub start: Start,
    /// Its calls (indexes), in order.
    pub calls: Vec<usize>,
}

/// What the replay does: per thread its calls, per call the calls of
/// other threads it waits for and the time the thread ran before it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The threads, in the order they first appear.
    pub threads: Vec<ThreadPlan>,
    /// Per call: the calls it waits for (the edges into it).
    pub waits: Vec<Vec<usize>>,
    /// Per call: nanoseconds its thread ran between its previous call's
    /// return (or its start) and this call: its user CPU time where the
    /// record has it, else the wall-clock time.
    pub think_ns: Vec<u64>,
    /// Calls whose thread time is user CPU time (the rest: wall-clock).
    pub user_time_calls: usize,
    /// Per call: nanoseconds it took in the record.
    pub took_ns: Vec<u64>,
    /// Nanoseconds from the first call's entry to the last return.
    pub recorded_ns: u64,
}

/// Calls whose result is a byte count or an offset the replay must give
/// again to agree with the record: `read`, `write`, `pread64`,
/// `pwrite64`, `lseek`, `sendto`, `recvfrom`, `readlink`, `readlinkat`.
const COUNTS: [u64; 9] = [0, 1, 17, 18, 8, 44, 45, 89, 267];

/// Whether a call made again agrees with the record: the same error, or
/// both succeeded (with the same count for the calls of [`COUNTS`]; a
/// new descriptor or a child's id may differ).
pub fn agrees(call: &Call, replayed: i64) -> bool {
    let Some(recorded) = call.exit.map(|e| e.result) else {
        return true;
    };
    let error = |r: i64| (-4095..0).contains(&r);
    match (error(recorded), error(replayed)) {
        (true, true) => recorded == replayed,
        (false, false) => !COUNTS.contains(&call.nr) || recorded == replayed,
        _ => false,
    }
}

/// `clone`'s flag for a thread of the caller's process.
const CLONE_THREAD: u64 = 0x10000;

impl Plan {
    /// The plan of `calls` (as `weft_syscalls::calls` pairs them), their
    /// processes (`process[k]` of call `k`), the dependency `edges`, and
    /// the TSC rate.
    pub fn new(calls: &[Call], process: &[i32], edges: &[Edge], ticks_per_ns: f64) -> Plan {
        let ns = |ticks: u64| (ticks as f64 / ticks_per_ns.max(1e-9)) as u64;
        let mut threads: Vec<ThreadPlan> = Vec::new();
        let mut index: HashMap<i32, usize> = HashMap::new();
        // The call that made each thread: a fork-like call returning it.
        let mut made_by: HashMap<i32, usize> = HashMap::new();
        for (k, c) in calls.iter().enumerate() {
            if matches!(c.nr, 56 | 57 | 58 | 435) {
                if let Some(child) = c.exit.map(|e| e.result).filter(|&r| r > 0) {
                    made_by.entry(child as i32).or_insert(k);
                }
            }
        }
        let mut think_ns = vec![0; calls.len()];
        let mut took_ns = vec![0; calls.len()];
        let mut last_return: HashMap<i32, u64> = HashMap::new();
        // Per thread, its user CPU time at its previous call.
        let mut last_user: HashMap<i32, u64> = HashMap::new();
        let mut user_time_calls = 0;
        for (k, c) in calls.iter().enumerate() {
            let t = *index.entry(c.tid).or_insert_with(|| {
                let start = match made_by.get(&c.tid) {
                    Some(&m) if calls[m].tid != c.tid => {
                        let creator = process[m];
                        let thread = calls[m].nr == 56 && calls[m].args[0] & CLONE_THREAD != 0
                            || process[k] == creator;
                        match thread {
                            true => Start::Thread(m),
                            false => Start::Process(m),
                        }
                    }
                    _ => Start::Initial,
                };
                threads.push(ThreadPlan {
                    tid: c.tid,
                    pid: process[k],
                    start,
                    calls: Vec::new(),
                });
                threads.len() - 1
            });
            threads[t].calls.push(k);
            // A new image's first call restarts its thread's user time.
            match (c.user_ns, last_user.get(&c.tid)) {
                (Some(now), Some(&before)) if now >= before => {
                    // No more CPU time than time passed since the thread's
                    // last return (a recorded value out of that bound is
                    // not the thread's user time).
                    let passed = (last_return.get(&c.tid))
                        .map_or(u64::MAX, |&back| ns(c.entry_tsc.saturating_sub(back)));
                    think_ns[k] = (now - before).min(passed);
                    user_time_calls += 1;
                }
                (Some(_), _) => user_time_calls += 1,
                (None, _) => {
                    if let Some(&back) = last_return.get(&c.tid) {
                        think_ns[k] = ns(c.entry_tsc.saturating_sub(back));
                    }
                }
            }
            if let Some(now) = c.user_ns {
                last_user.insert(c.tid, now);
            }
            if let Some(tsc) = c.exit.and_then(|e| e.tsc) {
                took_ns[k] = ns(tsc.saturating_sub(c.entry_tsc));
                last_return.insert(c.tid, tsc);
            }
        }
        let mut waits = vec![Vec::new(); calls.len()];
        // A blocking read waits for its bytes by itself.
        for e in edges.iter().filter(|e| !e.waits_by_itself) {
            waits[e.to].push(e.from);
        }
        let first = calls.first().map_or(0, |c| c.entry_tsc);
        let last = calls
            .iter()
            .map(|c| c.exit.and_then(|e| e.tsc).unwrap_or(c.entry_tsc))
            .max()
            .unwrap_or(first);
        Plan {
            threads,
            waits,
            think_ns,
            user_time_calls,
            took_ns,
            recorded_ns: ns(last.saturating_sub(first)),
        }
    }

    /// The threads that start with the replay, by process (the processes
    /// the record did not see made), in order.
    pub fn initial(&self) -> BTreeMap<i32, Vec<usize>> {
        let mut out: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (t, plan) in self.threads.iter().enumerate() {
            if plan.start == Start::Initial {
                out.entry(plan.pid).or_default().push(t);
            }
        }
        out
    }

    /// The threads call `k` makes (a process's first thread, or a thread).
    pub fn made_by(&self, k: usize) -> Vec<usize> {
        (0..self.threads.len())
            .filter(|&t| matches!(self.threads[t].start, Start::Process(m) | Start::Thread(m) if m == k))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_syscalls::Return;

    fn call(tid: i32, entry: u64, exit: u64, nr: u64, args: &[u64], result: i64) -> Call {
        Call {
            tid,
            ring: tid,
            entry_tsc: entry,
            user_ns: None,
            loader: false,
            nr,
            vdso: false,
            args: std::array::from_fn(|i| args.get(i).copied().unwrap_or(0)),
            exit: Some(Return {
                tsc: Some(exit),
                result,
            }),
            buffers: Vec::new(),
        }
    }

    #[test]
    fn results_agree_by_error_and_by_count() {
        let read = call(1, 0, 1, 0, &[3], 10);
        assert!(agrees(&read, 10));
        assert!(!agrees(&read, 9));
        assert!(!agrees(&read, -2));
        let open = call(1, 0, 1, 257, &[], 3);
        assert!(agrees(&open, 5), "another descriptor number");
        let failed = call(1, 0, 1, 257, &[], -2);
        assert!(agrees(&failed, -2));
        assert!(!agrees(&failed, -13));
        assert!(!agrees(&failed, 4));
    }

    #[test]
    fn forks_make_processes_clones_threads_and_gaps_are_think_time() {
        let calls = vec![
            call(10, 100, 110, 57, &[], 11),             // fork -> 11
            call(10, 130, 140, 56, &[CLONE_THREAD], 12), // thread 12
            call(11, 150, 160, 0, &[3], 1),
            call(12, 170, 180, 1, &[1], 1),
            call(10, 200, 220, 61, &[11], 11), // wait4
        ];
        let process = [10, 10, 11, 10, 10];
        let edges = [Edge {
            from: 2,
            to: 4,
            resource: 0,
            waits_by_itself: false,
        }];
        let plan = Plan::new(&calls, &process, &edges, 2.0);
        let starts: Vec<(i32, Start)> = plan.threads.iter().map(|t| (t.tid, t.start)).collect();
        assert_eq!(
            starts,
            [
                (10, Start::Initial),
                (11, Start::Process(0)),
                (12, Start::Thread(1))
            ]
        );
        assert_eq!(plan.threads[0].calls, [0, 1, 4]);
        assert_eq!(plan.think_ns, [0, 10, 0, 0, 30], "ticks at 2 a ns");
        assert_eq!(plan.user_time_calls, 0);
        let mut timed = calls.clone();
        for (c, user) in timed.iter_mut().zip([100, 104, 7, 9, 111]) {
            c.user_ns = Some(user);
        }
        let plan = Plan::new(&timed, &process, &edges, 2.0);
        assert_eq!(plan.think_ns, [0, 4, 0, 0, 7], "user time where recorded");
        assert_eq!(plan.user_time_calls, 5);
        // No more user time than time passed since the last return (the
        // wait4's 60 ticks after the clone's: 30 ns).
        let mut wild = timed.clone();
        wild[4].user_ns = Some(1 << 62);
        let capped = Plan::new(&wild, &process, &edges, 2.0);
        assert_eq!(capped.think_ns, [0, 4, 0, 0, 30]);
        assert_eq!(plan.took_ns[4], 10);
        assert_eq!(plan.waits[4], [2]);
        assert_eq!(plan.recorded_ns, 60);
        assert_eq!(
            plan.initial().into_iter().collect::<Vec<_>>(),
            [(10, vec![0])]
        );
        assert_eq!(plan.made_by(0), [1]);
        assert_eq!(plan.made_by(1), [2]);
    }
}
