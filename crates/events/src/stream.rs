//! Reading CTF streams back, and repairing them. Every packet is checked
//! (magic, stream id, sizes, and that its records tile it exactly) before
//! its records are decoded, so a stream whose last packet was cut short
//! (weft killed while writing it, a full disk) yields every whole packet
//! before it, and a stream corrupted in the middle yields the packets
//! before the damage and says where and why it stopped: never a panic,
//! never a packet read past its bytes. `weft events --repair` cuts streams
//! back to their last whole packet so that babeltrace2 reads them.

use crate::ctf::{PacketHeader, MAGIC, PACKET_HEADER, PACKET_HEADER_V1};
use crate::files::{io, SafeDir, TEMP_PREFIX};
use crate::trace_dir::is_stream;
use crate::{Error, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use weft_live::ring as r;
use weft_live::EventRecord;
use zerocopy::{FromZeros, IntoBytes};

/// Most bytes of records in one packet: a drain copies at most a whole
/// ring, and its last record may run on into the ring's slack.
const MAX_RECORDS: u64 = r::MAX_DATA + r::SLACK;

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// After a whole packet (or empty).
    Whole,
    /// Inside its last packet, which was cut short: the `bytes` from
    /// `offset` on hold no whole packet and were not read.
    CutShort {
        /// Where the last whole packet ends.
        offset: u64,
        /// Bytes after it.
        bytes: u64,
    },
}

