//! Re-execution (ULTra's second way of running a workload again): the
//! real program runs once more, and at each of its `syscall` instructions
//! a feed probe (`weft_plan::Feed`, compiled by `weft_patch::mini`)
//! follows the calling thread through its recorded calls. Calls whose
//! results the rerun cannot reproduce get the recorded ones (see
//! [`answered`]); the others are made; a call that is not the recorded
//! one stops the rerun (a divergence).
//!
//! This module plans the probes and builds the feed, the file that holds
//! every recorded thread's calls in the layout of `weft_abi::feed`, and
//! reads back what the rerun wrote into it.

use crate::deps::Edge;
use crate::fds::{Kind, Resources};
use crate::{Call, Memory};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weft_abi::feed as f;
use weft_plan::{Allocate, Exhausted, Expand, Feed, Guarded, PointSpec};
use weft_plan::{Primitive, Resolved, VdsoCall};

/// The feed probes at every `syscall` instruction of the functions
/// matching `pattern`, before it and after it.
pub fn feed_specs(pattern: &str) -> Result<Vec<PointSpec>, weft_plan::Error> {
    let mut specs = crate::syscall_specs(pattern, |returning| {
        Arc::new(FeedProbe {
            returning,
            vdso: false,
        })
    })?;
    specs.extend(crate::vdso::vdso_specs(|returning| {
        Arc::new(FeedProbe {
            returning,
            vdso: true,
        })
    })?);
    Ok(specs)
}

/// The feed at a `syscall` instruction (before or after it), or at a
/// vDSO function's entry or returns.
#[derive(Debug)]
struct FeedProbe {
    returning: bool,
    vdso: bool,
}

impl Expand for FeedProbe {
    fn expand(
        &self,
        at: &Resolved<'_>,
        alloc: &mut dyn Allocate,
    ) -> Result<Vec<Guarded>, Exhausted> {
        let vdso = match self.vdso {
            true => match crate::vdso::call_of(at.function) {
                Some(nr) => Some(VdsoCall {
                    nr,
                    buffer: alloc.call_buffer()?.0,
                }),
                None => return Ok(Vec::new()),
            },
            false => None,
        };
        let (base, state) = alloc.feed()?;
        let feed = Guarded {
            predicate: None,
            primitive: Primitive::Feed(Feed {
                returning: self.returning,
                base,
                state,
                site: site_number(at.module, at.function),
                returns_to: deliveries::returns_to(at, self.vdso),
                vdso,
            }),
        };
        let child = (self.returning && !self.vdso)
            .then(|| crate::child_dispatch(at))
            .flatten();
        Ok([feed].into_iter().chain(child).collect())
    }
}

/// Every site numbered so far in this weft process, by name, and their
/// names by number: one number per `syscall` instruction, before and
/// after it, unique across the images of a workload.
static SITES: Mutex<Option<Sites>> = Mutex::new(None);

/// Site numbers by name, and names by number.
type Sites = (HashMap<String, u32>, Vec<String>);

/// The number of the `syscall` instruction at `function` of `module`
/// (`NAME+0xOFF`, the instruction's offset, as the applier names both
/// the point before it and the point after it).
fn site_number(module: &str, function: &str) -> u32 {
    let key = format!("{module}:{function}");
    let mut sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let (by_name, names) = sites.get_or_insert_with(Default::default);
    if let Some(&n) = by_name.get(&key) {
        return n;
    }
    let n = names.len() as u32;
    names.push(key.clone());
    by_name.insert(key, n);
    n
}

/// The name (`module:function+0xOFF`) of site `n`.
pub fn site_name(n: u64) -> Option<String> {
    let sites = SITES.lock().unwrap_or_else(|e| e.into_inner());
    let (_, names) = sites.as_ref()?;
    names.get(usize::try_from(n).ok()?).cloned()
}

