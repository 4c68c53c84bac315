//! The trap table: sorted (site, trampoline entry) pairs that the SIGTRAP
//! handler (`crate::trap`) binary-searches, and the kernel `struct
//! sigaction`s it installs and restores.

/// Number of entries in use (u64).
pub const COUNT: u64 = 0;
/// The replaced kernel `struct sigaction` (32 bytes), as `rt_sigaction` returned it.
pub const OLD_ACTION: u64 = 8;
/// Its `sa_handler` (u64; 0 = SIG_DFL, 1 = SIG_IGN).
pub const OLD_HANDLER: u64 = OLD_ACTION + weft_abi::sigaction::HANDLER;
/// A kernel `struct sigaction` selecting SIG_DFL (32 bytes).
pub const DEFAULT_ACTION: u64 = 40;
/// weft's own kernel `struct sigaction` (32 bytes).
pub const NEW_ACTION: u64 = 72;
/// Size of a kernel `struct sigaction` (handler, flags, restorer, mask).
pub const ACTION_SIZE: u64 = weft_abi::sigaction::SIZE;
/// First entry; each is 16 bytes: site (u64), trampoline entry (u64).
pub const ENTRIES: u64 = 128;
/// Size of one entry.
pub const ENTRY_SIZE: u64 = 16;

// The actions follow one another and end before the entries.
const _: () = assert!(
    DEFAULT_ACTION == OLD_ACTION + ACTION_SIZE
        && NEW_ACTION == DEFAULT_ACTION + ACTION_SIZE
        && NEW_ACTION + ACTION_SIZE <= ENTRIES
);
