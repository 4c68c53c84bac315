//! The header at offset 0 of the data area: magic, version, and where every
//! other part of the data area lies. weft writes it once, as the bytes of
//! [`Header`] (`#[repr(C)]`, no padding, serialized with `bytemuck`).

use bytemuck::{Pod, Zeroable};

/// The header at offset 0 of the data area. Every field is a
/// little-endian integer; offsets are from the start of the data area.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Pod, Zeroable)]
pub struct Header {
    /// [`super::MAGIC`].
    pub magic: u32,
    /// [`super::VERSION`].
    pub version: u32,
    /// `size_of::<Header>()`.
    pub header_size: u64,
    /// Offset of the counters (u64 each).
    pub counters_offset: u64,
    /// How many counters fit.
    pub counters_capacity: u64,
    /// Offset of the trap table.
    pub trap_offset: u64,
    /// How many trap entries fit.
    pub trap_capacity: u64,
    /// Offset of scratch memory for remote system-call arguments.
    pub scratch_offset: u64,
    /// Its size.
    pub scratch_size: u64,
    /// Offset of the sync page (see [`super::sync`]).
    pub sync_offset: u64,
    /// Offset of the thread table (see [`super::threads`]).
    pub threads_offset: u64,
    /// Number of thread slots.
    pub thread_slots: u64,
    /// Bytes of data in each thread's event ring (a power of two).
    pub ring_data: u64,
    /// Offset of the journal (see [`super::journal`]); version 5.
    pub journal_offset: u64,
    /// How many journal entries each of its buffers holds.
    pub journal_capacity: u64,
    /// Lanes of every counter (see [`super::COUNTER_LANES`]); version 6.
    pub counter_lanes: u64,
    /// Bytes from one lane of the counters to the next (a power of two).
    pub counter_lane_bytes: u64,
}

impl Header {
    /// Bytes of the header: 96 from version 2, 112 from version 5, 128 from version 6.
    pub const SIZE: u64 = std::mem::size_of::<Header>() as u64;

    /// The header as the bytes written at offset 0 of the data area.
    pub fn as_bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn fields_lie_where_the_abi_says() {
        let fields = [
            (offset_of!(Header, magic), 0),
            (offset_of!(Header, version), 4),
            (offset_of!(Header, header_size), 8),
            (offset_of!(Header, counters_offset), 16),
            (offset_of!(Header, counters_capacity), 24),
            (offset_of!(Header, trap_offset), 32),
            (offset_of!(Header, trap_capacity), 40),
            (offset_of!(Header, scratch_offset), 48),
            (offset_of!(Header, scratch_size), 56),
            (offset_of!(Header, sync_offset), 64),
            (offset_of!(Header, threads_offset), 72),
            (offset_of!(Header, thread_slots), 80),
            (offset_of!(Header, ring_data), 88),
            (offset_of!(Header, journal_offset), 96),
            (offset_of!(Header, journal_capacity), 104),
            (offset_of!(Header, counter_lanes), 112),
            (offset_of!(Header, counter_lane_bytes), 120),
        ];
        for (i, (got, want)) in fields.into_iter().enumerate() {
            assert_eq!(got, want, "field {i}");
        }
        assert_eq!(Header::SIZE, 128);
    }

    #[test]
    fn bytes_are_the_fields_in_little_endian() {
        let h = Header {
            magic: super::super::MAGIC,
            version: 2,
            header_size: Header::SIZE,
            counters_offset: 0x1111,
            counters_capacity: 0x2222,
            trap_offset: 0x3333,
            trap_capacity: 0x4444,
            scratch_offset: 0x5555,
            scratch_size: 0x6666,
            sync_offset: 0x7777,
            threads_offset: 0x8888,
            thread_slots: 0x9999,
            ring_data: 0xaaaa,
            journal_offset: 0xbbbb,
            journal_capacity: 0xcccc,
            counter_lanes: 0xdddd,
            counter_lane_bytes: 0xeeee,
        };
        // The packing weft did by hand before the header became Pod.
        let mut want = Vec::new();
        want.extend_from_slice(&h.magic.to_le_bytes());
        want.extend_from_slice(&h.version.to_le_bytes());
        for x in [
            h.header_size,
            h.counters_offset,
            h.counters_capacity,
            h.trap_offset,
            h.trap_capacity,
            h.scratch_offset,
            h.scratch_size,
            h.sync_offset,
            h.threads_offset,
            h.thread_slots,
            h.ring_data,
            h.journal_offset,
            h.journal_capacity,
            h.counter_lanes,
            h.counter_lane_bytes,
        ] {
            want.extend_from_slice(&x.to_le_bytes());
        }
        assert_eq!(h.as_bytes(), &want[..]);
        assert_eq!(&h.as_bytes()[..4], b"WEFT");
    }
}
