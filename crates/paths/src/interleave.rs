//! Interleaving the threads' streams in time: the schedule
//! ([`weft_abi::schedule`]) says where each thread's stream was when it
//! was switched out or in and when it entered or left a system call. Each
//! stream is cut at those positions into *pieces*; a piece's records were
//! written after the thread's event just before the one that first shows
//! them, and pieces are ordered by that time. Pieces of threads that ran
//! at the same time on different CPUs come in the order they began; a
//! thread's code that another thread waited for (through a pipe, a
//! futex, any system call) always comes first.

use crate::trace_dir::{StreamKey, Trace};
use std::collections::{BTreeMap, HashMap};
use weft_abi::schedule::{Event, Kind, NO_BUFFER};

/// The stretch `from..to` of a stream (byte offsets), written from `ns`
/// on (`CLOCK_MONOTONIC`; 0 when the schedule says nothing earlier).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// The stream.
    pub stream: StreamKey,
    /// First byte.
    pub from: usize,
    /// One past the last byte.
    pub to: usize,
    /// When its first record can have been written, at the earliest.
    pub ns: u64,
}

/// Every stream of `trace` cut into pieces, in time order (a stream with
/// no schedule event is one piece from time 0).
pub fn pieces(trace: &Trace) -> Vec<Piece> {
    // Where each chunk of a thread starts in its stream, by handover.
    let mut starts: HashMap<(u32, u32, u64), (StreamKey, usize, usize)> = HashMap::new();
    let mut lengths: BTreeMap<StreamKey, usize> = BTreeMap::new();
    for (&key, chunks) in &trace.threads {
        let mut at = 0usize;
        for c in chunks {
            starts.insert((c.pid, c.tid, c.seq), (key, at, c.len));
            at += c.len;
        }
        lengths.insert(key, at);
    }
    let position = |e: &Event| -> Option<(StreamKey, usize)> {
        if e.seq == NO_BUFFER || e.kind == Kind::SwitchIn {
            return None;
        }
        // A buffer the thread wrote nothing into has no chunk: it stands
        // where the thread's next chunk in that image starts.
        if let Some(&(key, start, len)) = starts.get(&(e.pid, e.tid, e.seq)) {
            return Some((key, start + (e.offset as usize).min(len)));
        }
        let image = (e.seq >> crate::trace_dir::IMAGE_SHIFT) as u32;
        let key = (e.pid, e.tid, image);
        let chunks = trace.threads.get(&key)?;
        let at = chunks
            .iter()
            .take_while(|c| c.seq < e.seq)
            .map(|c| c.len)
            .sum();
        Some((key, at))
    };
    let mut by_thread: BTreeMap<(u32, u32), Vec<&Event>> = BTreeMap::new();
    for e in &trace.schedule {
        by_thread.entry((e.pid, e.tid)).or_default().push(e);
    }
    // How far each stream has been cut.
    let mut reached: BTreeMap<StreamKey, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (&(pid, tid), events) in by_thread.iter_mut() {
        events.sort_by_key(|e| e.ns);
        let mut previous = 0u64;
        for e in events.iter() {
            if let Some((key, at)) = position(e) {
                let from = reached.get(&key).copied().unwrap_or(0);
                if at > from {
                    out.push(Piece {
                        stream: key,
                        from,
                        to: at,
                        ns: previous,
                    });
                    reached.insert(key, at);
                }
            }
            previous = e.ns;
        }
        // What each of this thread's streams wrote after its last event.
        for (&key, &from) in reached.range((pid, tid, 0)..=(pid, tid, u32::MAX)) {
            let len = lengths.get(&key).copied().unwrap_or(0);
            if len > from {
                out.push(Piece {
                    stream: key,
                    from,
                    to: len,
                    ns: previous,
                });
            }
        }
    }
    // Streams the schedule never reached (or only partly, by threads it
    // had no event for).
    for (&key, &len) in &lengths {
        let seen = out.iter().any(|p| p.stream == key);
        if !seen && len > 0 {
            out.push(Piece {
                stream: key,
                from: 0,
                to: len,
                ns: 0,
            });
        }
    }
    out.sort_by_key(|p| (p.ns, p.stream, p.from));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace_dir::{Chunk, Meta};

    fn chunk(pid: u32, tid: u32, seq: u64, len: usize) -> Chunk {
        Chunk {
            pid,
            tid,
            seq,
            tsc_start: 0,
            tsc_end: 0,
            len,
            bytes: vec![1; len],
        }
    }

    fn event(ns: u64, tid: u32, kind: Kind, seq: u64, offset: u64) -> Event {
        Event {
            ns,
            pid: 10,
            tid,
            kind,
            cpu: 0,
            nr: 0,
            seq,
            offset,
        }
    }

    fn trace(chunks: Vec<Chunk>, schedule: Vec<Event>) -> Trace {
        let meta: Meta = serde_json::from_str(
            r#"{"format":"weft-paths","version":4,"functions":[],"processes":[],"lost":0,"ticks_per_ns":1.0}"#,
        )
        .unwrap();
        let mut threads: BTreeMap<StreamKey, Vec<Chunk>> = BTreeMap::new();
        for c in chunks {
            threads
                .entry((c.pid, c.tid, c.image()))
                .or_default()
                .push(c);
        }
        Trace {
            dir: std::path::PathBuf::new(),
            meta,
            threads,
            streams: Default::default(),
            schedule,
            schedule_error: None,
            cut: None,
        }
    }

    #[test]
    fn a_ping_pong_comes_out_in_turns() {
        // Thread 1 writes 10 bytes, enters write (t=100), reads until
        // thread 2 has written (t=300); thread 2 reads from t=50, leaves
        // read at 150, writes 20 bytes, enters write at 250.
        let t = trace(
            vec![chunk(10, 1, 0, 10), chunk(10, 1, 2, 5), chunk(10, 2, 1, 20)],
            vec![
                event(100, 1, Kind::SyscallEntry, 0, 10),
                event(110, 1, Kind::SyscallExit, 0, 10),
                event(120, 1, Kind::SyscallEntry, 0, 10),
                event(120, 1, Kind::SwitchOut, 0, 10),
                event(50, 2, Kind::SyscallEntry, NO_BUFFER, 0),
                event(150, 2, Kind::SyscallExit, NO_BUFFER, 0),
                event(250, 2, Kind::SyscallEntry, 1, 20),
                event(300, 1, Kind::SwitchIn, NO_BUFFER, 0),
                event(310, 1, Kind::SyscallExit, 0, 10),
                event(400, 1, Kind::SyscallEntry, 2, 5),
            ],
        );
        let p = pieces(&t);
        let order: Vec<(u32, usize, usize, u64)> =
            p.iter().map(|p| (p.stream.1, p.from, p.to, p.ns)).collect();
        assert_eq!(
            order,
            [(1, 0, 10, 0), (2, 0, 20, 150), (1, 10, 15, 310)],
            "thread 1's first write, thread 2's answer, thread 1's next"
        );
    }

    #[test]
    fn a_stream_without_events_is_one_piece_and_the_rest_after_the_last() {
        let t = trace(
            vec![chunk(10, 1, 0, 10), chunk(10, 3, 1, 7)],
            vec![event(100, 1, Kind::SyscallEntry, 0, 4)],
        );
        let p = pieces(&t);
        let order: Vec<(u32, usize, usize, u64)> =
            p.iter().map(|p| (p.stream.1, p.from, p.to, p.ns)).collect();
        assert_eq!(order, [(1, 0, 4, 0), (3, 0, 7, 0), (1, 4, 10, 100)]);
    }
}
