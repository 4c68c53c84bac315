//! The witness stream: the records a traced thread writes, one after
//! another, into its buffer.
//!
//! Every record starts with a byte that says what it is, and no record
//! starts with 0, so a buffer that was zero when the thread got it ends
//! where the first record starting with 0 would be.
//!
//! | first byte | record | bytes |
//! |---|---|---|
//! | `1..=0xF9` | a witness number of the current function | 1 |
//! | `0xFA` | (`--data`) a register's value, `u64` | 9 |
//! | `0xFB` | (`--validate`) a block starts: its index in its function, `u24` | 4 |
//! | `0xFC` | a frame resumed at a known place: the place's id, `u24` | 4 |
//! | `0xFD` | a call made by the current function returned | 1 |
//! | `0xFE` | a witness number above `0xF9`: `u16` follows (little-endian), then a 0 | 4 |
//! | `0xFF` | a traced function was entered: its id, `u24`, follows | 4 |
//!
//! Multi-byte numbers are little-endian. A *resume place* is where control
//! comes back into a frame without a plain return: the second and later
//! returns of a `setjmp` (a `longjmp` that may skip frames), and a C++
//! landing pad the unwinder jumps to. Their ids index the trace's table
//! of them.

/// Witness numbers up to this one are one byte.
pub const MAX_BYTE_WITNESS: u32 = 0xF9;
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
/// Largest function id (and block index, and resume place id).
pub const MAX_FUNCTION: u32 = 0xFF_FFFF;

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
            Record::Witness(w) => WIDE as u32 | (w << 8),
            Record::Returned => RETURNED as u32,
            Record::Entered(id) => ENTERED as u32 | (id << 8),
            Record::Block(index) => BLOCK as u32 | (index << 8),
            Record::Resumed(id) => RESUMED as u32 | (id << 8),
            Record::Value(_) => VALUE as u32,
        }
    }

    /// Bytes the store writes: 1, or 4.
    pub fn store_width(self) -> u32 {
        match self {
            Record::Witness(w) if w <= MAX_BYTE_WITNESS => 1,
            Record::Returned | Record::Value(_) => 1,
            _ => 4,
        }
    }

    /// Bytes the record occupies (the cursor's step).
    pub fn len(self) -> u32 {
        match self {
            Record::Witness(w) if w <= MAX_BYTE_WITNESS => 1,
            Record::Returned => 1,
            // The fourth byte pads it to the 4-byte store that writes it:
            // the store may not run over the next record, which a signal
            // handler may have written first.
            Record::Witness(_) => 4,
            Record::Entered(_) | Record::Block(_) | Record::Resumed(_) => 4,
            Record::Value(_) => 9,
        }
    }

    /// Never empty; here for clippy's `len_without_is_empty`.
    pub fn is_empty(self) -> bool {
        false
    }
}

/// Why bytes are not a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bad {
    /// The stream ends inside a record.
    Truncated,
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
        WIDE => {
            let b = take(3)?;
            (Record::Witness(u16::from_le_bytes([b[0], b[1]]) as u32), 4)
        }
        ENTERED | BLOCK | RESUMED => {
            let b = take(3)?;
            let n = u32::from_le_bytes([b[0], b[1], b[2], 0]);
            let r = match first {
                ENTERED => Record::Entered(n),
                BLOCK => Record::Block(n),
                _ => Record::Resumed(n),
            };
            (r, 4)
        }
        w => (Record::Witness(w as u32), 1),
    }))
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
            Record::Block(7),
            Record::Resumed(MAX_FUNCTION),
            Record::Witness(0xFFFF),
            Record::Returned,
            Record::Entered(0),
            Record::Entered(MAX_FUNCTION),
        ];
        let mut bytes = vec![0u8; 64];
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
    }
}
