//! Events directories: `meta.json` (what each event id means, the clock),
//! `events.jsonl` (one event per line) and `trace.json` (Chrome/Perfetto),
//! and reading a directory back.

use crate::files::{io, SafeDir};
use crate::shown::{shown_values, Shown};
use crate::stream::read_stream;
use crate::trace_dir::is_stream;
use crate::{ClockKind, RingMode, TraceDir};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use weft_live::{EventRecord, Session};
use weft_plan::{EventInfo, PointKind};

/// What is needed to read the events back.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// The traced process.
    pub pid: i32,
    /// TSC ticks per nanosecond.
    pub ticks_per_ns: f64,
    /// TSC at the start of tracing (time zero).
    pub start_tsc: u64,
    /// CLOCK_REALTIME (nanoseconds since the Unix epoch) when the clock
    /// read `start_tsc`: where the trace is in wall-clock time (absent in
    /// directories from older weft versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_realtime_ns: Option<u64>,
    /// Events dropped because a ring was full (in flight mode: the oldest
    /// events, overwritten).
    pub dropped: u64,
    /// `discard`, `block` or `flight` (absent in directories from older
    /// weft versions: discard).
    #[serde(default)]
    pub ring_mode: RingMode,
    /// The timestamps' clock: `tsc` or `monotonic` (absent in directories
    /// from older weft versions: tsc).
    #[serde(default)]
    pub clock: ClockKind,
    /// Whether the TSC was invariant, so timestamps of different threads
    /// compare (absent in directories from older weft versions).
    #[serde(default)]
    pub tsc_invariant: Option<bool>,
    /// For each event id: [module, function, "entry"|"exit", values per event].
    pub events: Vec<(String, String, String, u8)>,
    /// For each event id: bit `i` set if value `i` (from 0) is a string
    /// (absent or short in directories from older weft versions: none).
    #[serde(default)]
    pub strings: Vec<u16>,
    /// For each event id: bit `i` set if value `i` is a byte array (among
    /// the `strings` bits).
    #[serde(default)]
    pub binary: Vec<u16>,
    /// For each event id: its values' names, when its site gave them.
    #[serde(default)]
    pub names: Vec<Vec<String>>,
    /// The process of each traced thread, in a trace of several processes
    /// (a followed workload); absent when every thread is `pid`'s.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub threads: BTreeMap<i32, i32>,
    /// The streams' packet format: 2 has each packet's pid after its tid
    /// (absent in directories from older weft versions: 1).
    #[serde(default = "format_1")]
    pub format: u32,
    /// The programs the workload's processes exec'd, as weft found each
    /// new image (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub execs: Vec<Exec>,
    /// Where each process image's dynamic loader lies, for the calls weft's
    /// SIGSYS handler recorded with the address they were made from
    /// (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaders: Vec<Loader>,
    /// The trace is finished with its CTF streams alone, without
    /// `events.jsonl` and `trace.json` (a system call record, whose data
    /// would make them many times larger, and slow to write): readers read
    /// the streams, which are then whole (absent: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub streams_only: bool,
    /// Per process, the most memory weft saw it hold resident while it
    /// recorded (sampled as weft drained its rings, every 10 ms at most):
    /// what a replay process holds for it, so that a memory limit presses
    /// on the replay as on the program (absent when none was sampled).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resident: BTreeMap<i32, Resident>,
    /// The signal that killed each process weft itself reaped (the
    /// workload's first), when one did: the other processes' ends are in
    /// their parents' recorded `wait4`s (absent when none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub killed: BTreeMap<i32, i32>,
    /// Every delivery of a signal to a handler the program installed is
    /// in the trace, as a call of its own (`weft_abi::delivery`): the
    /// handlers ran behind weft's delivery stub (absent: false, as in
    /// records made with `--no-dispatch` and by weft before it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deliveries: bool,
}

/// Memory a process held resident at its most, in bytes (each the most
/// of its own; see `weft_process::Resident`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resident {
    /// Anonymous pages (its heap, stacks, copies of pages it wrote), those
    /// shared with its parent or children in full.
    pub anon: u64,
    /// The pages only it had written (a forked child's own memory).
    #[serde(default)]
    pub private: u64,
    /// Pages of files (its code and libraries, files it mapped), as its
    /// share among the processes that map them.
    pub file: u64,
}

