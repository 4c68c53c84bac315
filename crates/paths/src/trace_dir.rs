//! A paths trace on disk (`--paths-out DIR`):
//!
//! * `DIR/paths.json`: `{"format": "weft-paths", "version": 6, ...}` with
//!   the function table ([`FunctionInfo`]), the processes, and the bytes
//!   lost; written when tracing ends.
//! * `DIR/buffers.zst`: one zstd stream (its frame checksummed) of chunks, each a buffer a thread
//!   filled (or the last one it had), in the order weft took them: a
//!   40-byte header (`pid` u32, `tid` u32, `seq` u64, `tsc_start` u64,
//!   `tsc_end` u64, `len` u32, `flags` u32, little-endian), then `len`
//!   bytes of records (see [`crate::record`]).
//!
//! * `DIR/schedule.zst` (when BPF could record it): one zstd stream of
//!   [`weft_abi::schedule`] records, when each thread ran and entered and
//!   left system calls, and where its stream was then.
//!
//! A thread's stream is its chunks in `seq` order, end to end.

use crate::instrument::{FunctionInfo, ImageLoads};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

mod streams;
pub use streams::Streams;

/// `format` of `paths.json`.
pub const FORMAT: &str = "weft-paths";
/// `version` of `paths.json` this weft writes and reads.
pub const VERSION: u32 = 6;
/// Bytes of a chunk's header.
pub const CHUNK_HEADER: usize = 40;

/// `paths.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    /// Always [`FORMAT`].
    pub format: String,
    /// [`VERSION`].
    pub version: u32,
    /// The traced functions; an `ENTERED` record's id is an index.
    pub functions: Vec<FunctionInfo>,
    /// Process images traced, with their command names, in the order they
    /// were (a process that execs has one per image).
    pub processes: Vec<(i32, String)>,
    /// Bytes of records dropped because no buffer was free in time.
    pub lost: u64,
    /// TSC ticks per nanosecond.
    pub ticks_per_ns: f64,
    /// Every block also wrote a record (`--validate`).
    #[serde(default)]
    pub validate: bool,
    /// Per process image (as `processes`): where its traced modules were
    /// loaded, for runtime addresses.
    #[serde(default)]
    pub loads: Vec<ImageLoads>,
    /// The schedule stream, if there is one.
    #[serde(default)]
    pub schedule: Option<ScheduleInfo>,
    /// Where each forked child's stream goes on from its parent's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forks: Vec<ForkPoint>,
    /// Whether weft finished the trace: `false` in the `paths.json` it
    /// writes as soon as functions are laid out, which a weft that was
    /// killed, or whose disk filled, leaves behind.
    #[serde(default = "finished")]
    pub complete: bool,
}

fn finished() -> bool {
    true
}

/// A forked child's first buffer, and where its parent's stream stood
/// when it forked: the child's regeneration starts with the frames its
/// parent had there (a child goes on in its parent's calls).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkPoint {
    /// The child's first chunk (its `seq`).
    pub child: u64,
    /// The parent's chunk it forked in (its `seq`).
    pub parent: u64,
    /// Bytes of that chunk the parent had written.
    pub at: u64,
}

/// What `schedule.zst` holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScheduleInfo {
    /// Records written.
    pub records: u64,
    /// Records the kernel's ring had no room for (weft read it too late).
    pub dropped: u64,
}

/// One buffer's worth of a thread's records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Process.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// Handover number, increasing over the whole process; its bits from
    /// 40 up number the pool, one per process image (see [`Chunk::image`]).
    pub seq: u64,
    /// TSC when the thread got the buffer.
    pub tsc_start: u64,
    /// TSC when it filled it (0 for the last, partly filled one).
    pub tsc_end: u64,
    /// Bytes of its records.
    pub len: usize,
    /// The records (in a [`Trace`], moved into its thread's stream:
    /// [`Trace::stream`]).
    pub bytes: Vec<u8>,
}

/// Bits of a handover number below the pool's number.
pub const IMAGE_SHIFT: u32 = 40;

impl Chunk {
    /// The process image (an index into [`Meta::processes`]) whose pool the
    /// buffer was in: a forked child writes into its parent's pool until it
    /// execs, then into its new image's.
    pub fn image(&self) -> u32 {
        (self.seq >> IMAGE_SHIFT) as u32
    }
}

/// A thread's stream in one process image: (pid, tid, image).
pub type StreamKey = (u32, u32, u32);

