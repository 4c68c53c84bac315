//! The consumer: drains every thread's ring and writes what it drains to
//! the CTF streams of an events directory as it goes, one packet per drain
//! and thread (one `write`, unbuffered: what was drained is in the file even
//! if weft is killed), so that a trace of any length needs no memory in weft.
//! A write that fails part way (a full disk) is cut back to the stream's
//! last whole packet, so a stream file only ever holds whole packets.

use crate::files::io;
use crate::{Meta, Result, TraceClock, TraceDir};
use std::collections::BTreeMap;
use std::io::Write;
use weft_live::{RawRecords, Session};
use weft_plan::EventInfo;

/// One thread's stream file and the bytes of whole packets in it.
#[derive(Debug)]
struct Stream {
    file: std::fs::File,
    len: u64,
}

/// Writes drained events to `DIR/ctf/stream_TID`, or only counts them.
/// One recorder may take the rings of several sessions, the processes and
/// images of a workload, whose event ids are shared (see
/// `Session::share_event_ids`): it keeps what each id means and which
/// process each thread is in.
#[derive(Debug)]
pub struct Recorder {
    dir: Option<TraceDir>,
    streams: BTreeMap<i32, Stream>,
    events: u64,
    /// Events drained per process.
    events_of: BTreeMap<i32, u64>,
    /// The first write error; later drains still free the rings.
    failed: Option<crate::Error>,
    /// The first session's process and clock.
    first: Option<(i32, TraceClock)>,
    /// What every event id of the sessions seen means.
    known: BTreeMap<u32, EventInfo>,
    /// Events each process's rings dropped.
    dropped: BTreeMap<i32, u64>,
    /// The process of each thread drained.
    threads: BTreeMap<i32, i32>,
    /// The programs exec'd (see [`Meta::execs`]).
    execs: Vec<crate::Exec>,
    /// The processes' loaders (see [`Meta::loaders`]).
    loaders: Vec<crate::Loader>,
    /// The signals that killed processes weft reaped (see [`Meta::killed`]).
    killed: BTreeMap<i32, i32>,
    /// Finish with the streams alone (see [`Meta::streams_only`]).
    streams_only: bool,
    /// Signal deliveries are recorded (see [`Meta::deliveries`]).
    deliveries: bool,
    /// Per process, the most memory seen resident, and when it is to be
    /// sampled next (see [`Meta::resident`]); `None`: not sampled.
    resident: Option<BTreeMap<i32, (crate::Resident, std::time::Instant)>>,
    /// How many ids the last `meta.json` written held, and when it was
    /// written (see [`Recorder::describe`]).
    described: Option<(usize, std::time::Instant)>,
}

/// How often a process's resident memory is sampled at most (less often
/// where a sample takes long: [`Recorder::sample`]).
const RESIDENT_EVERY: std::time::Duration = std::time::Duration::from_millis(10);

impl Recorder {
    /// A recorder writing into `dir` (see [`TraceDir::prepare`]), or
    /// counting only.
    pub fn new(dir: Option<TraceDir>) -> Recorder {
        Recorder {
            dir,
            streams: BTreeMap::new(),
            events: 0,
            events_of: BTreeMap::new(),
            failed: None,
            first: None,
            known: BTreeMap::new(),
            dropped: BTreeMap::new(),
            threads: BTreeMap::new(),
            execs: Vec::new(),
            loaders: Vec::new(),
            killed: BTreeMap::new(),
            streams_only: false,
            deliveries: false,
            resident: None,
            described: None,
        }
    }

    /// Notes what `session`'s event ids mean and how many events it
    /// dropped.
    fn learn(&mut self, session: &Session, clock: TraceClock) {
        self.first.get_or_insert((session.pid(), clock));
        for (id, info) in session.events() {
            self.known.entry(*id).or_insert_with(|| info.clone());
        }
        self.dropped.insert(session.pid(), session.events_dropped());
    }

