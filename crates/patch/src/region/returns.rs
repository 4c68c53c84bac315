//! Return stacks: where weft keeps, per thread, the frames whose return
//! address it replaced, so that a function's exit probes run when it
//! returns to its caller, past the functions it tail-calls.
//!
//! The stacks live outside the shared region, in private anonymous memory
//! of the process ([`super::sync::RETURN_STACKS`] holds its address, 0 until
//! a function needs it): a forked child then gets a copy of them that
//! matches the copy of its stack. One stack of [`BYTES_PER_THREAD`] per
//! thread slot, found from the slot's index ([`super::threads::SLOT`]).
//!
//! A stack: the number of entries in use at [`DEPTH`], [`DISARMED`] (1 while
//! an unwinder walks the stack, whose return addresses weft then put back),
//! [`OVERFLOW`] (calls left unhooked because the stack was full), then
//! [`CAPACITY`] entries of [`ENTRY_SIZE`] bytes: the address of the return
//! slot, the return address it held, the return stub that replaced it, and
//! the function's exit routine. Only the owning thread writes its stack.

/// Bytes of one thread's return stack.
pub const BYTES_PER_THREAD: u64 = 4096;
/// log2 of [`BYTES_PER_THREAD`].
pub const SHIFT: u32 = 12;
/// Entries in use (u64).
pub const DEPTH: u64 = 0;
/// 1 while an unwinder runs: the entries' return slots hold the original
/// addresses again.
pub const DISARMED: u64 = 8;
/// Calls whose return was not hooked because the stack was full (their
/// exits run at their own returns and tail calls instead).
pub const OVERFLOW: u64 = 16;
/// Offset of the first entry.
pub const ENTRIES: u64 = 32;
/// Bytes of one entry.
pub const ENTRY_SIZE: u64 = 32;
/// log2 of [`ENTRY_SIZE`].
pub const ENTRY_SHIFT: u32 = 5;
/// Entry field: address of the return slot (the function's `rsp` at entry).
pub const E_SLOT: u64 = 0;
/// Entry field: the return address the slot held.
pub const E_RET: u64 = 8;
/// Entry field: the return stub written into the slot, 0 for a call that
/// is only followed (its function leaves by `ret` only, and its slot keeps
/// the original address).
pub const E_STUB: u64 = 16;
/// Entry field: the function's exit routine.
pub const E_EXIT: u64 = 24;
/// Entries per thread.
pub const CAPACITY: u64 = (BYTES_PER_THREAD - ENTRIES) / ENTRY_SIZE;

/// Bytes of the return stacks of `slots` thread slots.
pub const fn area_size(slots: u64) -> u64 {
    slots * BYTES_PER_THREAD
}

const _: () = assert!(1 << SHIFT == BYTES_PER_THREAD && 1 << ENTRY_SHIFT == ENTRY_SIZE);
