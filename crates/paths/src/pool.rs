//! The buffer pool: a file shared by weft and the traced process, holding
//! a header, one descriptor per buffer, and the buffers, each followed by
//! a guard page that the process maps without access.
//!
//! ```text
//! offset 0             header (below), then descriptors of DESC bytes
//! header_size()        buffer 0 (buffer_size bytes), guard page
//! + stride()           buffer 1, guard page
//! ...                  buffer `buffers` is the discard buffer: where a
//!                      thread writes when weft is gone; never read
//! code()               the fault handler and the claim routine (mapped
//!                      read-execute)
//! own()                a page each process maps privately (copied on
//!                      fork): the SIGSEGV action the program asked for
//! ```
//!
//! A descriptor's state moves FREE → OWNED (the fault handler gives the
//! buffer to a thread) → FULL (its guard page was reached) → DRAINING
//! (weft reads it) → FREE (weft zeroed it and woke waiting threads through
//! the `FREED` futex word). Every field is little-endian.

/// `"WEFTPATH"`, the header's first word.
pub const MAGIC: u64 = u64::from_le_bytes(*b"WEFTPATH");
/// Header: handovers so far (the next buffer's sequence number), `u64`.
pub const SEQ: u64 = 8;
/// Header: incremented by weft each time it frees buffers; threads
/// waiting for one sleep on it (`u32` futex word).
pub const FREED: u64 = 16;
/// Header: set by weft when it stops draining (`u32`).
pub const GONE: u64 = 20;
/// Header: bytes of witnesses dropped because no buffer came (`u64`).
pub const LOST: u64 = 24;
/// Header: weft's pid as the process sees it, or 0 when weft cannot tell
/// (another pid namespace): a thread waiting for a buffer stops waiting
/// once that process is gone (`u32`).
pub const OWNER: u64 = 32;
/// Header: weft's handler's kernel `sigaction`.
pub const NEW_ACTION: u64 = 96;
/// Header: the `timespec` a thread waits for a free buffer at a time.
pub const WAIT: u64 = 128;
/// Descriptors start here.
pub const DESCS: u64 = 512;
/// Bytes per descriptor.
pub const DESC: u64 = 64;
/// Descriptor: state (`u32`).
pub const STATE: u64 = 0;
/// Descriptor: the owning thread's tid (`u32`).
pub const TID: u64 = 4;
/// Descriptor: the handover's sequence number (`u64`).
pub const DESC_SEQ: u64 = 8;
/// Descriptor: TSC when the thread got the buffer (`u64`).
pub const TSC_START: u64 = 16;
/// Descriptor: TSC when it filled it (`u64`).
pub const TSC_END: u64 = 24;
/// Descriptor: bytes used, set when full (`u64`).
pub const LEN: u64 = 32;
/// Descriptor: the owning process's pid (`u32`).
pub const PID: u64 = 40;
/// Descriptor, of a forked child's first buffer: the sequence number of
/// the buffer its parent was writing when it forked (`u64`).
pub const PARENT_SEQ: u64 = 48;
/// Descriptor: 1 + where in that buffer the parent's stream stood (`u64`;
/// 0 for a buffer that is not a forked child's first).
pub const PARENT_AT: u64 = 56;

/// A buffer no thread has.
pub const FREE: u32 = 0;
/// A thread writes into it.
pub const OWNED: u32 = 1;
/// Full, waiting for weft.
pub const FULL: u32 = 2;
/// weft is reading it.
pub const DRAINING: u32 = 3;

/// Page size of x86-64.
pub const PAGE: u64 = 4096;
/// Bytes of the code pages.
pub const CODE_SIZE: u64 = 2 * PAGE;

/// Sizes of a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool {
    /// Buffers handed to threads (the discard buffer comes on top).
    pub buffers: u64,
    /// Bytes of one buffer, a multiple of the page size.
    pub buffer_size: u64,
}

