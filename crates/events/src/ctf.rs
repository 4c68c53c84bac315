//! CTF 1.8 output (the Common Trace Format read by babeltrace2 and Trace
//! Compass): `DIR/ctf/metadata` in TSDL and one stream file per thread.
//!
//! The metadata describes the ring records exactly (see
//! `weft_patch::region::ring`): an event header with the TSC and the event
//! id, an event context with the record's shape (values, text bytes), the
//! values as `int64_t` (a string value as its length and flags), then each
//! string's text as a UTF-8 sequence aligned to 8 bytes. So weft writes what
//! it drains from a ring as it is, one packet per drain and thread, with no
//! re-encoding. Integers are naturally aligned (CTF alignments are in
//! bits), which skips the padding after a string's text. The thread id is
//! in each packet's context; timestamps are the raw TSC values on a clock
//! declared at the TSC's measured rate.

use crate::Meta;
use std::fmt::Write as _;
use weft_live::ring as r;
use zerocopy::little_endian::{I64, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The magic number that starts every packet.
pub(crate) const MAGIC: u32 = 0xC1FC_1FC1;

/// A packet's header and context as the metadata declares them
/// (`packet.header` and `packet.context`): little-endian, no padding.
#[derive(Debug, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub(crate) struct PacketHeader {
    pub magic: U32,
    pub stream_id: U32,
    pub timestamp_begin: U64,
    pub timestamp_end: U64,
    /// Bits of the packet that hold data (all of them).
    pub content_size: U64,
    /// Bits of the packet.
    pub packet_size: U64,
    pub events_discarded: U64,
    pub tid: I64,
    /// The thread's process (from packet format 2).
    pub pid: I64,
}

/// Bytes of a packet's header and context, before its records.
pub const PACKET_HEADER: usize = std::mem::size_of::<PacketHeader>();
const _: () = assert!(PACKET_HEADER == 8 + 7 * 8);
/// Bytes of the header of packet format 1 (no pid), which older weft
/// versions wrote; readers take both.
pub const PACKET_HEADER_V1: usize = PACKET_HEADER - 8;
/// The packet format weft writes: 2 has the pid after the tid.
pub const PACKET_FORMAT: u32 = 2;

/// A TSDL identifier for a value name: letters, digits and `_`.
fn identifier(name: &str) -> String {
    let mut id: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id.insert(0, 'v');
    }
    id
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The clock's origin (value 0) in wall-clock time, as CTF 1.8 declares
/// it: whole seconds since the Unix epoch (`offset_s`) and cycles of
/// `freq` Hz on top (`offset`, less than a second's worth), from the
/// CLOCK_REALTIME reading taken when the clock read `start_tsc`.
/// Timestamps then read as `realtime + (value - start_tsc) / freq`, so
/// babeltrace2 shows the time of day; an error in the measured rate only
/// matters over the trace's duration, not since the clock's own origin.
/// (0, 0) for a trace without that reading (older weft versions).
pub(crate) fn clock_offset(meta: &Meta, freq: u64) -> (i64, u64) {
    const NS: i128 = 1_000_000_000;
    let (Some(realtime), true) = (meta.start_realtime_ns, freq > 0) else {
        return (0, 0);
    };
    let since_origin = i128::from(meta.start_tsc) * NS / i128::from(freq);
    let origin = i128::from(realtime) - since_origin;
    let seconds = origin.div_euclid(NS);
    let cycles = (origin.rem_euclid(NS) * i128::from(freq) + NS / 2) / NS;
    // Rounding may make a whole second of cycles.
    let (seconds, cycles) = if cycles >= i128::from(freq) {
        (seconds + 1, cycles - i128::from(freq))
    } else {
        (seconds, cycles)
    };
    (seconds as i64, cycles as u64)
}

