//! The witness stream: the records a traced thread writes, one after
//! another, into its buffer.
//!
//! Every record starts with a byte that says what it is, and no record
//! starts with 0, so a buffer that was zero when the thread got it ends
//! where the first record starting with 0 would be. Only a register's
//! value holds 0 bytes anywhere else: the numbers of the other records
//! are written as three base-255 digits, each plus one (`1..=0xFF`), so
//! that in a stream without values the first 0 byte is its end, found
//! at memory speed (weft looks for it in every full buffer while the
//! program may be waiting for a free one).
//!
//! | first byte | record | bytes |
//! |---|---|---|
//! | `1..=0xCF` | a witness number of the current function | 1 |
//! | `0xD0..=0xD7` | a witness number from `0xD0` on: the first byte's distance from `0xD0`, then a digit | 2 |
//! | `0xD8..=0xF9` | a traced function whose id is below 8,670 was entered: the first byte's distance from `0xD8`, then a digit | 2 |
//! | `0xFA` | (`--data`) a register's value, `u64` | 9 |
//! | `0xFB` | (`--validate`) a block starts: its index in its function, 3 digits | 4 |
//! | `0xFC` | a frame resumed at a known place: the place's id, 3 digits | 4 |
//! | `0xFD` | a call made by the current function returned | 1 |
//! | `0xFE` | a witness number above the two-byte ones, 3 digits | 4 |
//! | `0xFF` | a traced function was entered: its id, 3 digits | 4 |
//!
//! A two-byte record's number is its first byte's distance from the
//! first byte of its kind times 255, plus its digit (the witnesses' counted
//! from `0xD0`). A function's most frequent edges get its smallest
//! witness numbers (see `witness::place`), so that the loops of a
//! function with hundreds of witnesses still write one byte an
//! iteration; entry records, written when a function is called through
//! a pointer or from code not traced, take two bytes in all but the
//! largest programs (sqlite3 on 50,000 rows: 0.60 bytes a block with
//! every such record four bytes, 0.43 with these).
//!
//! Digits and the `u64` are little-endian. A *resume place* is where control
//! comes back into a frame without a plain return: the second and later
//! returns of a `setjmp` (a `longjmp` that may skip frames), and a C++
//! landing pad the unwinder jumps to. Their ids index the trace's table
//! of them.

/// Witness numbers up to this one are one byte.
pub const MAX_BYTE_WITNESS: u32 = 0xCF;
/// The first byte of the first two-byte witnesses.
const SHORT_WITNESS: u8 = 0xD0;
/// Witness numbers up to this one take two bytes at most.
pub const MAX_SHORT_WITNESS: u32 = MAX_BYTE_WITNESS + 8 * DIGIT_BASE;
/// The first byte of the first two-byte entries.
const SHORT_ENTERED: u8 = 0xD8;
/// Function ids up to this one enter with a two-byte record.
pub const MAX_SHORT_FUNCTION: u32 = (VALUE - SHORT_ENTERED) as u32 * DIGIT_BASE - 1;
/// The first byte of a register's value (`--data`).
pub const VALUE: u8 = 0xFA;
/// The first byte of a block's record (`--validate`).
pub const BLOCK: u8 = 0xFB;
/// The first byte of a resumption.
pub const RESUMED: u8 = 0xFC;
/// The record of a call returning to its (traced) caller.
pub const RETURNED: u8 = 0xFD;
/// The first byte of a wide witness.
pub const WIDE: u8 = 0xFE;
/// The first byte of a function's entry.
pub const ENTERED: u8 = 0xFF;
/// Largest witness number a function may have.
pub const MAX_WITNESS: u32 = 0xFFFF;
/// Largest function id (and block index, and resume place id): the
/// largest number three digits hold.
pub const MAX_FUNCTION: u32 = DIGIT_BASE * DIGIT_BASE * DIGIT_BASE - 1;
/// The base of the digits of a record's number.
const DIGIT_BASE: u32 = 255;

/// `n` (at most [`MAX_FUNCTION`]) as three digits `1..=0xFF`, the first
/// in the lowest byte.
fn digits(n: u32) -> u32 {
    debug_assert!(n <= MAX_FUNCTION);
    let d = |k: u32| n / DIGIT_BASE.pow(k) % DIGIT_BASE + 1;
    d(0) | d(1) << 8 | d(2) << 16
}