/// Why a call gets its recorded result instead of being made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Answer {
    /// A process or thread id (`getpid`, `getppid`, `gettid`).
    Id,
    /// A clock (`clock_gettime`, `gettimeofday`, `time`, `sysinfo`).
    Time,
    /// Random bytes (`getrandom`, a read of `/dev/urandom`).
    Random,
    /// The CPU the thread ran on (`getcpu`).
    Cpu,
    /// Input from outside the workload: a read of a descriptor it
    /// inherited (its standard input, a pipe from its caller), or of a
    /// device; `fstat`, `lseek` and a failed `ioctl` of such a
    /// descriptor.
    Outside,
    /// Which of its descriptors `poll` found ready (the writes and
    /// closes that made them so are waited for).
    Ready,
    /// That no child had ended yet (`wait4` with `WNOHANG` that found
    /// none): the rerun's children end when its timing has them end.
    NotYet,
    /// That a signal interrupted the call (`EINTR`): the rerun runs the
    /// signal's handler at its return, as the record has it.
    Interrupted,
    /// Which signals were pending (`rt_sigpending`): the rerun raises the
    /// recorded ones where the record has them and drops its own
    /// processes' and timers', so its kernel's set says nothing of the
    /// record's.
    Pending,
}

impl Answer {
    /// How the report names it.
    pub fn describe(self) -> &'static str {
        match self {
            Answer::Id => "process and thread ids",
            Answer::Time => "clocks",
            Answer::Random => "random bytes",
            Answer::Cpu => "the CPU a thread ran on",
            Answer::Ready => "which descriptors were ready (poll, epoll, select)",
            Answer::Outside => "input from outside the workload",
            Answer::NotYet => "children not ended yet (wait4 WNOHANG)",
            Answer::Interrupted => "calls a signal's delivery interrupted (EINTR)",
            Answer::Pending => "pending signals (rt_sigpending)",
        }
    }
}

/// How long a waiting call sleeps at a time (`weft_abi::feed::WAIT_TIMEOUT`).
const WAIT_TIMEOUT_NS: u64 = 10_000_000;

/// Whether the program gets another result than the kernel's for call
/// `nr` in a rerun: the recorded id of the child it made, or of the one
/// `wait4` reaped.
pub fn result_is_translated(nr: u64) -> bool {
    MAKERS.contains(&nr) || GIVE_IDS.contains(&nr)
}

/// Whether call `nr` returns a process, group, session or thread id that
/// the rerun does not translate (the rerun's own ids are other numbers):
/// `set_tid_address`, `getpgrp`, `getpgid`, `getsid`.
pub fn result_is_an_id(nr: u64) -> bool {
    [218, 111, 121, 124].contains(&nr)
}

/// `readv`, `preadv`, `preadv2`: their recorded bytes go back through
/// their vectors (`weft_abi::feed::SCATTER`).
const VECTORED_READS: [u64; 3] = [19, 295, 327];

/// `-EINTR`.
const EINTR: i64 = -4;

/// Calls whose first argument is a descriptor, compared in the rerun.
const FD_FIRST: &[u64] = &[
    0, 1, 3, 5, 8, 16, 17, 18, 19, 20, 32, 33, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 54, 55,
    72, 74, 75, 77, 81, 217, 288, 292,
];
/// Calls whose second argument is a descriptor too (`dup2`, `dup3`).
const FD_SECOND: &[u64] = &[33, 292];
/// Calls that make a process or a thread.
const MAKERS: &[u64] = &[56, 57, 58, 435];

/// Whether `call` takes input (reads, receives): one its thread left in
/// the record, on input from outside the workload, is waited out in the
/// rerun (`feed::LEFT`).
fn takes_input(call: &Call) -> bool {
    // read, pread64, readv, preadv, preadv2, recvfrom, recvmsg, recvmmsg
    [0, 17, 19, 295, 327, 45, 47, 299].contains(&call.nr)
}

/// Calls whose first two arguments may be process or thread ids: `kill`,
/// `tkill`, `tgkill`, `wait4`, `waitid`, `setpgid`, `getpgid`, `getsid`,
/// `sched_setaffinity`, `sched_getaffinity`, `prlimit64`, `pidfd_open`.
const TAKE_IDS: &[u64] = &[62, 200, 234, 61, 247, 109, 121, 124, 203, 204, 302, 434];
/// `wait4`'s options not to wait, and to report stops and continues.
const WNOHANG: u64 = 1;
const WUNTRACED: u64 = 2;
const WCONTINUED: u64 = 8;