    /// The meta of everything learned: a single process's trace as
    /// before, a workload's with the threads' processes.
    fn meta(&self, clock: TraceClock) -> Meta {
        let (pid, clock) = self.first.unwrap_or((0, clock));
        let several = self.dropped.len() > 1;
        let empty = BTreeMap::new();
        let mut meta = Meta::of_workload(
            pid,
            &self.known,
            self.dropped.values().sum(),
            if several { &self.threads } else { &empty },
            clock,
        );
        meta.execs = self.execs.clone();
        meta.loaders = self.loaders.clone();
        meta.killed = self.killed.clone();
        meta.streams_only = self.streams_only;
        meta.deliveries = self.deliveries;
        if let Some(resident) = &self.resident {
            meta.resident = resident
                .iter()
                .filter(|(_, (r, _))| *r != crate::Resident::default())
                .map(|(&pid, &(r, _))| (pid, r))
                .collect();
        }
        meta
    }

    /// Samples each process's resident memory as its rings are drained,
    /// every [`RESIDENT_EVERY`] at most, keeping the most seen (see
    /// [`Meta::resident`]): for a system call record, which `replay` reads.
    pub fn sample_resident(&mut self, on: bool) {
        self.resident = on.then(BTreeMap::new);
    }

    /// Process `pid`'s resident memory now, if sampling is on and its last
    /// sample is old enough.
    fn sample(&mut self, pid: i32) {
        let Some(resident) = &mut self.resident else {
            return;
        };
        let now = std::time::Instant::now();
        let entry = resident
            .entry(pid)
            .or_insert((crate::Resident::default(), now));
        if now < entry.1 {
            return;
        }
        if let Some(held) = weft_process::resident(pid) {
            let most = &mut entry.0;
            most.anon = most.anon.max(held.anon);
            most.private = most.private.max(held.private);
            most.file = most.file.max(held.file);
        }
        // The kernel walks the process's page tables for it, holding its
        // memory map's lock (27 µs for a Python of 20 MiB here, some
        // milliseconds for gigabytes): the next sample waits a hundred
        // times what this one took, so that sampling costs the process and
        // weft 1 % at most.
        entry.1 = now + RESIDENT_EVERY.max(now.elapsed() * 100);
    }

    /// Finish the directory with its CTF streams alone, without deriving
    /// `events.jsonl` and `trace.json` (see [`Meta::streams_only`]).
    pub fn streams_only(&mut self, on: bool) {
        self.streams_only = on;
    }

    /// Whether [`Recorder::finish`] derives `events.jsonl` and `trace.json`.
    pub fn derives_files(&self) -> bool {
        !self.streams_only
    }

    /// Notes that process `pid` exec'd `path` with `arguments` (its argv
    /// and how many environment variables, when weft could read them;
    /// weft found the new image at TSC `tsc`): a successful `execve` has
    /// no return to record it.
    pub fn note_exec(
        &mut self,
        pid: i32,
        tsc: u64,
        path: String,
        arguments: Option<(Vec<String>, Option<usize>)>,
    ) {
        let (argv, vars) = match arguments {
            Some((argv, vars)) => (Some(argv), vars),
            None => (None, None),
        };
        self.execs.push(crate::Exec {
            pid,
            tsc,
            path,
            argv,
            vars,
        });
    }

    /// Notes that signal `signal` killed process `pid`, which weft reaped.
    pub fn note_killed(&mut self, pid: i32, signal: i32) {
        self.killed.insert(pid, signal);
    }

    /// Notes that the program's signal handlers run behind weft's
    /// delivery stub, which records each delivery (see
    /// [`Meta::deliveries`]).
    pub fn note_deliveries(&mut self) {
        self.deliveries = true;
    }

    /// Notes that process `pid`'s image found at `tsc` has its dynamic
    /// loader at `lo..hi`.
    pub fn note_loader(&mut self, pid: i32, tsc: u64, lo: u64, hi: u64) {
        self.loaders.push(crate::Loader {
            pid,
            tsc,
            lo,
            hi,
            ready: None,
            settled: None,
        });
    }

    /// Notes that weft settled process `pid`'s latest image at `tsc`.
    pub fn note_settled(&mut self, pid: i32, tsc: u64) {
        if let Some(l) = self.loaders.iter_mut().rev().find(|l| l.pid == pid) {
            l.settled.get_or_insert(tsc);
        }
    }

    /// Notes that weft let process `pid`'s latest image run its own code
    /// at `tsc`.
    pub fn note_ready(&mut self, pid: i32, tsc: u64) {
        if let Some(l) = self.loaders.iter_mut().rev().find(|l| l.pid == pid) {
            l.ready.get_or_insert(tsc);
        }
    }

