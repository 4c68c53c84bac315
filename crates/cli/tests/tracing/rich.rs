//! Rich events (`<weft/event.h>`) written by the program: integers,
//! strings and byte arrays exact in every variant, and sites switched on
//! and off by attaching and detaching.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// The expected text of a `rich:request` event's values for thread `k`'s
/// round `i` (see tests/targets/rich.c), with --string-max 16.
fn rich_request_values(k: u64, i: u64) -> String {
    let label = match i % 4 {
        0 => "\"get\"".to_string(),
        1 => "\"\"".to_string(),
        2 => "\"a-label-much-lon\"...".to_string(),
        _ => "(null)".to_string(),
    };
    let len = i % 24;
    let payload: String = (0..len.min(16))
        .map(|j| format!("{:02x}", if j % 3 == 0 { 0 } else { (j + k) as u8 }))
        .collect();
    let cut = if len > 16 { "..." } else { "" };
    format!(
        "index={} label={label} payload=0x{payload}{cut}",
        k * 1_000_000 + i
    )
}

// Rich events (weft/event.h) written by the program into the rings: every
// event once, with its integers, strings (cut, empty, null) and byte
// arrays (with NULs) exact, in each thread's order.
variant_test!(rich_events_carry_integers_strings_and_bytes_exactly, |v| {
    let traced = trace_run(
        &format!("rich-{}", v.name),
        &["--trace", "event:rich:*", "--string-max", "16"],
        build("rich", v),
        &["3", "500"],
    );
    let (tally, text) = (traced.tallies(), traced.text());
    assert_eq!((tally["request"], tally["done"]), (1500, 3));
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut requests, mut done) = (0, 0);
    for line in text.lines() {
        if let Some((_, values)) = line.split_once(":rich:request probe ") {
            let index: u64 = values
                .strip_prefix("index=")
                .and_then(|r| r.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{}: {line}", v.name));
            let (k, i) = (index / 1_000_000, index % 1_000_000);
            assert_eq!(values, rich_request_values(k, i), "{}", v.name);
            let expected = next.entry(k).or_insert(0);
            assert_eq!(i, *expected, "{}: thread {k} in order", v.name);
            *expected += 1;
            requests += 1;
        } else if line.contains(":rich:done probe ") {
            assert!(line.ends_with(" count=500"), "{}: {line}", v.name);
            done += 1;
        }
    }
    assert_eq!(
        (requests, done),
        (tally["request"], tally["done"]),
        "{}",
        v.name
    );
    if let Some(text) = babeltrace(&traced.events) {
        let read = lines_with_all(&text, &["rich:request", "label = {"]) as u64;
        assert_eq!(read, tally["request"], "{}", v.name);
    }
});

/// A rich event site starts recording when weft attaches to the running
/// program and stops when weft detaches; the program carries on, and the
/// memory weft had to leave is taken out by the next attach.
#[test]
fn rich_events_start_and_stop_with_attach() {
    use std::io::{BufRead, BufReader, Write};
    let bin = build("rich", &O2);
    let events = scratch("rich-attach").join("events");
    let mut target = KillOnDrop(
        Command::new(&bin)
            .args(["2", "0", "serve"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut to_target = target.0.stdin.take().unwrap();
    let mut from_target = BufReader::new(target.0.stdout.take().unwrap()).lines();
    writeln!(to_target, "go 100").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 200");
    let mut attached = attach(target.0.id(), |c| {
        c.args(["--trace", "event:rich:request", "--events-out"])
            .arg(&events)
    });
    writeln!(to_target, "go 300").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 800");
    assert!(attached.detach().success());
    let rest: Vec<String> = attached.stderr.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("stays mapped")),
        "weft says its memory stays: {rest:?}"
    );
    // Detached: the sites are off, and the program runs on.
    writeln!(to_target, "go 200").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 1200");
    // The next attach takes out the memory the first one left.
    let maps = || std::fs::read_to_string(format!("/proc/{}/maps", target.0.id())).unwrap();
    assert!(maps().contains("weft"), "{}", maps());
    let again = run(
        weft()
            .args(["attach", "-p", &target.0.id().to_string()])
            .args(["--duration", "100ms", "--count", "body"]),
        Duration::from_secs(60),
    );
    assert_eq!(again.status, 0, "{}", again.stderr);
    assert!(
        !maps().contains("weft"),
        "weft's memory is still there:\n{}",
        maps()
    );
    writeln!(to_target, "go 100").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 1400");
    writeln!(to_target, "quit").unwrap();
    let status = target.0.wait().unwrap();
    assert!(status.success());
    assert_eq!(
        lines_with(&events_text(&events), ":rich:request probe"),
        600,
        "exactly the events of the batch run while attached"
    );
}
