//! Reading an events directory back (`weft events`): every event in time
//! order, streamed, with memory bounded by the trace's shape (its threads
//! and its largest packet), never by its length.
//!
//! First the directory is checked: `meta.json` consistent in itself and
//! `ctf/metadata` whole and describing the same clock and event ids
//! (`check`). Then two passes. The first reads `events.jsonl` (a finished
//! trace) or else every CTF stream once, checking each line or packet and
//! that every event id is one `meta.json` describes, and notes the *runs*:
//! stretches whose timestamps never go back, in file order (a thread's
//! stream is one run unless a signal handler's event was stamped inside
//! another's write). It keeps only where each run starts and its length.
//! The second merges the runs, reading each a packet (or a few lines) at a
//! time: the smallest timestamp first, and among equal ones the earliest
//! in file order. That is the order of a stable sort of all the events by
//! time, which `weft events` printed before it streamed.

use crate::check::{
    check_meta, check_metadata_file, inconsistent, read_description, MISMATCH_TODO,
};
use crate::files::io;
use crate::store::Line;
use crate::stream::{next_packet, packets, Next, StreamEnd};
use crate::trace_dir::is_stream;
use crate::{Error, Meta, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use weft_live::ring as r;
use weft_live::EventRecord;

/// Runs up to which each keeps its file open between reads; with more,
/// each read opens the file again (so many runs cannot use up the
/// process's file descriptors).
const MAX_OPEN: usize = 64;
/// Buffer of a run reading a file it keeps open.
const BUFFER: usize = 64 * 1024;
/// Lines a run of `events.jsonl` reads at a time when it does not keep its
/// file open.
const LINES_PER_READ: usize = 256;

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

/// Where the events are read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `events.jsonl` (weft finished the trace).
    Lines,
    /// The CTF streams (weft did not finish it).
    Streams,
}

/// A stretch of events in file order whose timestamps never go back.
#[derive(Debug, Clone, Copy)]
struct Run {
    /// Index of its file.
    file: usize,
    /// Where it starts: the packet (streams) or line (`events.jsonl`) that
    /// holds its first event.
    start: u64,
    /// Records of that packet before its first event.
    skip: usize,
    /// Its events.
    count: u64,
}

/// Notes runs as events come in file order.
#[derive(Debug, Default)]
struct Runs {
    runs: Vec<Run>,
    last: Option<u64>,
    events: u64,
}

impl Runs {
    /// The next event in file order, at `tsc`, in `file` at `start`
    /// (after `skip` records there).
    fn see(&mut self, tsc: u64, file: usize, start: u64, skip: usize) {
        let new_file = self.runs.last().is_none_or(|r| r.file != file);
        if new_file || self.last.is_some_and(|last| tsc < last) {
            self.runs.push(Run {
                file,
                start,
                skip,
                count: 0,
            });
        }
        self.runs.last_mut().expect("pushed").count += 1;
        self.last = Some(tsc);
        self.events += 1;
    }
}

/// An events directory opened for reading, checked, its runs noted.
#[derive(Debug)]
pub struct TraceReader {
    meta: Meta,
    meta_path: PathBuf,
    kind: Kind,
    files: Vec<PathBuf>,
    runs: Vec<Run>,
    events: u64,
    damage: Vec<Damage>,
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

/// Checks a sequence of `T`s (or a string, for `T = AnyStr`) without
/// keeping it.
struct Checked<T>(std::marker::PhantomData<T>);

/// Any string, not kept.
struct AnyStr;

impl<'de> serde::Deserialize<'de> for AnyStr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<AnyStr, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = AnyStr;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> std::result::Result<AnyStr, E> {
                Ok(AnyStr)
            }
        }
        d.deserialize_str(Visitor)
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Checked<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Visitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for Visitor<T> {
            type Value = Checked<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a sequence")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Checked<T>, A::Error> {
                while seq.next_element::<T>()?.is_some() {}
                Ok(Checked(std::marker::PhantomData))
            }
        }
        d.deserialize_seq(Visitor(std::marker::PhantomData))
    }
}

/// A line of `events.jsonl` as the first pass checks it: every field of a
/// [`Line`] with its type, only the time and the event id kept (no
/// allocation per line).
#[derive(serde::Deserialize)]
struct Stamp {
    tsc: u64,
    #[serde(rename = "tid")]
    _tid: i32,
    event: u32,
    #[serde(rename = "args")]
    _args: Checked<u64>,
    #[serde(rename = "strings", default)]
    _strings: Option<Checked<AnyStr>>,
}