/// Reads into `buf` until it is full or the input ends; returns the bytes
/// read.
fn fill(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Checks the part of a packet header every weft version writes (up to
/// the thread id); returns the packet's size in bytes.
fn check_header(h: &PacketHeader) -> std::result::Result<u64, String> {
    let (packet, content) = (h.packet_size.get(), h.content_size.get());
    if h.stream_id.get() != 0 {
        return Err(format!(
            "packet header names stream {} (weft writes stream 0)",
            h.stream_id.get()
        ));
    }
    if content != packet {
        return Err(format!(
            "packet content size ({content} bits) differs from its size ({packet} bits)"
        ));
    }
    if packet % 8 != 0 || packet / 8 < PACKET_HEADER_V1 as u64 {
        return Err(format!(
            "packet size ({packet} bits) is not whole bytes of at least its header"
        ));
    }
    // The records, and the pid of format 2.
    if packet / 8 - PACKET_HEADER_V1 as u64 > MAX_RECORDS + 8 {
        return Err(format!(
            "packet size ({packet} bits) is larger than any weft packet"
        ));
    }
    if i32::try_from(h.tid.get()).is_err() {
        return Err(format!(
            "packet thread id {} is not a thread id",
            h.tid.get()
        ));
    }
    Ok(packet / 8)
}

/// Checks that the records of a packet tile it exactly, each with at most
/// [`r::MAX_ARGS`] values and, given the number of event ids `meta.json`
/// describes, an id among them; else where (from the records' start) and
/// why.
fn check_records(records: &[u8], ids: Option<usize>) -> std::result::Result<(), (usize, String)> {
    let mut at = 0;
    while at < records.len() {
        let left = records.len() - at;
        if left < r::R_ARGS as usize {
            return Err((
                at,
                format!("is cut by the end of its packet ({left} bytes left of a 16-byte header)"),
            ));
        }
        let shape = &records[at + r::R_NARGS as usize..at + r::R_ARGS as usize];
        let (nargs, text) = r::shape(u32::from_le_bytes(
            shape.try_into().expect("4 bytes, by the bounds above"),
        ));
        if nargs > r::MAX_ARGS {
            return Err((
                at,
                format!("has {nargs} values (a record has at most {})", r::MAX_ARGS),
            ));
        }
        let id = u32::from_le_bytes(
            records[at + r::R_EVENT as usize..at + r::R_NARGS as usize]
                .try_into()
                .expect("4 bytes, by the bounds above"),
        );
        if let Some(ids) = ids.filter(|&ids| id as usize >= ids) {
            return Err((
                at,
                format!(
                    "has event id {id}, which meta.json does not describe (it describes {ids})"
                ),
            ));
        }
        let size = r::record_size(nargs, text) as usize;
        if size > left {
            return Err((
                at,
                format!("runs past the end of its packet ({size} bytes, {left} left)"),
            ));
        }
        at += size;
    }
    Ok(())
}

/// The thread whose stream the file `stream` is (`stream_TID`), if it is
/// named as weft names them.
fn thread_of(stream: &Path) -> Option<i32> {
    let name = stream.file_name()?.to_str()?;
    is_stream(name).then(|| name["stream_".len()..].parse().ok())?
}

/// What comes next in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// A whole, valid packet of thread `tid`, `size` bytes long in all.
    Packet {
        /// The thread in its context.
        tid: i32,
        /// Its bytes, header included.
        size: u64,
    },
    /// The stream ends here.
    End(StreamEnd),
}

/// Reads the packet at `offset` of the stream `input` (named `stream` in
/// messages), checks its header and that its records tile it (and, given
/// `ids`, that their event ids are below it), and leaves its records in
/// `records`. A corrupt packet is an [`Error::Corrupt`].
pub(crate) fn next_packet(
    input: &mut dyn Read,
    stream: &Path,
    offset: u64,
    ids: Option<usize>,
    records: &mut Vec<u8>,
) -> Result<Next> {
    let corrupt = |why| Error::Corrupt {
        stream: stream.to_path_buf(),
        offset,
        why,
    };
    let failed = io(format!("reading {}", stream.display()));
    let mut header = PacketHeader::new_zeroed();
    let got = fill(input, &mut header.as_mut_bytes()[..PACKET_HEADER_V1]).map_err(&failed)?;
    if got == 0 {
        return Ok(Next::End(StreamEnd::Whole));
    }
    if got >= 4 && header.magic.get() != MAGIC {
        return Err(corrupt(format!(
            "bad packet magic {:#010x} (weft's packets start with {MAGIC:#010x})",
            header.magic.get()
        )));
    }
    if got < PACKET_HEADER_V1 {
        return Ok(Next::End(StreamEnd::CutShort {
            offset,
            bytes: got as u64,
        }));
    }
    let packet = check_header(&header).map_err(corrupt)?;
    let tid = header.tid.get() as i32;
    if let Some(owner) = thread_of(stream).filter(|&owner| owner != tid) {
        return Err(corrupt(format!(
            "packet of thread {tid} in the stream of thread {owner} (weft writes each \
             thread's packets to its own stream_TID)"
        )));
    }
    records.clear();
    // The word after the thread id: the process id in packets since the
    // pid was added (below PID_MAX_LIMIT, 2^22), else, in an older weft's
    // packet, the first record's timestamp (never that small), which then
    // starts the records.
    let mut header_len = PACKET_HEADER_V1;
    if packet >= PACKET_HEADER as u64 {
        let more = fill(input, &mut header.as_mut_bytes()[PACKET_HEADER_V1..]).map_err(&failed)?;
        if more < PACKET_HEADER - PACKET_HEADER_V1 {
            return Ok(Next::End(StreamEnd::CutShort {
                offset,
                bytes: (PACKET_HEADER_V1 + more) as u64,
            }));
        }
        let word = header.pid.get();
        if (0..PID_LIMIT).contains(&word) {
            header_len = PACKET_HEADER;
        } else {
            records.extend_from_slice(header.pid.as_bytes());
        }
    }
    let size = packet - header_len as u64 - records.len() as u64;
    let read = (&mut *input)
        .take(size)
        .read_to_end(records)
        .map_err(&failed)?;
    if (read as u64) < size {
        return Ok(Next::End(StreamEnd::CutShort {
            offset,
            bytes: (packet - size) + read as u64,
        }));
    }
    check_records(records, ids).map_err(|(at, why)| {
        let at = offset + (header_len + at) as u64;
        corrupt(format!("the record at byte {at} {why}"))
    })?;
    Ok(Next::Packet { tid, size: packet })
}

/// Process ids are below this (the kernel's `PID_MAX_LIMIT`).
const PID_LIMIT: i64 = 1 << 22;

/// What [`packets`] passes each packet to: its offset in the stream, its
/// thread and its records.
pub(crate) type EachPacket<'a> = dyn FnMut(u64, i32, &[u8]) -> Result<()> + 'a;

/// Reads the packets of the stream `input` (named `stream` in messages),
/// checks each (see [`next_packet`]), and passes each one's offset, thread
/// and records to `each`. Returns how the stream ended; a corrupt packet is
/// an [`Error::Corrupt`] after the packets before it were passed on.
pub(crate) fn packets(
    input: &mut dyn Read,
    stream: &Path,
    ids: Option<usize>,
    each: &mut EachPacket<'_>,
) -> Result<StreamEnd> {
    let mut records = Vec::new();
    let mut offset = 0u64;
    loop {
        match next_packet(input, stream, offset, ids, &mut records)? {
            Next::End(end) => return Ok(end),
            Next::Packet { tid, size } => {
                each(offset, tid, &records)?;
                offset += size;
            }
        }
    }
}

/// Reads the events of one stream back, a packet at a time; `strings`
/// gives each event id's string masks (see `Meta::string_masks`).
pub(crate) fn read_stream(
    input: &mut dyn Read,
    stream: &Path,
    strings: &dyn Fn(u32) -> (u16, u16),
    each: &mut dyn FnMut(Vec<EventRecord>) -> Result<()>,
) -> Result<StreamEnd> {
    packets(input, stream, None, &mut |_, tid, records| {
        let mut events = Vec::new();
        weft_live::decode_records(tid, records, strings, &mut events);
        each(events)
    })
}

/// A stream `weft events --repair` cut back to its last whole packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The stream file.
    pub stream: PathBuf,
    /// Its new length: where its last whole, valid packet ends.
    pub offset: u64,
    /// The bytes removed after it.
    pub removed: u64,
    /// Why those bytes were unreadable.
    pub why: String,
}

