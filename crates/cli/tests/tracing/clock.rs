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

/// The wall-clock time now, in nanoseconds since the Unix epoch.
fn realtime_now() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i128
}

/// The CTF clock has its origin in wall-clock time (`offset_s`, `offset`):
/// babeltrace2 prints each event at the time of day it happened, between
/// this test's own wall-clock readings around the run (within a second
/// either way: the TSC rate is measured over 20 ms), for either clock. It
/// printed times in 1970 when the offset was 0.
#[test]
fn babeltrace_prints_wall_clock_times() {
    let bin = build("events", &O2);
    for clock in ["tsc", "monotonic"] {
        let before = realtime_now();
        let traced = trace_run(
            &format!("wall-clock-{clock}"),
            &["--clock", clock, "--trace", "fn:traced"],
            &bin,
            &["2", "200"],
        );
        let after = realtime_now();
        let meta = traced.meta();
        let start = i128::from(meta["start_realtime_ns"].as_u64().unwrap());
        assert!(
            before <= start && start <= after,
            "{clock}: meta.json's start"
        );
        if !have("babeltrace2") {
            skip("babeltrace2 missing (bash scripts/install-deps.sh installs it)");
            return;
        }
        let bt = run(
            std::process::Command::new("babeltrace2")
                .arg("--clock-seconds")
                .arg(traced.events.join("ctf")),
            std::time::Duration::from_secs(60),
        );
        assert_eq!(bt.status, 0, "{}", bt.stderr);
        let times: Vec<i128> = bt
            .stdout
            .lines()
            .map(|l| {
                // `[1712345678.123456789] (+0.000001234) ...`
                let stamp = l
                    .strip_prefix('[')
                    .and_then(|l| l.split_once(']'))
                    .unwrap()
                    .0;
                let (s, ns) = stamp.split_once('.').unwrap();
                s.parse::<i128>().unwrap() * 1_000_000_000 + ns.parse::<i128>().unwrap()
            })
            .collect();
        assert_eq!(times.len(), 2 * 2 * 200, "{clock}");
        let second = 1_000_000_000;
        for t in &times {
            assert!(
                before - second <= *t && *t <= after + second,
                "{clock}: {t} not between {before} and {after} (ns since the epoch)"
            );
        }
    }
}
