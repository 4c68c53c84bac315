//! The shared region: memory mapped into the target and into weft.
//!
//! One memfd holds a *data area* (this layout) followed by *code areas*
//! (trampolines, one per cluster of modules). The data area is mapped
//! read-write in the target next to every code area, so trampolines reach
//! counters RIP-relative; weft maps the whole memfd once and reads counters
//! without any system call.
//!
//! This is an ABI between generated code and weft: fields are `#[repr(C)]`
//! offsets, never pointers; the header starts with a magic and version.
//! Bump rule: new fields are appended and `VERSION` increases; an existing
//! field never moves or changes meaning.

/// `WEFT` in little-endian.
pub const MAGIC: u32 = u32::from_le_bytes(*b"WEFT");
/// Layout version.
pub const VERSION: u32 = 2;

/// The header at offset 0 of the data area.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u32,
    /// [`VERSION`].
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
    /// Offset of the library-load handshake words (see `load_hook`).
    pub sync_offset: u64,
    /// Offset of the thread table (see [`threads`]).
    pub threads_offset: u64,
    /// Number of thread slots.
    pub thread_slots: u64,
    /// Bytes of data in each thread's event ring (a power of two).
    pub ring_data: u64,
}

/// The thread table: per-thread state that trampolines keep without locks.
///
/// A thread finds its slot by hashing its thread pointer (`fs:0`, which
/// the x86-64 TLS ABI makes point to itself) and probing linearly; a free
/// slot (key 0) is claimed with `lock cmpxchg`, once per thread, which is
/// also when the slot's tid is recorded (one `gettid`). Only the owning
/// thread writes its block, so its updates need no atomics; weft reads
/// timers under their sequence numbers (odd while an update is under way).
pub mod threads {
    /// Keys: `thread_slots` u64, the owner's thread pointer (0 = free).
    pub const KEYS: u64 = 0;
    /// Timers per thread.
    pub const TIMERS: u64 = 64;
    /// Bytes per timer: sequence, count of starts, start tick, total ticks (u64 each).
    pub const TIMER_SIZE: u64 = 32;
    /// Offsets inside a timer.
    pub const TIMER_SEQ: u64 = 0;
    /// Count of starts not yet stopped.
    pub const TIMER_COUNT: u64 = 8;
    /// TSC at the outermost start.
    pub const TIMER_START: u64 = 16;
    /// Accumulated TSC ticks.
    pub const TIMER_TOTAL: u64 = 24;
    /// Per-thread counters (for constraints such as "inside F").
    pub const COUNTERS: u64 = 64;
    /// Offset of the thread's event ring in its block (see [`ring`]).
    pub const RING: u64 = 4096;
    /// Bytes of one thread's block: timers, counters, its tid, then its
    /// ring with `ring_data` bytes of data, rounded to a cache line.
    pub const fn block_size(ring_data: u64) -> u64 {
        (RING + super::ring::HEADER + ring_data + super::ring::SLACK).div_ceil(64) * 64
    }
    /// Offset of the tid inside a block.
    pub const TID: u64 = TIMERS * TIMER_SIZE + COUNTERS * 8;
    /// Offset of timer `t` in a block.
    pub const fn timer(t: u64) -> u64 {
        t * TIMER_SIZE
    }
    /// Offset of per-thread counter `c` in a block.
    pub const fn counter(c: u64) -> u64 {
        TIMERS * TIMER_SIZE + c * 8
    }
}

/// The trap table: sorted (site, trampoline entry) pairs the SIGTRAP
/// handler searches, and the handler it replaced.
pub mod trap_table {
    /// Number of entries in use (u64).
    pub const COUNT: u64 = 0;
    /// The replaced kernel `struct sigaction` (32 bytes), as `rt_sigaction` returned it.
    pub const OLD_ACTION: u64 = 8;
    /// Its `sa_handler` (u64; 0 = SIG_DFL, 1 = SIG_IGN): the first field.
    pub const OLD_HANDLER: u64 = OLD_ACTION;
    /// A kernel `struct sigaction` selecting SIG_DFL (32 bytes).
    pub const DEFAULT_ACTION: u64 = 40;
    /// weft's own kernel `struct sigaction` (32 bytes).
    pub const NEW_ACTION: u64 = 72;
    /// First entry; each is 16 bytes: site (u64), trampoline entry (u64).
    pub const ENTRIES: u64 = 128;
    /// Size of one entry.
    pub const ENTRY_SIZE: u64 = 16;
}

/// Words of the sync page besides the library-load handshake (which uses
/// its first 16 bytes, see `load_hook`).
pub mod sync {
    /// Block mode: a TSC value until which a writer that finds its ring
    /// full waits (spinning, no system call) for weft to make room; 0 means
    /// discard mode. weft moves it forward at every drain, so writers stop
    /// waiting soon after weft stops draining or dies.
    pub const RING_WAIT_UNTIL: u64 = 64;
    /// Flight mode when non-zero: a writer that finds its ring full
    /// overwrites the oldest records (counting them as dropped) instead of
    /// dropping the new one. weft then never consumes while tracing; it
    /// reads the rings when it dumps them.
    pub const RING_OVERWRITE: u64 = 72;
    /// Executions of per-thread instrumentation that found every thread
    /// slot taken, so recorded nothing (counted with `lock add`).
    pub const NO_SLOT: u64 = 80;
}