/// The child a `wait4` reaped: one whose end it reported (its status
/// says it exited or was killed; without a status, options that report
/// nothing else), not a stop or a continue, which an outside signal may
/// have caused and a rerun would wait for in vain.
fn reaped(call: &Call) -> Option<i32> {
    let child = call.exit.filter(|e| call.nr == 61 && e.result > 0)?.result as i32;
    let status = call
        .buffers
        .iter()
        .find(|b| b.what == Memory::Filled && b.arg == 1)
        .and_then(|b| Some(u32::from_le_bytes(b.bytes.get(..4)?.try_into().ok()?)));
    let ended = match status {
        Some(s) => s & 0x7f != 0x7f && s != 0xffff,
        None => call.args[2] & (WUNTRACED | WCONTINUED) == 0,
    };
    ended.then_some(child)
}
/// Calls whose result is a process id: `wait4`, `waitid` (0 or an error,
/// its id in `siginfo`, not translated).
const GIVE_IDS: &[u64] = &[61];

/// What call `k` uses if it is input from outside the workload (a
/// descriptor it inherited, a device but `/dev/null`): random bytes or
/// other input.
fn outside(k: usize, resources: &Resources, ops: &HashMap<usize, usize>) -> Option<Answer> {
    let r = &resources.resources[*ops.get(&k)?];
    let device = r.kind == Kind::File && r.name.starts_with("/dev/") && r.name != "/dev/null";
    (r.kind == Kind::Inherited || device).then_some(match r.name.as_str() {
        "/dev/urandom" | "/dev/random" => Answer::Random,
        _ => Answer::Outside,
    })
}

/// Whether the rerun answers `call` (the `k`th of the record) with its
/// recorded result, and why: `None` for a call the rerun makes; `Err`
/// for one it would answer but makes, since the record holds the bytes
/// it returned cut.
pub fn answered(
    k: usize,
    call: &Call,
    resources: &Resources,
    ops: &HashMap<usize, usize>,
) -> Result<Option<Answer>, Answer> {
    // A call its thread left has no recorded bytes, even where its
    // signal frame gave its result: it is made (or waited out: `LEFT`).
    if crate::calls::left_with_result(call) {
        return Ok(None);
    }
    let outside = || outside(k, resources, ops);
    let answer = match call.nr {
        39 | 110 | 186 => Some(Answer::Id),
        96 | 201 | 228 | 99 => Some(Answer::Time),
        318 => Some(Answer::Random),
        309 => Some(Answer::Cpu),
        127 if call.exit.is_some_and(|e| e.result == 0) => Some(Answer::Pending),
        // poll, ppoll: which descriptors were ready is timing; the
        // recorded answer, with the writes and closes that made them
        // ready waited for (`crate::deps`).
        7 | 271 if call.exit.is_some_and(|e| e.result >= 0) => Some(Answer::Ready),
        // epoll_wait, epoll_pwait, epoll_pwait2: the same, by the
        // descriptions their events' data stand for (`fds::epoll`).
        232 | 281 | 441 if call.exit.is_some_and(|e| e.result >= 0) => Some(Answer::Ready),
        // select, pselect6 with a read set only: the same, by the bits
        // the kernel wrote back (write and exception sets, which the
        // record does not hold, leave the call to be made, as does a
        // select with no set at all, a sleep).
        23 | 270
            if call.exit.is_some_and(|e| e.result >= 0)
                && call.args[1] != 0
                && call.args[2] == 0
                && call.args[3] == 0 =>
        {
            Some(Answer::Ready)
        }
        // wait4(..., WNOHANG) = 0: whether a child had ended is timing.
        61 if call.args[2] & WNOHANG != 0 && call.exit.is_some_and(|e| e.result == 0) => {
            Some(Answer::NotYet)
        }
        // read, pread64, recvfrom, fstat; readv, preadv, preadv2
        0 | 17 | 45 | 5 | 19 | 295 | 327 => outside(),
        // newfstatat(fd, "", buf, AT_EMPTY_PATH)
        262 if call.args[3] & 0x1000 != 0 => outside(),
        // lseek, and an ioctl that failed (isatty's `ENOTTY`) or filled
        // memory the record holds (a terminal's settings and size): what
        // the program learns of a descriptor it inherited (a file, a
        // pipe, a terminal) is what it learnt then. Another ioctl that
        // succeeded filled memory the record does not hold: it is made.
        8 => outside(),
        16 if call.exit.is_some_and(|e| e.result < 0)
            || call.buffers.iter().any(|b| b.what == Memory::Filled) =>
        {
            outside()
        }
        _ => None,
    };
    let Some(answer) = answer else {
        return Ok(None);
    };
    // Only what the record holds whole: a call that returned more bytes
    // than a record carries is made.
    let filled = call.buffers.iter().find(|b| b.what == Memory::Filled);
    match (call.exit, filled) {
        (None, _) => Ok(None),
        (Some(_), Some(b)) if b.truncated => Err(answer),
        _ => Ok(Some(answer)),
    }
}

