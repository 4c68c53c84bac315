//! The ring modes: discard counts what it drops, block loses nothing,
//! flight keeps the latest events and dumps on SIGUSR2; rich events follow
//! the same modes; bad ring options are one clear line.

use crate::support::*;
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn discard_mode_accounts_for_every_event() {
    // Unpaced, two threads outrun the 1 ms drain: rings fill and events are
    // dropped. Every event is either recorded or counted as dropped.
    let traced = trace_run(
        "trace-drops",
        &["--trace", "fn:traced", "--args", "2"],
        build("events", &O2),
        &["2", "300000"],
    );
    let calls = traced.tallies()["traced"];
    assert_eq!(calls, 600_000);
    let dropped = traced.meta()["dropped"].as_u64().unwrap();
    let recorded = traced.records().len() as u64;
    assert!(dropped > 0, "{recorded} recorded: the rings never filled");
    assert_eq!(
        recorded + dropped,
        2 * calls,
        "an entry and an exit per call"
    );
    assert!(
        traced.out.stderr.contains(&format!("({dropped} dropped)")),
        "{}",
        traced.out.stderr
    );
}

#[test]
fn block_mode_loses_nothing() {
    // The load that makes discard mode drop (above) loses nothing when
    // writers wait for room.
    let bin = build("events", &O2);
    let out = run(
        weft()
            .args(["run", "--trace", "fn:traced", "--args", "2"])
            .args(["--ring-mode", "block", "--"])
            .arg(&bin)
            .args(["2", "300000"]),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(tallies(&out.stdout)["traced"], 600_000);
    assert!(
        out.stderr
            .contains("weft: 1200000 event(s) traced (0 dropped)"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_ring_options_are_one_clear_line() {
    // A loop over bad options (not build variants), each with its message.
    for (args, want, code) in [
        (
            &["--ring-size", "3M"][..],
            "a power of two from 64K to 64M",
            2,
        ),
        (
            &["--ring-size", "128M"][..],
            "a power of two from 64K to 64M",
            2,
        ),
        (&["--ring-mode", "flight"][..], "give --events-out DIR", 1),
    ] {
        let out = run(
            weft()
                .args(["run", "--trace", "fn:main"])
                .args(args)
                .args(["--", "/bin/true"]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status, code, "{args:?}: {}", out.stderr);
        assert!(out.stderr.contains(want), "{args:?}: {}", out.stderr);
    }
}

/// Checks an events directory of the events target: in each thread the
/// entries of `traced` carry consecutive first arguments and each exit the
/// matching result. Returns the events and, by thread, the last entry's
/// first argument.
fn check_traced_sequences(dir: &std::path::Path) -> (u64, BTreeMap<i64, i64>) {
    // By thread: the last entry's arguments.
    let mut last: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    let mut events = 0;
    for e in records(dir) {
        let tid = e.tid();
        events += 1;
        match e.kind.as_str() {
            "entry" => {
                if let Some((a, _)) = last.get(&tid) {
                    assert_eq!(e.arg(0), a + 1, "{}: consecutive calls", dir.display());
                }
                last.insert(tid, (e.arg(0), e.arg(1)));
            }
            _ => {
                if let Some((a, b)) = last.get(&tid) {
                    assert_eq!(e.arg(0), 3 * a + b, "{}: the call's result", dir.display());
                }
            }
        }
    }
    let last = last.into_iter().map(|(t, (a, _))| (t, a as i64)).collect();
    (events, last)
}

/// CPU time (user and system, in clock ticks) of weft's child `weft`
/// started, 0 while there is none.
fn target_cpu_ticks(weft: i32) -> u64 {
    let children = std::fs::read_to_string(format!("/proc/{weft}/task/{weft}/children"));
    let Some(child) = children
        .ok()
        .and_then(|c| c.split_whitespace().next().map(str::to_owned))
    else {
        return 0;
    };
    let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are
    // fields 14 and 15 of the whole line.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let field = |n: usize| {
        rest.split_whitespace()
            .nth(n - 3)
            .and_then(|f| f.parse::<u64>().ok())
    };
    field(14).unwrap_or(0) + field(15).unwrap_or(0)
}

#[test]
fn flight_mode_keeps_the_latest_events_and_dumps_on_sigusr2() {
    let bin = build("events", &O2);
    let dir = scratch("trace-flight");
    let events = dir.join("events");
    let calls: i64 = 8_000_000;
    let w = weft()
        .args(["run", "--trace", "fn:traced", "--ring-mode", "flight"])
        .args(["--ring-size", "64K", "--events-out"])
        .arg(&events)
        .arg("--")
        .arg(&bin)
        .args(["2", &calls.to_string()])
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut w = KillOnDrop(w);
    let pid = w.0.id() as i32;
    // SIGUSR2 only once weft catches it (bit 11 of SigCgt), else it would end weft.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let caught = status
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << 11) != 0);
        if caught {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "weft catches SIGUSR2");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The dump must be taken while the target runs: wait until it has
    // spent 50 ms on the CPU (it needs several hundred), not a fixed time,
    // which a loaded or a fast machine would overshoot or undershoot.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while target_cpu_ticks(pid) < 5 {
        assert!(std::time::Instant::now() < deadline, "the target runs");
        std::thread::sleep(Duration::from_millis(2));
    }
    // SAFETY: kill with weft's own pid.
    unsafe { libc::kill(pid, libc::SIGUSR2) };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(s) = w.0.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "weft finishes");
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap();
    assert!(status.success(), "{stderr}");
    let tally = tallies(&std::fs::read_to_string(dir.join("stdout")).unwrap());
    assert_eq!(tally["traced"], 2 * calls as u64);

    // The dump taken while the target ran holds whole, consistent records.
    let (dumped, _) = check_traced_sequences(&events.join("dump-1"));
    assert!(dumped > 0, "{stderr}");
    // At the end: the latest events of each thread, up to its last call;
    // every event is either there or counted as overwritten or dropped.
    let (kept, last) = check_traced_sequences(&events);
    assert_eq!(last.len(), 2, "{last:?}");
    assert!(last.values().all(|&a| a == calls - 1), "{last:?}");
    let meta = events_meta(&events);
    assert_eq!(meta["ring_mode"], "flight");
    assert_eq!(kept + meta["dropped"].as_u64().unwrap(), 4 * calls as u64);
    // A 64 KiB ring keeps about 2340 records of 32 (entry) and 24 (exit) bytes.
    assert!(kept > 2 * 2300 && kept <= 2 * 2341, "{kept}");
}