/// A program a process exec'd: what a successful `execve` gives no return
/// to record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exec {
    /// The process.
    pub pid: i32,
    /// TSC when weft found the new image, after the `execve`'s entry and
    /// before the new image's first call.
    pub tsc: u64,
    /// The file name `execve` was given (`AT_EXECFN`).
    pub path: String,
    /// The arguments it was given (none where weft could not read them,
    /// or in a record made before session 23).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// How many environment variables it was given, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars: Option<usize>,
}

/// A process image's dynamic loader: its code's addresses, from when weft
/// found the image (`tsc`) until the process's next image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Loader {
    /// The process.
    pub pid: i32,
    /// TSC when weft found the image.
    pub tsc: u64,
    /// Its lowest address.
    pub lo: u64,
    /// One past its highest.
    pub hi: u64,
    /// TSC when weft let the image run its own code, its libraries
    /// loaded and set up (absent until then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<u64>,
    /// TSC when weft settled the image: every `syscall` site rewritten,
    /// Syscall User Dispatch off (absent if it never did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled: Option<u64>,
}

impl Meta {
    /// Whether a call process `pid` made from address `site` at TSC `tsc`
    /// was its image's start-up: made by the dynamic loader's code, or
    /// before weft let the image run its own (the C library's set-up,
    /// which the loader calls).
    pub fn in_loader(&self, pid: i32, tsc: u64, site: u64) -> bool {
        (self.loaders.iter())
            .rev()
            .find(|l| l.pid == pid && l.tsc <= tsc)
            .is_some_and(|l| (l.lo..l.hi).contains(&site) || l.ready.is_some_and(|r| tsc < r))
    }
}

fn format_1() -> u32 {
    1
}

impl Meta {
    /// Which values of event `id` carry bytes (strings and byte arrays),
    /// and which of those are byte arrays.
    pub fn string_masks(&self, id: u32) -> (u16, u16) {
        let get = |v: &[u16]| v.get(id as usize).copied().unwrap_or(0);
        (get(&self.strings), get(&self.binary))
    }

    /// The name of value `i` (from 0) of event `id`: the site's, or `argN`.
    pub fn value_name(&self, id: u32, i: usize) -> std::borrow::Cow<'_, str> {
        match self.names.get(id as usize).and_then(|n| n.get(i)) {
            Some(name) => name.as_str().into(),
            None => format!("arg{}", i + 1).into(),
        }
    }
}

/// Open entries a thread's stack keeps at most: an entry whose exit was
/// lost (a dropped event, longjmp, an exception) stays open, and a long
/// trace can leave millions; beyond this many the oldest is forgotten
/// (an exit matching it, deeper than any real recursion, gets no
/// duration), so memory stays bounded.
const MAX_OPEN_ENTRIES: usize = 1 << 16;

/// Gives each function exit its duration by matching it with the entry of
/// the same function on the same thread (a stack per thread, so recursion
/// pairs up; entries left open by longjmp or exceptions are skipped).
/// Entries of functions that no exit event names (`entry:PATTERN`) are
/// not kept: nothing would match them.
#[derive(Debug)]
pub struct Durations<'m> {
    stacks: std::collections::HashMap<i32, std::collections::VecDeque<(&'m str, &'m str, u64)>>,
    /// By event id: whether an exit event of the same function exists.
    paired: Vec<bool>,
}

