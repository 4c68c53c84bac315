//! The thread table: per-thread state that generated code keeps without
//! locks, in one block per thread slot.
//!
//! The table is `thread_slots` keys (u64 each) followed by as many blocks of
//! [`block_size`] bytes. A thread finds its slot by hashing its thread
//! pointer (`fs:0`, which the x86-64 TLS ABI makes point to itself) and
//! probing linearly; a free slot (key [`FREE`]) is claimed with `lock
//! cmpxchg`, once per thread, which is also when the slot's tid is recorded
//! (one `gettid`). Only the owning thread writes its block, so its updates
//! need no atomics; weft reads timers under their sequence numbers (odd
//! while an update is under way).
//!
//! A block: [`TIMERS`] timers of [`TIMER_SIZE`] bytes, then [`COUNTERS`]
//! per-thread counters (u64 each), then the owner's tid (u64) at [`TID`],
//! the slot's index (u64) at [`SLOT`], the address of its CPU clock entry
//! (u64) at [`VCLOCK`], a scratch TSC at [`STAMP`], the [`WRITING`] flag,
//! the calls it has open ([`OPEN_DEPTH`], [`OPEN_CALLS`]), then, at
//! [`RING`], the thread's event ring (see [`super::ring`]).

/// Keys: `thread_slots` u64 from the start of the table, the owner's thread
/// pointer ([`FREE`] or [`RETIRED`] otherwise).
pub const KEYS: u64 = 0;
/// The key of a free slot.
pub const FREE: u64 = 0;
/// The key of a retired slot, written by layouts before version 7 (which
/// retired a slot found under another tid; version 7 passes it over):
/// never a thread pointer, never free.
pub const RETIRED: u64 = 1;
/// Timers per thread.
pub const TIMERS: u64 = 64;
/// Bytes per timer: sequence, count of starts, start tick, total ticks (u64 each).
pub const TIMER_SIZE: u64 = 32;
/// Offsets inside a timer: the sequence number (odd while updating).
pub const TIMER_SEQ: u64 = 0;
/// Count of starts not yet stopped.
pub const TIMER_COUNT: u64 = 8;
/// TSC at the outermost start.
pub const TIMER_START: u64 = 16;
/// Accumulated TSC ticks.
pub const TIMER_TOTAL: u64 = 24;
/// Per-thread counters (for constraints such as "inside F").
pub const COUNTERS: u64 = 64;
/// Offset of the tid (u64) inside a block.
pub const TID: u64 = TIMERS * TIMER_SIZE + COUNTERS * 8;
/// Offset of the slot's own index (u64) inside its block, written when the
/// slot is claimed: it locates the thread's return stack (version 7).
pub const SLOT: u64 = TID + 8;
/// Offset of the address of the thread's entry in the per-thread CPU
/// clock (`weft_abi::vclock`) inside its block (u64, 0 until the thread
/// first reads the clock and claims its entry; version 8).
pub const VCLOCK: u64 = SLOT + 8;
/// Offset of the TSC value the thread's last timestamp-reading primitive
/// read (u64, 0 when it read none), for the primitive right after it in
/// the same mini-trampoline: a system call's capture stops its CPU timer
/// and stamps its entry's record at one instant, with one `rdtsc`. A
/// scratch word only the owning thread's code reads.
pub const STAMP: u64 = VCLOCK + 8;
/// While the thread writes a record into its ring, the frame of the code
/// writing it (u64: 8 bytes below its `rsp`), else 0: a signal handler's
/// record that comes in meanwhile is dropped, and counted, instead of
/// written over the one being written, since the ring has one writer,
/// the thread, and a record is published only when whole. A record
/// begun above that frame finds a record the thread left and never
/// finishes (`mini::frames`), and is written over it. Version 10 (bit 0
/// until version 12).
pub const WRITING: u64 = STAMP + 8;
/// How many calls the thread has open (u64): made by a program that
/// makes its point's call, not returned yet (see `mini::open_calls`).
/// Version 12.
pub const OPEN_DEPTH: u64 = WRITING + 8;
/// The open calls, [`OPEN_SLOTS`] of [`OPEN_SIZE`] bytes, the outermost
/// first; a call nested deeper is not kept.
pub const OPEN_CALLS: u64 = OPEN_DEPTH + 8;
/// Open calls kept at most.
pub const OPEN_SLOTS: u64 = 8;
/// Bytes of an open call.
pub const OPEN_SIZE: u64 = 96;
/// Inside an open call: its frame, the `rsp` of the code that made it
/// at its `syscall` instruction (u64).
pub const OPEN_FRAME: u64 = 0;
/// The record it gets if the thread leaves it, from its event id on: the
/// event id (u32), the shape word (u32: its values; 0 for no record),
/// then the values (u64 each), as a ring record has them after its time.
pub const OPEN_EVENT: u64 = 8;
/// Where its values start.
pub const OPEN_VALUES: u64 = 16;
/// Values an open call's record holds at most: the number, six
/// arguments, the user time, the entry's instant, and the result the
/// call had when the thread left it ([`LEFT_RESULT_UNKNOWN`] if none is
/// known), written when the call is found left (version 13).
pub const OPEN_VALUES_MAX: u64 = 10;
/// A left call's result when the thread's signal frame does not say it.
pub const LEFT_RESULT_UNKNOWN: u64 = weft_abi::syscall::LEFT_RESULT_UNKNOWN;
/// 1 (u64) while a signal the delivery stub put off waits for the record
/// being written to be done (`crate::dispatch`'s stub, version 14): the
/// signal is pending, blocked in the interrupted code's mask, and the
/// code that gives the `WRITING` word back unblocks [`DEFERRED_MASK`],
/// so that it comes then, its delivery recorded and its handler's calls
/// too, where before they were dropped.
pub const DEFERRED: u64 = OPEN_CALLS + OPEN_SLOTS * OPEN_SIZE;
/// The signals (u64, a kernel signal set) the stub put off since the
/// writer took the `WRITING` word, which the writer unblocks when it
/// gives the word back (session 30; before, the mask the interrupted code
/// had, which the writer put back whole).
pub const DEFERRED_MASK: u64 = DEFERRED + 8;
/// 1 (u64) from the return of the call that a program makes
/// (`Primitive::MakeCall`, `CallFunction`) until the thread goes back to
/// the program's code, else 0 (version 15): a signal that comes in
/// between came after the call, before any more of the program's own
/// code ran, which the delivery stub cannot tell from the interrupted
/// `rip` alone (weft's code before a call looks the same to it); a rerun
/// raises it at the call's return, not before the next call. Such a
/// program returns with r11 at the block, and its trampoline clears the
/// word just before its jump (or `ret`) back to the program's code, an
/// instruction the stub recognises (`crate::dispatch`). A program's
/// signal handler runs with the word 0 (it is the program's code), and
/// its return puts back the word its signal found: the stub keeps it in
/// the signal frame, so that a second signal that comes as the handler
/// returns still reads as after the call, whatever calls the handler
/// made.
pub const RETURNED: u64 = DEFERRED_MASK + 8;
/// Offset of the thread's event ring in its block (see [`super::ring`]).
pub const RING: u64 = 4096;
const _: () = assert!(RETURNED + 8 <= RING);

