//! The clock trampolines use: the TSC, read here too, with its rate
//! measured against CLOCK_MONOTONIC.

use std::time::{Duration, Instant};

/// Reads the time-stamp counter.
pub fn tsc() -> u64 {
    // SAFETY: rdtsc exists on every x86-64 processor and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
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
    fn tsc_advances_at_a_plausible_rate() {
        let per_ns = calibrate(Duration::from_millis(20));
        assert!(per_ns > 0.1 && per_ns < 10.0, "{per_ns} ticks per ns");
    }
}