/// The line `line` without its line end (as `BufRead::lines` gives it).
fn without_newline(line: &str) -> &str {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix('\r').unwrap_or(line)
}

impl TraceReader {
    /// Opens the events directory `dir`: reads and checks `meta.json` and
    /// `ctf/metadata`, then reads `events.jsonl` if weft finished the trace,
    /// else every whole packet of its CTF streams (what could not be read
    /// is in [`TraceReader::damage`]), checking each event's id, and notes
    /// where each run of events in time order is. Holds no events.
    pub fn open(dir: &Path) -> Result<TraceReader> {
        let meta_path = dir.join("meta.json");
        let text = read_description(&meta_path).map_err(io(format!(
            "reading {} (an events directory from --events-out?)",
            meta_path.display()
        )))?;
        let meta: Meta = serde_json::from_str(&text)
            .map_err(|e| Error::Format(format!("{}: {e}", meta_path.display())))?;
        drop(text);
        check_meta(&meta, &meta_path)?;
        let lines = dir.join("events.jsonl");
        let finished = lines.exists();
        // A finished trace of an older weft may lack ctf/; an unfinished
        // one is read from it, so it needs its metadata.
        if !finished || dir.join("ctf").exists() {
            check_metadata_file(dir, &meta, &meta_path)?;
        }
        let mut reader = TraceReader {
            meta,
            meta_path,
            kind: if finished { Kind::Lines } else { Kind::Streams },
            files: if finished {
                vec![lines]
            } else {
                streams_of(dir)?
            },
            runs: Vec::new(),
            events: 0,
            damage: Vec::new(),
        };
        let mut runs = Runs::default();
        match reader.kind {
            Kind::Lines => reader.scan_lines(&mut runs)?,
            Kind::Streams => {
                for file in 0..reader.files.len() {
                    reader.scan_stream(file, &mut runs)?;
                }
            }
        }
        reader.runs = runs.runs;
        reader.events = runs.events;
        Ok(reader)
    }

    /// What the event ids mean, and how the trace was taken.
    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    /// The streams that could not be read to their end (only where weft did
    /// not finish the trace, which has then no `events.jsonl`).
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// The number of events.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// An event id the meta does not describe, in `file` at `place`.
    fn unknown_id(&self, file: &Path, place: String, id: u32) -> Error {
        inconsistent(
            file,
            format!(
                "{place} has event id {id}, but {} describes {} event id(s) only",
                self.meta_path.display(),
                self.meta.events.len()
            ),
            MISMATCH_TODO,
        )
    }

    /// The first pass over `events.jsonl`: every line parsed and checked.
    fn scan_lines(&mut self, runs: &mut Runs) -> Result<()> {
        let path = &self.files[0];
        let failed = io(format!("reading {}", path.display()));
        let file = File::open(path).map_err(&failed)?;
        let mut input = BufReader::with_capacity(BUFFER, file);
        let (mut line, mut offset) = (String::new(), 0u64);
        for n in 1.. {
            line.clear();
            let bytes = input.read_line(&mut line).map_err(&failed)?;
            if bytes == 0 {
                break;
            }
            let l: Stamp = serde_json::from_str(without_newline(&line))
                .map_err(|e| Error::Format(format!("{}:{n}: {e}", path.display())))?;
            if l.event as usize >= self.meta.events.len() {
                return Err(self.unknown_id(path, format!("line {n}"), l.event));
            }
            runs.see(l.tsc, 0, offset, 0);
            offset += bytes as u64;
        }
        Ok(())
    }

