//! `weft syscalls replay`: a recorded workload's calls made again in a
//! sandbox give the recorded results and read the recorded bytes, wait
//! for every dependency, and a sandbox that lacks a file is one clear
//! line.

use crate::support::*;
use std::time::Duration;

/// Records `syscalls_deps` working in `work` into `out`.
fn record(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let target = build("syscalls_deps", &O2);
    let dir = scratch(name);
    let work = dir.join("work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap();
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let recorded = run(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&target)
            .arg(&work),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.status, 0, "weft: {}", recorded.stderr);
    assert_eq!(recorded.stdout, "lost\ndone\n");
    (dir, out)
}

/// The three processes of `syscalls_deps` (a fork, a fork that execs)
/// replayed, fine and coarse: every call made again gives the recorded
/// result (the record's own, which `recorded_calls_are_the_ones_strace_sees`
/// holds to strace's) and reads the recorded bytes (the file through the
/// shared description at the child's offset, "piped" from the pipe,
/// "sock" from the socket pair); every dependency `deps` reports was
/// waited for: the later call began after the earlier one returned, on
/// the one clock all replay processes read.
#[test]
fn a_replay_gives_the_recorded_results_and_keeps_every_dependency() {
    let (_, out) = record("syscalls-replay");
    for mode in ["--fine", "--coarse"] {
        let replayed = run(
            weft()
                .args(["syscalls", "replay", "--json", mode])
                .arg(&out),
            Duration::from_secs(60),
        );
        assert_eq!(
            replayed.status, 0,
            "{mode}: {}\n{}",
            replayed.stderr, replayed.stdout
        );
        let r: serde_json::Value = serde_json::from_str(replayed.stdout.trim()).unwrap();
        assert_eq!(r["differ"], serde_json::json!([]), "{mode}");
        assert!(r["stalled"].is_null(), "{mode}: {}", r["stalled"]);
        let deps = run(
            weft().args(["syscalls", "deps", "--json", mode]).arg(&out),
            Duration::from_secs(60),
        );
        let deps: serde_json::Value = serde_json::from_str(deps.stdout.trim()).unwrap();
        let calls = r["calls"].as_array().unwrap();
        let edges = deps["edges"].as_array().unwrap();
        assert!(edges.len() >= 5, "{mode}: {edges:?}");
        for e in edges {
            let (from, to) = (
                e["from"].as_u64().unwrap() as usize,
                e["to"].as_u64().unwrap() as usize,
            );
            let (a, b) = (&calls[from], &calls[to]);
            assert!(
                a["outcome"] != "not reached" && b["outcome"] != "not reached",
                "{mode}: {e}"
            );
            assert!(
                b["began_s"].as_f64().unwrap() >= a["ended_s"].as_f64().unwrap(),
                "{mode}: call {to} began before call {from} ended: {a} {b}"
            );
        }
        // The reads of the file, the pipe and the socket were made, with
        // the recorded bytes (a read of other bytes is in "differ").
        let shown = run(
            weft().args(["syscalls", "show", "--json"]).arg(&out),
            Duration::from_secs(60),
        );
        let reads = shown
            .stdout
            .lines()
            .zip(calls)
            .filter(|(l, c)| {
                l.contains("\"name\":\"read\"")
                    && l.contains("\"filled\"")
                    && c["outcome"] == "made"
            })
            .count();
        assert!(reads >= 5, "{mode}: {reads} reads with data made again");
    }
}

/// A sandbox given with --root must hold the files the workload found in
/// place: an empty one is refused before anything runs, in one line that
/// names the file; a directory that is no trace is one line too.
#[test]
fn a_sandbox_without_the_workloads_files_is_one_clear_line() {
    let (dir, out) = record("syscalls-replay-root");
    let empty = dir.join("empty");
    let _ = std::fs::remove_dir_all(&empty);
    std::fs::create_dir_all(&empty).unwrap();
    let refused = run(
        weft()
            .args(["syscalls", "replay", "--root"])
            .arg(&empty)
            .arg(&out),
        Duration::from_secs(60),
    );
    assert_clear_error(
        &refused,
        1,
        &format!("the sandbox {} lacks ", empty.display()),
        "an empty sandbox",
    );
    assert_eq!(refused.stderr.lines().count(), 1, "{}", refused.stderr);
    assert!(refused.stdout.is_empty(), "nothing ran: {}", refused.stdout);
    let nothing = run(
        weft().args(["syscalls", "replay"]).arg(&empty),
        Duration::from_secs(60),
    );
    assert_eq!(nothing.status, 1, "{}", nothing.stderr);
    assert_eq!(nothing.stderr.lines().count(), 1, "{}", nothing.stderr);
    assert!(!nothing.stderr.contains("panicked"), "{}", nothing.stderr);
}