/// The TSDL metadata.
pub fn metadata(meta: &Meta) -> String {
    let mut m = String::from("/* CTF 1.8 */\n\n");
    m.push_str(
        "typealias integer { size = 8; align = 8; signed = false; encoding = UTF8; } := utf8_t;\n\
         typealias integer { size = 8; align = 8; signed = false; } := uint8_t;\n\
         typealias integer { size = 16; align = 16; signed = false; } := uint16_t;\n\
         typealias integer { size = 32; align = 32; signed = false; } := uint32_t;\n\
         typealias integer { size = 64; align = 64; signed = false; } := uint64_t;\n\
         typealias integer { size = 64; align = 64; signed = true; } := int64_t;\n\
         typealias enum : uint32_t { whole = 0, cut = 1073741824, null = 2147483648 } := string_flags_t;\n\n\
         trace {\n\tmajor = 1;\n\tminor = 8;\n\tbyte_order = le;\n\
         \tpacket.header := struct {\n\t\tuint32_t magic;\n\t\tuint32_t stream_id;\n\t};\n};\n\n",
    );
    let freq = (meta.ticks_per_ns * 1e9).round() as u64;
    let (offset_s, offset) = clock_offset(meta, freq);
    let _ = write!(
        m,
        "env {{\n\ttracer_name = \"weft\";\n\tpid = {};\n}};\n\n\
         clock {{\n\tname = \"{clock}\";\n\tdescription = \"{description}\";\n\tfreq = {freq};\n\
         \toffset_s = {offset_s};\n\toffset = {offset};\n}};\n\n\
         typealias integer {{ size = 64; align = 64; signed = false; map = clock.{clock}.value; }} := tsc_t;\n\n",
        meta.pid,
        clock = match meta.clock {
            crate::ClockKind::Monotonic => "monotonic",
            crate::ClockKind::Tsc => "tsc",
        },
        description = match meta.clock {
            crate::ClockKind::Monotonic => "CLOCK_MONOTONIC",
            crate::ClockKind::Tsc => "time-stamp counter",
        },
    );
    let pid_field = if meta.format >= 2 {
        "\t\tint64_t pid;\n"
    } else {
        ""
    };
    m.push_str(&format!(
        "stream {{\n\tid = 0;\n\
         \tpacket.context := struct {{\n\t\ttsc_t timestamp_begin;\n\t\ttsc_t timestamp_end;\n\
         \t\tuint64_t content_size;\n\t\tuint64_t packet_size;\n\t\tuint64_t events_discarded;\n\
         \t\tint64_t tid;\n{pid_field}\t}};\n\
         \tevent.header := struct {{\n\t\ttsc_t timestamp;\n\t\tuint32_t id;\n\t}};\n\
         \tevent.context := struct {{\n\t\tuint16_t values;\n\t\tuint16_t text_bytes;\n\t}};\n}};\n\n",
    ));
    for (id, (module, function, kind, nargs)) in meta.events.iter().enumerate() {
        let mut fields = String::new();
        if kind == "exit" {
            fields.push_str("\t\tint64_t ret;\n");
        } else {
            let (mask, binary) = meta.string_masks(id as u32);
            let is_string = |i: u8| mask & (1 << i) != 0;
            let name = |i: u8| identifier(&meta.value_name(id as u32, usize::from(i)));
            for i in 0..*nargs {
                let n = name(i);
                if is_string(i) {
                    let _ = writeln!(
                        fields,
                        "\t\tuint32_t {n}_len;\n\t\tstring_flags_t {n}_flags;"
                    );
                } else {
                    let _ = writeln!(fields, "\t\tint64_t {n};");
                }
            }
            for i in (0..*nargs).filter(|&i| is_string(i)) {
                let n = name(i);
                let element = if binary & (1 << i) != 0 {
                    "uint8_t data"
                } else {
                    "utf8_t text"
                };
                let _ = writeln!(
                    fields,
                    "\t\tstruct {{ {element}[{n}_len]; }} align(64) {n};"
                );
            }
            if mask != 0 {
                // The padding after the last text belongs to the event:
                // babeltrace2 cannot skip it at the end of a packet.
                fields.push_str("\t\tstruct { } align(64) end;\n");
            }
        }
        let _ = write!(
            m,
            "event {{\n\tname = \"{}:{}:{}\";\n\tid = {id};\n\tstream_id = 0;\n\tfields := struct {{\n{fields}\t}};\n}};\n\n",
            escape(module),
            escape(function),
            kind
        );
    }
    m
}