/// A feed built from a record.
#[derive(Debug, Clone)]
pub struct FeedFile {
    /// The file's bytes.
    pub bytes: Vec<u8>,
    /// Each thread feed's ring (the recorded thread whose ring held its
    /// calls), in feed order.
    pub rings: Vec<i32>,
    /// Each thread feed's calls (indices into the record's calls).
    pub calls: Vec<Vec<usize>>,
    /// The calls the rerun answers, and why.
    pub answers: HashMap<usize, Answer>,
    /// The calls the rerun would answer but makes, since the record holds
    /// their bytes cut.
    pub cut: Vec<usize>,
    /// Calls a signal interrupted (`EINTR`) that the thread made again
    /// at once: not in the feed.
    pub interrupted: usize,
    /// Waits of a call for another thread's (the dependencies kept).
    pub waits: usize,
}

/// Builds the feed of `calls` (as [`crate::calls`] gives them, with the
/// resources `fds::resolve` works out for them, and the dependencies
/// between their threads `deps::edges` gives: each becomes a wait of the
/// later call for the earlier one's return). The first call's ring is
/// feed 0, the one weft names for the rerun's first process.
pub fn build_feed(calls: &[Call], resources: &Resources, edges: &[Edge]) -> FeedFile {
    let mut rings: Vec<i32> = Vec::new();
    let mut feed_of: HashMap<i32, usize> = HashMap::new();
    let mut per_feed: Vec<Vec<usize>> = Vec::new();
    // A call a signal interrupted, which the program made again at once,
    // is left out: the rerun's signals come when they come, and a call
    // they interrupt in the rerun stands for its recorded one again.
    let mut next_of_ring: HashMap<i32, usize> = HashMap::new();
    let mut retried = vec![false; calls.len()];
    // A call with no return that its thread followed with others: one
    // it left (not one that never returns, nor the record's end).
    let mut left = vec![false; calls.len()];
    // A call a signal's delivery the record holds interrupted (its
    // result `EINTR`, or the delivery's frame says so of a call the
    // handler then left): the rerun answers its EINTR and runs the handler
    // there, never waiting in it for a signal it drops.
    let mut interrupted = vec![false; calls.len()];
    for (k, c) in calls.iter().enumerate().rev() {
        if let Some(&next) = next_of_ring.get(&c.ring) {
            let n = &calls[next];
            let eintr = c.exit.is_some_and(|e| e.result == EINTR);
            let left_by_it = c.exit.is_none()
                && n.args[2] >> 32 == weft_abi::delivery::AFTER_SYSCALL
                && n.args[1] as i64 == EINTR;
            interrupted[k] =
                (eintr || left_by_it) && crate::calls::is_delivery(n) && !MASKING.contains(&c.nr);
            retried[k] = eintr && n.nr == c.nr && n.args == c.args;
            left[k] = (c.exit.is_none() || crate::calls::left_with_result(c)) && takes_input(c);
        }
        next_of_ring.insert(c.ring, k);
    }
    for (k, c) in calls.iter().enumerate() {
        if retried[k] {
            continue;
        }
        let i = *feed_of.entry(c.ring).or_insert_with(|| {
            rings.push(c.ring);
            per_feed.push(Vec::new());
            rings.len() - 1
        });
        per_feed[i].push(k);
    }
    let ops: HashMap<usize, usize> = resources
        .ops
        .iter()
        .map(|op| (op.call, op.resource))
        .collect();
    let threads_at = f::HEADER_SIZE;
    let calls_at = threads_at + f::THREAD_SIZE * rings.len() as u64;
    // After the calls, each thread feed's extra call (`f::THREAD_EXTRA`).
    let extras_at = calls_at + f::CALL_SIZE * calls.len() as u64;
    let map_at = extras_at + f::CALL_SIZE * rings.len() as u64;
    let map_capacity = rings.len() as u64 + 64;
    let data_at = map_at + f::MAP_ENTRY * map_capacity;
    let mut bytes = vec![0u8; data_at as usize];
    let put = |bytes: &mut Vec<u8>, at: u64, v: u64| {
        bytes[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes())
    };
    put(&mut bytes, 0, f::MAGIC);
    put(&mut bytes, f::HEADER_VERSION, f::VERSION);
    put(&mut bytes, f::THREAD_COUNT, rings.len() as u64);
    put(&mut bytes, f::THREADS, threads_at);
    put(&mut bytes, f::MAP, map_at);
    put(&mut bytes, f::MAP_CAPACITY, map_capacity);
    put(&mut bytes, f::WAIT_TIMEOUT + 8, WAIT_TIMEOUT_NS);
    // Each call's thread feed and index there; and what it waits for:
    // per other feed, the newest call there it depends on (which returned
    // in the record: one that never returns, an `execve`, is never done;
    // but an `exit_group` is, once weft sees its thread gone: `ended`).
    let mut place: HashMap<usize, (usize, usize)> = HashMap::new();
    for (i, ks) in per_feed.iter().enumerate() {
        for (p, &k) in ks.iter().enumerate() {
            place.insert(k, (i, p));
        }
    }
    let mut waits_of: HashMap<usize, std::collections::BTreeMap<usize, usize>> = HashMap::new();
    for e in edges {
        let (Some(&(to_feed, _)), Some(&(from_feed, from_at))) =
            (place.get(&e.to), place.get(&e.from))
        else {
            continue;
        };
        let returns = calls[e.from].exit.and_then(|r| r.tsc).is_some();
        if to_feed == from_feed
            || e.waits_by_itself
            || !returns && calls[e.from].nr != crate::fds::EXIT_GROUP
        {
            continue;
        }
        let newest = waits_of
            .entry(e.to)
            .or_default()
            .entry(from_feed)
            .or_default();
        *newest = (*newest).max(from_at + 1);
    }
    delivery_waits(calls, &per_feed, &mut waits_of);
    let mut waits = 0;
    let mut answers = HashMap::new();
    let mut cut = Vec::new();
    let mut slot = 0u64;
    for (i, ks) in per_feed.iter().enumerate() {
        let places = raise_places(calls, ks);
        let t = threads_at + f::THREAD_SIZE * i as u64;
        put(&mut bytes, t + f::THREAD_TID, rings[i] as u64);
        put(
            &mut bytes,
            t + f::THREAD_CALLS,
            calls_at + f::CALL_SIZE * slot,
        );
        put(&mut bytes, t + f::THREAD_COUNT_CALLS, ks.len() as u64);
        put(
            &mut bytes,
            t + f::THREAD_EXTRA,
            extras_at + f::CALL_SIZE * i as u64,
        );
        put(
            &mut bytes,
            extras_at + f::CALL_SIZE * i as u64 + f::CALL_NR,
            FUTEX,
        );
        for (p, &k) in ks.iter().enumerate() {
            let c = &calls[k];
            let at = calls_at + f::CALL_SIZE * slot;
            slot += 1;
            let mut flags = 0u64;
            if MASKING.contains(&c.nr)
                && c.exit.is_some_and(|e| e.result == EINTR)
                && ks
                    .get(p + 1)
                    .is_some_and(|&n| crate::calls::is_delivery(&calls[n]))
            {
                flags |= f::MASKED_WAIT;
            }
            let mut args = c.args;
            if let Some(&(place, rip)) = places.get(&k) {
                flags |= place;
                args[0] = rip;
            }
            if FD_FIRST.contains(&c.nr) {
                flags |= 1 << f::COMPARE_SHIFT;
            }
            if FD_SECOND.contains(&c.nr) {
                flags |= 2 << f::COMPARE_SHIFT;
            }
            // An ioctl answered with the bytes its request filled: the
            // rerun's must be the same request, or they would go into a
            // buffer of another size.
            if c.nr == 16 && c.buffers.iter().any(|b| b.what == Memory::Filled) {
                flags |= 2 << f::COMPARE_SHIFT;
            }
            if TAKE_IDS.contains(&c.nr) {
                flags |= f::TRANSLATE_IDS;
            }
            if GIVE_IDS.contains(&c.nr) {
                flags |= f::TRANSLATE_RESULT;
            }
            // A wait4 that reaped a child reaps that one in the rerun:
            // which of the children ended first is timing too.
            if reaped(c).is_some_and(|child| feed_of.contains_key(&child)) {
                flags |= f::REAP;
            }
            let result = match interrupted[k] {
                true => EINTR,
                false => c.exit.map_or(0, |e| e.result),
            };
            let from_pipe = ops
                .get(&k)
                .is_some_and(|&r| matches!(resources.resources[r].kind, Kind::Pipe | Kind::Socket));
            // A datagram (recvfrom with a source address) is whole or not.
            let stream = c.nr == 0 || c.args[4] == 0;
            if matches!(c.nr, 0 | 45) && from_pipe && stream && result > 0 {
                flags |= f::CLAMP;
            }
            // A read of outside input its thread left: the rerun waits for
            // its own signal there instead (the call may have taken the
            // input, or not: the record cannot say, and the rerun's answers
            // of that input come from the record anyway). Any other call
            // left is made: a read of a file the call may have moved the
            // offset of, an `accept` that took a descriptor number, a
            // `write` whose own `SIGPIPE` took the thread out.
            if left[k] && !interrupted[k] && outside(k, resources, &ops).is_some() {
                flags |= f::LEFT;
            }
            if MAKERS.contains(&c.nr) && result > 0 {
                if let Some(&child) = feed_of.get(&(result as i32)) {
                    flags |= f::HAS_CHILD;
                    put(&mut bytes, at + f::CALL_CHILD, child as u64);
                    if forks(c) {
                        flags |= f::EXACT_CHILD;
                        bytes.resize(bytes.len().next_multiple_of(8), 0);
                        let area = bytes.len() as u64;
                        put(&mut bytes, at + f::CALL_DATA, area);
                        bytes.resize(bytes.len() + f::CLONE_ARGS_SIZE as usize, 0);
                    }
                }
            }
            let answer = match interrupted[k] {
                true => Ok(Some(Answer::Interrupted)),
                false => answered(k, c, resources, &ops),
            };
            match answer {
                Ok(Some(why)) => {
                    answers.insert(k, why);
                    flags |= f::ANSWER;
                    if let Some(b) = c.buffers.iter().find(|b| b.what == Memory::Filled) {
                        flags |= (b.arg as u64 + 1) << f::FILL_SHIFT;
                        if VECTORED_READS.contains(&c.nr) {
                            flags |= f::SCATTER;
                        }
                        let data = bytes.len() as u64;
                        bytes.extend_from_slice(&b.bytes);
                        bytes.resize(bytes.len().next_multiple_of(8), 0);
                        put(&mut bytes, at + f::CALL_DATA, data);
                        put(&mut bytes, at + f::CALL_DATA_LEN, b.bytes.len() as u64);
                    }
                }
                Ok(None) => {}
                Err(_) => cut.push(k),
            }
            put(&mut bytes, at + f::CALL_NR, c.nr);
            put(&mut bytes, at + f::CALL_FLAGS, flags);
            for (j, a) in args.iter().enumerate() {
                put(&mut bytes, at + f::CALL_ARGS + 8 * j as u64, *a);
            }
            put(&mut bytes, at + f::CALL_RESULT, result as u64);
            if let Some(w) = waits_of.get(&k) {
                bytes.resize(bytes.len().next_multiple_of(8), 0);
                let first = bytes.len() as u64;
                put(&mut bytes, at + f::CALL_WAITS, first);
                put(&mut bytes, at + f::CALL_WAIT_COUNT, w.len() as u64);
                for (&feed, &until) in w {
                    let entry = bytes.len() as u64;
                    bytes.resize(bytes.len() + f::WAIT_ENTRY as usize, 0);
                    put(&mut bytes, entry + f::WAIT_FEED, feed as u64);
                    put(&mut bytes, entry + f::WAIT_UNTIL, until as u64);
                }
                waits += w.len();
            }
        }
    }
    FeedFile {
        bytes,
        rings,
        calls: per_feed,
        answers,
        cut,
        interrupted: retried.iter().filter(|&&r| r).count(),
        waits,
    }
}