/// Why a trace directory cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The directory exists and holds something else.
    #[error("{0} exists and is not a weft paths trace; give a new or empty directory, or an earlier trace")]
    NotATrace(PathBuf),
    /// `--paths-out` names a symbolic link or a file that is not a directory.
    #[error("{0} is a symbolic link or not a directory; give a directory")]
    NotADirectory(PathBuf),
    /// `regen` was given a directory with no trace in it.
    #[error("{0} holds no paths trace (no paths.json); `weft run --paths WHAT --paths-out DIR` writes one")]
    NoTrace(PathBuf),
    /// The run that wrote the directory did not finish it.
    #[error("{0} holds witnesses but no paths.json: the weft that wrote it did not finish (it was killed?), and the witnesses cannot be read without the table")]
    Unfinished(PathBuf),
    /// A file could not be read or written.
    #[error("{path}: {why}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why (in the message, not a source of its own: it would print
        /// twice in an error's chain).
        why: std::io::Error,
    },
    /// `paths.json` is not one this weft reads.
    #[error("{path}: {why}")]
    BadMeta {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
    /// The trace's records do not fit in the memory this process may take.
    #[error("{path}: regeneration holds a trace's records in memory, and this one's do not fit: memory ran out after {held} bytes; regenerate it where more memory is free (its decompressed size is the bytes of witnesses weft reported)")]
    NoMemory {
        /// The file.
        path: PathBuf,
        /// Bytes read before memory ran out.
        held: u64,
    },
    /// The streams did not fit in the memory budget, and the file they
    /// were to go to instead could not be written.
    #[error("the trace's streams do not fit in the memory budget, and writing them to an unnamed file in {dir} failed: {why}; free space there or in $TMPDIR, or give regen more memory (--memory)")]
    Spill {
        /// Where the file was (the trace's directory, or `$TMPDIR`).
        dir: PathBuf,
        /// Why.
        why: std::io::Error,
    },
    /// `buffers.zst` ends inside a chunk or does not decompress.
    #[error("{path}: {why} at byte {offset} of the decompressed stream; {kept} chunk(s) before it are read")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
        /// Where.
        offset: u64,
        /// Whole chunks before it.
        kept: usize,
    },
}

/// Why a chunk's header cannot be one weft wrote, if it cannot: no
/// process or thread, flags this weft never sets, a buffer filled before
/// it was taken, a process image the table does not list (in a finished
/// trace; an unfinished one may stop before its table does), or a
/// handover number seen before (each pool numbers its handovers once).
fn damaged_header(c: &Chunk, flags: u32, meta: &Meta, seen: &mut HashSet<u64>) -> Option<String> {
    let why = if c.pid == 0 || c.tid == 0 {
        format!("a chunk's header names process {} thread {}", c.pid, c.tid)
    } else if flags != 0 {
        format!("a chunk's header has flags {flags:#x}, which weft does not write")
    } else if c.tsc_end != 0 && c.tsc_end < c.tsc_start {
        "a chunk's header says its buffer was filled before it was taken".to_string()
    } else if meta.complete && c.image() as usize >= meta.processes.len() {
        format!(
            "a chunk's header names process image {}, and paths.json lists {}",
            c.image(),
            meta.processes.len()
        )
    } else if !seen.insert(c.seq) {
        format!(
            "a chunk's header repeats handover number {:#x} (thread {})",
            c.seq, c.tid
        )
    } else {
        return None;
    };
    Some(format!("{why} (the file is damaged)"))
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TraceError + '_ {
    move |why| TraceError::Io {
        path: path.to_path_buf(),
        why,
    }
}

/// Refuses `dir` if it exists and is not a directory weft may write: a
/// symbolic link, a file, or a directory holding anything but an earlier
/// paths trace (`paths.json` that says it is one, `buffers.zst`). A new
/// or empty directory is fine.
pub fn check_dir(dir: &Path) -> Result<(), TraceError> {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return Ok(());
    };
    if !meta.is_dir() {
        return Err(TraceError::NotADirectory(dir.to_path_buf()));
    }
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let weft_file = name == "buffers.zst"
            || name == "paths.json"
            || name == "schedule.zst"
            || name == ".paths.json.new";
        if !weft_file || !entry.file_type().map_err(io(dir))?.is_file() {
            return Err(TraceError::NotATrace(dir.to_path_buf()));
        }
    }
    let table = dir.join("paths.json");
    if table.exists() {
        let mut head = vec![0u8; 256];
        let n = std::fs::File::open(&table)
            .and_then(|mut f| f.read(&mut head))
            .map_err(io(&table))?;
        let text = String::from_utf8_lossy(&head[..n]);
        if !text.contains(&format!("\"format\":\"{FORMAT}\"")) {
            return Err(TraceError::NotATrace(dir.to_path_buf()));
        }
    }
    Ok(())
}

