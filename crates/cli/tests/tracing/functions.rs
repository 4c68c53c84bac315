//! Function entries and exits traced with their arguments and results:
//! exact payloads in each thread's order, the Chrome JSON's pairs,
//! durations on exits, threads that reuse a thread pointer, tracing
//! started by attaching, and bad requests.

use crate::support::*;
use std::collections::BTreeMap;
use std::time::Duration;

#[test]
fn function_entries_and_exits_with_exact_payloads() {
    let traced = trace_run(
        "trace-fn",
        &["--trace", "fn:traced", "--args", "2"],
        build("events", &O2),
        &["3", "1500"],
    );
    assert_eq!(traced.tallies()["traced"], 4500);
    let meta = traced.meta();
    assert_eq!(meta["dropped"], 0, "bursts fit a ring: nothing dropped");
    let nonstop = weft_process::cpu_flags().iter().any(|f| f == "nonstop_tsc");
    assert_eq!(meta["tsc_invariant"], nonstop, "as the kernel reports it");
    // Per thread: alternate entry(i, base) / exit(3i + base), timestamps never going back.
    let mut by_thread: BTreeMap<i64, Vec<Record>> = BTreeMap::new();
    for e in traced.records() {
        by_thread.entry(e.tid()).or_default().push(e);
    }
    assert_eq!(by_thread.len(), 3);
    let mut bases: Vec<u64> = Vec::new();
    for (tid, evs) in &by_thread {
        assert_eq!(
            evs.len(),
            3000,
            "thread {tid}: an entry and an exit per call"
        );
        let base = evs[0].arg(1);
        bases.push(base);
        let mut last = 0;
        for (k, e) in evs.iter().enumerate() {
            let tsc = e.time();
            assert!(tsc >= last, "thread {tid}: order kept");
            last = tsc;
            let i = (k / 2) as u64;
            if k % 2 == 0 {
                assert_eq!(e.kind, "entry");
                assert_eq!((e.arg(0), e.arg(1)), (i, base));
            } else {
                assert_eq!(e.kind, "exit");
                assert_eq!(e.arg(0), 3 * i + base);
            }
        }
    }
    bases.sort();
    assert_eq!(bases, vec![0, 1000, 2000]);
    // Chrome/Perfetto JSON: every B has its E on the same thread.
    let trace = chrome_trace(&traced.events);
    let mut depth: BTreeMap<i64, i64> = BTreeMap::new();
    for e in trace["traceEvents"].as_array().unwrap() {
        let d = depth.entry(e["tid"].as_i64().unwrap()).or_default();
        *d += if e["ph"] == "B" { 1 } else { -1 };
        assert!(*d >= 0 && *d <= 1, "entries and exits pair up");
        assert_eq!(e["name"], "traced");
    }
    assert!(depth.values().all(|&d| d == 0));
    assert_eq!(trace["traceEvents"].as_array().unwrap().len(), 9000);
    // weft events prints one line per event.
    let text = traced.text();
    assert_eq!(text.lines().count(), 9000);
    assert!(
        text.lines()
            .any(|l| l.ends_with(":traced entry arg1=7 arg2=1000")),
        "{}",
        &text[..300]
    );
    // babeltrace2 (Debian's CTF reader) reads the same events from ctf/.
    let Some(bt) = babeltrace(&traced.events) else {
        return;
    };
    assert_eq!(bt.lines().count(), 9000);
    assert_eq!(lines_with(&bt, ":traced:entry:"), 4500);
    assert_eq!(lines_with(&bt, "{ arg1 = 7, arg2 = 1000 }"), 1);
    // 2021 = 3 * 7 + 2000: call 7 of the third thread; no other call returns it.
    assert_eq!(lines_with(&bt, "{ ret = 2021 }"), 1);
}