/// `futex`'s number: the one call a thread feed's extra call stands for.
const FUTEX: u64 = 202;

/// Names the rerun's first process (its pid) as the follower of feed 0,
/// in a feed's bytes: written before the process makes its first call.
pub fn name_first_process(bytes: &mut [u8], pid: i32) {
    let get =
        |b: &[u8], at: u64| u64::from_le_bytes(b[at as usize..at as usize + 8].try_into().unwrap());
    let map = get(bytes, f::MAP);
    let mut put =
        |at: u64, v: u64| bytes[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    put(map + f::ENTRY_FEED, 1);
    put(map + f::ENTRY_TID, pid as u64);
    put(f::MAP_USED, 1);
}

/// Whether a call makes a process the way `fork` does: `fork`, or a
/// `clone` on no stack of its own that shares neither memory nor the
/// thread group (glibc's `fork`). Its child can get its recorded pid
/// (`f::EXACT_CHILD`); a `vfork` child runs on its parent's stack, where
/// the call made again would clobber what the parent's return needs.
pub fn forks(c: &Call) -> bool {
    const CLONE_VM: u64 = 0x100;
    const CLONE_VFORK: u64 = 0x4000;
    const CLONE_THREAD: u64 = 0x10000;
    match c.nr {
        57 => true,
        56 => c.args[1] == 0 && c.args[0] & (CLONE_VM | CLONE_VFORK | CLONE_THREAD) == 0,
        _ => false,
    }
}

/// The recorded ids the rerun's threads and processes have as their own
/// (the id map's entries whose kernel id is the recorded one): the first
/// process's when it got its recorded pid, and forked children's
/// ([`f::EXACT_CHILD`]).
pub fn exact_ids(bytes: &[u8]) -> std::collections::HashSet<i32> {
    let map = word(bytes, f::MAP);
    let used = word(bytes, f::MAP_USED).min(word(bytes, f::MAP_CAPACITY));
    let threads = word(bytes, f::THREADS);
    (0..used)
        .filter_map(|i| {
            let entry = map + f::MAP_ENTRY * i;
            let feed = word(bytes, entry + f::ENTRY_FEED).checked_sub(1)?;
            let recorded = word(bytes, threads + f::THREAD_SIZE * feed + f::THREAD_TID);
            let rerun = word(bytes, entry + f::ENTRY_TID);
            (recorded == rerun).then_some(rerun as i32)
        })
        .collect()
}

/// What the rerun did with a thread feed, as the feed says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Calls the thread made (or had answered) of its feed.
    pub cursor: u64,
    /// Of them, answered.
    pub answered: u64,
    /// The rerun's thread that followed it, 0 for none.
    pub tid: i32,
    /// It stopped after a divergence.
    pub stopped: bool,
    /// Waits for another thread's call it gave up (10 s, or a divergence).
    pub waits_given_up: u64,
    /// Futex calls it made that its record did not have there, and
    /// recorded ones it did not make (`f::THREAD_EXTRA`).
    pub futexes: (u64, u64),
    /// Recorded signal deliveries it raised (`f::THREAD_RAISED`).
    pub raised: u64,
}

