//! The ring consumer: weft's side of the per-thread event rings (layout in
//! `weft_patch::region::ring`, producers in `weft_patch::mini` and
//! `include/weft/event.h`). Records are drained or, in flight mode, copied
//! in place, and decoded.

use super::*;

/// One event drained from a thread's ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// The thread that emitted it.
    pub tid: i32,
    /// TSC at emission.
    pub tsc: u64,
    /// The event id given to [`Primitive::Emit`].
    pub event: u32,
    /// Its values. A string value is the number of bytes copied, with
    /// `region::ring::STR_TRUNCATED` or `STR_NULL` set as they apply.
    pub args: Vec<u64>,
    /// The text of its string values, in order (lossy UTF-8; byte arrays
    /// in hex).
    pub strings: Vec<String>,
}

/// One thread's records as its ring holds them (see `region::ring`), one
/// after another.
#[derive(Debug, Clone, Copy)]
pub struct RawRecords<'a> {
    /// The thread that wrote them.
    pub tid: i32,
    /// Events the thread dropped so far (in flight mode: overwrote).
    pub dropped: u64,
    /// The records.
    pub bytes: &'a [u8],
}

/// `bytes` in lowercase hex, two digits a byte (how a record's byte arrays
/// are given as text).
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// The bytes of [`to_hex`]'s text; a pair that is not two hex digits
/// is left out.
pub fn from_hex(text: &str) -> Vec<u8> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks_exact(2)
        .filter_map(|pair| Some(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

/// Decodes records laid out as in a ring (see `region::ring`); `strings`
/// gives the masks of an event id's values that carry bytes and, among
/// them, the byte arrays (decoded as hex). Stops at a record that does not
/// fit in `bytes`.
pub fn decode_records(
    tid: i32,
    bytes: &[u8],
    strings: &dyn Fn(u32) -> (u16, u16),
    out: &mut Vec<EventRecord>,
) {
    use weft_patch::region::ring as r;
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let mut at = 0usize;
    while let (Some(tsc), Some(id_and_shape)) = (word(at), word(at + r::R_EVENT as usize)) {
        let (nargs, text) = r::shape((id_and_shape >> 32) as u32);
        let size = r::record_size(nargs, text) as usize;
        if nargs > r::MAX_ARGS || at + size > bytes.len() {
            break;
        }
        let args: Vec<u64> = (0..nargs)
            .filter_map(|i| word(at + r::R_ARGS as usize + 8 * i))
            .collect();
        let event = id_and_shape as u32;
        let (mask, binary) = strings(event);
        let mut text_at = at + r::R_ARGS as usize + 8 * nargs;
        let mut texts = Vec::new();
        for (i, value) in args.iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            let len = ((value & 0xffff_ffff) as usize).min(text as usize);
            let piece = bytes.get(text_at..text_at + len).unwrap_or_default();
            texts.push(if binary & (1 << i) != 0 {
                to_hex(piece)
            } else {
                String::from_utf8_lossy(piece).into_owned()
            });
            text_at += len.div_ceil(8) * 8;
        }
        out.push(EventRecord {
            tid,
            tsc,
            event,
            args,
            strings: texts,
        });
        at += size;
    }
}

/// Draining event rings (the consumer side; see `region::ring`).
impl Session {
    /// Block mode: a writer that finds its ring full waits until weft has
    /// made room or until the TSC reaches `tsc`; 0 selects discard mode.
    /// Call it again before `tsc` passes to keep writers waiting.
    pub fn set_ring_wait_until(&self, tsc: u64) {
        self.shm.store_u64(
            self.layout.header.sync_offset + weft_patch::region::sync::RING_WAIT_UNTIL,
            tsc,
        );
    }

    /// Flight mode on or off: with it, a writer that finds its ring full
    /// overwrites the oldest records instead of dropping the new one. Do
    /// not drain while it is on: read the rings with
    /// [`Session::snapshot_events`].
    pub fn set_ring_overwrite(&self, on: bool) {
        self.shm.store_u64(
            self.layout.header.sync_offset + weft_patch::region::sync::RING_OVERWRITE,
            u64::from(on),
        );
    }

    /// The claimed thread slots' rings: (ring offset, tid).
    pub(super) fn claimed_rings(&self) -> impl Iterator<Item = (u64, i32)> + '_ {
        // A region without rings has blocks that end where a ring would start.
        let has_rings = self.layout.header.ring_data != 0;
        self.claimed_slots().filter(move |_| has_rings).map(|slot| {
            let block = self.layout.thread_block(slot);
            (
                block + threads::RING,
                self.shm.load_u64(block + threads::TID) as i32,
            )
        })
    }

    /// Moves every published record out of every thread's ring, in each
    /// thread's order, handing each thread's records to `take` as one
    /// contiguous run of bytes, and frees the space for the producers.
    /// A thread with two rings (the one it wrote before its program set
    /// up its thread pointer, `startup.rs`, and its own) has the older's
    /// records handed first.
    pub fn drain_records(&self, take: &mut dyn FnMut(RawRecords<'_>)) {
        use weft_patch::region::ring as r;
        let mut drained: Vec<(i32, u64, Vec<u8>)> = Vec::new();
        for (ring, tid) in self.claimed_rings() {
            let head = self.shm.load_u64(ring + r::HEAD);
            let tail = self.shm.load_u64(ring + r::TAIL);
            if head == tail {
                continue;
            }
            let data = ring + r::HEADER;
            let bytes = self.gather_records(
                tail,
                head,
                &|at| self.shm.load_u32(data + at + r::R_NARGS),
                &mut |at, len, out| self.shm.read_into(data + at, len, out),
            );
            // Only now may the producer reuse the space.
            self.shm.store_u64(ring + r::TAIL, head);
            drained.push((tid, self.shm.load_u64(ring + r::DROPPED), bytes));
        }
        // A record starts with its TSC.
        let first_tsc = |bytes: &[u8]| {
            bytes
                .get(..8)
                .map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
        };
        drained.sort_by_key(|(tid, _, bytes)| (*tid, first_tsc(bytes)));
        for (tid, dropped, bytes) in &drained {
            take(RawRecords {
                tid: *tid,
                dropped: *dropped,
                bytes,
            });
        }
    }

    /// Writes, into each thread's ring, the records of the calls the
    /// thread still had open when its process ended (killed in a blocked
    /// `read`, a `write` whose `SIGPIPE` ended it, a thread ended by its
    /// process's `exec`): their records, kept in the thread's block while
    /// they ran (`weft_patch::mini::open_calls`), as the thread's next call
    /// would have written them, stamped `now`, their result unknown.
    /// Only for a process that is gone: no thread of it writes its ring
    /// any more. Returns how many it wrote.
    pub fn record_calls_left_open(&self, now: u64) -> usize {
        use weft_patch::region::ring as r;
        let data = self.layout.header.ring_data;
        if data == 0 {
            return 0;
        }
        let mut written = 0;
        for slot in self.claimed_slots().collect::<Vec<_>>() {
            let block = self.layout.thread_block(slot);
            let depth = self.shm.load_u64(block + threads::OPEN_DEPTH);
            for k in 0..depth.min(threads::OPEN_SLOTS) {
                let open = block + threads::OPEN_CALLS + k * threads::OPEN_SIZE;
                let word = self.shm.load_u64(open + threads::OPEN_EVENT);
                let values = (word >> 32) as usize;
                if values == 0 || values > threads::OPEN_VALUES_MAX as usize {
                    continue;
                }
                let ring = block + threads::RING;
                let size = r::record_size(values, 0);
                let head = self.shm.load_u64(ring + r::HEAD);
                if head - self.shm.load_u64(ring + r::TAIL) > data - size {
                    self.shm
                        .store_u64(ring + r::DROPPED, self.shm.load_u64(ring + r::DROPPED) + 1);
                    continue;
                }
                let at = ring + r::HEADER + (head & (data - 1));
                self.shm.store_u64(at + r::R_TSC, now);
                self.shm.store_u64(at + r::R_EVENT, word);
                for v in 0..values as u64 {
                    let value = self.shm.load_u64(open + threads::OPEN_VALUES + 8 * v);
                    self.shm.store_u64(at + r::R_ARGS + 8 * v, value);
                }
                // The last value, the result when left: not known here.
                self.shm.store_u64(
                    at + r::R_ARGS + 8 * (values as u64 - 1),
                    threads::LEFT_RESULT_UNKNOWN,
                );
                self.shm.store_u64(ring + r::HEAD, head + size);
                written += 1;
            }
            self.shm.store_u64(block + threads::OPEN_DEPTH, 0);
        }
        written
    }

    /// Moves every published event out of every thread's ring, decoded, in
    /// each thread's order.
    pub fn drain_events(&self, out: &mut Vec<EventRecord>) {
        self.drain_records(&mut |raw| {
            decode_records(raw.tid, raw.bytes, &|e| self.string_mask(e), out)
        });
    }

    /// Which values of event `id`'s records carry bytes: (strings and byte
    /// arrays, byte arrays).
    pub fn string_mask(&self, id: u32) -> (u16, u16) {
        self.event_info(id)
            .map_or((0, 0), |e| (e.strings, e.binary))
    }

    /// Flight mode: copies the records every ring holds now, in each
    /// thread's order, leaving the rings as they are. While it copies,
    /// writers whose ring is full drop new events (counted) instead of
    /// overwriting old ones, so that the copy is whole. A writer that was
    /// already overwriting finishes that record: it moves its tail past
    /// old records before it reuses their bytes, so after copying a ring
    /// weft reads the tail again and keeps only the records from there on.
    pub fn snapshot_records(&self, take: &mut dyn FnMut(RawRecords<'_>)) {
        use weft_patch::region::ring as r;
        let size = self.layout.header.ring_data;
        let overwrite = self.layout.header.sync_offset + weft_patch::region::sync::RING_OVERWRITE;
        let flight = self.shm.load_u64(overwrite);
        self.shm.store_u64(overwrite, 0);
        for (ring, tid) in self.claimed_rings() {
            let head = self.shm.load_u64(ring + r::HEAD);
            let tail = self.shm.load_u64(ring + r::TAIL);
            if head == tail {
                continue;
            }
            let copy = self.shm.read(ring + r::HEADER, (size + r::SLACK) as usize);
            let tail = tail.max(self.shm.load_u64(ring + r::TAIL));
            if head <= tail || head - tail > size {
                continue;
            }
            let word = |at: u64| {
                let at = (at + r::R_NARGS) as usize;
                let bytes = copy.get(at..at + 4).and_then(|b| b.try_into().ok());
                bytes.map_or(u32::MAX, u32::from_le_bytes)
            };
            let bytes = self.gather_records(tail, head, &word, &mut |at, len, out| {
                let at = at as usize;
                out.extend_from_slice(copy.get(at..at + len).unwrap_or_default());
            });
            take(RawRecords {
                tid,
                dropped: self.shm.load_u64(ring + r::DROPPED),
                bytes: &bytes,
            });
        }
        self.shm.store_u64(overwrite, flight);
    }

    /// The bytes of the records between ring positions `from` and `to`,
    /// contiguous: `shape` reads the shape word of the record at an offset
    /// of the ring's data (`u32::MAX` where there is none), `copy` appends
    /// a run of the data's bytes. Positions are contiguous in memory
    /// except where a record ran on into the slack: the next one starts at
    /// the beginning of the data. (One copy of each run, no allocation a
    /// record: at a few million records a second, weft's drain was half
    /// allocations.)
    pub(super) fn gather_records(
        &self,
        from: u64,
        to: u64,
        shape: &dyn Fn(u64) -> u32,
        copy: &mut dyn FnMut(u64, usize, &mut Vec<u8>),
    ) -> Vec<u8> {
        use weft_patch::region::ring as r;
        let mask = self.layout.header.ring_data - 1;
        let mut bytes = Vec::with_capacity((to - from) as usize);
        let mut run_start = from;
        let mut pos = from;
        while pos < to {
            let offset = pos & mask;
            let word = shape(offset);
            if word == u32::MAX {
                break;
            }
            let (nargs, text) = r::shape(word);
            pos += r::record_size(nargs.min(r::MAX_ARGS), text.min(r::MAX_TEXT));
            if pos >= to || (pos & mask) <= offset {
                // The end, or the next record starts back at the beginning.
                let start = run_start & mask;
                copy(start, (pos - run_start) as usize, &mut bytes);
                run_start = pos;
            }
        }
        bytes
    }

    /// Events dropped so far because a ring was full (in flight mode: the
    /// oldest events overwritten).
    pub fn events_dropped(&self) -> u64 {
        use weft_patch::region::ring as r;
        self.claimed_rings()
            .map(|(ring, _)| self.shm.load_u64(ring + r::DROPPED))
            .sum::<u64>()
            + self.threads_without_slot()
    }

    /// Executions of per-thread instrumentation (events, timers) skipped
    /// because every thread slot was taken.
    pub fn threads_without_slot(&self) -> u64 {
        self.shm
            .load_u64(self.layout.header.sync_offset + weft_patch::region::sync::NO_SLOT)
    }

    /// The meaning of an event id, if the session gave it.
    pub fn event_info(&self, id: u32) -> Option<&EventInfo> {
        self.given
            .events
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, info)| info)
    }

    /// Every event id the session gave and its meaning, in the order
    /// given: ids 0, 1, 2... unless the session shares its ids with
    /// others (see [`share_event_ids`](Self::share_event_ids)).
    pub fn events(&self) -> &[(u32, EventInfo)] {
        &self.given.events
    }

    /// Takes event ids from `ids` (shared by every session of a
    /// workload, so that the ids of one trace never collide) instead of
    /// numbering this session's own from 0. Call it before any is given.
    pub fn share_event_ids(&mut self, ids: std::sync::Arc<EventIds>) {
        debug_assert!(self.given.events.is_empty());
        self.given.shared_ids = Some(ids);
    }
}

/// Event ids shared by the sessions of a workload: an id means one thing
/// in the whole trace, and the same thing (module, function, kind, values)
/// has one id in every process. A workload whose processes exec the same
/// programs over and over (a shell loop, make) would otherwise describe
/// each probe again for every process, and its trace's description would
/// grow with every exec.
#[derive(Debug, Default)]
pub struct EventIds {
    given: std::sync::Mutex<std::collections::HashMap<String, u32>>,
}

impl EventIds {
    /// The id of `info`: the one it was given before, or the next one.
    pub(super) fn id_of(&self, info: &EventInfo) -> u32 {
        let mut given = self.given.lock().unwrap_or_else(|e| e.into_inner());
        let next = given.len() as u32;
        *given.entry(format!("{info:?}")).or_insert(next)
    }
}

#[cfg(test)]
mod tests {
    use super::{from_hex, to_hex};

    #[test]
    fn hex_goes_there_and_back() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = to_hex(&bytes);
        assert_eq!(&text[..8], "00010203");
        assert_eq!(&text[text.len() - 4..], "feff");
        assert_eq!(from_hex(&text), bytes);
        assert_eq!(from_hex("0g7f"), vec![0x7f]);
    }
}