#[test]
fn bad_trace_requests_are_one_clear_line() {
    // A loop over bad requests (not build variants), each with its message.
    for (req, want) in [
        ("traced", "write fn:PATTERN"),
        ("usdt:python:line", "matches no USDT probe"),
        ("xyz:a", "unknown kind 'xyz'"),
        ("fn:traced@arg9/s", "arguments 1 to 6"),
        ("fn:traced@arg1/x", "format '/x'"),
    ] {
        let out = run(
            weft().args(["run", "--trace", req, "--", "/bin/true"]),
            Duration::from_secs(30),
        );
        assert_clear_error(&out, 1, want, req);
    }
}

#[test]
fn tracing_starts_in_a_running_process() {
    let mut server = Server::start();
    let events = scratch("trace-attach").join("ev");
    let mut attached = attach(server.pid(), |c| {
        c.args(["--trace", "fn:work", "--args", "1", "--events-out"])
            .arg(&events)
    });
    server.send("go 800 2");
    assert_eq!(server.line(), "done 1600");
    assert!(attached.detach().success());
    assert_eq!(events_meta(&events)["dropped"], 0);
    let (mut entries, mut exits) = (0, 0);
    for e in records(&events) {
        match e.kind.as_str() {
            "entry" => entries += 1,
            _ => exits += 1,
        }
    }
    assert_eq!(
        (entries, exits),
        (1600, 1600),
        "exactly the calls made while traced"
    );
    server.send("quit");
}

/// Each function exit carries its duration: the metrics target's naps last
/// at least the milliseconds they were asked for (nanosleep), and the ten
/// 20 ms naps together last what the target's own clock says they did.
#[test]
fn exits_carry_their_duration() {
    let traced = trace_run(
        "trace-durations",
        &["--trace", "fn:nap", "--args", "1"],
        build("metrics", &O2),
        &[],
    );
    let mut asked: BTreeMap<i64, u64> = BTreeMap::new();
    let (mut naps, mut twenties, mut twenty_s) = (0, 0.0, 0.0);
    for e in traced.records() {
        if e.kind == "entry" {
            asked.insert(e.tid(), e.arg(0));
            continue;
        }
        let ms = asked.remove(&e.tid()).expect("an exit after its entry");
        let took = e.json["duration_ns"].as_u64().expect("an exit's duration") as f64 / 1e6;
        assert!(took >= ms as f64, "nap({ms}) took {took} ms");
        if ms == 20 {
            twenties += 1.0;
            twenty_s += took / 1e3;
        }
        naps += 1;
    }
    assert!(
        naps >= 10 && twenties == 10.0,
        "{naps} naps, {twenties} of 20 ms"
    );
    // The target's own clock around its nanosleep; 1% for weft's TSC rate
    // (calibrated over 20 ms), 1 µs of truncation per call below, and up
    // to 0.5 ms of entry and exit around it above.
    let own = traced.tallies()["nap20_us"] as f64 / 1e6;
    assert!(
        twenty_s >= own * 0.99 - 10e-6 && twenty_s <= own * 1.01 + 0.005,
        "the ten 20 ms naps: {twenty_s} s in the trace, {own} s by the target's clock"
    );
}

/// Threads run one after another reuse each other's thread control block
/// (so the same thread pointer): each still gets its own ring and its own
/// thread id, and no thread's events are filed under another's.
#[test]
fn threads_reusing_a_thread_pointer_keep_their_own_events() {
    let traced = trace_run(
        "trace-serial",
        &["--trace", "entry:traced", "--args", "2"],
        build("events", &O2),
        &["6", "200", "serial"],
    );
    // By thread id: the thread index (arg2 / 1000) of its events, and how many.
    let mut threads: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for e in traced.records() {
        let index = e.arg(1) / 1000;
        let t = threads.entry(e.tid()).or_insert((index, 0));
        assert_eq!(
            t.0,
            index,
            "thread {} wrote another thread's events",
            e.tid()
        );
        t.1 += 1;
    }
    assert_eq!(threads.len(), 6, "{threads:?}");
    assert!(threads.values().all(|&(_, n)| n == 200), "{threads:?}");
}