impl<'m> Durations<'m> {
    /// For the events of `meta`.
    pub fn new(meta: &'m Meta) -> Durations<'m> {
        let exits: std::collections::HashSet<(&str, &str)> = meta
            .events
            .iter()
            .filter(|(_, _, kind, _)| kind == "exit")
            .map(|(m, f, _, _)| (m.as_str(), f.as_str()))
            .collect();
        Durations {
            stacks: std::collections::HashMap::new(),
            paired: meta
                .events
                .iter()
                .map(|(m, f, _, _)| exits.contains(&(m.as_str(), f.as_str())))
                .collect(),
        }
    }

    /// Takes the next event of its thread; for an exit whose entry was
    /// seen, returns the nanoseconds since that entry.
    pub fn see(&mut self, meta: &'m Meta, e: &EventRecord) -> Option<u64> {
        let (module, function, kind, _) = meta.events.get(e.event as usize)?;
        match kind.as_str() {
            "entry" if self.paired.get(e.event as usize) == Some(&true) => {
                let stack = self.stacks.entry(e.tid).or_default();
                if stack.len() >= MAX_OPEN_ENTRIES {
                    stack.pop_front();
                }
                stack.push_back((module, function, e.tsc));
                None
            }
            "exit" => {
                let stack = self.stacks.get_mut(&e.tid)?;
                let at = stack
                    .iter()
                    .rposition(|(m, f, _)| *m == module.as_str() && *f == function.as_str())?;
                let (_, _, start) = stack[at];
                stack.truncate(at);
                Some((e.tsc.saturating_sub(start) as f64 / meta.ticks_per_ns).round() as u64)
            }
            _ => None,
        }
    }
}

/// One line of `events.jsonl`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Line {
    pub tsc: u64,
    pub tid: i32,
    pub event: u32,
    pub args: Vec<u64>,
    #[serde(default)]
    pub strings: Vec<String>,
}

/// A [`Line`] written without copying the event's values.
#[derive(Serialize)]
struct LineRef<'a> {
    tsc: u64,
    /// The thread's process, in a trace of several processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pid: Option<i32>,
    tid: i32,
    event: u32,
    args: &'a [u64],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    strings: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_ns: Option<u64>,
}

/// The clock and mode of a trace.
#[derive(Debug, Clone, Copy)]
pub struct TraceClock {
    /// TSC ticks per nanosecond.
    pub ticks_per_ns: f64,
    /// TSC at the start of tracing.
    pub start_tsc: u64,
    /// CLOCK_REALTIME (ns since the epoch) when the clock read `start_tsc`.
    pub start_realtime_ns: u64,
    /// What writers did when a ring was full.
    pub ring_mode: RingMode,
    /// The timestamps' clock (CLOCK_MONOTONIC has ticks of 1 ns).
    pub clock: ClockKind,
}

impl Meta {
    /// What `session`'s event ids mean, and how it traced.
    pub fn of(session: &Session, clock: TraceClock) -> Meta {
        let events: BTreeMap<u32, EventInfo> = session.events().iter().cloned().collect();
        Meta::of_workload(
            session.pid(),
            &events,
            session.events_dropped(),
            &BTreeMap::new(),
            clock,
        )
    }

    /// What the event ids of a workload's sessions mean (`events`, by id:
    /// they share their ids), the events `dropped` in all, and which
    /// process each traced thread belongs to (`threads`); `pid` is the
    /// process weft started or attached to first.
    pub fn of_workload(
        pid: i32,
        events: &BTreeMap<u32, EventInfo>,
        dropped: u64,
        threads: &BTreeMap<i32, i32>,
        clock: TraceClock,
    ) -> Meta {
        // Ids index the tables: one the sessions did not give (none, as
        // they count up from 0 together) reads as an unknown function.
        let count = events
            .keys()
            .next_back()
            .map_or(0, |&last| last as usize + 1);
        let unknown = EventInfo {
            module: "?".into(),
            function: "?".into(),
            kind: PointKind::Entry,
            args: 0,
            strings: 0,
            binary: 0,
            names: vec![],
        };
        let info = |id: usize| events.get(&(id as u32)).unwrap_or(&unknown);
        Meta {
            pid,
            ticks_per_ns: clock.ticks_per_ns,
            start_tsc: clock.start_tsc,
            start_realtime_ns: Some(clock.start_realtime_ns),
            dropped,
            ring_mode: clock.ring_mode,
            clock: clock.clock,
            tsc_invariant: Some(weft_live::clock::tsc_is_invariant()),
            events: (0..count)
                .map(|id| {
                    let e = info(id);
                    let kind = match e.kind {
                        PointKind::Exit => "exit",
                        PointKind::Entry => "entry",
                        PointKind::Instruction(_) => "probe",
                        PointKind::Syscall => "syscall",
                        PointKind::AfterSyscall => "sysret",
                    };
                    (
                        e.module.clone(),
                        e.function.clone(),
                        kind.to_string(),
                        e.args,
                    )
                })
                .collect(),
            strings: (0..count).map(|id| info(id).strings).collect(),
            binary: (0..count).map(|id| info(id).binary).collect(),
            names: (0..count).map(|id| info(id).names.clone()).collect(),
            threads: threads.clone(),
            format: crate::ctf::PACKET_FORMAT,
            execs: Vec::new(),
            loaders: Vec::new(),
            resident: BTreeMap::new(),
            killed: BTreeMap::new(),
            streams_only: false,
            deliveries: false,
        }
    }

