//! Libraries loaded with dlopen after weft started: instrumented before
//! their first call, in `run` and in `attach`.

use crate::support::*;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A library loaded with dlopen after weft started: its `WEFT_EVENT` site,
/// asked for before it existed, is enabled before its first call, so every
/// call's event is recorded with its values.
#[test]
fn rich_event_sites_of_a_dlopened_library_are_traced() {
    let bin = build("dlopen", &O2);
    let lib = build_shared("plugin", &O2);
    let traced = trace_run(
        "dlopen-rich",
        &["--trace", "event:plugin:work"],
        &bin,
        &[lib.to_str().unwrap(), "700"],
    );
    assert!(
        traced
            .out
            .stderr
            .contains("sites in libraries loaded later will be traced"),
        "{}",
        traced.out.stderr
    );
    assert_eq!(traced.tallies()["plugin_work"], 700);
    let text = traced.text();
    let values: Vec<(i64, i64)> = text
        .lines()
        .filter_map(|l| l.split_once(":plugin:work probe x="))
        .map(|(_, rest)| {
            let (x, r) = rest.split_once(" result=").expect("two values");
            (x.parse().unwrap(), r.trim().parse().unwrap())
        })
        .collect();
    assert_eq!(values.len(), 700, "{text}");
    for (i, (x, r)) in values.iter().enumerate() {
        assert_eq!((*x, *r), (i as i64, 5 * i as i64 + 1));
    }
}

variant_test!(run_counts_calls_into_a_dlopened_library, dynamic, |v| {
    let bin = build("dlopen", v);
    let lib = build_shared("plugin", v);
    let counted = count_run(
        &format!("dlopen-run-{}", v.name),
        &["--count", "libplugin.so:plugin_work"],
        &bin,
        &[lib.to_str().unwrap(), "1500"],
        Duration::from_secs(60),
    );
    let out = &counted.out;
    assert_eq!(out.status, 0, "{}: {}", v.name, out.stderr);
    assert!(
        out.stderr
            .contains("will be instrumented when the library is loaded"),
        "{}",
        out.stderr
    );
    let want = tallies(&out.stdout)["plugin_work"];
    assert_eq!(want, 1500);
    assert_eq!(counted.count("plugin_work", "entry"), want, "{}", v.name);
});

#[test]
fn attach_counts_calls_into_a_library_loaded_while_attached() {
    let bin = build("dlopen", &O2);
    let lib = build_shared("plugin", &O2);
    let mut target = Command::new(&bin)
        .arg(&lib)
        .arg("700")
        .arg("wait")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = target.stdin.take().unwrap();
    let stdout = target.stdout.take().unwrap();
    let target = KillOnDrop(target);
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    assert_eq!(
        lines.recv_timeout(Duration::from_secs(30)).unwrap(),
        "ready"
    );
    let dir = scratch("dlopen-attach");
    let json = dir.join("counts.json");
    let mut attached = attach(target.0.id(), |c| {
        c.args(["--count", "libplugin.so:plugin_work"])
            .args(["--format", "json", "--output"])
            .arg(&json)
    });
    writeln!(stdin, "go").unwrap();
    stdin.flush().unwrap();
    let mut tally = None;
    while tally.is_none() {
        let l = lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the target finishes its calls");
        tally = l
            .strip_prefix("tally plugin_work ")
            .and_then(|n| n.parse::<u64>().ok());
    }
    attached.detach();
    assert_eq!(
        count_of(&read_counts(&json), "plugin_work", "entry"),
        tally.unwrap()
    );
    writeln!(stdin, "quit").unwrap();
}

/// A pattern for a library the program never loads is said once at the
/// start (however many probes it stands for) and once at the end, where
/// its zero would otherwise look like a measurement.
#[test]
fn a_library_never_loaded_is_said_once_at_start_and_at_the_end() {
    let bin = build("cputime", &O2);
    let out = run(
        weft()
            .args([
                "run",
                "--count",
                "libnever.so:nothing",
                "--metric",
                "wall_time:fn=libnever.so:nothing",
                "--",
            ])
            .arg(&bin)
            .arg("10"),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let said = |what: &str| out.stderr.lines().filter(|l| l.contains(what)).count();
    assert_eq!(
        said("'libnever.so:nothing' matches no loaded module yet"),
        1,
        "{}",
        out.stderr
    );
    assert_eq!(
        said("'libnever.so:nothing' was never instrumented"),
        1,
        "{}",
        out.stderr
    );
    // Nothing near its name was loaded: the message lists what was, the
    // C library among them.
    assert_eq!(said("(loaded: "), 1, "{}", out.stderr);
    assert!(out.stderr.contains("libc.so.6"), "{}", out.stderr);
}