    /// Events dropped by every session's rings so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.values().sum()
    }

    /// The events directory, if writing one.
    pub fn dir(&self) -> Option<&TraceDir> {
        self.dir.as_ref()
    }

    /// Writes what the session's event ids mean (`meta.json`,
    /// `ctf/metadata`) now, so that the streams can be read even if weft
    /// never finishes; call it once tracing has started and whenever ids
    /// are added.
    ///
    /// The files are written again when an id was added, and otherwise at
    /// most once a second: a workload's every new image calls this, and
    /// with ids shared between its processes most add none. What changed
    /// in between (execs, loaders, threads, dropped counts) is written at
    /// the next write and by [`Recorder::finish`]; a weft that dies before
    /// then leaves streams whose every event can still be read.
    pub fn describe(&mut self, session: &Session, clock: TraceClock) -> Result<()> {
        const AT_MOST_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
        self.learn(session, clock);
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let due = match self.described {
            None => true,
            Some((ids, at)) => ids < self.known.len() || at.elapsed() >= AT_MOST_EVERY,
        };
        if !due {
            return Ok(());
        }
        crate::store::write_meta(dir, &self.meta(clock))?;
        self.described = Some((self.known.len(), std::time::Instant::now()));
        Ok(())
    }

    /// Events recorded so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Events recorded so far of process `pid`.
    pub fn events_of(&self, pid: i32) -> u64 {
        self.events_of.get(&pid).copied().unwrap_or(0)
    }

    /// Drains every ring now; returns how full the fullest ring was, as
    /// a fraction of its size.
    pub fn drain(&mut self, session: &Session) -> f64 {
        let pid = session.pid();
        self.sample(pid);
        let mut fullest = 0;
        session.drain_records(&mut |raw| {
            fullest = fullest.max(raw.bytes.len());
            self.take(pid, raw)
        });
        fullest as f64 / session.ring_size().max(1) as f64
    }

    /// Flight mode: records what the rings hold now, leaving them as they are.
    pub fn snapshot(&mut self, session: &Session) -> u64 {
        let before = self.events;
        let pid = session.pid();
        session.snapshot_records(&mut |raw| self.take(pid, raw));
        self.events - before
    }

    fn take(&mut self, pid: i32, raw: RawRecords<'_>) {
        self.threads.insert(raw.tid, pid);
        let (header, count) = crate::ctf::packet_header(pid, raw.tid, raw.dropped, raw.bytes);
        self.events += count;
        *self.events_of.entry(pid).or_default() += count;
        let Some(dir) = &self.dir else {
            return;
        };
        if self.failed.is_some() {
            return;
        }
        let name = format!("stream_{}", raw.tid);
        let stream = match self.streams.entry(raw.tid) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(v) => match dir.ctf().create(&name) {
                Ok(file) => v.insert(Stream { file, len: 0 }),
                Err(e) => {
                    let path = dir.ctf().join(&name);
                    self.failed = Some(io(format!("creating {}", path.display()))(e));
                    return;
                }
            },
        };
        // The header, then the records where the drain put them: no copy
        // of a packet's bytes.
        let written =
            (stream.file.write_all(&header)).and_then(|()| stream.file.write_all(raw.bytes));
        match written {
            Ok(()) => stream.len += (header.len() + raw.bytes.len()) as u64,
            Err(source) => {
                // Part of the packet may be in the file: cut it off, so the
                // stream ends with a whole packet.
                let _ = stream.file.set_len(stream.len);
                self.failed = Some(crate::Error::WriteStopped {
                    stream: dir.ctf().join(&name),
                    kept: stream.len,
                    source,
                });
            }
        }
    }

    /// Completes the directory (`meta.json`, `ctf/metadata`,
    /// `events.jsonl`, `trace.json`); returns its meta, or None when only
    /// counting.
    pub fn finish(mut self, session: &Session, clock: TraceClock) -> Result<Option<Meta>> {
        self.learn(session, clock);
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let Some(dir) = self.dir.take() else {
            return Ok(None);
        };
        // The streams are unbuffered: every packet is written already.
        self.streams.clear();
        let meta = self.meta(clock);
        crate::store::finish_dir(&dir, &meta)?;
        Ok(Some(meta))
    }
}
