//! The consumer: drains every thread's ring and writes what it drains to
//! the CTF streams of an events directory as it goes, one packet per drain
//! and thread (one `write`, unbuffered: what was drained is in the file even
//! if weft is killed), so that a trace of any length needs no memory in weft.

use crate::{Error, Meta, Result, TraceClock};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use weft_live::{RawRecords, Session};

/// Writes drained events to `DIR/ctf/stream_TID`, or only counts them.
#[derive(Debug)]
pub struct Recorder {
    dir: Option<PathBuf>,
    streams: BTreeMap<i32, std::fs::File>,
    events: u64,
    /// The first write error; later drains still free the rings.
    failed: Option<Error>,
}

fn io(what: String) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io {
        what: what.clone(),
        source,
    }
}

impl Recorder {
    /// A recorder writing into `dir` (created; streams of an earlier trace
    /// there are removed), or counting only.
    pub fn new(dir: Option<&Path>) -> Result<Recorder> {
        if let Some(dir) = dir {
            let ctf = dir.join("ctf");
            std::fs::create_dir_all(&ctf).map_err(io(format!("creating {}", ctf.display())))?;
            for entry in std::fs::read_dir(&ctf)
                .map_err(io(format!("reading {}", ctf.display())))?
                .flatten()
            {
                if entry.file_name().to_string_lossy().starts_with("stream_") {
                    std::fs::remove_file(entry.path())
                        .map_err(io(format!("removing {}", entry.path().display())))?;
                }
            }
        }
        Ok(Recorder {
            dir: dir.map(Path::to_path_buf),
            streams: BTreeMap::new(),
            events: 0,
            failed: None,
        })
    }

    /// Writes what the session's event ids mean (`meta.json`,
    /// `ctf/metadata`) now, so that the streams can be read even if weft
    /// never finishes; call it once tracing has started and whenever ids
    /// are added.
    pub fn describe(&self, session: &Session, clock: TraceClock) -> Result<()> {
        match &self.dir {
            Some(dir) => crate::store::write_meta(dir, &Meta::of(session, clock)),
            None => Ok(()),
        }
    }

    /// Events recorded so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Drains every ring now; returns the number of events drained.
    pub fn drain(&mut self, session: &Session) -> u64 {
        let before = self.events;
        session.drain_records(&mut |raw| self.take(raw));
        self.events - before
    }

    /// Flight mode: records what the rings hold now, leaving them as they are.
    pub fn snapshot(&mut self, session: &Session) -> u64 {
        let before = self.events;
        session.snapshot_records(&mut |raw| self.take(raw));
        self.events - before
    }

    fn take(&mut self, raw: RawRecords<'_>) {
        let (packet, count) = crate::ctf::packet(raw.tid, raw.dropped, raw.bytes);
        self.events += count;
        let Some(dir) = &self.dir else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let path = dir.join("ctf").join(format!("stream_{}", raw.tid));
        let stream = match self.streams.entry(raw.tid) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => match std::fs::File::create(&path) {
                Ok(f) => v.insert(f),
                Err(e) => {
                    self.failed = Some(io(format!("writing {}", path.display()))(e));
                    return;
                }
            },
        };
        if let Err(e) = stream.write_all(&packet) {
            self.failed = Some(io(format!("writing {}", path.display()))(e));
        }
    }

    /// Flushes the streams and completes the directory (`meta.json`,
    /// `ctf/metadata`, `events.jsonl`, `trace.json`); returns its meta, or
    /// None when only counting.
    pub fn finish(mut self, session: &Session, clock: TraceClock) -> Result<Option<Meta>> {
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let Some(dir) = self.dir.take() else {
            return Ok(None);
        };
        for (tid, mut stream) in std::mem::take(&mut self.streams) {
            stream
                .flush()
                .map_err(io(format!("writing {}/ctf/stream_{tid}", dir.display())))?;
        }
        let meta = Meta::of(session, clock);
        crate::store::finish_dir(&dir, &meta)?;
        Ok(Some(meta))
    }
}
