//! The trap table: sorted (site, trampoline entry) pairs that the SIGTRAP
//! handler (`crate::trap`) binary-searches, and the kernel `struct
//! sigaction`s it installs and restores.
//!
//! The entries are double-buffered so that the table is whole at every
//! instant, even if weft dies while rewriting it: weft writes the buffer
//! not in use, then switches to it with one store of [`CURRENT`].

/// Which buffer is in use and how many of its entries (u64): bit
/// [`BUFFER_BIT`] selects the buffer, the low 32 bits are the count.
pub const CURRENT: u64 = 0;
/// The bit of [`CURRENT`] that selects the second buffer.
pub const BUFFER_BIT: u32 = 63;
/// The replaced kernel `struct sigaction` (32 bytes), as `rt_sigaction` returned it.
pub const OLD_ACTION: u64 = 8;
/// Its `sa_handler` (u64; 0 = SIG_DFL, 1 = SIG_IGN).
pub const OLD_HANDLER: u64 = OLD_ACTION + weft_abi::sigaction::HANDLER;
/// A kernel `struct sigaction` selecting SIG_DFL (32 bytes).
pub const DEFAULT_ACTION: u64 = 40;
/// weft's own kernel `struct sigaction` (32 bytes).
pub const NEW_ACTION: u64 = 72;
/// The process (u64: its pid) whose SIGTRAP action `OLD_ACTION` keeps. A
/// child it forks shares this memory but has its own actions: the
/// `sigaction` hook emulates only in this process.
pub const PROCESS: u64 = 104;
/// Size of a kernel `struct sigaction` (handler, flags, restorer, mask).
pub const ACTION_SIZE: u64 = weft_abi::sigaction::SIZE;
/// First entry of the first buffer; each is 16 bytes: site (u64),
/// trampoline entry (u64, 0 for a splice weft removed). The second buffer
/// follows the first's `trap_capacity` entries.
pub const ENTRIES: u64 = 128;
/// Size of one entry.
pub const ENTRY_SIZE: u64 = 16;

/// Offset of buffer `which` (0 or 1) for `capacity` entries each.
pub fn buffer(which: u64, capacity: u64) -> u64 {
    ENTRIES + which * capacity * ENTRY_SIZE
}

/// The [`CURRENT`] word for `count` entries in buffer `which`.
pub fn current(which: u64, count: u64) -> u64 {
    (which << BUFFER_BIT) | (count & 0xffff_ffff)
}

// The actions follow one another and end before the entries.
const _: () = assert!(
    DEFAULT_ACTION == OLD_ACTION + ACTION_SIZE
        && NEW_ACTION == DEFAULT_ACTION + ACTION_SIZE
        && NEW_ACTION + ACTION_SIZE <= PROCESS
        && PROCESS + 8 <= ENTRIES
);
