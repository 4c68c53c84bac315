//! The watch over a rerun (`weft syscalls reexec`): weft's thread that
//! reads the feed while the rerun runs, marks calls waiting for a process
//! that ended as done, and ends the rerun at a divergence, at the end of
//! a record that ends inside a call, or where a call waits far longer
//! than the recorded one did (a stall: what it waits for is not part of
//! the rerun).

use super::reexec::{backtrace_of, paths_of};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use weft_abi::feed as f;
use weft_syscalls::reexec::{self as rx, Divergence};
use weft_syscalls::Call;

/// A divergence, with the paths its call named and its thread's call
/// stack (read from the diverged thread's memory while it waits).
pub(super) type Diverged = (Divergence, Vec<String>, Vec<String>);

/// Watches the feed until `done`: at a divergence, ends the rerun (kills
/// the diverged thread's process, then every other process of the rerun)
/// and returns it.
/// A thread feed's last call that never returned in the record (its
/// process was killed in it, or the record stopped): where its rerun
/// entry's times are in the feed, and how long the record went on after
/// it began (TSC ticks of this machine), with its index in the record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Unfinished {
    began_at: u64,
    ended_at: u64,
    allowed: u64,
    call: usize,
}

/// The unfinished last calls of `feed`'s thread feeds (see
/// [`Unfinished`]), the record's TSC at `ticks_per_ns`.
pub(super) fn unfinished_ends(
    calls: &[Call],
    feed: &rx::FeedFile,
    ticks_per_ns: f64,
) -> Vec<Unfinished> {
    let word = |at: u64| {
        let at = at as usize;
        feed.bytes
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    };
    let end = (calls.iter())
        .map(|c| c.exit.and_then(|e| e.tsc).unwrap_or(c.entry_tsc))
        .max()
        .unwrap_or(0);
    let here = weft_live::clock::ticks_per_ns();
    let threads = word(f::THREADS);
    let mut out = Vec::new();
    for (i, ks) in feed.calls.iter().enumerate() {
        let (Some(&k), Some(p)) = (ks.last(), ks.len().checked_sub(1)) else {
            continue;
        };
        let c = &calls[k];
        let never_returns = [60, 231].contains(&c.nr) || weft_syscalls::is_exec(c.nr);
        if c.exit.is_some() || never_returns {
            continue;
        }
        let first = word(threads + f::THREAD_SIZE * i as u64 + f::THREAD_CALLS);
        let at = first + f::CALL_SIZE * p as u64;
        let recorded_ns = end.saturating_sub(c.entry_tsc) as f64 / ticks_per_ns.max(1e-9);
        out.push(Unfinished {
            began_at: at + f::CALL_RERUN_BEGAN,
            ended_at: at + f::CALL_RERUN_ENDED,
            // As long as in the record, and a second more.
            allowed: ((recorded_ns + 1e9) * here) as u64,
            call: k,
        });
    }
    out
}