    /// The first pass over stream `file`: every packet checked, every
    /// record's event id too (a record with an id `meta.json` does not
    /// describe makes its packet corrupt, as a bad size does).
    fn scan_stream(&mut self, file: usize, runs: &mut Runs) -> Result<()> {
        let path = self.files[file].clone();
        let input = File::open(&path).map_err(io(format!("reading {}", path.display())))?;
        let mut input = BufReader::with_capacity(BUFFER, input);
        let ids = Some(self.meta.events.len());
        let end = packets(&mut input, &path, ids, &mut |offset, _, records| {
            let mut at = 0;
            let mut index = 0;
            while at < records.len() {
                let word = |at: usize| {
                    u64::from_le_bytes(records[at..at + 8].try_into().expect("8 bytes"))
                };
                runs.see(word(at), file, offset, index);
                let (nargs, text) = r::shape((word(at + r::R_EVENT as usize) >> 32) as u32);
                // The packet was checked: its records tile it.
                at += r::record_size(nargs, text) as usize;
                index += 1;
            }
            Ok(())
        });
        match end {
            Ok(StreamEnd::Whole) => {}
            Ok(StreamEnd::CutShort { offset, bytes }) => self.damage.push(Damage::CutShort {
                stream: path,
                offset,
                bytes,
            }),
            Err(e @ Error::Corrupt { .. }) => self.damage.push(Damage::Corrupt(e)),
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Passes every event to `each` in time order (stably: events with the
    /// same time in file order), reading the files again a packet or a few
    /// lines at a time. A file that changed since [`TraceReader::open`] is
    /// an error.
    pub fn each_in_time_order(
        &self,
        each: &mut dyn FnMut(&EventRecord) -> Result<()>,
    ) -> Result<()> {
        let keep_open = self.runs.len() <= MAX_OPEN;
        let strings = |id| self.meta.string_masks(id);
        let mut cursors: Vec<Cursor> = self
            .runs
            .iter()
            .map(|run| Cursor::new(*run, keep_open))
            .collect();
        // The next event of each run, smallest time first, then run order
        // (which is file order).
        let mut heads: Vec<Option<EventRecord>> = Vec::with_capacity(cursors.len());
        let mut heap = BinaryHeap::with_capacity(cursors.len());
        for (i, cursor) in cursors.iter_mut().enumerate() {
            let head = cursor.next(self, &strings)?;
            if let Some(e) = &head {
                heap.push(Reverse((e.tsc, i)));
            }
            heads.push(head);
        }
        while let Some(Reverse((_, i))) = heap.pop() {
            let e = heads[i].take().expect("a run in the heap has a head");
            each(&e)?;
            heads[i] = cursors[i].next(self, &strings)?;
            if let Some(e) = &heads[i] {
                heap.push(Reverse((e.tsc, i)));
            }
        }
        Ok(())
    }

    /// The error for a file that no longer holds what the first pass read.
    fn changed(&self, file: usize, why: impl std::fmt::Display) -> Error {
        Error::Format(format!(
            "{}: changed while weft read it ({why}); read the trace again once nothing writes it",
            self.files[file].display()
        ))
    }
}

/// Reads one run, a packet or a few lines at a time.
#[derive(Debug)]
struct Cursor {
    run: Run,
    keep_open: bool,
    /// The file, when kept open, positioned at `pos`.
    open: Option<BufReader<File>>,
    /// Where the next packet or line to read starts.
    pos: u64,
    /// Events of the run not yet passed on.
    left: u64,
    /// Streams: the thread and the records of the current packet that
    /// belong to the run, and where the next one starts in them.
    tid: i32,
    records: Vec<u8>,
    at: usize,
    /// Lines: events read and not yet passed on.
    lines: VecDeque<EventRecord>,
}

impl Cursor {
    fn new(run: Run, keep_open: bool) -> Cursor {
        Cursor {
            run,
            keep_open,
            open: None,
            pos: run.start,
            left: run.count,
            tid: 0,
            records: Vec::new(),
            at: 0,
            lines: VecDeque::new(),
        }
    }

    /// The run's file, positioned at `pos`: kept open, or opened again.
    fn input(&mut self, reader: &TraceReader) -> Result<BufReader<File>> {
        if let Some(open) = self.open.take() {
            return Ok(open);
        }
        let path = &reader.files[self.run.file];
        let failed = io(format!("reading {}", path.display()));
        let mut file = File::open(path).map_err(&failed)?;
        file.seek(SeekFrom::Start(self.pos)).map_err(&failed)?;
        let capacity = if self.keep_open { BUFFER } else { 8 * 1024 };
        Ok(BufReader::with_capacity(capacity, file))
    }

    /// Puts the file back for the next read (when kept open).
    fn put_back(&mut self, input: BufReader<File>) {
        if self.keep_open && self.left > 0 {
            self.open = Some(input);
        }
    }

    /// The run's next event, or None at its end.
    fn next(
        &mut self,
        reader: &TraceReader,
        strings: &dyn Fn(u32) -> (u16, u16),
    ) -> Result<Option<EventRecord>> {
        if self.left == 0 {
            return Ok(None);
        }
        let e = match reader.kind {
            Kind::Streams => self.next_record(reader, strings)?,
            Kind::Lines => self.next_line(reader)?,
        };
        self.left -= 1;
        if self.left == 0 {
            // Done: free what it held.
            *self = Cursor::new(
                Run {
                    count: 0,
                    ..self.run
                },
                false,
            );
        }
        Ok(Some(e))
    }

    /// The next record of the run in its stream, decoded.
    fn next_record(
        &mut self,
        reader: &TraceReader,
        strings: &dyn Fn(u32) -> (u16, u16),
    ) -> Result<EventRecord> {
        if self.at >= self.records.len() {
            self.read_packet(reader)?;
        }
        let word =
            |at: usize| u64::from_le_bytes(self.records[at..at + 8].try_into().expect("8 bytes"));
        let (nargs, text) = r::shape((word(self.at + r::R_EVENT as usize) >> 32) as u32);
        let size = r::record_size(nargs, text) as usize;
        let mut one = Vec::with_capacity(1);
        weft_live::decode_records(
            self.tid,
            &self.records[self.at..self.at + size],
            strings,
            &mut one,
        );
        self.at += size;
        one.pop()
            .ok_or_else(|| reader.changed(self.run.file, "a record no longer decodes"))
    }

    /// Reads the packet at `pos` and keeps the records of it that belong to
    /// the run (after `skip` records, at most `left`).
    fn read_packet(&mut self, reader: &TraceReader) -> Result<()> {
        let mut input = self.input(reader)?;
        let path = &reader.files[self.run.file];
        let ids = Some(reader.meta.events.len());
        let size = match next_packet(&mut input, path, self.pos, ids, &mut self.records) {
            Ok(Next::Packet { tid, size }) => {
                self.tid = tid;
                size
            }
            Ok(Next::End(_)) => {
                return Err(reader.changed(self.run.file, "it ends before the events it held"))
            }
            Err(e) => return Err(reader.changed(self.run.file, e)),
        };
        self.pos += size;
        // Where the run's records start and end in this packet.
        let record_end = |records: &[u8], at: usize| {
            let shape = u32::from_le_bytes(
                records[at + r::R_NARGS as usize..at + r::R_ARGS as usize]
                    .try_into()
                    .expect("4 bytes"),
            );
            let (nargs, text) = r::shape(shape);
            at + r::record_size(nargs, text) as usize
        };
        let mut start = 0;
        for _ in 0..std::mem::take(&mut self.run.skip) {
            if start >= self.records.len() {
                return Err(reader.changed(self.run.file, "a packet holds fewer records"));
            }
            start = record_end(&self.records, start);
        }
        let (mut end, mut n) = (start, 0);
        while end < self.records.len() && n < self.left {
            end = record_end(&self.records, end);
            n += 1;
        }
        if n == 0 {
            return Err(reader.changed(self.run.file, "a packet holds fewer records"));
        }
        if start > 0 || end < self.records.len() {
            // Part of the packet: keep only that part.
            self.records = self.records[start..end].to_vec();
        }
        self.at = 0;
        self.put_back(input);
        Ok(())
    }

    /// The next line of the run in `events.jsonl`, parsed.
    fn next_line(&mut self, reader: &TraceReader) -> Result<EventRecord> {
        if self.lines.is_empty() {
            let mut input = self.input(reader)?;
            let path = &reader.files[self.run.file];
            let failed = io(format!("reading {}", path.display()));
            let want = if self.keep_open { 1 } else { LINES_PER_READ };
            let mut line = String::new();
            while (self.lines.len() as u64) < self.left.min(want as u64) {
                line.clear();
                let bytes = input.read_line(&mut line).map_err(&failed)?;
                if bytes == 0 {
                    return Err(reader.changed(self.run.file, "it ends before the events it held"));
                }
                self.pos += bytes as u64;
                let l: Line = serde_json::from_str(without_newline(&line))
                    .map_err(|e| reader.changed(self.run.file, e))?;
                self.lines.push_back(EventRecord {
                    tid: l.tid,
                    tsc: l.tsc,
                    event: l.event,
                    args: l.args,
                    strings: l.strings,
                });
            }
            self.put_back(input);
        }
        Ok(self.lines.pop_front().expect("read above"))
    }
}

#[cfg(test)]
mod tests;