    /// The process of thread `tid`: from `threads` in a workload's trace,
    /// else the traced process.
    pub fn pid_of(&self, tid: i32) -> i32 {
        self.threads.get(&tid).copied().unwrap_or(self.pid)
    }
}

/// Writes `meta.json` and `ctf/metadata`: what the event ids mean. weft
/// writes them when tracing starts (and again when ids are added), so that
/// the CTF streams written so far can be read even if weft never finishes.
/// Each is written whole under a temporary name and renamed over the old.
pub fn write_meta(dir: &TraceDir, meta: &Meta) -> Result<()> {
    dir.root().replace_with_bytes(
        "meta.json",
        &serde_json::to_vec_pretty(meta).expect("plain data"),
    )?;
    dir.ctf()
        .replace_with_bytes("metadata", crate::ctf::metadata(meta).as_bytes())
}

/// Completes an events directory whose `ctf/` streams are written: writes
/// `meta.json` and `ctf/metadata`, then derives `events.jsonl` and
/// `trace.json` from the streams, a packet at a time (each under a
/// temporary name, renamed once complete: a reader finds them whole or not
/// at all).
pub fn finish_dir(dir: &TraceDir, meta: &Meta) -> Result<()> {
    write_meta(dir, meta)?;
    if meta.streams_only {
        return Ok(());
    }
    let ctf = dir.ctf();
    let mut streams: Vec<String> = ctf
        .names()
        .map_err(io(format!("reading {}", ctf.path().display())))?;
    streams.retain(|name| is_stream(name));
    let root = dir.root();
    // The two files are independent: each is derived on its own core.
    let (lines, chrome) = std::thread::scope(|scope| {
        let lines = scope.spawn(|| {
            root.replace("events.jsonl", |file| {
                write_lines(file, &root.join("events.jsonl"), meta, ctf, &streams)
            })
        });
        let chrome = root.replace("trace.json", |file| {
            write_chrome(file, &root.join("trace.json"), meta, ctf, &streams)
        });
        (
            lines
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p)),
            chrome,
        )
    });
    lines.and(chrome)
}

/// Reads the stream `name` of `ctf` a packet at a time (the whole packets
/// of a stream cut short; a corrupt one is an error).
fn each_event_of(
    ctf: &SafeDir,
    name: &str,
    meta: &Meta,
    each: &mut dyn FnMut(Vec<EventRecord>) -> Result<()>,
) -> Result<()> {
    let path = ctf.join(name);
    let file = ctf
        .open_file(name, false)
        .map_err(io(format!("reading {}", path.display())))?;
    let mut input = std::io::BufReader::with_capacity(1 << 20, file);
    read_stream(&mut input, &path, &|id| meta.string_masks(id), each).map(|_| ())
}

/// `events.jsonl` from the streams: one line per event, each exit with its
/// duration.
fn write_lines(
    file: &mut std::fs::File,
    path: &Path,
    meta: &Meta,
    ctf: &SafeDir,
    streams: &[String],
) -> Result<()> {
    let err = io(format!("writing {}", path.display()));
    let mut lines = std::io::BufWriter::with_capacity(1 << 20, file);
    for stream in streams {
        // A stream holds one thread's events, in order.
        let mut durations = Durations::new(meta);
        each_event_of(ctf, stream, meta, &mut |events| {
            for e in &events {
                let line = LineRef {
                    tsc: e.tsc,
                    pid: (!meta.threads.is_empty()).then(|| meta.pid_of(e.tid)),
                    tid: e.tid,
                    event: e.event,
                    args: &e.args,
                    strings: &e.strings,
                    duration_ns: durations.see(meta, e),
                };
                serde_json::to_writer(&mut lines, &line).map_err(|e| err(e.into()))?;
                lines.write_all(b"\n").map_err(&err)?;
            }
            Ok(())
        })?;
    }
    lines.flush().map_err(&err)
}

