//! Reading traces back: `weft events` streams the events in time order
//! with memory that does not grow with the trace, printing the same lines
//! from `events.jsonl` and from the CTF streams; an events directory whose
//! files are damaged or disagree (`meta.json`, `ctf/metadata`, the
//! streams, `events.jsonl`) is refused in one line naming the file and
//! what is wrong, before anything is printed.

use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// `weft events EVENTS` with its address space limited to `limit_kib`
/// KiB (`ulimit -v`): an allocation beyond it fails and weft aborts. (The
/// kernel's peak-memory count of a child, ru_maxrss, also counts the test
/// process's own memory when the child was spawned with vfork, so it
/// cannot tell weft's peak.)
fn weft_events_within(events: &Path, limit_kib: u64) -> Finished {
    run(
        Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v {limit_kib} && exec \"$0\" events \"$1\""
            ))
            .arg(env!("CARGO_BIN_EXE_weft"))
            .arg(events),
        Duration::from_secs(120),
    )
}

/// `weft events` on 300000 events holds none of them: it runs in a 32 MiB
/// address space (it needs about 15), where holding them took over 60 MB
/// (about 200 bytes an event with its text: the weft before this change
/// aborted there), read from `events.jsonl` or from the
/// streams, and both print the same lines, one per event, in time order.
#[test]
fn weft_events_streams_in_bounded_memory() {
    let traced = trace_run(
        "events-streamed",
        &["--trace", "fn:traced", "--ring-mode", "block"],
        build("events", &O2),
        &["2", "75000"],
    );
    let events = &traced.events;
    let mut printed = Vec::new();
    for from in ["events.jsonl", "ctf"] {
        if from == "ctf" {
            // As a weft killed before the end leaves it: read the streams.
            std::fs::remove_file(events.join("events.jsonl")).unwrap();
        }
        let out = weft_events_within(events, 32 * 1024);
        assert_eq!(out.status, 0, "{from}: {}", out.stderr);
        assert!(out.stderr.is_empty(), "{from}: {}", out.stderr);
        printed.push(out.stdout);
    }
    assert!(printed[0] == printed[1], "the same lines from either");
    let text = &printed[0];
    assert!(text.len() > 15_000_000, "{} bytes printed", text.len());
    assert_eq!(text.lines().count(), 300_000);
    // Time order, across both threads; each thread's calls in order, each
    // exit paired with its entry.
    let mut last_time = 0.0;
    let mut threads: std::collections::BTreeMap<&str, u64> = Default::default();
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let time: f64 = words[0].parse().unwrap();
        assert!(time >= last_time, "{line}");
        last_time = time;
        let calls = threads.entry(words[1]).or_default();
        match words[3] {
            "entry" => assert_eq!(words[4], format!("arg1={calls}"), "{line}"),
            _ => {
                assert!(words[5].starts_with("duration_ns="), "{line}");
                *calls += 1;
            }
        }
    }
    assert_eq!(threads.values().collect::<Vec<_>>(), [&75_000, &75_000]);
}

/// `weft events DIR`, checked to fail with one clear line naming `file`
/// and saying `what`, printing no event.
fn refused(events: &Path, file: &str, what: &str) -> String {
    let out = run(weft().arg("events").arg(events), Duration::from_secs(60));
    assert_clear_error(&out, 1, what, file);
    let path = events.join(file);
    assert!(
        out.stderr
            .starts_with(&format!("weft: {}: ", path.display())),
        "{file}: {}",
        out.stderr
    );
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stdout.is_empty(), "{file}: printed {}", out.stdout);
    out.stderr
}