/// `n` (below `255 * (kinds' last first byte - first + 1)`) as a
/// two-byte record whose first byte counts from `first`.
fn short(first: u8, n: u32) -> u32 {
    (first as u32 + n / DIGIT_BASE) | (n % DIGIT_BASE + 1) << 8
}

/// The number three digits write, or `None` if one is 0 (not a digit).
fn number(b: [u8; 3]) -> Option<u32> {
    b.iter().rev().try_fold(0u32, |n, &d| {
        (d != 0).then(|| n * DIGIT_BASE + (d as u32 - 1))
    })
}

/// A record as written: the value a store writes (little-endian, as
/// wide as [`Record::store_width`]) and how far the cursor moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A witness number, `1..=MAX_WITNESS`.
    Witness(u32),
    /// A call returned.
    Returned,
    /// Function `id` was entered.
    Entered(u32),
    /// Block `index` of the current function starts (`--validate`).
    Block(u32),
    /// A frame resumed at the resume place `id`.
    Resumed(u32),
    /// A register's value (`--data`): its 8 bytes are stored apart from
    /// the tag, first (see `rebuild::emit`).
    Value(u64),
}

impl Record {
    /// The value stored: one store of [`Record::store_width`] bytes.
    pub fn value(self) -> u32 {
        match self {
            Record::Witness(w) if w <= MAX_BYTE_WITNESS => w,
            Record::Witness(w) if w <= MAX_SHORT_WITNESS => {
                short(SHORT_WITNESS, w - MAX_BYTE_WITNESS - 1)
            }
            Record::Witness(w) => WIDE as u32 | digits(w) << 8,
            Record::Returned => RETURNED as u32,
            Record::Entered(id) if id <= MAX_SHORT_FUNCTION => short(SHORT_ENTERED, id),
            Record::Entered(id) => ENTERED as u32 | digits(id) << 8,
            Record::Block(index) => BLOCK as u32 | digits(index) << 8,
            Record::Resumed(id) => RESUMED as u32 | digits(id) << 8,
            Record::Value(_) => VALUE as u32,
        }
    }

    /// Bytes the store writes: 1, 2 or 4.
    pub fn store_width(self) -> u32 {
        match self {
            Record::Value(_) => 1,
            _ => self.len(),
        }
    }

    /// Bytes the record occupies (the cursor's step).
    pub fn len(self) -> u32 {
        match self {
            Record::Witness(w) if w <= MAX_BYTE_WITNESS => 1,
            Record::Witness(w) if w <= MAX_SHORT_WITNESS => 2,
            Record::Entered(id) if id <= MAX_SHORT_FUNCTION => 2,
            Record::Returned => 1,
            Record::Witness(_) | Record::Entered(_) | Record::Block(_) | Record::Resumed(_) => 4,
            Record::Value(_) => 9,
        }
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(self) -> bool {
        false
    }
}

impl std::fmt::Display for Record {
    /// The record as a message names it ("witness 4", "the entry of
    /// function 691").
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Record::Witness(w) => write!(f, "witness {w}"),
            Record::Returned => f.write_str("a call's return record"),
            Record::Entered(id) => write!(f, "the entry of function {id}"),
            Record::Block(b) => write!(f, "the record of block {b}"),
            Record::Resumed(id) => write!(f, "resume place {id}"),
            Record::Value(v) => write!(f, "a register's value ({v:#x})"),
        }
    }
}

/// A record read, or the stream's end, as a message names it.
pub fn describe(record: Option<Record>) -> String {
    record.map_or_else(|| "the end of the stream".into(), |r| r.to_string())
}

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// The stream ends inside a record.
    Truncated,
    /// A record's number has a 0 byte, which no digit is (a damaged trace).
    NotADigit,
}

impl std::fmt::Display for Bad {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Bad::Truncated => "the stream ends inside a record",
            Bad::NotADigit => "a record's number has a 0 byte (the trace is damaged)",
        })
    }
}