/// A file of a trace directory, created for weft's user only.
fn create_private(path: &Path) -> Result<std::fs::File, TraceError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc_o_nofollow())
        .open(path)
        .map_err(io(path))
}

/// `O_NOFOLLOW`: a file of the trace is never written through a link.
const fn libc_o_nofollow() -> i32 {
    0o400000
}

/// Writes a trace as weft drains buffers.
pub struct TraceWriter {
    dir: PathBuf,
    buffers: zstd::stream::write::Encoder<'static, std::fs::File>,
    schedule: Option<zstd::stream::write::Encoder<'static, std::fs::File>>,
    /// Schedule records written.
    pub schedule_records: u64,
    /// Bytes of records written.
    pub bytes: u64,
    /// Chunks written.
    pub chunks: u64,
    /// Forked children's first chunks, as written.
    pub forks: Vec<ForkPoint>,
}

impl TraceWriter {
    /// Creates `dir` (or reuses an earlier trace there, replacing it).
    pub fn create(dir: &Path) -> Result<TraceWriter, TraceError> {
        check_dir(dir)?;
        // An earlier trace's schedule must not pass for this one's (a run
        // without BPF writes none).
        for old in ["paths.json", "schedule.zst", ".paths.json.new"] {
            let _ = std::fs::remove_file(dir.join(old));
        }
        if !dir.exists() {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(io(dir))?;
        }
        let path = dir.join("buffers.zst");
        let file = create_private(&path)?;
        let buffers = checked_encoder(file).map_err(io(&path))?;
        Ok(TraceWriter {
            dir: dir.to_path_buf(),
            buffers,
            schedule: None,
            schedule_records: 0,
            bytes: 0,
            chunks: 0,
            forks: Vec::new(),
        })
    }

    /// Appends schedule records (whole ones, [`weft_abi::schedule::SIZE`]
    /// bytes each) to `schedule.zst`, which the first call creates.
    pub fn schedule(&mut self, records: &[u8]) -> Result<(), TraceError> {
        let path = self.dir.join("schedule.zst");
        if self.schedule.is_none() {
            let file = create_private(&path)?;
            self.schedule = Some(checked_encoder(file).map_err(io(&path))?);
        }
        if let Some(out) = self.schedule.as_mut() {
            out.write_all(records).map_err(io(&path))?;
        }
        self.schedule_records += (records.len() / weft_abi::schedule::SIZE) as u64;
        Ok(())
    }

    /// Appends a chunk.
    pub fn chunk(&mut self, c: &Chunk) -> Result<(), TraceError> {
        let mut h = [0u8; CHUNK_HEADER];
        h[0..4].copy_from_slice(&c.pid.to_le_bytes());
        h[4..8].copy_from_slice(&c.tid.to_le_bytes());
        h[8..16].copy_from_slice(&c.seq.to_le_bytes());
        h[16..24].copy_from_slice(&c.tsc_start.to_le_bytes());
        h[24..32].copy_from_slice(&c.tsc_end.to_le_bytes());
        h[32..36].copy_from_slice(&(c.bytes.len() as u32).to_le_bytes());
        let path = self.dir.join("buffers.zst");
        self.buffers.write_all(&h).map_err(io(&path))?;
        self.buffers.write_all(&c.bytes).map_err(io(&path))?;
        self.bytes += c.bytes.len() as u64;
        self.chunks += 1;
        Ok(())
    }

    /// Writes out what the compressors hold: what was drained so far is
    /// then in the files, the schedule's too, for a weft that is killed
    /// before the end (its schedule was empty: `--interleave` said none was
    /// recorded).
    pub fn flush(&mut self) -> Result<(), TraceError> {
        let path = self.dir.join("buffers.zst");
        self.buffers.flush().map_err(io(&path))?;
        if let Some(schedule) = self.schedule.as_mut() {
            let path = self.dir.join("schedule.zst");
            schedule.flush().map_err(io(&path))?;
        }
        Ok(())
    }

    /// Ends the stream and writes `paths.json`.
    pub fn finish(self, meta: &Meta) -> Result<(), TraceError> {
        let path = self.dir.join("buffers.zst");
        self.buffers.finish().map_err(io(&path))?;
        if let Some(schedule) = self.schedule {
            let path = self.dir.join("schedule.zst");
            schedule.finish().map_err(io(&path))?;
        }
        write_table(&self.dir, meta)
    }

