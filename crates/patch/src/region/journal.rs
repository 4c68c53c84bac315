//! The journal: every change weft has made, or is about to make, to the
//! program's own memory (splices, springboards, rich event sites, USDT
//! semaphores), with the bytes before and after it.
//!
//! It lets the next weft undo what a weft that died (`kill -9`, a crash, a
//! lost machine) left in the program: the region of a dead weft is found by
//! its owner in the sync page (`super::sync::OWNER_PID`), and each entry
//! tells where to put which bytes back. Like the trap table it is
//! double-buffered, so it is whole at every instant: weft writes the buffer
//! not in use, then switches to it with one store of [`CURRENT`]. An entry
//! is listed before its change is made and dropped only after the change
//! is undone.

/// Which buffer is in use and how many of its entries (u64): bit
/// [`BUFFER_BIT`] selects the buffer, the low 32 bits are the count.
pub const CURRENT: u64 = 0;
/// The bit of [`CURRENT`] that selects the second buffer.
pub const BUFFER_BIT: u32 = 63;
/// First entry of the first buffer; the second buffer follows the first's
/// `journal_capacity` entries.
pub const ENTRIES: u64 = 64;
/// Size of one entry: address (u64), kind (u32), length (u32), the bytes
/// before (`MAX_BYTES`) and the bytes after (`MAX_BYTES`).
pub const ENTRY_SIZE: u64 = 64;
/// The longest change an entry holds.
pub const MAX_BYTES: usize = 24;

/// What an entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Code: a splice, written (and undone) in phases, `int3` first.
    Code = 1,
    /// Code: one of a springboard pair (`Code`, always written in phases).
    PairedCode = 2,
    /// Data the program reads, written in one store (a rich event site's
    /// ring function).
    Data = 3,
    /// A USDT semaphore (u16) weft raised by one.
    Semaphore = 4,
}

impl Kind {
    fn from_u32(v: u32) -> Option<Kind> {
        [Kind::Code, Kind::PairedCode, Kind::Data, Kind::Semaphore]
            .into_iter()
            .find(|k| *k as u32 == v)
    }
}

/// One change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where in the program.
    pub addr: u64,
    /// What it is.
    pub kind: Kind,
    /// The bytes there before weft (empty for a semaphore).
    pub old: Vec<u8>,
    /// The bytes weft wrote (empty for a semaphore).
    pub new: Vec<u8>,
}

impl Entry {
    /// The entry's bytes in the journal; `None` if its bytes do not fit.
    pub fn encode(&self) -> Option<[u8; ENTRY_SIZE as usize]> {
        let len = self.old.len();
        if len > MAX_BYTES || self.new.len() != len {
            return None;
        }
        let mut out = [0u8; ENTRY_SIZE as usize];
        out[0..8].copy_from_slice(&self.addr.to_le_bytes());
        out[8..12].copy_from_slice(&(self.kind as u32).to_le_bytes());
        out[12..16].copy_from_slice(&(len as u32).to_le_bytes());
        out[16..16 + len].copy_from_slice(&self.old);
        out[16 + MAX_BYTES..16 + MAX_BYTES + len].copy_from_slice(&self.new);
        Some(out)
    }

    /// An entry read back from the journal; `None` for bytes that are not one.
    pub fn decode(bytes: &[u8]) -> Option<Entry> {
        if bytes.len() < ENTRY_SIZE as usize {
            return None;
        }
        let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or([0; 4]));
        let addr = u64::from_le_bytes(bytes[0..8].try_into().ok()?);
        let kind = Kind::from_u32(word(8))?;
        let len = word(12) as usize;
        if addr == 0 || len > MAX_BYTES {
            return None;
        }
        Some(Entry {
            addr,
            kind,
            old: bytes[16..16 + len].to_vec(),
            new: bytes[16 + MAX_BYTES..16 + MAX_BYTES + len].to_vec(),
        })
    }
}

/// Offset of buffer `which` (0 or 1) for `capacity` entries each.
pub fn buffer(which: u64, capacity: u64) -> u64 {
    ENTRIES + which * capacity * ENTRY_SIZE
}

/// The [`CURRENT`] word for `count` entries in buffer `which`.
pub fn current(which: u64, count: u64) -> u64 {
    (which << BUFFER_BIT) | (count & 0xffff_ffff)
}

/// The buffer and the count a [`CURRENT`] word selects.
pub fn selected(current: u64) -> (u64, u64) {
    (current >> BUFFER_BIT, current & 0xffff_ffff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_refuse_what_does_not_fit() {
        let e = Entry {
            addr: 0x7f00_1234_5678,
            kind: Kind::PairedCode,
            old: vec![0x55, 0x48, 0x89, 0xe5, 0x41],
            new: vec![0xe9, 1, 2, 3, 4],
        };
        let bytes = e.encode().unwrap();
        assert_eq!(Entry::decode(&bytes), Some(e.clone()));
        assert_eq!(Entry::decode(&[0u8; 64]), None);
        let long = Entry {
            old: vec![0; MAX_BYTES + 1],
            new: vec![0; MAX_BYTES + 1],
            ..e
        };
        assert_eq!(long.encode(), None);
    }

    #[test]
    fn current_selects_a_buffer_and_a_count() {
        assert_eq!(selected(current(1, 17)), (1, 17));
        assert_eq!(selected(current(0, 0)), (0, 0));
        assert_eq!(buffer(1, 100), ENTRIES + 100 * ENTRY_SIZE);
    }
}