impl Pool {
    /// A pool of `buffers` buffers of `buffer_size` bytes (rounded up to
    /// whole pages, at least one).
    pub fn new(buffers: u64, buffer_size: u64) -> Pool {
        Pool {
            buffers: buffers.max(1),
            buffer_size: buffer_size.max(1).next_multiple_of(PAGE),
        }
    }

    /// Bytes of the header and descriptors, whole pages.
    pub fn header_size(&self) -> u64 {
        (DESCS + DESC * (self.buffers + 1)).next_multiple_of(PAGE)
    }

    /// Distance from one buffer to the next (the buffer and its guard).
    pub fn stride(&self) -> u64 {
        self.buffer_size + PAGE
    }

    /// Offset of buffer `k` (`k == buffers` is the discard buffer).
    pub fn buffer(&self, k: u64) -> u64 {
        self.header_size() + k * self.stride()
    }

    /// Offset of buffer `k`'s guard page.
    pub fn guard(&self, k: u64) -> u64 {
        self.buffer(k) + self.buffer_size
    }

    /// Offset of descriptor `k`.
    pub fn desc(&self, k: u64) -> u64 {
        DESCS + k * DESC
    }

    /// Offset of the code pages (the fault handler and the claim
    /// routine), after the discard buffer's guard. They live in the pool,
    /// which stays mapped after weft detaches, so the handler outlives any
    /// copy a thread may still be running.
    pub fn code(&self) -> u64 {
        self.buffer(self.buffers + 1)
    }

    /// Offset of the page each process maps privately, after the code:
    /// it holds the kernel `sigaction` for SIGSEGV that the program has
    /// (the one weft's handler replaced, then any the program set since),
    /// which a forked child inherits as the kernel's action, and no other
    /// process sees.
    pub fn own(&self) -> u64 {
        self.code() + CODE_SIZE
    }

    /// Offset of the program's own SIGSEGV action (in [`Pool::own`]).
    pub fn program_action(&self) -> u64 {
        self.own()
    }

    /// Offset of the pid (u64) of the process whose action
    /// [`Pool::program_action`] is: a process that shares the page with
    /// another (a `vfork` child) sets its own actions in the kernel.
    pub fn program_process(&self) -> u64 {
        self.own() + 32
    }

    /// Offset of the cursor (`u64`) a forked child found in its TCB: its
    /// parent's when it forked (the copy of `_Fork` writes it, in the
    /// child's own page), until the child's first buffer takes it.
    pub fn forked_cursor(&self) -> u64 {
        self.own() + 40
    }

    /// Bytes of the whole file.
    pub fn size(&self) -> u64 {
        self.own() + PAGE
    }

    /// The header's initial bytes: magic, and the wait of 50 ms.
    pub fn header_bytes(&self) -> Vec<u8> {
        let mut h = vec![0u8; DESCS as usize];
        h[..8].copy_from_slice(&MAGIC.to_le_bytes());
        h[WAIT as usize + 8..WAIT as usize + 16].copy_from_slice(&50_000_000u64.to_le_bytes());
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_disjoint_and_guarded() {
        let p = Pool::new(55, 5000);
        assert_eq!(p.buffer_size, 8192);
        assert_eq!(p.header_size(), PAGE);
        assert!(p.desc(55) + DESC <= p.header_size());
        for k in 0..p.buffers {
            assert_eq!(p.guard(k) + PAGE, p.buffer(k + 1));
            assert_eq!(p.buffer(k) % PAGE, 0);
        }
        assert_eq!(p.code(), p.guard(55) + PAGE);
        assert_eq!(Pool::new(56, 4096).header_size(), 2 * PAGE);
        assert_eq!(p.own(), p.code() + CODE_SIZE);
        assert_eq!(p.size(), p.own() + PAGE);
        assert!(p.program_process() + 8 <= p.forked_cursor());
        const { assert!(PARENT_AT + 8 <= DESC) };
        const { assert!(LOST + 8 <= OWNER && OWNER + 4 <= NEW_ACTION) };
        const { assert!(NEW_ACTION + 32 <= WAIT && WAIT + 16 <= DESCS) };
    }
}