/// `trace.json` from the streams.
fn write_chrome(
    file: &mut std::fs::File,
    path: &Path,
    meta: &Meta,
    ctf: &SafeDir,
    streams: &[String],
) -> Result<()> {
    let mut chrome = ChromeWriter::create(file, path)?;
    for stream in streams {
        each_event_of(ctf, stream, meta, &mut |events| {
            events.iter().try_for_each(|e| chrome.row(meta, e))
        })?;
    }
    chrome.finish(meta)
}

/// An event's values as `{"ret": R}` (exits) or `{"arg1": A, ...}` (or
/// the site's names): integers signed, strings as text.
struct ChromeArgs<'a> {
    exit: bool,
    values: Vec<Shown<'a>>,
    names: &'a [String],
}

impl Serialize for ChromeArgs<'_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        const ARGS: [&str; 12] = [
            "arg1", "arg2", "arg3", "arg4", "arg5", "arg6", "arg7", "arg8", "arg9", "arg10",
            "arg11", "arg12",
        ];
        let values = if self.exit {
            &self.values[..self.values.len().min(1)]
        } else {
            &self.values[..self.values.len().min(ARGS.len())]
        };
        let mut map = serializer.serialize_map(Some(values.len()))?;
        for (i, v) in values.iter().enumerate() {
            let key = match self.names.get(i) {
                _ if self.exit => "ret",
                Some(name) => name.as_str(),
                None => ARGS[i],
            };
            map.serialize_entry(key, v)?;
        }
        map.end()
    }
}

/// Chrome/Perfetto trace event format: entries `B`, exits `E`, probes `i`.
/// Streamed row by row: a trace of millions of events is never held.
struct ChromeWriter<'f> {
    out: std::io::BufWriter<&'f mut std::fs::File>,
    path: std::path::PathBuf,
    first: bool,
    /// By event id: the start of its rows, `{"name":..,"cat":..,"ph":..,"s":"t","ts":`,
    /// escaped once.
    prefixes: Vec<Option<String>>,
}

impl<'f> ChromeWriter<'f> {
    fn create(file: &'f mut std::fs::File, path: &Path) -> Result<ChromeWriter<'f>> {
        let err = io(format!("writing {}", path.display()));
        let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
        out.write_all(b"{\"traceEvents\":[").map_err(&err)?;
        Ok(ChromeWriter {
            out,
            path: path.to_path_buf(),
            first: true,
            prefixes: Vec::new(),
        })
    }

    /// One row: `B` for an entry, `E` for an exit, `i` for a probe; `ts` in
    /// microseconds with nanosecond digits.
    fn row(&mut self, meta: &Meta, e: &EventRecord) -> Result<()> {
        let Some((module, function, kind, _)) = meta.events.get(e.event as usize) else {
            return Ok(());
        };
        let id = e.event as usize;
        if self.prefixes.len() <= id {
            self.prefixes.resize(id + 1, None);
        }
        let prefix = self.prefixes[id].get_or_insert_with(|| {
            let ph = match kind.as_str() {
                "exit" => "E",
                "entry" => "B",
                _ => "i",
            };
            // Plain strings: serializing them cannot fail.
            let quoted = |t: &str| serde_json::to_string(t).expect("a string");
            format!(
                "{{\"name\":{},\"cat\":{},\"ph\":\"{ph}\",\"s\":\"t\",\"ts\":",
                quoted(function),
                quoted(module)
            )
        });
        let args = ChromeArgs {
            exit: kind == "exit",
            values: shown_values(meta.string_masks(e.event), e),
            names: meta.names.get(id).map_or(&[][..], Vec::as_slice),
        };
        let ns = (e.tsc.saturating_sub(meta.start_tsc) as f64 / meta.ticks_per_ns) as u64;
        let out = &mut self.out;
        let first = std::mem::replace(&mut self.first, false);
        (|| -> std::io::Result<()> {
            if !first {
                out.write_all(b",")?;
            }
            out.write_all(prefix.as_bytes())?;
            write!(
                out,
                "{}.{:03},\"pid\":{},\"tid\":{},\"args\":",
                ns / 1000,
                ns % 1000,
                meta.pid_of(e.tid),
                e.tid
            )?;
            serde_json::to_writer(&mut *out, &args)?;
            out.write_all(b"}")
        })()
        .map_err(|source| Error::Io {
            what: format!("writing {}", self.path.display()),
            source,
        })
    }

    fn finish(mut self, meta: &Meta) -> Result<()> {
        let err = io(format!("writing {}", self.path.display()));
        write!(
            self.out,
            "],\"displayTimeUnit\":\"ns\",\"otherData\":{{\"dropped\":{}}}}}",
            meta.dropped
        )
        .map_err(&err)?;
        self.out.flush().map_err(&err)
    }
}

/// The lines `weft events` prints, one per event, like `perf script`:
/// `TIME_NS TID MODULE:FUNCTION entry|exit VALUES`, each exit with its
/// duration. Give it the events in time order.
#[derive(Debug)]
pub struct TextLines<'m> {
    meta: &'m Meta,
    durations: Durations<'m>,
    line: String,
}

