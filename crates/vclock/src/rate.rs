//! The TSC's rate against `CLOCK_MONOTONIC`, measured once per weft run
//! across its own start-up. A measurement needs two (TSC, time) pairs some
//! 20 ms apart; weft takes the first as it starts ([`start`]) and the
//! second when a rate is first asked for, sleeping only for what is left
//! of the 20 ms. weft's start-up (loading BPF programs, starting and
//! instrumenting its program) takes longer than that, so the rate costs
//! no wait at all, where two measurements of their own (the event clock's
//! and this crate's) used to sleep 20 ms each in every run. The kernel's
//! own figure (a perf event page's `time_mult`) is not given on this kind
//! of machine (a KVM guest whose scheduler clock is kvm-clock).

use std::time::Duration;

/// How far apart the two pairs are at least.
const SPAN: Duration = Duration::from_millis(20);

static FIRST: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// Takes the measurement's first pair, if not taken yet: call it as early
/// as possible (it costs some 16 clock reads).
pub fn start() {
    FIRST.get_or_init(crate::paired);
}

/// TSC ticks per nanosecond, measured once: from the pair [`start`] took
/// (or one taken now) to a pair at least 20 ms later.
pub fn ticks_per_ns() -> f64 {
    *RATE.get_or_init(|| {
        let (t0, n0) = *FIRST.get_or_init(crate::paired);
        let since = Duration::from_nanos(crate::monotonic_ns().saturating_sub(n0));
        if since < SPAN {
            std::thread::sleep(SPAN - since);
        }
        let (t1, n1) = crate::paired();
        (t1 - t0) as f64 / (n1 - n0).max(1) as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rate is the TSC's: a second measurement over 100 ms agrees
    /// within 0.1 %, and asking again gives the same figure.
    #[test]
    fn the_rate_measured_across_start_up_is_the_tscs() {
        start();
        let first = ticks_per_ns();
        assert!(first > 0.1 && first < 10.0, "{first} ticks per ns");
        let (t0, n0) = crate::paired();
        std::thread::sleep(Duration::from_millis(100));
        let (t1, n1) = crate::paired();
        let again = (t1 - t0) as f64 / (n1 - n0) as f64;
        assert!((again - first).abs() / first < 1e-3, "{first} then {again}");
        assert_eq!(ticks_per_ns().to_bits(), first.to_bits());
    }
}