    /// Writes `paths.json` as `meta` says, whole or not at all: into a new
    /// file renamed over the old one. weft writes one as soon as the first
    /// functions are laid out, so that a trace whose weft was killed, or
    /// whose disk filled, is read up to where it stops.
    pub fn write_table(&self, meta: &Meta) -> Result<(), TraceError> {
        write_table(&self.dir, meta)
    }
}

/// A zstd stream (level 3) into `file` whose frame ends with a checksum
/// of its content: bytes changed on disk are found as damage at the
/// latest where the frame ends, never read as records.
fn checked_encoder(
    file: std::fs::File,
) -> std::io::Result<zstd::stream::write::Encoder<'static, std::fs::File>> {
    let mut encoder = zstd::stream::write::Encoder::new(file, 3)?;
    encoder.include_checksum(true)?;
    Ok(encoder)
}

/// See [`TraceWriter::write_table`].
fn write_table(dir: &Path, meta: &Meta) -> Result<(), TraceError> {
    let path = dir.join("paths.json");
    let new = dir.join(".paths.json.new");
    let _ = std::fs::remove_file(&new);
    // Written as it is serialized: a large program's table (cc1's is
    // about 100 MB) is never held whole as text.
    let mut out = std::io::BufWriter::with_capacity(1 << 20, create_private(&new)?);
    serde_json::to_writer(&mut out, meta).map_err(|e| match e.io_error_kind() {
        Some(_) => io(&new)(std::io::Error::from(e)),
        None => TraceError::BadMeta {
            path: path.clone(),
            why: e.to_string(),
        },
    })?;
    out.into_inner().map_err(|e| io(&new)(e.into_error()))?;
    std::fs::rename(&new, &path).map_err(io(&path))
}

/// A trace read back: its table and every thread's stream.
pub struct Trace {
    /// The directory it was read from.
    pub dir: PathBuf,
    /// `paths.json`.
    pub meta: Meta,
    /// Per thread and process image: the chunks in `seq` order (their
    /// records moved into `streams`).
    pub threads: BTreeMap<StreamKey, Vec<Chunk>>,
    /// Per thread and process image: its chunks' records end to end.
    pub streams: Streams,
    /// The schedule, in time order (empty without one).
    pub schedule: Vec<weft_abi::schedule::Event>,
    /// Why `schedule.zst` could not be read, if it could not: only
    /// interleaving needs it.
    pub schedule_error: Option<String>,
    /// Where `buffers.zst` is cut short or damaged, if it is: `threads`
    /// holds the chunks before that place.
    pub cut: Option<TraceError>,
}

impl Trace {
    /// Reads `dir`, holding its streams in memory. A `buffers.zst` cut
    /// short (weft killed, disk full) keeps the chunks before the cut, and
    /// says where it is in [`Trace::cut`].
    pub fn read(dir: &Path) -> Result<Trace, TraceError> {
        Trace::read_within(dir, u64::MAX)
    }

    /// Reads `dir` as [`Trace::read`] does, holding at most `budget` bytes
    /// of its records in memory: past it, the streams go to a file
    /// regeneration maps (see [`Streams`]).
    pub fn read_within(dir: &Path, budget: u64) -> Result<Trace, TraceError> {
        let path = dir.join("paths.json");
        if !path.exists() {
            if !dir.is_dir() {
                let why = if dir.exists() {
                    "not a directory (a trace is the directory --paths-out wrote)"
                } else {
                    "no such directory"
                };
                return Err(TraceError::Io {
                    path: dir.to_path_buf(),
                    why: std::io::Error::new(std::io::ErrorKind::NotFound, why),
                });
            }
            if dir.join("buffers.zst").exists() {
                return Err(TraceError::Unfinished(dir.to_path_buf()));
            }
            return Err(TraceError::NoTrace(dir.to_path_buf()));
        }
        let text = std::fs::read_to_string(&path).map_err(io(&path))?;
        let meta: Meta = serde_json::from_str(&text).map_err(|e| TraceError::BadMeta {
            path: path.clone(),
            why: format!("not a paths table ({e})"),
        })?;
        if let Some(why) = meta
            .functions
            .iter()
            .enumerate()
            .find_map(|(i, f)| damaged(i, f))
        {
            return Err(TraceError::BadMeta { path, why });
        }
        if meta.format != FORMAT || meta.version != VERSION {
            return Err(TraceError::BadMeta {
                path,
                why: format!(
                    "format {} version {}; this weft reads {FORMAT} version {VERSION}",
                    meta.format, meta.version
                ),
            });
        }
        let path = dir.join("buffers.zst");
        let file = std::fs::File::open(&path).map_err(io(&path))?;
        let (threads, streams, cut) = streams::read_chunks(file, &path, &meta, budget)?;
        let (schedule, schedule_error) = match meta.schedule {
            Some(_) => match read_schedule(&dir.join("schedule.zst"), meta.complete) {
                Ok(events) => (events, None),
                Err(e) => (Vec::new(), Some(e.to_string())),
            },
            None => (Vec::new(), None),
        };
        Ok(Trace {
            dir: dir.to_path_buf(),
            meta,
            threads,
            streams,
            schedule,
            schedule_error,
            cut,
        })
    }