pub(super) fn watch(
    path: &Path,
    done: &AtomicBool,
    (unfinished, feed_lengths): (&[Unfinished], &[u64]),
    stall: &Stall,
    ended: &std::sync::Mutex<Ended>,
) -> Option<Diverged> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .ok()?;
    let mut header = vec![0u8; f::HEADER_SIZE as usize];
    file.read_exact_at(&mut header, 0).ok()?;
    // The header and the thread feeds (which follow it): who follows which.
    let threads = f::HEADER_SIZE + f::THREAD_SIZE * rx::progress(&header).len() as u64;
    let mut table = vec![0u8; threads as usize];
    let mut seen: Option<Diverged> = None;
    // Every thread of the rerun seen so far, with its start time: one
    // whose id names another process by now is not ended.
    let mut rerun: std::collections::HashMap<i32, u64> = std::collections::HashMap::new();
    let mut killed = std::collections::HashSet::new();
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(5));
        if file.read_exact_at(&mut table, 0).is_err() {
            continue;
        }
        for p in rx::progress(&table).iter().filter(|p| p.tid > 0) {
            if let (std::collections::hash_map::Entry::Vacant(v), Some(start)) =
                (rerun.entry(p.tid), weft_process::start_time(p.tid))
            {
                v.insert(start);
            }
        }
        // A thread gone has done all it will: a call waiting for its
        // process's end goes on (its sleep ends within 10 ms).
        let gone = |tid: i32| {
            !weft_process::is_alive(tid)
                || rerun
                    .get(&tid)
                    .is_some_and(|&s| weft_process::start_time(tid) != Some(s))
        };
        for (at, calls) in rx::ended(&table, &gone) {
            let _ = file.write_all_at(&calls.to_le_bytes(), at);
        }
        // A call the record ends inside, made in the rerun as long as
        // the record went on after it: the rerun ends there too.
        let read_word = |at: u64| {
            let mut b = [0u8; 8];
            file.read_exact_at(&mut b, at)
                .map_or(0, |_| u64::from_le_bytes(b))
        };
        // Only once every live thread of the rerun has made all its
        // recorded calls: a slower rerun of the others is not cut short.
        let all_made = (rx::progress(&table).iter().enumerate())
            .filter(|(_, p)| p.tid > 0 && !gone(p.tid))
            .all(|(i, p)| feed_lengths.get(i).is_some_and(|&n| p.cursor >= n));
        let overdue = unfinished.iter().find(|u| {
            let began = read_word(u.began_at);
            // Ended before it began again: an interrupted try, retried.
            let ended = read_word(u.ended_at);
            began != 0
                && (ended == 0 || ended < began)
                && weft_live::clock::tsc().saturating_sub(began) > u.allowed
        });
        if let (Some(u), true) = (overdue, all_made) {
            ended.lock().unwrap_or_else(|e| e.into_inner()).inside = Some(u.call);
            let alive = (rerun.iter())
                .filter(|&(&tid, &start)| weft_process::start_time(tid) == Some(start))
                .map(|(&tid, _)| tid)
                .collect::<Vec<_>>();
            for tid in alive {
                if killed.insert(tid) {
                    crate::run::ENDED_BY_WEFT.store(true, std::sync::atomic::Ordering::Relaxed);
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(tid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
            }
        }
        // A call that has waited far longer than its recorded one: what it
        // waits for is not part of the rerun. It ends there.
        let stalled = ended.lock().unwrap_or_else(|e| e.into_inner()).stalled;
        if stalled.is_none() {
            if let Some(found) = stall.find(&table, &read_word) {
                ended.lock().unwrap_or_else(|e| e.into_inner()).stalled = Some(found);
                for (&tid, &start) in &rerun {
                    if weft_process::start_time(tid) == Some(start) && killed.insert(tid) {
                        crate::run::ENDED_BY_WEFT.store(true, std::sync::atomic::Ordering::Relaxed);
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(tid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
        }
        let Some(d) = rx::divergence(&table) else {
            continue;
        };
        let (paths, stack) = match &seen {
            Some((_, paths, stack)) => (paths.clone(), stack.clone()),
            None => (paths_of(&d), backtrace_of(&d)),
        };
        // The rerun is over: each SIGKILL ends a whole process, the
        // diverged one first, those of threads stopped in weft's code,
        // and the others (a server waiting for a client that diverged
        // would wait for ever).
        let mut ending: Vec<i32> = vec![d.tid];
        ending.extend(
            rx::progress(&table)
                .iter()
                .filter(|p| p.stopped && p.tid > 0)
                .map(|p| p.tid),
        );
        ending.extend(
            rerun
                .iter()
                .filter(|&(&tid, &start)| weft_process::start_time(tid) == Some(start))
                .map(|(&tid, _)| tid),
        );
        for tid in ending {
            if killed.insert(tid) {
                crate::run::ENDED_BY_WEFT.store(true, std::sync::atomic::Ordering::Relaxed);
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(tid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        seen = Some((d, paths, stack));
    }
    seen
}

/// How a rerun ended besides a divergence: inside the call its record
/// ends in (the record's index), or stalled in a call (the record's
/// index, how long the rerun waited there, in seconds, and whether it
/// waited in a futex call its record does not have, before that one).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Ended {
    pub(super) inside: Option<usize>,
    pub(super) stalled: Option<(usize, f64, bool)>,
}

/// What makes a call stalled: per thread feed, its calls' indices in the
/// record and how long each took there (TSC ticks of this machine; none
/// for a call that never returned), and the slack a call gets past ten
/// times its recorded time.
pub(super) struct Stall {
    calls: Vec<Vec<usize>>,
    took: Vec<Vec<Option<u64>>>,
    slack: u64,
    ticks_per_ns: f64,
}

impl Stall {
    /// For `feed` built from `calls` (recorded at `ticks_per_ns`), with
    /// `slack` past ten times each call's recorded time.
    pub(super) fn new(
        calls: &[Call],
        feed: &rx::FeedFile,
        ticks_per_ns: f64,
        slack: Duration,
    ) -> Stall {
        let here = weft_live::clock::ticks_per_ns();
        let took = (feed.calls.iter())
            .map(|ks| {
                ks.iter()
                    .map(|&k| {
                        let c = &calls[k];
                        let end = c.exit.and_then(|e| e.tsc)?;
                        let ns = end.saturating_sub(c.entry_tsc) as f64 / ticks_per_ns.max(1e-9);
                        Some((ns * here) as u64)
                    })
                    .collect()
            })
            .collect();
        Stall {
            calls: feed.calls.clone(),
            took,
            slack: (slack.as_nanos() as f64 * here) as u64,
            ticks_per_ns: here,
        }
    }

    /// A thread's call under way in the rerun (`table`: the feed's header
    /// and thread feeds; `word` reads the feed) for longer than ten times
    /// its recorded time and the slack: its index in the record, and the
    /// seconds it has waited; or a futex call the record does not have
    /// (`f::THREAD_EXTRA`) for longer than the slack: the index of the
    /// thread's recorded call it came before, and true.
    fn find(&self, table: &[u8], word: &dyn Fn(u64) -> u64) -> Option<(usize, f64, bool)> {
        let now = weft_live::clock::tsc();
        let threads = word(f::THREADS);
        let seconds = |ticks: u64| ticks as f64 / self.ticks_per_ns / 1e9;
        for (i, p) in rx::progress(table).iter().enumerate() {
            let extra = word(threads + f::THREAD_SIZE * i as u64 + f::THREAD_EXTRA);
            let (began, ended) = (
                word(extra + f::CALL_RERUN_BEGAN),
                word(extra + f::CALL_RERUN_ENDED),
            );
            let next = self.calls.get(i).and_then(|ks| {
                ks.get(p.cursor as usize)
                    .or_else(|| ks.get((p.cursor as usize).checked_sub(1)?))
            });
            if let (true, Some(&k)) = (extra != 0 && began != 0 && ended < began, next) {
                let waited = now.saturating_sub(began);
                if waited > self.slack {
                    return Some((k, seconds(waited), true));
                }
            }
        }
        for (i, p) in rx::progress(table).iter().enumerate() {
            let Some(at) = (p.cursor as usize).checked_sub(1) else {
                continue;
            };
            let (Some(&k), Some(&Some(took))) = (
                self.calls.get(i).and_then(|ks| ks.get(at)),
                self.took.get(i).and_then(|t| t.get(at)),
            ) else {
                continue;
            };
            let first = word(threads + f::THREAD_SIZE * i as u64 + f::THREAD_CALLS);
            let call = first + f::CALL_SIZE * at as u64;
            let (began, ended) = (
                word(call + f::CALL_RERUN_BEGAN),
                word(call + f::CALL_RERUN_ENDED),
            );
            let waited = now.saturating_sub(began);
            if began != 0
                && ended < began
                && waited > took.saturating_mul(10).saturating_add(self.slack)
            {
                return Some((k, seconds(waited), false));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread waiting in a futex call its record does not have (its
    /// feed's extra call begun and not ended) longer than the slack is
    /// found stalled there, before its next recorded call: without it, a
    /// rerun whose thread waits for ever in such a call was never ended.
    #[test]
    fn a_thread_waiting_in_an_unrecorded_futex_is_found_stalled() {
        let call = |nr: u64| Call {
            tid: 10,
            ring: 10,
            entry_tsc: 0,
            user_ns: None,
            loader: false,
            nr,
            vdso: false,
            args: [0; 6],
            exit: Some(weft_syscalls::Return {
                tsc: Some(1),
                result: 0,
            }),
            buffers: Vec::new(),
        };
        let calls = [call(39), call(1)];
        let resources = weft_syscalls::fds::resolve(&calls, &Default::default());
        let feed = rx::build_feed(&calls, &resources, &[]);
        let mut bytes = feed.bytes.clone();
        let put = |b: &mut Vec<u8>, at: u64, v: u64| {
            b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes())
        };
        let word = |b: &[u8], at: u64| {
            u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap())
        };
        let thread = word(&bytes, f::THREADS);
        put(&mut bytes, thread + f::THREAD_RERUN_TID, 4242);
        put(&mut bytes, thread + f::THREAD_CURSOR, 1);
        let stall = Stall::new(&calls, &feed, 1.0, Duration::from_millis(1));
        let read = |b: &[u8]| {
            let b = b.to_vec();
            move |at: u64| word(&b, at)
        };
        assert_eq!(stall.find(&bytes, &read(&bytes)), None, "nothing waits");
        let extra = word(&bytes, thread + f::THREAD_EXTRA);
        let long_ago = weft_live::clock::tsc() - (weft_live::clock::ticks_per_ns() * 1e9) as u64;
        put(&mut bytes, extra + f::CALL_RERUN_BEGAN, long_ago);
        let found = stall.find(&bytes, &read(&bytes));
        assert!(
            matches!(found, Some((1, waited, true)) if waited > 0.5),
            "{found:?}"
        );
    }
}