/// Reads the record at `at`: `None` at the end of the stream (no bytes
/// left, or a 0 byte), otherwise the record and its length.
pub fn read(bytes: &[u8], at: usize) -> Result<Option<(Record, usize)>, Bad> {
    let Some(&first) = bytes.get(at) else {
        return Ok(None);
    };
    let take = |n: usize| bytes.get(at + 1..at + 1 + n).ok_or(Bad::Truncated);
    Ok(Some(match first {
        0 => return Ok(None),
        RETURNED => (Record::Returned, 1),
        VALUE => {
            let b = take(8)?;
            (
                Record::Value(u64::from_le_bytes(b.try_into().expect("8 bytes"))),
                9,
            )
        }
        SHORT_WITNESS..VALUE => {
            let d = take(1)?[0];
            if d == 0 {
                return Err(Bad::NotADigit);
            }
            let n = |first: u8| (first as u32) * DIGIT_BASE + (d as u32 - 1);
            let r = if first < SHORT_ENTERED {
                Record::Witness(MAX_BYTE_WITNESS + 1 + n(first - SHORT_WITNESS))
            } else {
                Record::Entered(n(first - SHORT_ENTERED))
            };
            (r, 2)
        }
        WIDE | ENTERED | BLOCK | RESUMED => {
            let b = take(3)?;
            let n = number([b[0], b[1], b[2]]).ok_or(Bad::NotADigit)?;
            let r = match first {
                WIDE => Record::Witness(n),
                ENTERED => Record::Entered(n),
                BLOCK => Record::Block(n),
                _ => Record::Resumed(n),
            };
            (r, 4)
        }
        w => (Record::Witness(w as u32), 1),
    }))
}

/// The witness of one or two bytes at `at`, and its length; `None` for
/// anything else. The same as [`read`] for those records, on the walk's
/// hot path.
#[inline]
pub fn short_witness(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    let &first = bytes.get(at)?;
    if first != 0 && u32::from(first) <= MAX_BYTE_WITNESS {
        return Some((u32::from(first), 1));
    }
    if !(SHORT_WITNESS..SHORT_ENTERED).contains(&first) {
        return None;
    }
    let &digit = bytes.get(at + 1)?;
    (digit != 0).then(|| {
        let n = u32::from(first - SHORT_WITNESS) * DIGIT_BASE + u32::from(digit) - 1;
        (MAX_BYTE_WITNESS + 1 + n, 2)
    })
}

/// [`short_witness`], and a wide witness too: any witness record at `at`
/// and its length.
#[inline]
pub fn witness(bytes: &[u8], at: usize) -> Option<(u32, usize)> {
    match short_witness(bytes, at) {
        Some(w) => Some(w),
        None if bytes.get(at) == Some(&WIDE) => match read(bytes, at) {
            Ok(Some((Record::Witness(w), n))) => Some((w, n)),
            _ => None,
        },
        None => None,
    }
}

/// Where the records of `bytes` end: the offset of the first record
/// that starts with 0 or runs past the end, or `bytes.len()`. The same
/// as calling [`read`] from 0 until it stops, eight bytes a step over
/// runs of one-byte witnesses (weft scans every full buffer this way
/// while the program waits for a free one).
pub fn records_end(bytes: &[u8]) -> usize {
    // (A number's digit is never 0, and a 0 digit stops `read` too.)
    let mut at = 0;
    loop {
        if let Some(word) = bytes.get(at..at + 8) {
            let special = not_byte_witnesses(u64::from_le_bytes(word.try_into().expect("8 bytes")));
            if special == 0 {
                at += 8;
                continue;
            }
            // Every byte before the first special one is a whole record.
            at += special.trailing_zeros() as usize / 8;
        }
        match read(bytes, at) {
            Ok(Some((_, n))) => at += n,
            _ => return at,
        }
    }
}

/// Where the records of `bytes`, which holds no register values (a run
/// without `--data`), end: its first 0 byte, or `bytes.len()`. The same as
/// [`records_end`] for such a stream unless its last record is cut short,
/// which a buffer's never is (a store that reaches the guard page writes
/// nothing there).
pub fn records_end_without_values(bytes: &[u8]) -> usize {
    memchr::memchr(0, bytes).unwrap_or(bytes.len())
}