    /// The command name of process image `image`.
    pub fn command(&self, image: u32) -> &str {
        self.meta
            .processes
            .get(image as usize)
            .map_or("", |(_, c)| c.as_str())
    }

    /// A thread's stream in an image: its chunks end to end.
    pub fn stream(&self, thread: StreamKey) -> &[u8] {
        self.streams.get(thread)
    }

    /// For a forked child's stream: its parent's stream, and how much of
    /// it came before the fork.
    pub fn fork_origin(&self, thread: StreamKey) -> Option<(StreamKey, usize)> {
        let first = self.threads.get(&thread)?.first()?.seq;
        let fork = self.meta.forks.iter().find(|f| f.child == first)?;
        self.threads.iter().find_map(|(&key, chunks)| {
            let k = chunks.iter().position(|c| c.seq == fork.parent)?;
            let before: usize = chunks[..k].iter().map(|c| c.len).sum();
            let at = (fork.at as usize).min(chunks[k].len);
            (key != thread).then_some((key, before + at))
        })
    }
}

/// The records of `schedule.zst`, in time order.
/// A trace that was not finished (`complete` false: its weft was killed)
/// keeps the whole records before where its schedule stops.
fn read_schedule(
    path: &Path,
    complete: bool,
) -> Result<Vec<weft_abi::schedule::Event>, TraceError> {
    use weft_abi::schedule::{Event, SIZE};
    let file = std::fs::File::open(path).map_err(io(path))?;
    let mut raw = Vec::new();
    let decoded = zstd::stream::read::Decoder::new(file).and_then(|mut d| d.read_to_end(&mut raw));
    let truncated = |why: String, at: usize| TraceError::Truncated {
        path: path.to_path_buf(),
        why,
        offset: at as u64,
        kept: at / SIZE,
    };
    match decoded {
        Err(e) if complete => {
            return Err(truncated(
                format!("the zstd stream is damaged ({e})"),
                raw.len(),
            ))
        }
        _ => {}
    }
    if raw.len() % SIZE != 0 {
        if complete {
            return Err(truncated(
                "a record is cut short".into(),
                raw.len() / SIZE * SIZE,
            ));
        }
        raw.truncate(raw.len() / SIZE * SIZE);
    }
    let mut events = Vec::with_capacity(raw.len() / SIZE);
    for (i, r) in raw.chunks_exact(SIZE).enumerate() {
        let e = Event::parse(r)
            .ok_or_else(|| truncated("a record of an unknown kind".into(), i * SIZE))?;
        events.push(e);
    }
    events.sort_by_key(|e| e.ns);
    Ok(events)
}

/// What is wrong with entry `i` of the function table, if anything: an
/// index out of range would make regeneration fail without saying why.
fn damaged(i: usize, f: &FunctionInfo) -> Option<String> {
    let n = f.blocks.len();
    let bad = |what: &str| Some(format!("function {i} ({}) in the table: {what}", f.name));
    if f.id as usize != i {
        return bad("its id is not its place in the table");
    }
    // An id weft took for a function whose copy it could not place:
    // nothing enters it.
    if n == 0 && f.edges.is_empty() && f.resumes.is_empty() && f.part_exits.is_empty() {
        return None;
    }
    if n == 0 || f.entry >= n {
        return bad("no entry block");
    }
    if f.edges.iter().any(|&(from, to, _)| from >= n || to > n) {
        return bad("an edge names a block it does not have");
    }
    if f.blocks
        .iter()
        .any(|b| b.insns.is_empty() || b.calls.iter().any(|&c| c as usize >= b.insns.len()))
    {
        return bad("a block with no instruction, or a call past its end");
    }
    if f.resumes.iter().any(|r| {
        f.blocks
            .get(r.block)
            .is_none_or(|b| !r.block_start && !b.calls.contains(&r.insn))
    }) {
        return bad("a resume place that is not one of its calls or blocks");
    }
    if f.part_exits.iter().any(|&b| b >= n) {
        return bad("a jump into another part from a block it does not have");
    }
    None
}