/// Cuts each CTF stream of the events directory `dir` back to its last
/// whole, valid packet (after a packet cut short, or before a corrupt
/// one: the rest of that stream is unreadable), and removes temporary
/// files a killed weft left; returns what it cut. A record whose event id
/// `meta.json` does not describe makes its packet corrupt, but only when
/// `meta.json` is consistent and `ctf/metadata` (whole) agrees with it:
/// weft never cuts a stream for a `meta.json` of another trace. Opens
/// nothing through a link.
pub fn repair_dir(dir: &Path) -> Result<Vec<Repair>> {
    let ids = crate::check::trusted_ids(dir);
    let root = SafeDir::open(dir).map_err(io(format!("opening {}", dir.display())))?;
    let ctf = root
        .open_dir("ctf")
        .map_err(io(format!("opening {}", dir.join("ctf").display())))?;
    let mut repairs = Vec::new();
    for (at, names) in [(&root, root.names()), (&ctf, ctf.names())] {
        let names = names.map_err(io(format!("reading {}", at.path().display())))?;
        for name in names.iter().filter(|n| n.starts_with(TEMP_PREFIX)) {
            at.remove_file(name)
                .map_err(io(format!("removing {}", at.join(name).display())))?;
        }
    }
    let names = ctf
        .names()
        .map_err(io(format!("reading {}", ctf.path().display())))?;
    for name in names.iter().filter(|n| is_stream(n)) {
        let path = ctf.join(name);
        let file = ctf
            .open_file(name, false)
            .map_err(io(format!("reading {}", path.display())))?;
        let len = file
            .metadata()
            .map_err(io(format!("reading {}", path.display())))?
            .len();
        let mut input = std::io::BufReader::with_capacity(1 << 20, file);
        let (offset, why) = match packets(&mut input, &path, ids, &mut |_, _, _| Ok(())) {
            Ok(StreamEnd::Whole) => continue,
            Ok(StreamEnd::CutShort { offset, .. }) => {
                (offset, "its last packet was cut short".to_string())
            }
            Err(Error::Corrupt { offset, why, .. }) => (offset, why),
            Err(e) => return Err(e),
        };
        ctf.open_file(name, true)
            .and_then(|f| f.set_len(offset))
            .map_err(io(format!("cutting {}", path.display())))?;
        repairs.push(Repair {
            stream: path,
            offset,
            removed: len.saturating_sub(offset),
            why,
        });
    }
    Ok(repairs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctf::tests::meta;
    use proptest::prelude::*;

    /// Two records as a ring holds them: f(5, -1) and g(9, "hello").
    fn records() -> Vec<u8> {
        records_at(0)
    }

    /// [`records`] with timestamps `base` later.
    fn records_at(base: u64) -> Vec<u8> {
        let mut records = Vec::new();
        records.extend_from_slice(&(base + 100).to_le_bytes());
        records.extend_from_slice(&0u32.to_le_bytes());
        records.extend_from_slice(&2u32.to_le_bytes());
        records.extend_from_slice(&5u64.to_le_bytes());
        records.extend_from_slice(&(-1i64).to_le_bytes());
        records.extend_from_slice(&(base + 200).to_le_bytes());
        records.extend_from_slice(&2u32.to_le_bytes());
        records.extend_from_slice(&(2u32 | 8 << 16).to_le_bytes());
        records.extend_from_slice(&9u64.to_le_bytes());
        records.extend_from_slice(&5u64.to_le_bytes());
        records.extend_from_slice(b"hello\0\0\0");
        records
    }

    /// A stream of three packets of [`records`] of thread 42.
    fn stream() -> Vec<u8> {
        stream_of(42)
    }

    /// A stream of three packets of [`records`] of thread `tid`.
    fn stream_of(tid: i32) -> Vec<u8> {
        let (p, count) = crate::ctf::packet(7, tid, 3, &records());
        assert_eq!(count, 2);
        [p.clone(), p.clone(), p].concat()
    }

    /// `packet` as an older weft wrote it: no pid after the tid.
    fn format_1(packet: &[u8]) -> Vec<u8> {
        let mut old = [&packet[..PACKET_HEADER_V1], &packet[PACKET_HEADER..]].concat();
        let bits = (old.len() * 8) as u64;
        // content_size and packet_size, after magic, stream id and the two timestamps.
        old[24..32].copy_from_slice(&bits.to_le_bytes());
        old[32..40].copy_from_slice(&bits.to_le_bytes());
        old
    }

    #[test]
    fn packets_of_an_older_weft_without_a_pid_read_the_same() {
        // Timestamps as a TSC reads them, a second or more after boot (a
        // timestamp below 2^22 would read as a pid).
        let (p, _) = crate::ctf::packet(7, 42, 3, &records_at(1 << 40));
        let (empty, _) = crate::ctf::packet(7, 42, 3, &[]);
        let new = [p.clone(), empty.clone(), p.clone()].concat();
        let old = [format_1(&p), format_1(&empty), format_1(&p)].concat();
        let (from_new, end_new) = read(&new);
        let (from_old, end_old) = read(&old);
        assert!(matches!(end_new, Ok(StreamEnd::Whole)));
        assert!(matches!(end_old, Ok(StreamEnd::Whole)), "{end_old:?}");
        assert_eq!(from_new.len(), 4);
        assert_eq!(from_old, from_new);
        // An old stream cut inside its last packet ends there.
        let cut = &old[..old.len() - 3];
        let (got, end) = read(cut);
        assert_eq!(got.len(), 2);
        assert!(matches!(end, Ok(StreamEnd::CutShort { .. })), "{end:?}");
    }

    /// The events read from `bytes` and how the stream ended.
    fn read(bytes: &[u8]) -> (Vec<EventRecord>, Result<StreamEnd>) {
        let m = meta();
        let mut got = Vec::new();
        let end = read_stream(
            &mut &bytes[..],
            Path::new("ctf/stream_42"),
            &|id| m.string_masks(id),
            &mut |mut e| {
                got.append(&mut e);
                Ok(())
            },
        );
        (got, end)
    }

    #[test]
    fn packets_read_back_as_the_records_written() {
        let (got, end) = read(&stream());
        assert_eq!(end.unwrap(), StreamEnd::Whole);
        assert_eq!(got.len(), 6);
        assert_eq!((got[0].tid, got[0].tsc, got[0].event), (42, 100, 0));
        assert_eq!(got[0].args, [5, u64::MAX]);
        assert_eq!(
            (got[1].args.clone(), got[1].strings.clone()),
            (vec![9, 5], vec!["hello".to_string()])
        );
    }

    #[test]
    fn a_stream_cut_inside_its_last_packet_keeps_the_packets_before() {
        let whole = stream();
        let packet = whole.len() / 3;
        for cut in [1, 3, 4, 20, PACKET_HEADER, PACKET_HEADER + 8, packet - 1] {
            let (got, end) = read(&whole[..2 * packet + cut]);
            assert_eq!(got.len(), 4, "cut {cut}");
            assert_eq!(
                end.unwrap(),
                StreamEnd::CutShort {
                    offset: 2 * packet as u64,
                    bytes: cut as u64
                },
                "cut {cut}"
            );
        }
    }

    #[test]
    fn a_corrupt_packet_stops_the_stream_there_and_says_why() {
        let whole = stream();
        let packet = whole.len() / 3;
        let damaged = |at: usize, bytes: &[u8]| {
            let mut s = whole.clone();
            s[at..at + bytes.len()].copy_from_slice(bytes);
            let (got, end) = read(&s);
            match end {
                Err(Error::Corrupt { offset, why, .. }) => (got.len(), offset, why),
                other => panic!("not corrupt: {other:?}"),
            }
        };
        let (n, offset, why) = damaged(packet, b"XXXX");
        assert_eq!((n, offset), (2, packet as u64));
        assert!(why.contains("bad packet magic 0x58585858"), "{why}");
        // Sizes that disagree, and records that do not tile the packet.
        let (n, _, why) = damaged(packet + 32, &7u64.to_le_bytes());
        assert!(n == 2 && why.contains("content size"), "{why}");
        let shape = packet + PACKET_HEADER + 12;
        let (_, _, why) = damaged(shape, &(13u32).to_le_bytes());
        assert!(why.contains("has 13 values"), "{why}");
        let (_, _, why) = damaged(shape, &(12u32).to_le_bytes());
        assert!(why.contains("runs past the end of its packet"), "{why}");
        // A packet of another thread than the stream's (its file name).
        let (s, m) = (stream(), meta());
        let mut got = 0;
        let end = read_stream(
            &mut &s[..],
            Path::new("ctf/stream_41"),
            &|id| m.string_masks(id),
            &mut |e| {
                got += e.len();
                Ok(())
            },
        );
        match end {
            Err(Error::Corrupt { offset: 0, why, .. }) => assert_eq!(
                why,
                "packet of thread 42 in the stream of thread 41 (weft writes each thread's \
                 packets to its own stream_TID)"
            ),
            other => panic!("not corrupt: {other:?}"),
        }
        assert_eq!(got, 0);
        let msg = Error::Corrupt {
            stream: "ev/ctf/stream_42".into(),
            offset: 4096,
            why: "bad packet magic".into(),
        };
        assert_eq!(
            msg.to_string(),
            "ev/ctf/stream_42: unreadable from byte 4096: bad packet magic"
        );
    }

    /// A real packet, then `edits` (position, byte) applied to a stream of
    /// three of them, then cut to `keep` bytes.
    fn mutated() -> impl Strategy<Value = Vec<u8>> {
        (
            proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
            any::<usize>(),
        )
            .prop_map(|(edits, keep)| {
                let mut s = stream();
                for (at, byte) in edits {
                    let at = at % s.len();
                    s[at] = byte;
                }
                let keep = keep % (s.len() + 1);
                s.truncate(keep);
                s
            })
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let (_, end) = read(&bytes);
            prop_assert!(matches!(end, Ok(_) | Err(Error::Corrupt { .. })), "{end:?}");
        }

        #[test]
        fn mutated_packets_never_panic(bytes in mutated()) {
            let (got, end) = read(&bytes);
            prop_assert!(matches!(end, Ok(_) | Err(Error::Corrupt { .. })), "{end:?}");
            prop_assert!(got.len() <= 6);
            // Whatever ended the stream, the packets before it are whole.
            if let Ok(StreamEnd::CutShort { offset, bytes: cut }) = end {
                prop_assert_eq!(offset + cut, bytes.len() as u64);
            }
        }

        #[test]
        fn headers_that_claim_anything_never_panic(
            size in any::<u64>(), content in any::<u64>(), tid in any::<i64>(),
        ) {
            let mut s = stream();
            s[24..32].copy_from_slice(&content.to_le_bytes());
            s[32..40].copy_from_slice(&size.to_le_bytes());
            s[48..56].copy_from_slice(&tid.to_le_bytes());
            let (_, end) = read(&s);
            prop_assert!(matches!(end, Ok(_) | Err(Error::Corrupt { .. })), "{end:?}");
        }
    }

    #[test]
    fn records_of_ids_meta_json_does_not_describe_are_corrupt() {
        let whole = stream();
        let packet = whole.len() / 3;
        // The bytes of records `packets` passes on with `ids`, and its end.
        let read = |ids: Option<usize>| {
            let mut n = 0;
            let end = packets(&mut &whole[..], Path::new("s"), ids, &mut |_, _, r| {
                n += r.len();
                Ok(())
            });
            (n, end)
        };
        // meta() describes ids 0 to 2, and the records use ids 0 and 2.
        let (_, end) = read(Some(3));
        assert_eq!(end.unwrap(), StreamEnd::Whole);
        match read(Some(2)) {
            (0, Err(Error::Corrupt { offset: 0, why, .. })) => assert_eq!(
                why,
                format!(
                    "the record at byte {} has event id 2, which meta.json does not describe \
                     (it describes 2)",
                    PACKET_HEADER + 32
                )
            ),
            other => panic!("not corrupt: {other:?}"),
        }
        // Without ids (weft's own finish), any id.
        let (n, end) = read(None);
        assert_eq!(
            (end.unwrap(), n),
            (StreamEnd::Whole, 3 * (packet - PACKET_HEADER))
        );
    }

    #[test]
    fn repair_cuts_streams_at_unknown_ids_only_for_a_trusted_meta() {
        let dir = std::env::temp_dir().join(format!("weft-repair-ids-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ctf")).unwrap();
        let whole = stream_of(4);
        let packet = whole.len() / 3;
        // The last packet's second record gets id 7.
        let mut bad = whole.clone();
        let id_at = 2 * packet + PACKET_HEADER + 32 + 8;
        bad[id_at..id_at + 4].copy_from_slice(&7u32.to_le_bytes());
        std::fs::write(dir.join("ctf/stream_4"), &bad).unwrap();
        let m = meta();
        std::fs::write(dir.join("meta.json"), serde_json::to_vec(&m).unwrap()).unwrap();
        // ctf/metadata of another trace: nothing cut.
        let mut other = m.clone();
        other.events[0].1 = "elsewhere".into();
        std::fs::write(dir.join("ctf/metadata"), crate::ctf::metadata(&other)).unwrap();
        assert!(repair_dir(&dir).unwrap().is_empty());
        assert_eq!(std::fs::read(dir.join("ctf/stream_4")).unwrap(), bad);
        // Agreeing: the packet is cut.
        std::fs::write(dir.join("ctf/metadata"), crate::ctf::metadata(&m)).unwrap();
        let repairs = repair_dir(&dir).unwrap();
        assert_eq!(repairs.len(), 1);
        assert_eq!(
            (repairs[0].offset, repairs[0].removed),
            (2 * packet as u64, packet as u64)
        );
        assert!(
            repairs[0].why.contains("has event id 7"),
            "{}",
            repairs[0].why
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn repair_cuts_streams_to_their_last_whole_packet() {
        let dir = std::env::temp_dir().join(format!("weft-repair-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ctf")).unwrap();
        let whole = stream_of(1);
        let packet = whole.len() / 3;
        std::fs::write(dir.join("ctf/stream_1"), &whole).unwrap();
        std::fs::write(dir.join("ctf/stream_2"), &stream_of(2)[..2 * packet + 9]).unwrap();
        let mut bad = stream_of(3);
        bad[packet..packet + 4].copy_from_slice(b"XXXX");
        std::fs::write(dir.join("ctf/stream_3"), &bad).unwrap();
        std::fs::write(dir.join(format!("ctf/{TEMP_PREFIX}metadata-1-0")), b"").unwrap();
        let repairs = repair_dir(&dir).unwrap();
        assert_eq!(repairs.len(), 2, "{repairs:?}");
        assert_eq!(
            (repairs[0].offset, repairs[0].removed),
            (2 * packet as u64, 9)
        );
        assert_eq!(
            (repairs[1].offset, repairs[1].removed),
            (packet as u64, 2 * packet as u64)
        );
        let len = |n: &str| std::fs::metadata(dir.join("ctf").join(n)).unwrap().len();
        assert_eq!(len("stream_1"), whole.len() as u64);
        assert_eq!(len("stream_2"), 2 * packet as u64);
        assert_eq!(len("stream_3"), packet as u64);
        assert!(!dir.join(format!("ctf/{TEMP_PREFIX}metadata-1-0")).exists());
        assert!(repair_dir(&dir).unwrap().is_empty(), "repaired once");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
