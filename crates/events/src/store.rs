//! Events directories: `meta.json` (what each event id means, the clock),
//! `events.jsonl` (one event per line) and `trace.json` (Chrome/Perfetto),
//! and reading a directory back.

use crate::files::{io, SafeDir};
use crate::stream::{read_stream, StreamEnd};
use crate::trace_dir::is_stream;
use crate::{ClockKind, RingMode, TraceDir};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use weft_live::{EventRecord, Session};
use weft_plan::PointKind;

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

/// One value of an event as shown: an integer or a string's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown<'a> {
    /// An integer (signed).
    Int(i64),
    /// A string's text, and whether it went on past what was copied.
    Str(&'a str, bool),
    /// A byte array in hex, and whether it went on past what was copied.
    Bytes(&'a str, bool),
    /// A null string or array pointer.
    Null,
}

/// The values of `e`, strings and byte arrays resolved, given its event's
/// masks (see [`Meta::string_masks`]).
pub fn shown_values((mask, binary): (u16, u16), e: &EventRecord) -> Vec<Shown<'_>> {
    use weft_live::ring::{STR_NULL, STR_TRUNCATED};
    let mut texts = e.strings.iter();
    e.args
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if mask & (1 << i) == 0 {
                return Shown::Int(v as i64);
            }
            // One text per string value, null ones included (empty).
            let text = texts.next().map_or("", String::as_str);
            if v & STR_NULL != 0 {
                return Shown::Null;
            }
            if binary & (1 << i) != 0 {
                Shown::Bytes(text, v & STR_TRUNCATED != 0)
            } else {
                Shown::Str(text, v & STR_TRUNCATED != 0)
            }
        })
        .collect()
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shown::Int(v) => write!(f, "{v}"),
            Shown::Str(text, truncated) => {
                write!(f, "{text:?}")?;
                if *truncated {
                    f.write_str("...")?;
                }
                Ok(())
            }
            Shown::Bytes(hex, truncated) => {
                write!(f, "0x{hex}")?;
                if *truncated {
                    f.write_str("...")?;
                }
                Ok(())
            }
            Shown::Null => f.write_str("(null)"),
        }
    }
}

impl Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Shown::Int(v) => serializer.serialize_i64(*v),
            Shown::Str(text, false) => serializer.serialize_str(text),
            Shown::Str(text, true) => serializer.serialize_str(&format!("{text}...")),
            Shown::Bytes(..) => serializer.serialize_str(&self.to_string()),
            Shown::Null => serializer.serialize_none(),
        }
    }
}

/// Gives each function exit its duration by matching it with the entry of
/// the same function on the same thread (a stack per thread, so recursion
/// pairs up; entries left open by longjmp or exceptions are skipped).
#[derive(Debug, Default)]
pub struct Durations<'m> {
    stacks: std::collections::HashMap<i32, Vec<(&'m str, &'m str, u64)>>,
}

