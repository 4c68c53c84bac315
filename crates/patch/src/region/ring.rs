//! A thread's event ring and the format of its records.
//!
//! Single producer (the thread: mini-trampolines, or `include/weft/event.h`),
//! single consumer (weft). The ring is a [`HEADER`] of 64 bytes followed by
//! `ring_data` bytes of data (a power of two, `Header::ring_data`) and
//! [`SLACK`] bytes. Positions only grow and index the data modulo its size.
//! A record's size depends on its argument count; one that starts near the
//! end of the data continues into the slack after it instead of wrapping,
//! so every record is contiguous. The producer writes a record and then
//! publishes it by storing `head`; the consumer copies records and then
//! stores `tail` (x86 stores are not reordered with stores, loads not with
//! loads, so no fence is needed). A full ring drops the event and counts it
//! (discard mode), waits (block mode) or overwrites the oldest records
//! (flight mode); see [`super::sync`].

/// Producer position (bytes written, u64).
pub const HEAD: u64 = 0;
/// Consumer position (bytes read, u64).
pub const TAIL: u64 = 8;
/// Events dropped because the ring was full (u64).
pub const DROPPED: u64 = 16;
/// Size of the header.
pub const HEADER: u64 = 64;
/// Size of the data unless the session asks for another (a power of
/// two; see `Header::ring_data`).
pub const DEFAULT_DATA: u64 = 256 * 1024;
/// Smallest and largest sizes of the data.
pub const MIN_DATA: u64 = 64 * 1024;
/// See [`MIN_DATA`].
pub const MAX_DATA: u64 = 64 * 1024 * 1024;
/// Record layout: TSC (u64), event id (u32), a shape word (u32: the
/// number of values in its low 16 bits, the bytes of string text in
/// its high 16 bits), the values (u64 each), then the text of its
/// string values, each padded to 8 bytes; see [`record_size`]. The
/// bytes are those of a CTF event (see `weft_events`' metadata), so
/// weft writes records to disk as they are. Offsets inside a record:
pub const R_TSC: u64 = 0;
/// Event id.
pub const R_EVENT: u64 = 8;
/// The shape word: values and text bytes.
pub const R_NARGS: u64 = 12;
/// First value.
pub const R_ARGS: u64 = 16;
/// The shape word's low bits: the number of values.
pub const SHAPE_VALUES: u32 = 0xffff;
/// The shape word's high bits, from this one: the bytes of text.
pub const SHAPE_TEXT_SHIFT: u32 = 16;
/// Most values a record holds (as many as a USDT probe may have).
pub const MAX_ARGS: usize = 12;
/// Most bytes of text one record carries.
pub const MAX_TEXT: u64 = 4096;
/// String text is padded to a multiple of this many bytes.
pub const TEXT_ALIGN: u64 = 8;
/// Bytes after the data into which a record that starts near its end
/// runs on, so that every record is contiguous (at least the largest
/// record, rounded to a cache line).
pub const SLACK: u64 = MAX_TEXT + 128;
/// A string value's word: the bytes copied, and these flags.
/// The string went on past the bytes copied.
pub const STR_TRUNCATED: u64 = 1 << 62;
/// The pointer was null: nothing copied.
pub const STR_NULL: u64 = 1 << 63;

/// Bytes of a record carrying `nargs` values and `text` bytes of string
/// text (already padded).
pub const fn record_size(nargs: usize, text: u64) -> u64 {
    R_ARGS + 8 * nargs as u64 + text
}

/// The values and the text bytes of a record's shape word.
pub const fn shape(word: u32) -> (usize, u64) {
    (
        (word & SHAPE_VALUES) as usize,
        (word >> SHAPE_TEXT_SHIFT) as u64,
    )
}

// The header's words lie within it, and the largest record fits in the slack.
const _: () = assert!(DROPPED + 8 <= HEADER && record_size(MAX_ARGS, MAX_TEXT) <= SLACK);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_word_splits_values_and_text() {
        assert_eq!(shape(3 | 40 << 16), (3, 40));
    }
}
