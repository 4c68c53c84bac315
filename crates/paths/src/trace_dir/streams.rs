//! A trace's streams read back from `buffers.zst`: each thread's chunks in
//! `seq` order, end to end. They are held in memory while they fit in the
//! reader's budget; past it, they go to a file no other process can open
//! (unlinked, in the trace's directory or else in `$TMPDIR`) that
//! regeneration then maps, so the kernel pages them in from disk as
//! regeneration walks them and drops them again under pressure: a trace
//! larger than memory still regenerates.

use super::{damaged_header, Chunk, Meta, StreamKey, TraceError, CHUNK_HEADER};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufWriter, Read, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// Every thread's stream: its chunks' records end to end.
#[derive(Default)]
pub struct Streams {
    held: Held,
}

enum Held {
    /// Each stream in memory.
    Memory(BTreeMap<StreamKey, Vec<u8>>),
    /// All streams in one mapped file, one after another.
    Mapped {
        map: memmap2::Mmap,
        ranges: BTreeMap<StreamKey, Range<usize>>,
        dir: PathBuf,
    },
}

impl Default for Held {
    fn default() -> Held {
        Held::Memory(BTreeMap::new())
    }
}

impl Streams {
    /// Streams held in memory.
    pub fn in_memory(streams: BTreeMap<StreamKey, Vec<u8>>) -> Streams {
        Streams {
            held: Held::Memory(streams),
        }
    }

    /// A thread's stream (empty for a thread the trace does not have).
    pub fn get(&self, key: StreamKey) -> &[u8] {
        match &self.held {
            Held::Memory(streams) => streams.get(&key).map_or(&[], Vec::as_slice),
            Held::Mapped { map, ranges, .. } => ranges.get(&key).map_or(&[], |r| &map[r.clone()]),
        }
    }

    /// Where the file the streams are mapped from is (it has no name), if
    /// they are in one: they did not fit in the budget they were read
    /// with.
    pub fn mapped_in(&self) -> Option<&Path> {
        match &self.held {
            Held::Memory(_) => None,
            Held::Mapped { dir, .. } => Some(dir),
        }
    }

    /// Bytes of records in all streams.
    pub fn len(&self) -> u64 {
        match &self.held {
            Held::Memory(streams) => streams.values().map(|s| s.len() as u64).sum(),
            Held::Mapped { map, .. } => map.len() as u64,
        }
    }