impl<'m> Durations<'m> {
    /// Takes the next event of its thread; for an exit whose entry was
    /// seen, returns the nanoseconds since that entry.
    pub fn see(&mut self, meta: &'m Meta, e: &EventRecord) -> Option<u64> {
        let (module, function, kind, _) = meta.events.get(e.event as usize)?;
        let stack = self.stacks.entry(e.tid).or_default();
        match kind.as_str() {
            "entry" => {
                stack.push((module, function, e.tsc));
                None
            }
            "exit" => {
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

/// One stored event.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    tsc: u64,
    tid: i32,
    event: u32,
    args: Vec<u64>,
    #[serde(default)]
    strings: Vec<String>,
}

/// A [`Line`] written without copying the event's values.
#[derive(Serialize)]
struct LineRef<'a> {
    tsc: u64,
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
        Meta {
            pid: session.pid(),
            ticks_per_ns: clock.ticks_per_ns,
            start_tsc: clock.start_tsc,
            start_realtime_ns: Some(clock.start_realtime_ns),
            dropped: session.events_dropped(),
            ring_mode: clock.ring_mode,
            clock: clock.clock,
            tsc_invariant: Some(weft_live::clock::tsc_is_invariant()),
            events: session
                .events()
                .iter()
                .map(|e| {
                    let kind = match e.kind {
                        PointKind::Exit => "exit",
                        PointKind::Entry => "entry",
                        PointKind::Instruction(_) => "probe",
                    };
                    (
                        e.module.clone(),
                        e.function.clone(),
                        kind.to_string(),
                        e.args,
                    )
                })
                .collect(),
            strings: session.events().iter().map(|e| e.strings).collect(),
            binary: session.events().iter().map(|e| e.binary).collect(),
            names: session.events().iter().map(|e| e.names.clone()).collect(),
        }
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
        let mut durations = Durations::default();
        each_event_of(ctf, stream, meta, &mut |events| {
            for e in &events {
                let line = LineRef {
                    tsc: e.tsc,
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
                meta.pid,
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

/// An events directory read back.
#[derive(Debug)]
pub struct Trace {
    /// What the event ids mean, and how the trace was taken.
    pub meta: Meta,
    /// The events, stream by stream.
    pub events: Vec<EventRecord>,
    /// The streams that could not be read to their end (only where weft did
    /// not finish the trace, which has then no `events.jsonl`).
    pub damage: Vec<Damage>,
}

/// A CTF stream that could not be read to its end.
#[derive(Debug)]
pub enum Damage {
    /// Its last packet was cut short (weft was killed or the disk filled
    /// while writing it); every packet before it was read.
    CutShort {
        /// The stream file.
        stream: PathBuf,
        /// Where its last whole packet ends.
        offset: u64,
        /// The bytes after it, left out.
        bytes: u64,
    },
    /// Corrupt in the middle: an [`Error::Corrupt`]; the packets before
    /// the damage were read.
    Corrupt(Error),
}

impl Damage {
    /// Whether events in the middle of a stream may be missing.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, Damage::Corrupt(_))
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::CutShort {
                stream,
                offset,
                bytes,
            } => write!(
                f,
                "{}: its last packet was cut short (weft was killed or the disk filled while \
                 writing it): left out its last {bytes} byte(s), from byte {offset}",
                stream.display()
            ),
            Damage::Corrupt(e) => write!(f, "{e}"),
        }
    }
}

/// The CTF stream files of an events directory, in order.
fn streams_of(dir: &Path) -> Result<Vec<PathBuf>> {
    let ctf = dir.join("ctf");
    let mut streams: Vec<PathBuf> = std::fs::read_dir(&ctf)
        .map_err(io(format!("reading {}", ctf.display())))?
        .flatten()
        .filter(|e| is_stream(&e.file_name().to_string_lossy()))
        .map(|e| e.path())
        .collect();
    streams.sort();
    Ok(streams)
}

/// Reads an events directory back: `events.jsonl` if weft finished the
/// trace, else every whole packet of its CTF streams, with what could not
/// be read in [`Trace::damage`].
pub fn read_dir(dir: &Path) -> Result<Trace> {
    let meta_path = dir.join("meta.json");
    let text = crate::check::read_description(&meta_path).map_err(io(format!(
        "reading {} (an events directory from --events-out?)",
        meta_path.display()
    )))?;
    let meta: Meta = serde_json::from_str(&text)
        .map_err(|e| Error::Format(format!("{}: {e}", meta_path.display())))?;
    crate::check::check_meta(&meta, &meta_path)?;
    let path = dir.join("events.jsonl");
    // A finished trace of an older weft may lack ctf/; an unfinished one
    // is read from it, so it needs its metadata.
    if !path.exists() || dir.join("ctf").exists() {
        crate::check::check_metadata_file(dir, &meta, &meta_path)?;
    }
    let mut events = Vec::new();
    let mut damage = Vec::new();
    if !path.exists() {
        // weft did not finish this trace: read what its streams hold.
        let ids = Some(meta.events.len());
        for stream in streams_of(dir)? {
            let file = std::fs::File::open(&stream)
                .map_err(io(format!("reading {}", stream.display())))?;
            let mut input = std::io::BufReader::with_capacity(1 << 20, file);
            let end = crate::stream::packets(&mut input, &stream, ids, &mut |_, tid, records| {
                weft_live::decode_records(tid, records, &|id| meta.string_masks(id), &mut events);
                Ok(())
            });
            match end {
                Ok(StreamEnd::Whole) => {}
                Ok(StreamEnd::CutShort { offset, bytes }) => damage.push(Damage::CutShort {
                    stream,
                    offset,
                    bytes,
                }),
                Err(e @ Error::Corrupt { .. }) => damage.push(Damage::Corrupt(e)),
                Err(e) => return Err(e),
            }
        }
        return Ok(Trace {
            meta,
            events,
            damage,
        });
    }
    let file = std::fs::File::open(&path).map_err(io(format!("reading {}", path.display())))?;
    for (n, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io(format!("reading {}", path.display())))?;
        let l: Line = serde_json::from_str(&line)
            .map_err(|e| Error::Format(format!("{}:{}: {e}", path.display(), n + 1)))?;
        if l.event as usize >= meta.events.len() {
            return Err(crate::check::inconsistent(
                &path,
                format!(
                    "line {} has event id {}, but {} describes {} event id(s) only",
                    n + 1,
                    l.event,
                    meta_path.display(),
                    meta.events.len()
                ),
                crate::check::MISMATCH_TODO,
            ));
        }
        events.push(EventRecord {
            tid: l.tid,
            tsc: l.tsc,
            event: l.event,
            args: l.args,
            strings: l.strings,
        });
    }
    Ok(Trace {
        meta,
        events,
        damage,
    })
}

/// One line per event, in time order, like `perf script`:
/// `TIME_NS TID MODULE:FUNCTION entry|exit VALUES`.
pub fn render_text(meta: &Meta, events: &[EventRecord]) -> String {
    let mut sorted: Vec<&EventRecord> = events.iter().collect();
    sorted.sort_by_key(|e| e.tsc);
    let mut out = String::new();
    let mut durations = Durations::default();
    for e in sorted {
        let duration = durations
            .see(meta, e)
            .map(|ns| format!(" duration_ns={ns}"))
            .unwrap_or_default();
        let (module, function, kind) = meta
            .events
            .get(e.event as usize)
            .map(|(m, f, k, _)| (m.as_str(), f.as_str(), k.as_str()))
            .unwrap_or(("?", "?", "?"));
        let ns = e.tsc.saturating_sub(meta.start_tsc) as f64 / meta.ticks_per_ns;
        let values = if kind == "exit" {
            e.args
                .first()
                .map(|r| format!("ret={}", *r as i64))
                .unwrap_or_default()
        } else {
            shown_values(meta.string_masks(e.event), e)
                .iter()
                .enumerate()
                .map(|(i, v)| format!("{}={v}", meta.value_name(e.event, i)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "{ns:>16.0} {:>7} {module}:{function} {kind} {values}{duration}\n",
            e.tid
        ));
    }
    out
}
