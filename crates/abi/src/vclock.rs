//! weft's own ABI, not the kernel's: the layout of the per-thread virtual
//! CPU clock that weft's BPF program (`crates/vclock/src/bpf/vclock.bpf.c`,
//! which repeats these numbers and is checked against them by a test),
//! the code weft generates in a target and weft itself share.
//!
//! The clock is one BPF array map, memory-mapped, of [`ENTRIES`] entries of
//! [`ENTRY_SIZE`] bytes:
//!
//! * entry 0, the header ([`MAGIC`], [`VERSION`]);
//! * from [`FIRST_CPU`], one entry per CPU (up to [`CPUS`]): at [`NS`], the
//!   `CLOCK_MONOTONIC` time of the CPU's last context switch, and at
//!   [`SEQ`] the number of switches;
//! * from [`FIRST_THREAD`], an open-addressed table of [`SLOTS`] thread
//!   entries, keyed by kernel thread id at [`TID`] (0: free). A thread
//!   claims its own entry (`lock cmpxchg` of its tid into a free one,
//!   probing at most [`PROBES`] entries from [`home`]); the BPF program at
//!   `sched_switch` adds to a claimed thread's [`NS`] the time it just ran
//!   (the kernel's runtime since [`BASE`], which it notes at the switch-in),
//!   sets [`CPU`] to 1 + the CPU it runs on (0 while it does not), and
//!   increments [`SEQ`] before and after (odd while it updates).
//!
//! A thread's CPU time now is then its [`NS`] plus the time since its
//! CPU's last switch, read without a system call: the thread's own code
//! reads [`SEQ`], [`NS`], the TSC and the CPU (`rdtscp`), and the CPU's
//! [`NS`], and retries if [`SEQ`] changed (it was switched out meanwhile).

/// `WVCK` in little-endian, the header's first u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"WVCK");
/// Layout version, the header's second u32.
pub const VERSION: u32 = 1;
/// Bytes per entry.
pub const ENTRY_SIZE: u64 = 32;
/// CPUs the clock covers (a power of two: generated code masks
/// `rdtscp`'s CPU number with `CPUS - 1`).
pub const CPUS: u64 = 1024;
/// log2 of [`SLOTS`].
pub const SLOT_BITS: u32 = 16;
/// Thread entries.
pub const SLOTS: u64 = 1 << SLOT_BITS;
/// Entries probed at most, from a tid's home, to find or claim its entry.
pub const PROBES: u32 = 16;
/// Index of the first CPU entry.
pub const FIRST_CPU: u64 = 1;
/// Index of the first thread entry.
pub const FIRST_THREAD: u64 = FIRST_CPU + CPUS;
/// Entries in the map.
pub const ENTRIES: u64 = FIRST_THREAD + SLOTS;
/// Bytes of the map as mapped.
pub const MAP_SIZE: u64 = ENTRIES * ENTRY_SIZE;

/// Offset in an entry of the thread id (u32; thread entries only).
pub const TID: u64 = 0;
/// Offset in an entry of the sequence number (u32).
pub const SEQ: u64 = 4;
/// Offset in an entry of its nanoseconds (u64): a thread's accumulated
/// on-CPU time, or a CPU's last switch.
pub const NS: u64 = 8;
/// Offset in a thread entry of 1 + the CPU it runs on, 0 while it does
/// not run (u32).
pub const CPU: u64 = 16;

/// Offset in a thread entry of the kernel's runtime of the thread
/// (`sum_exec_runtime`) when it was last switched in, 0 if unknown (u64):
/// at its switch-out the program adds the kernel's runtime since, which
/// leaves out steal time and the switch itself.
pub const BASE: u64 = 24;

/// The multiplier of Knuth's multiplicative hash (2^32 / φ).
pub const HASH: u32 = 0x9E37_79B1;

/// The first thread entry (from 0, relative to [`FIRST_THREAD`]) probed for `tid`.
pub const fn home(tid: u32) -> u32 {
    tid.wrapping_mul(HASH) >> (32 - SLOT_BITS)
}

/// TSC ticks to `CLOCK_MONOTONIC` nanoseconds, as generated code converts
/// them: `ns_base + ((tsc - tsc_base) * mult) >> shift` (with a 128-bit
/// product).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conversion {
    /// A TSC reading.
    pub tsc_base: u64,
    /// `CLOCK_MONOTONIC` nanoseconds at `tsc_base`.
    pub ns_base: u64,
    /// Nanoseconds per tick, times 2^`shift`.
    pub mult: u64,
    /// See `mult`.
    pub shift: u32,
}

impl Conversion {
    /// `CLOCK_MONOTONIC` nanoseconds at TSC reading `tsc`.
    pub fn ns(&self, tsc: u64) -> u64 {
        let product = u128::from(tsc.wrapping_sub(self.tsc_base)) * u128::from(self.mult);
        self.ns_base.wrapping_add((product >> self.shift) as u64)
    }
}

/// Where a process sees the clock: what generated code needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    /// Address of the map (its header) in the process.
    pub base: u64,
    /// TSC to nanoseconds.
    pub conversion: Conversion,
}

impl View {
    /// Address of CPU `cpu`'s entry.
    pub fn cpu(&self, cpu: u64) -> u64 {
        self.base + (FIRST_CPU + cpu) * ENTRY_SIZE
    }

    /// Address of thread entry `slot` (from 0).
    pub fn thread(&self, slot: u64) -> u64 {
        self.base + (FIRST_THREAD + slot) * ENTRY_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn homes_spread_and_stay_in_the_table() {
        let homes: std::collections::HashSet<u32> = (1..5000u32).map(home).collect();
        assert!(homes.len() > 4900, "{}", homes.len());
        assert!((0..100_000u32).all(|t| u64::from(home(t)) < SLOTS));
    }

    #[test]
    fn conversion_scales_and_offsets() {
        // 2.5 ticks per ns: mult = 2^32 / 2.5.
        let c = Conversion {
            tsc_base: 1000,
            ns_base: 5_000_000,
            mult: (1u64 << 32) * 2 / 5,
            shift: 32,
        };
        assert_eq!(c.ns(1000), 5_000_000);
        assert_eq!(c.ns(1000 + 2_500_000_000), 5_000_000 + 1_000_000_000 - 1);
        assert!(CPUS.is_power_of_two() && MAP_SIZE == ENTRIES * 32);
    }
}