/// A call as the rerun made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rerun {
    /// TSC when it was made (after its waits).
    pub began: u64,
    /// TSC when it returned, and its result then; none for a call that
    /// did not return (or a vDSO call).
    pub ended: Option<(u64, i64)>,
}

/// How the rerun made each call of the feed, by the call's index in the
/// record: calls it never made are not there.
pub fn rerun_calls(bytes: &[u8], feed: &FeedFile) -> HashMap<usize, Rerun> {
    let threads = word(bytes, f::THREADS);
    let mut out = HashMap::new();
    for (i, ks) in feed.calls.iter().enumerate() {
        let first = word(bytes, threads + f::THREAD_SIZE * i as u64 + f::THREAD_CALLS);
        for (p, &k) in ks.iter().enumerate() {
            let at = first + f::CALL_SIZE * p as u64;
            let began = word(bytes, at + f::CALL_RERUN_BEGAN);
            let ended = word(bytes, at + f::CALL_RERUN_ENDED);
            let result = word(bytes, at + f::CALL_RERUN_RESULT) as i64;
            if began != 0 {
                let ended = (ended != 0).then_some((ended, result));
                out.insert(k, Rerun { began, ended });
            }
        }
    }
    out
}

/// The first divergence of a rerun.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// [`weft_abi::feed::DIFFERS`], `BEYOND` or `UNKNOWN_THREAD`.
    pub kind: u64,
    /// The thread feed (none for a thread the record does not have).
    pub feed: Option<usize>,
    /// The call's index in that feed.
    pub call: u64,
    /// The rerun's thread.
    pub tid: i32,
    /// The number it asked for.
    pub nr: u64,
    /// Its arguments.
    pub args: [u64; 6],
    /// The site's number ([`site_name`]).
    pub site: u64,
    /// `rsp` at the instruction.
    pub rsp: u64,
    /// `rbx`, `rbp`, `r12`..`r15` there.
    pub callee_saved: [u64; 6],
}