/// The rich event writer in the program follows weft's ring modes as the
/// trampolines do: block loses nothing, flight keeps the latest events and
/// counts the overwritten ones, discard counts its drops.
#[test]
fn rich_events_follow_the_ring_modes() {
    let bin = build("rich", &O2);
    // A loop over the ring modes, not build variants: one workload run in
    // each mode, each with its own accounting.
    for mode in ["block", "flight", "discard"] {
        let traced = trace_run(
            &format!("rich-mode-{mode}"),
            &[
                "--trace",
                "event:rich:request",
                "--ring-mode",
                mode,
                "--ring-size",
                "64K",
            ],
            &bin,
            &["2", "100000"],
        );
        let text = traced.text();
        assert_eq!(traced.tallies()["request"], 200_000);
        let lost = traced.meta()["dropped"].as_u64().unwrap();
        let kept = lines_with(&text, ":rich:request probe") as u64;
        assert_eq!(kept + lost, 200_000, "{mode}");
        match mode {
            "block" => assert_eq!(lost, 0),
            "flight" => {
                // Each thread's latest events, up to its last round.
                for k in 0..2u64 {
                    let last = format!("index={} ", k * 1_000_000 + 99_999);
                    assert!(text.contains(&last), "{mode}: thread {k}'s last event kept");
                }
            }
            _ => {}
        }
    }
}