impl<'m> TextLines<'m> {
    /// For the events of `meta`.
    pub fn new(meta: &'m Meta) -> TextLines<'m> {
        TextLines {
            meta,
            durations: Durations::new(meta),
            line: String::new(),
        }
    }

    /// The line of `e` (the next event in time order), newline included.
    pub fn line(&mut self, e: &EventRecord) -> &str {
        use std::fmt::Write as _;
        let meta = self.meta;
        let duration = self.durations.see(meta, e);
        let (module, function, kind) = meta
            .events
            .get(e.event as usize)
            .map(|(m, f, k, _)| (m.as_str(), f.as_str(), k.as_str()))
            .unwrap_or(("?", "?", "?"));
        let ns = e.tsc.saturating_sub(meta.start_tsc) as f64 / meta.ticks_per_ns;
        let line = &mut self.line;
        line.clear();
        if meta.threads.is_empty() {
            let _ = write!(line, "{ns:>16.0} {:>7} {module}:{function} {kind} ", e.tid);
        } else {
            // Several processes: PID/TID.
            let thread = format!("{}/{}", meta.pid_of(e.tid), e.tid);
            let _ = write!(line, "{ns:>16.0} {thread:>13} {module}:{function} {kind} ");
        }
        if kind == "exit" {
            if let Some(r) = e.args.first() {
                let _ = write!(line, "ret={}", *r as i64);
            }
        } else {
            for (i, v) in shown_values(meta.string_masks(e.event), e)
                .iter()
                .enumerate()
            {
                if i > 0 {
                    line.push(' ');
                }
                let _ = write!(line, "{}={v}", meta.value_name(e.event, i));
            }
        }
        if let Some(ns) = duration {
            let _ = write!(line, " duration_ns={ns}");
        }
        line.push('\n');
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctf::tests::meta;

    fn event(tid: i32, tsc: u64, event: u32) -> EventRecord {
        EventRecord {
            tid,
            tsc,
            event,
            args: vec![],
            strings: vec![],
        }
    }

    #[test]
    fn durations_keep_only_entries_an_exit_can_match_and_a_bounded_stack() {
        let m = meta();
        let mut d = Durations::new(&m);
        // g (id 2) has no exit event: its entries are not kept.
        for tsc in 0..100_000 {
            assert_eq!(d.see(&m, &event(1, tsc, 2)), None);
        }
        assert!(d.stacks.get(&1).is_none_or(|s| s.is_empty()));
        // f's entries whose exits were lost: the latest MAX_OPEN_ENTRIES.
        let open = MAX_OPEN_ENTRIES as u64 + 10;
        for tsc in 0..open {
            d.see(&m, &event(1, 1000 * tsc, 0));
        }
        assert_eq!(d.stacks[&1].len(), MAX_OPEN_ENTRIES);
        // An exit pairs with the latest entry of its thread (2.5 ticks a ns).
        let last = 1000 * (open - 1);
        assert_eq!(d.see(&m, &event(1, last + 250, 1)), Some(100));
        assert_eq!(d.see(&m, &event(2, last + 250, 1)), None, "another thread");
        assert_eq!(d.stacks[&1].len(), MAX_OPEN_ENTRIES - 1);
    }
}