/// The high bit of each byte of `word` (little-endian) that is not a
/// one-byte witness (`1..=MAX_BYTE_WITNESS`): a 0, or `0xFA` and above.
/// Exact per byte: no sum carries into the next byte.
fn not_byte_witnesses(word: u64) -> u64 {
    const LOW7: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const ONES: u64 = 0x0101_0101_0101_0101;
    // High bit set where the byte is not 0.
    let nonzero = ((word & LOW7) + LOW7) | word;
    // High bit set where the byte is 0xFA or above: its high bit is set
    // and its low seven bits are 0x7A or above.
    let above = ((word & LOW7) + (0x80 - (MAX_BYTE_WITNESS as u64 + 1 - 0x80)) * ONES) & word;
    (!nonzero | above) & HIGH
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_written() {
        let records = [
            Record::Witness(1),
            Record::Witness(MAX_BYTE_WITNESS),
            Record::Witness(MAX_BYTE_WITNESS + 1),
            Record::Witness(MAX_SHORT_WITNESS),
            Record::Witness(MAX_SHORT_WITNESS + 1),
            Record::Entered(MAX_SHORT_FUNCTION),
            Record::Entered(MAX_SHORT_FUNCTION + 1),
            Record::Block(7),
            Record::Resumed(MAX_FUNCTION),
            Record::Witness(0xFFFF),
            Record::Returned,
            Record::Entered(0),
            Record::Entered(MAX_FUNCTION),
        ];
        let mut bytes = vec![0u8; 128];
        let mut at = 0usize;
        for r in records {
            let v = r.value().to_le_bytes();
            bytes[at..at + r.store_width() as usize]
                .copy_from_slice(&v[..r.store_width() as usize]);
            at += r.len() as usize;
        }
        let mut back = Vec::new();
        let mut at = 0;
        while let Some((r, n)) = read(&bytes, at).unwrap() {
            back.push(r);
            at += n;
        }
        assert_eq!(back, records);
        let mut value = vec![VALUE];
        value.extend(0x0123_4567_89ab_cdefu64.to_le_bytes());
        assert_eq!(
            read(&value, 0),
            Ok(Some((Record::Value(0x0123_4567_89ab_cdef), 9)))
        );
        assert_eq!(read(&value[..8], 0), Err(Bad::Truncated));
        assert_eq!(read(&[WIDE, 1], 0), Err(Bad::Truncated));
        assert_eq!(read(&[ENTERED, 1, 2], 0), Err(Bad::Truncated));
        assert_eq!(read(&[ENTERED, 1, 0, 2], 0), Err(Bad::NotADigit));
        assert_eq!(read(&[SHORT_WITNESS], 0), Err(Bad::Truncated));
        assert_eq!(read(&[SHORT_ENTERED, 0], 0), Err(Bad::NotADigit));
        // Every wider witness is free of 0 bytes too, two bytes up to
        // MAX_SHORT_WITNESS and four after.
        for w in MAX_BYTE_WITNESS + 1..=MAX_WITNESS {
            let r = Record::Witness(w);
            let len = if w <= MAX_SHORT_WITNESS { 2 } else { 4 };
            assert_eq!(r.len(), len);
            let bytes = &r.value().to_le_bytes()[..len as usize];
            assert!(!bytes.contains(&0), "witness {w} as {bytes:x?}");
            assert_eq!(read(bytes, 0), Ok(Some((r, len as usize))));
        }
        // The digits at their edges: 0, the base, the largest.
        assert_eq!(Record::Entered(0).value(), 0x01_00 | SHORT_ENTERED as u32);
        assert_eq!(
            Record::Entered(255).value(),
            0x01_00 | (SHORT_ENTERED + 1) as u32
        );
        assert_eq!(Record::Entered(MAX_SHORT_FUNCTION).value(), 0xFF_F9);
        assert_eq!(Record::Witness(MAX_BYTE_WITNESS + 1).value(), 0x01_D0);
        assert_eq!(Record::Witness(MAX_SHORT_WITNESS).value(), 0xFF_D7);
        assert_eq!(Record::Block(0).value(), 0x01_01_01_00 | BLOCK as u32);
        assert_eq!(Record::Block(255).value(), 0x01_02_01_00 | BLOCK as u32);
        assert_eq!(
            Record::Entered(MAX_SHORT_FUNCTION + 1).value(),
            0x01_23_01_00 | ENTERED as u32
        );
        assert_eq!(
            Record::Entered(MAX_FUNCTION).value(),
            0xFF_FF_FF_00 | ENTERED as u32
        );
    }

    #[test]
    fn short_witness_reads_as_read_does() {
        for first in 0..=255u8 {
            for digit in [0u8, 1, 2, 0x7F, 0xFF] {
                let bytes = [first, digit, 1, 1, 1, 1, 1, 1, 1];
                let want = match read(&bytes, 0) {
                    Ok(Some((Record::Witness(x), n))) if n <= 2 => Some((x, n)),
                    _ => None,
                };
                assert_eq!(short_witness(&bytes, 0), want, "{bytes:x?}");
            }
        }
        assert_eq!(short_witness(&[0xD0], 0), None);
    }

    /// The stopping point of reading one record after another.
    fn slow_end(bytes: &[u8]) -> usize {
        let mut at = 0;
        while let Ok(Some((_, n))) = read(bytes, at) {
            at += n;
        }
        at
    }

    #[test]
    fn every_byte_is_classified_as_read_classifies_it() {
        for b in 0..=255u8 {
            let word = u64::from_le_bytes([1, 1, b, 1, 1, 1, 1, 1]);
            let one_byte_witness = (1..=MAX_BYTE_WITNESS as u8).contains(&b);
            assert_eq!(
                not_byte_witnesses(word) == 0,
                one_byte_witness,
                "byte {b:#x}"
            );
            if !one_byte_witness {
                assert_eq!(not_byte_witnesses(word), 0x80 << 16, "byte {b:#x}");
            }
        }
    }

    use proptest::prelude::*;

    proptest! {
        #[test]
        fn records_end_agrees_with_reading_one_record_after_another(
            records in proptest::collection::vec(
                prop_oneof![
                    8 => (1..=MAX_BYTE_WITNESS).prop_map(Record::Witness),
                    1 => (MAX_BYTE_WITNESS + 1..=MAX_SHORT_WITNESS).prop_map(Record::Witness),
                    1 => (MAX_SHORT_WITNESS + 1..=MAX_WITNESS).prop_map(Record::Witness),
                    1 => (0..=MAX_SHORT_FUNCTION).prop_map(Record::Entered),
                    1 => (0..=MAX_FUNCTION).prop_map(Record::Entered),
                    1 => Just(Record::Returned),
                    1 => (0..=MAX_FUNCTION).prop_map(Record::Resumed),
                    1 => proptest::num::u64::ANY.prop_map(Record::Value),
                ],
                0..200,
            ),
            cut in proptest::option::of(0usize..2000),
            hole in proptest::option::of(0usize..200),
        ) {
            let mut bytes = Vec::new();
            for (k, r) in records.iter().enumerate() {
                let at = bytes.len();
                bytes.resize(at + r.len() as usize, 0);
                if hole == Some(k) {
                    continue; // reserved, not written
                }
                let v = r.value().to_le_bytes();
                let w = r.store_width() as usize;
                bytes[at..at + w].copy_from_slice(&v[..w]);
                if let Record::Value(x) = r {
                    bytes[at + 1..at + 9].copy_from_slice(&x.to_le_bytes());
                }
            }
            if let Some(c) = cut {
                bytes.truncate(c.min(bytes.len()));
            }
            prop_assert_eq!(records_end(&bytes), slow_end(&bytes));
            let has_values = records.iter().any(|r| matches!(r, Record::Value(_)));
            if !has_values && cut.is_none() {
                prop_assert_eq!(records_end_without_values(&bytes), slow_end(&bytes));
            }
        }

        #[test]
        fn numbers_have_no_zero_byte_and_read_back(n in 0..=MAX_FUNCTION) {
            for r in [Record::Entered(n), Record::Block(n), Record::Resumed(n)] {
                let len = r.len() as usize;
                let bytes = &r.value().to_le_bytes()[..len];
                prop_assert!(!bytes.contains(&0), "{r:?} as {bytes:x?}");
                prop_assert_eq!(read(bytes, 0), Ok(Some((r, len))));
            }
        }
    }
}