    /// Whether no stream has a record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A trace's chunks, per thread and process image.
pub(super) type Chunks = BTreeMap<StreamKey, Vec<Chunk>>;

/// The chunks of `buffers.zst` (`file`, at `path`), per thread in `seq`
/// order, and the threads' streams, read as they decompress: the whole
/// decompressed stream is never held, and past `budget` bytes of records
/// nothing more is held in memory (see the module documentation). A
/// stream cut short or damaged keeps the chunks before that place, and
/// says where it is; memory running out is an error of its own.
pub(super) fn read_chunks(
    file: std::fs::File,
    path: &Path,
    meta: &Meta,
    budget: u64,
) -> Result<(Chunks, Streams, Option<TraceError>), TraceError> {
    let mut threads = Chunks::new();
    let (mut at, mut kept) = (0usize, 0usize);
    let truncated = |why: String, at: usize, kept: usize| TraceError::Truncated {
        path: path.to_path_buf(),
        why,
        offset: at as u64,
        kept,
    };
    // The decoder's error names the place: the chunk it stopped inside is
    // cut short because of it. A stream that stops inside a frame was cut
    // (weft killed, a full disk), not damaged.
    let decoder_error = |e: std::io::Error| {
        if meta.complete {
            format!("the zstd stream is damaged ({e})")
        } else {
            format!("the zstd stream stops where the unfinished trace was cut ({e})")
        }
    };
    let mut seen = HashSet::new();
    let mut decoder = match zstd::stream::read::Decoder::new(file) {
        Ok(d) => d,
        Err(e) => {
            let cut = Some(truncated(decoder_error(e), 0, 0));
            return Ok((threads, Streams::default(), cut));
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    // Past the budget: every chunk's records in this file, at the offset
    // `spilled` gives for its handover number.
    let mut spill: Option<Spill> = None;
    let mut spilled: HashMap<u64, u64> = HashMap::new();
    let mut cut = None;
    loop {
        let mut h = [0u8; CHUNK_HEADER];
        match read_full(&mut decoder, &mut h) {
            Ok(0) => break,
            Ok(n) if n < CHUNK_HEADER => {
                cut = Some(truncated("a chunk header is cut short".into(), at, kept));
                break;
            }
            Ok(_) => {}
            Err(e) => {
                cut = Some(truncated(decoder_error(e), at, kept));
                break;
            }
        }
        let u32_at = |o: usize| u32::from_le_bytes(h[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        let len = u32_at(32) as usize;
        let mut bytes = Vec::new();
        if bytes.try_reserve_exact(len).is_err() {
            return Err(TraceError::NoMemory {
                path: path.to_path_buf(),
                held: at as u64,
            });
        }
        bytes.resize(len, 0);
        match read_full(&mut decoder, &mut bytes) {
            Ok(n) if n == len => {}
            Ok(_) => {
                cut = Some(truncated(
                    "a chunk's records are cut short".into(),
                    at,
                    kept,
                ));
                break;
            }
            Err(e) => {
                cut = Some(truncated(decoder_error(e), at, kept));
                break;
            }
        }
        let mut c = Chunk {
            pid: u32_at(0),
            tid: u32_at(4),
            seq: u64_at(8),
            tsc_start: u64_at(16),
            tsc_end: u64_at(24),
            len,
            bytes,
        };
        if let Some(why) = damaged_header(&c, u32_at(36), meta, &mut seen) {
            cut = Some(truncated(why, at, kept));
            break;
        }
        if spill.is_none() && (at + CHUNK_HEADER + len) as u64 > budget {
            // Over the budget: what is held goes to the file first.
            let mut s = Spill::create(dir)?;
            for c in threads.values_mut().flatten() {
                spilled.insert(c.seq, s.write(&c.bytes)?);
                c.bytes = Vec::new();
            }
            spill = Some(s);
        }
        if let Some(s) = &mut spill {
            spilled.insert(c.seq, s.write(&c.bytes)?);
            c.bytes = Vec::new();
        }
        threads
            .entry((c.pid, c.tid, c.image()))
            .or_default()
            .push(c);
        at += CHUNK_HEADER + len;
        kept += 1;
    }
    for chunks in threads.values_mut() {
        chunks.sort_by_key(|c| c.seq);
    }
    let streams = match spill {
        None => Streams::in_memory(held_streams(&mut threads, path, at)?),
        Some(s) => mapped_streams(s, &threads, &spilled, dir)?,
    };
    Ok((threads, streams, cut))
}

/// Each thread's stream in one piece, its chunks' records moved there
/// one by one: the records are held once.
fn held_streams(
    threads: &mut Chunks,
    path: &Path,
    at: usize,
) -> Result<BTreeMap<StreamKey, Vec<u8>>, TraceError> {
    let mut streams = BTreeMap::new();
    for (&key, chunks) in threads.iter_mut() {
        let mut stream = Vec::new();
        let len = chunks.iter().map(|c| c.len).sum::<usize>();
        if stream.try_reserve_exact(len).is_err() {
            return Err(TraceError::NoMemory {
                path: path.to_path_buf(),
                held: at as u64,
            });
        }
        for c in chunks.iter_mut() {
            stream.extend_from_slice(&c.bytes);
            c.bytes = Vec::new();
        }
        streams.insert(key, stream);
    }
    Ok(streams)
}

/// The spilled chunks (in `from`, in the order they were read) copied
/// into a second file thread by thread, in `seq` order, and that file
/// mapped; `from` is closed (and its blocks freed) once copied.
fn mapped_streams(
    from: Spill,
    threads: &Chunks,
    spilled: &HashMap<u64, u64>,
    dir: &Path,
) -> Result<Streams, TraceError> {
    let from = from.finish()?;
    if from.len == 0 {
        let empty = threads.keys().map(|&k| (k, Vec::new())).collect();
        return Ok(Streams::in_memory(empty));
    }
    let source = from.map()?;
    let mut to = Spill::create(dir)?;
    let mut ranges = BTreeMap::new();
    for (&key, chunks) in threads {
        let start = to.at as usize;
        for c in chunks {
            let off = spilled[&c.seq] as usize;
            to.write(&source[off..off + c.len])?;
        }
        ranges.insert(key, start..to.at as usize);
    }
    drop(source);
    drop(from);
    let to = to.finish()?;
    let map = to.map()?;
    Ok(Streams {
        held: Held::Mapped {
            map,
            ranges,
            dir: to.dir,
        },
    })
}

/// A file nothing else can open, written from its start.
struct Spill {
    out: BufWriter<std::fs::File>,
    /// Bytes written.
    at: u64,
    /// Where it is (for messages: it has no name).
    dir: PathBuf,
}

/// A spill file written to its end.
struct Written {
    file: std::fs::File,
    len: u64,
    dir: PathBuf,
}

impl Spill {
    /// In `dir` if it can be written, else in `$TMPDIR`.
    fn create(dir: &Path) -> Result<Spill, TraceError> {
        let tmp = std::env::temp_dir();
        let (file, dir) = match unnamed_file(dir) {
            Ok(f) => (f, dir.to_path_buf()),
            Err(_) => (
                unnamed_file(&tmp).map_err(|why| spill_error(&tmp, why))?,
                tmp,
            ),
        };
        Ok(Spill {
            out: BufWriter::with_capacity(1 << 20, file),
            at: 0,
            dir,
        })
    }

    /// Appends `bytes`; returns where they start.
    fn write(&mut self, bytes: &[u8]) -> Result<u64, TraceError> {
        let at = self.at;
        self.out
            .write_all(bytes)
            .map_err(|why| spill_error(&self.dir, why))?;
        self.at += bytes.len() as u64;
        Ok(at)
    }

    fn finish(self) -> Result<Written, TraceError> {
        let dir = self.dir;
        let file = self
            .out
            .into_inner()
            .map_err(|e| spill_error(&dir, e.into_error()))?;
        Ok(Written {
            file,
            len: self.at,
            dir,
        })
    }
}

impl Written {
    /// The file mapped; it has at least a byte (mmap refuses none).
    fn map(&self) -> Result<memmap2::Mmap, TraceError> {
        // SAFETY: the file has no name, so no other process can open it,
        // and this process writes it no more: the mapped bytes do not
        // change while the map lives.
        unsafe { memmap2::Mmap::map(&self.file) }.map_err(|why| spill_error(&self.dir, why))
    }
}

/// A new file in `dir` with no name (`O_TMPFILE`), or, where the file
/// system has no such files, one whose name is removed at once.
fn unnamed_file(dir: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    match rustix::fs::open(dir, flags, Mode::RUSR | Mode::WUSR) {
        Ok(fd) => Ok(fd.into()),
        Err(rustix::io::Errno::OPNOTSUPP | rustix::io::Errno::ISDIR) => {
            let path = dir.join(format!(".weft-regen-{}", std::process::id()));
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?;
            std::fs::remove_file(&path)?;
            Ok(file)
        }
        Err(e) => Err(e.into()),
    }
}

fn spill_error(dir: &Path, why: std::io::Error) -> TraceError {
    TraceError::Spill {
        dir: dir.to_path_buf(),
        why,
    }
}

/// Fills `buf` from `from` as far as it goes: the bytes read (fewer at
/// the stream's end), or the error that stopped it.
fn read_full(from: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match from.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::super::{Trace, TraceWriter, FORMAT, VERSION};
    use super::*;

    /// A finished trace in a new directory: three threads of two processes
    /// whose chunks were taken out of `seq` order, of random lengths.
    fn written(seed: u64) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("weft-streams-test-{}-{seed}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w = TraceWriter::create(&dir).unwrap();
        let mut x = seed | 1;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let threads = [(10, 10, 0u64), (10, 11, 0), (20, 20, 1 << 40)];
        let mut seqs = [0u64; 3];
        let mut pending = Vec::new();
        for _ in 0..60 {
            let t = (next() % 3) as usize;
            let (pid, tid, pool) = threads[t];
            seqs[t] += 1;
            let len = (next() % 5000) as usize;
            let bytes: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            pending.push(Chunk {
                pid,
                tid,
                seq: pool | (seqs[t] * 3 + t as u64),
                tsc_start: 1,
                tsc_end: 2,
                len,
                bytes,
            });
            // Taken late now and then: written after the next one.
            if next() % 4 != 0 {
                for c in pending.drain(..).rev() {
                    w.chunk(&c).unwrap();
                }
            }
        }
        for c in pending {
            w.chunk(&c).unwrap();
        }
        let meta = Meta {
            format: FORMAT.into(),
            version: VERSION,
            functions: Vec::new(),
            processes: vec![(10, "a".into()), (20, "b".into())],
            lost: 0,
            ticks_per_ns: 1.0,
            validate: false,
            loads: Vec::new(),
            schedule: None,
            forks: Vec::new(),
            complete: true,
        };
        w.finish(&meta).unwrap();
        dir
    }

    /// Whatever the budget, each thread's stream is its chunks in `seq`
    /// order end to end; past the budget it comes from a mapped file.
    #[test]
    fn streams_past_the_budget_are_the_same_from_a_file() {
        for seed in [1, 7, 99] {
            let dir = written(seed);
            let whole = Trace::read(&dir).unwrap();
            assert!(whole.streams.mapped_in().is_none());
            let total = whole.streams.len();
            assert!(total > 10_000, "{total} bytes");
            for budget in [0, 1, total / 2, total - 1] {
                let t = Trace::read_within(&dir, budget).unwrap();
                assert_eq!(
                    t.streams.mapped_in(),
                    Some(dir.as_path()),
                    "budget {budget}"
                );
                assert_eq!(t.streams.len(), total);
                assert_eq!(
                    t.threads.keys().collect::<Vec<_>>(),
                    whole.threads.keys().collect::<Vec<_>>()
                );
                for (&key, chunks) in &whole.threads {
                    assert_eq!(t.stream(key), whole.stream(key), "budget {budget}, {key:?}");
                    assert_eq!(
                        whole.stream(key).len(),
                        chunks.iter().map(|c| c.len).sum::<usize>()
                    );
                    assert!(chunks.windows(2).all(|p| p[0].seq < p[1].seq));
                }
            }
            // The whole trace within the budget: in memory.
            let t = Trace::read_within(&dir, total + 60 * CHUNK_HEADER as u64).unwrap();
            assert!(t.streams.mapped_in().is_none());
            // Spill files have no names: the directory holds what weft wrote.
            let mut names: Vec<_> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            names.sort();
            assert_eq!(names, ["buffers.zst", "paths.json"]);
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