fn word(bytes: &[u8], at: u64) -> u64 {
    bytes
        .get(at as usize..at as usize + 8)
        .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// The divergence a feed's bytes hold, if any.
pub fn divergence(bytes: &[u8]) -> Option<Divergence> {
    if word(bytes, f::DIVERGED) == 0 {
        return None;
    }
    let feed = word(bytes, f::DIVERGENCE_FEED);
    Some(Divergence {
        kind: word(bytes, f::DIVERGENCE_KIND),
        feed: (feed != u64::MAX).then_some(feed as usize),
        call: word(bytes, f::DIVERGENCE_CALL),
        tid: word(bytes, f::DIVERGENCE_TID) as i32,
        nr: word(bytes, f::DIVERGENCE_NR),
        args: std::array::from_fn(|i| word(bytes, f::DIVERGENCE_ARGS + 8 * i as u64)),
        site: word(bytes, f::DIVERGENCE_SITE),
        rsp: word(bytes, f::DIVERGENCE_RSP),
        callee_saved: std::array::from_fn(|i| {
            word(bytes, f::DIVERGENCE_CALLEE_SAVED + 8 * i as u64)
        }),
    })
}

/// The thread feeds whose rerun thread is gone (`gone`) with calls not
/// counted done: where each one's [`f::THREAD_DONE`] is in the feed, and
/// its number of calls, which weft writes there. A call that waits for a
/// process's end (a write that found no reader: `crate::deps`) waits for
/// its `exit_group`, which returns to no one; and no later call of a
/// thread that is gone will come.
pub fn ended(bytes: &[u8], gone: &dyn Fn(i32) -> bool) -> Vec<(u64, u64)> {
    let threads = word(bytes, f::THREADS);
    (0..word(bytes, f::THREAD_COUNT))
        .filter_map(|i| {
            let t = threads + f::THREAD_SIZE * i;
            let tid = word(bytes, t + f::THREAD_RERUN_TID) as i32;
            let calls = word(bytes, t + f::THREAD_COUNT_CALLS);
            let done = word(bytes, t + f::THREAD_DONE);
            (tid > 0 && done < calls && gone(tid)).then_some((t + f::THREAD_DONE, calls))
        })
        .collect()
}

/// Each thread feed's progress, in feed order.
pub fn progress(bytes: &[u8]) -> Vec<Progress> {
    let threads = word(bytes, f::THREADS);
    (0..word(bytes, f::THREAD_COUNT))
        .map(|i| {
            let t = threads + f::THREAD_SIZE * i;
            Progress {
                cursor: word(bytes, t + f::THREAD_CURSOR),
                answered: word(bytes, t + f::THREAD_ANSWERED),
                tid: word(bytes, t + f::THREAD_RERUN_TID) as i32,
                stopped: word(bytes, t + f::THREAD_STOPPED) != 0,
                waits_given_up: word(bytes, t + f::THREAD_WAITS_GIVEN_UP),
                futexes: (
                    word(bytes, t + f::THREAD_EXTRAS_MADE),
                    word(bytes, t + f::THREAD_FUTEXES_SKIPPED),
                ),
                raised: word(bytes, t + f::THREAD_RAISED),
            }
        })
        .collect()
}

mod deliveries;
#[cfg(test)]
mod tests;

use deliveries::{delivery_waits, raise_places, MASKING};
pub use deliveries::{feed_signals, rips_unknown};