/// The first and last TSC of ring records and their number.
fn span(records: &[u8]) -> (u64, u64, u64) {
    let word = |at: usize| {
        records
            .get(at..at + 8)
            .map_or(0, |b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    };
    let (mut first, mut last, mut count) = (None, 0, 0);
    let mut at = 0usize;
    while at + r::R_ARGS as usize <= records.len() {
        let (nargs, text) = r::shape((word(at + r::R_EVENT as usize) >> 32) as u32);
        let tsc = word(at);
        first.get_or_insert(tsc);
        last = tsc;
        count += 1;
        at += r::record_size(nargs, text) as usize;
    }
    (first.unwrap_or(0), last, count)
}

/// A packet holding `records` (laid out as in a ring) of thread `tid` of
/// process `pid`,
/// with the thread's count of dropped events so far; and how many events
/// it holds.
#[cfg(test)]
pub(crate) fn packet(pid: i32, tid: i32, dropped: u64, records: &[u8]) -> (Vec<u8>, u64) {
    let (header, count) = packet_header(pid, tid, dropped, records);
    let mut p = Vec::with_capacity(PACKET_HEADER + records.len());
    p.extend_from_slice(&header);
    p.extend_from_slice(records);
    (p, count)
}

/// The header of [`packet`], which `records` follow in a stream; and how
/// many events they are.
pub fn packet_header(
    pid: i32,
    tid: i32,
    dropped: u64,
    records: &[u8],
) -> ([u8; PACKET_HEADER], u64) {
    let (begin, end, count) = span(records);
    let bits = ((PACKET_HEADER + records.len()) * 8) as u64;
    let header = PacketHeader {
        magic: MAGIC.into(),
        stream_id: 0.into(),
        timestamp_begin: begin.into(),
        timestamp_end: end.into(),
        content_size: bits.into(),
        packet_size: bits.into(),
        events_discarded: dropped.into(),
        tid: i64::from(tid).into(),
        pid: i64::from(pid).into(),
    };
    let mut bytes = [0u8; PACKET_HEADER];
    bytes.copy_from_slice(header.as_bytes());
    (bytes, count)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Three event ids of two functions, the third with a string argument.
    pub(crate) fn meta() -> Meta {
        Meta {
            pid: 7,
            ticks_per_ns: 2.5,
            start_tsc: 0,
            start_realtime_ns: None,
            dropped: 0,
            ring_mode: crate::RingMode::Discard,
            clock: crate::ClockKind::Tsc,
            tsc_invariant: Some(true),
            events: vec![
                ("m".into(), "f".into(), "entry".into(), 2),
                ("m".into(), "f".into(), "exit".into(), 1),
                ("m".into(), "g".into(), "entry".into(), 2),
            ],
            strings: vec![0, 0, 0b10],
            binary: vec![],
            names: vec![],
            threads: Default::default(),
            format: PACKET_FORMAT,
            execs: vec![],
            loaders: vec![],
            resident: Default::default(),
            killed: Default::default(),
            streams_only: false,
            deliveries: false,
        }
    }

    #[test]
    fn metadata_declares_every_event_and_the_clock() {
        let text = metadata(&meta());
        assert!(text.starts_with("/* CTF 1.8 */"));
        assert!(text.contains("freq = 2500000000;"));
        assert!(
            text.contains("name = \"m:f:entry\";\n\tid = 0;") && text.contains("int64_t arg2;")
        );
        assert!(text.contains("name = \"m:f:exit\";\n\tid = 1;") && text.contains("int64_t ret;"));
        assert!(text.contains(
            "\t\tint64_t arg1;\n\t\tuint32_t arg2_len;\n\t\tstring_flags_t arg2_flags;\n\
             \t\tstruct { utf8_t text[arg2_len]; } align(64) arg2;\n\t\tstruct { } align(64) end;\n"
        ));
    }

    #[test]
    fn the_clock_origin_is_placed_in_wall_clock_time() {
        let mut m = meta();
        // Without a realtime reading (older traces): the epoch, as before.
        assert!(metadata(&m).contains("\toffset_s = 0;\n\toffset = 0;\n"));
        // A 2.5 GHz TSC read 1000 s after its origin at 2024-01-01T00:00:00.25Z.
        let realtime = 1_704_067_200_250_000_000u64;
        m.start_tsc = 2_500_000_000_000;
        m.start_realtime_ns = Some(realtime);
        let freq = 2_500_000_000;
        assert_eq!(
            clock_offset(&m, freq),
            (1_704_066_200, 625_000_000),
            "origin 1000 s earlier, 0.25 s of cycles"
        );
        assert!(metadata(&m)
            .contains("\tfreq = 2500000000;\n\toffset_s = 1704066200;\n\toffset = 625000000;\n"));
        // Any start value: the origin plus start_tsc cycles is the realtime
        // reading, to the nanosecond.
        for (start, freq) in [
            (0, 1_000_000_000),
            (123_456_789_012_345, 1_000_000_000),
            (u64::MAX / 4, 2_899_999_999),
            (987_654_321_987, 3_000_000_001),
        ] {
            m.start_tsc = start;
            let (s, cycles) = clock_offset(&m, freq);
            assert!(cycles < freq);
            let f = i128::from(freq);
            let at = i128::from(s) * 1_000_000_000
                + (i128::from(cycles) + i128::from(start)) * 1_000_000_000 / f;
            assert!(
                (at - i128::from(realtime)).abs() <= 1,
                "{start} at {freq} Hz: {at} vs {realtime}"
            );
        }
    }

    #[test]
    fn packet_header_layout_is_the_declared_one() {
        let (p, count) = packet(9, -2, 3, &[]);
        assert_eq!(count, 0);
        let mut expected = Vec::new();
        expected.extend_from_slice(&MAGIC.to_le_bytes());
        expected.extend_from_slice(&0u32.to_le_bytes());
        let bits = (PACKET_HEADER * 8) as u64;
        for word in [0, 0, bits, bits, 3, -2i64 as u64, 9] {
            expected.extend_from_slice(&word.to_le_bytes());
        }
        assert_eq!(p, expected);
    }
}