/// Bytes of one thread's block: timers, counters, its tid, then its ring
/// with `ring_data` bytes of data, rounded to a cache line. A region
/// without rings (`ring_data` 0: nothing asked for events) has blocks of
/// [`RING`] bytes.
pub const fn block_size(ring_data: u64) -> u64 {
    if ring_data == 0 {
        return RING;
    }
    (RING + super::ring::HEADER + ring_data + super::ring::SLACK).div_ceil(64) * 64
}

/// Offset of timer `t` in a block.
pub const fn timer(t: u64) -> u64 {
    t * TIMER_SIZE
}

/// Offset of per-thread counter `c` in a block.
pub const fn counter(c: u64) -> u64 {
    TIMERS * TIMER_SIZE + c * 8
}

// The tid and the open calls lie before the ring, and an open call's
// record fits it.
const _: () = assert!(OPEN_CALLS + OPEN_SLOTS * OPEN_SIZE <= RING);
const _: () = assert!(OPEN_VALUES + 8 * OPEN_VALUES_MAX <= OPEN_SIZE);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_parts_are_disjoint() {
        assert_eq!(timer(TIMERS), 2048);
        assert_eq!(counter(0), timer(TIMERS));
        assert_eq!(TID, counter(COUNTERS));
        assert_eq!(TID, 2560);
        assert_eq!(block_size(super::super::ring::DEFAULT_DATA) % 64, 0);
    }
}
