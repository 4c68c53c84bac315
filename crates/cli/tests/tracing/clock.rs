//! `--clock monotonic`: timestamps from the target's vDSO clock_gettime,
//! between the test's own CLOCK_MONOTONIC readings.

use crate::support::*;
use std::collections::BTreeMap;

fn monotonic_now() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `--clock monotonic`: trampolines and rich events take their timestamps
/// from the target's vDSO clock_gettime, so they fall between this test's
/// own CLOCK_MONOTONIC readings around the run, in each thread's order.
#[test]
fn monotonic_clock_timestamps_are_clock_monotonic() {
    // A loop over the two kinds of event source (trampolines, rich events
    // written by the program), not build variants: both take their clock
    // from the same place.
    for (target, trace, args) in [
        ("events", "fn:traced", ["2", "500"]),
        ("rich", "event:rich:*", ["2", "500"]),
    ] {
        let bin = build(target, &O2);
        let before = monotonic_now();
        let traced = trace_run(
            &format!("monotonic-{target}"),
            &["--clock", "monotonic", "--trace", trace],
            &bin,
            &args,
        );
        let after = monotonic_now();
        let meta = traced.meta();
        assert_eq!(
            (meta["clock"].as_str(), meta["ticks_per_ns"].as_f64()),
            (Some("monotonic"), Some(1.0))
        );
        let mut last: BTreeMap<i64, u64> = BTreeMap::new();
        let mut count = 0;
        for e in traced.records() {
            let t = e.time();
            assert!(
                before <= t && t <= after,
                "{target}: {before} <= {t} <= {after}"
            );
            let previous = last.insert(e.tid(), t).unwrap_or(0);
            assert!(t >= previous, "{target}: in each thread's order");
            count += 1;
        }
        let expected = if target == "events" {
            2 * 2 * 500
        } else {
            2 * 500 + 2
        };
        assert_eq!(count, expected, "{target}");
    }
}
