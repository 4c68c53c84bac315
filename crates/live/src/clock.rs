//! The clock trampolines use: the TSC, read here too, with its rate
//! measured against CLOCK_MONOTONIC.

use std::time::{Duration, Instant};

/// Reads the time-stamp counter.
pub fn tsc() -> u64 {
    // SAFETY: rdtsc exists on every x86-64 processor and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether the TSC is invariant (CPUID 0x8000_0007, EDX bit 8): it ticks at a
/// constant rate in every power state and on every core, so timestamps from
/// different threads compare.
pub fn tsc_is_invariant() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 gives the highest extended leaf, checked first.
    let max_extended = __cpuid(0x8000_0000).eax;
    max_extended >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// TSC ticks per nanosecond, measured over `over`.
pub fn calibrate(over: Duration) -> f64 {
    let (t0, c0) = (Instant::now(), tsc());
    std::thread::sleep(over);
    let (t1, c1) = (Instant::now(), tsc());
    (c1 - c0) as f64 / (t1 - t0).as_nanos().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsc_invariance_matches_the_kernel() {
        // The kernel reports the same CPUID bit as the `nonstop_tsc` flag.
        let flags = weft_process::cpu_flags();
        if flags.is_empty() {
            return;
        }
        assert_eq!(tsc_is_invariant(), flags.iter().any(|f| f == "nonstop_tsc"));
    }

    #[test]
    fn tsc_advances_at_a_plausible_rate() {
        let per_ns = calibrate(Duration::from_millis(20));
        assert!(per_ns > 0.1 && per_ns < 10.0, "{per_ns} ticks per ns");
    }
}