/// A thread's event ring: single producer (the thread, in trampolines),
/// single consumer (weft). Positions only grow and index the data modulo its
/// size. A record's size depends on its argument count; one that starts near
/// the end of the data continues into the slack after it instead of
/// wrapping, so every record is contiguous. The producer writes a record and
/// then publishes it by storing `head`; the consumer copies records and then
/// stores `tail` (x86 stores are not reordered with stores, loads not with
/// loads, so no fence is needed). A full ring drops the event and counts it
/// (discard mode).
pub mod ring {
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
    /// Most values a record holds (as many as a USDT probe may have).
    pub const MAX_ARGS: usize = 12;
    /// Most bytes of text one record carries.
    pub const MAX_TEXT: u64 = 4096;
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
        ((word & 0xffff) as usize, (word >> 16) as u64)
    }
}

/// Where everything lies in the data area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// The header fields.
    pub header: Header,
    /// Total bytes of the data area (a multiple of the page size).
    pub size: u64,
}

impl Layout {
    /// A data area for `counters` counters, `traps` trap entries and event
    /// rings of `ring_data` bytes (a power of two from `ring::MIN_DATA` to
    /// `ring::MAX_DATA`).
    pub fn new(counters: u64, traps: u64, ring_data: u64) -> Layout {
        debug_assert!(ring_data.is_power_of_two());
        let ring_data = ring_data.clamp(ring::MIN_DATA, ring::MAX_DATA);
        let page = 4096;
        let round = |x: u64| x.div_ceil(page) * page;
        let header_size = std::mem::size_of::<Header>() as u64;
        let counters_offset = 64.max(header_size);
        let trap_offset = round(counters_offset + counters * 8);
        let scratch_offset =
            round(trap_offset + trap_table::ENTRIES + traps * trap_table::ENTRY_SIZE);
        let scratch_size = page;
        let sync_offset = scratch_offset + scratch_size;
        // As many slots as fit in about 1 GiB (the region and the code
        // must stay within a rel32 jump of the module), from 8 to 512.
        let block = threads::block_size(ring_data);
        let thread_slots = (1u64 << 30) / block;
        let thread_slots = if thread_slots >= 512 {
            512
        } else {
            (1u64 << thread_slots.max(8).ilog2()).max(8)
        };
        let threads_offset = sync_offset + page;
        let threads_size = round(thread_slots * 8 + thread_slots * threads::block_size(ring_data));
        let header = Header {
            magic: MAGIC,
            version: VERSION,
            header_size,
            counters_offset,
            counters_capacity: counters,
            trap_offset,
            trap_capacity: traps,
            scratch_offset,
            scratch_size,
            sync_offset,
            threads_offset,
            thread_slots,
            ring_data,
        };
        Layout {
            header,
            size: threads_offset + threads_size,
        }
    }

    /// Offset of thread slot `slot`'s block.
    pub fn thread_block(&self, slot: u64) -> u64 {
        self.header.threads_offset
            + self.header.thread_slots * 8
            + slot * threads::block_size(self.header.ring_data)
    }

    /// Offset of counter `index`.
    pub fn counter(&self, index: u64) -> u64 {
        self.header.counters_offset + index * 8
    }

    /// The header as bytes, to write at offset 0.
    pub fn header_bytes(&self) -> Vec<u8> {
        let h = &self.header;
        let mut v = Vec::with_capacity(64);
        v.extend_from_slice(&h.magic.to_le_bytes());
        v.extend_from_slice(&h.version.to_le_bytes());
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
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_page_aligned_and_disjoint() {
        let l = Layout::new(1 << 16, 1 << 12, ring::DEFAULT_DATA);
        assert_eq!(l.size % 4096, 0);
        assert!(l.counter(l.header.counters_capacity) <= l.header.trap_offset);
        assert!(
            l.header.trap_offset + trap_table::ENTRIES + (1 << 12) * 16 <= l.header.scratch_offset
        );
        assert_eq!(l.header_bytes().len() as u64, l.header.header_size);
        assert_eq!(&l.header_bytes()[..4], b"WEFT");
    }

    #[test]
    fn big_rings_get_fewer_thread_slots_within_reach() {
        for (ring_data, slots) in [
            (ring::DEFAULT_DATA, 512),
            (4 << 20, 128),
            (16 << 20, 32),
            (ring::MAX_DATA, 8),
        ] {
            let l = Layout::new(1 << 16, 1 << 12, ring_data);
            assert_eq!(l.header.thread_slots, slots, "{ring_data}");
            assert!(l.size < 1 << 31, "{ring_data}: {} bytes", l.size);
        }
    }
}