#[test]
fn damaged_or_mismatched_files_are_refused() {
    let traced = trace_run(
        "events-inconsistent",
        &["--trace", "fn:traced"],
        build("events", &O2),
        &["1", "10"],
    );
    let events = &traced.events;
    let full = events_text(events);
    assert_eq!(full.lines().count(), 20);
    let stream = format!("ctf/stream_{}", records(events)[0].tid());
    let meta_path = events.join("meta.json");
    let metadata = events.join("ctf/metadata");
    let good_meta = std::fs::read_to_string(&meta_path).unwrap();
    let good_metadata = std::fs::read_to_string(&metadata).unwrap();
    let meta: serde_json::Value = serde_json::from_str(&good_meta).unwrap();
    let put_meta = |m: &serde_json::Value| std::fs::write(&meta_path, m.to_string()).unwrap();

    // ctf/metadata cut short: refused, and --repair writes it again.
    std::fs::write(&metadata, &good_metadata[..good_metadata.len() - 30]).unwrap();
    let lines = good_metadata[..good_metadata.rfind("event {").unwrap()]
        .lines()
        .count();
    refused(
        events,
        "ctf/metadata",
        &format!(
            "ends inside the `event` block begun at line {} (cut short?); `weft events --repair \
             {}` writes it again from meta.json\n",
            lines + 1,
            events.display()
        ),
    );
    let repaired = run(
        weft().args(["events", "--repair"]).arg(events),
        Duration::from_secs(60),
    );
    assert_eq!(repaired.status, 0, "{}", repaired.stderr);
    assert!(
        repaired.stderr.contains(&format!(
            "weft: {}: written again from meta.json (it ends inside the `event` block",
            metadata.display()
        )),
        "{}",
        repaired.stderr
    );
    assert_eq!(repaired.stdout, full);
    assert_eq!(std::fs::read_to_string(&metadata).unwrap(), good_metadata);
    if let Some(bt) = babeltrace(events) {
        assert_eq!(bt.lines().count(), 20);
    }
    // Not CTF at all.
    std::fs::write(&metadata, "event { name = \"x\"; };\n").unwrap();
    refused(
        events,
        "ctf/metadata",
        "does not start with the CTF 1.8 mark `/* CTF 1.8 */`",
    );
    std::fs::write(&metadata, &good_metadata).unwrap();

    // meta.json that lists an event id fewer than its other lists.
    let mut m = meta.clone();
    m["events"].as_array_mut().unwrap().pop();
    put_meta(&m);
    refused(
        events,
        "meta.json",
        "\"strings\" describes 2 event ids, \"events\" only 1; weft writes it whole and in step \
         with the streams, so it was changed or comes from another trace: put back the one weft \
         wrote, or take the trace again",
    );
    // ... and in every list: then ctf/metadata and the events disagree with it.
    for list in ["strings", "binary", "names"] {
        m[list].as_array_mut().unwrap().pop();
    }
    put_meta(&m);
    refused(
        events,
        "ctf/metadata",
        &format!(
            "declares event id 1 (line {}), which {} does not describe: it describes 1 event \
             id(s); the files are not of the same trace",
            good_metadata[..good_metadata.rfind("event {").unwrap()]
                .lines()
                .count()
                + 1,
            meta_path.display()
        ),
    );
    std::fs::write(
        &metadata,
        good_metadata
            .replacen("event {", "evnt {", 2)
            .replacen("evnt {", "event {", 1),
    )
    .unwrap();
    // Read from the streams: a record of an id meta.json does not describe
    // makes its packet corrupt, as a bad size does; the packets before it
    // are printed (exits are id 1: only entries can be).
    std::fs::rename(events.join("events.jsonl"), events.join("kept.jsonl")).unwrap();
    let out = run(weft().arg("events").arg(events), Duration::from_secs(60));
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(out.stdout.lines().count() < 20, "{}", out.stdout);
    assert!(
        out.stdout.lines().all(|l| l.contains(":traced entry ")),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.starts_with(&format!(
            "weft: {}: unreadable from byte ",
            events.join(&stream).display()
        )) && out
            .stderr
            .contains("has event id 1, which meta.json does not describe (it describes 1)\n"),
        "{}",
        out.stderr
    );
    std::fs::rename(events.join("kept.jsonl"), events.join("events.jsonl")).unwrap();
    refused(
        events,
        "events.jsonl",
        &format!(
            "events.jsonl: line 2 has event id 1, but {} describes 1 event id(s) only",
            meta_path.display()
        ),
    );
    std::fs::write(&metadata, &good_metadata).unwrap();

    // An event of a kind weft does not write; a clock that is not one.
    let mut m = meta.clone();
    m["events"][1][2] = "leave".into();
    put_meta(&m);
    refused(
        events,
        "meta.json",
        "event 1 is of kind \"leave\", not entry, exit, probe, syscall or sysret",
    );
    let mut m = meta.clone();
    m["ticks_per_ns"] = 0.into();
    put_meta(&m);
    refused(
        events,
        "meta.json",
        "ticks_per_ns is 0, not a positive clock rate",
    );
    // ctf/metadata's clock at another rate than meta.json's.
    let mut m = meta.clone();
    m["ticks_per_ns"] = (meta["ticks_per_ns"].as_f64().unwrap() * 2.0).into();
    put_meta(&m);
    refused(events, "ctf/metadata", "its clock ticks at");

    // Back as weft wrote them: read as before.
    std::fs::write(&meta_path, &good_meta).unwrap();
    assert_eq!(events_text(events), full);
}
