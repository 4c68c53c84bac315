//! Event tracing: every event recorded once with exact payloads, in each
//! thread's order; the Chrome JSON pairs entries with exits; `weft events`
//! prints them all.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// Runs `bin TARGET_ARGS` under `weft run WEFT_ARGS --events-out EVENTS`,
/// checks that it succeeded, and returns the target's tallies and `weft
/// events EVENTS`.
fn traced_run(
    bin: &std::path::Path,
    weft_args: &[&str],
    events: &std::path::Path,
    target_args: &[&str],
) -> (BTreeMap<String, u64>, String) {
    let out = run(
        weft()
            .arg("run")
            .args(weft_args)
            .arg("--events-out")
            .arg(events)
            .arg("--")
            .arg(bin)
            .args(target_args),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}: {}", bin.display(), out.stderr);
    let text = run(weft().arg("events").arg(events), Duration::from_secs(30)).stdout;
    (tallies(&out.stdout), text)
}

/// What babeltrace2 (Debian's CTF reader) prints for an events directory's
/// `ctf/`, checked to have succeeded; None (said) if it is not installed.
fn babeltrace(events: &std::path::Path) -> Option<String> {
    if !have("babeltrace2") {
        skip("babeltrace2 missing (bash scripts/install-deps.sh installs it)");
        return None;
    }
    let bt = run(
        Command::new("babeltrace2").arg(events.join("ctf")),
        Duration::from_secs(60),
    );
    assert_eq!(bt.status, 0, "{}", bt.stderr);
    Some(bt.stdout)
}

/// Traces `traced` (entries with two arguments, and exits) in the events
/// target run with THREADS and CALLS; returns weft's outcome, the events
/// directory and its meta.json.
fn trace_events_target(
    name: &str,
    threads_and_calls: [&str; 2],
) -> (Finished, std::path::PathBuf, serde_json::Value) {
    let bin = build("events", &O2);
    let events = scratch(name).join("events");
    let out = run(
        weft()
            .args(["run", "--trace", "fn:traced", "--args", "2", "--events-out"])
            .arg(&events)
            .arg("--")
            .arg(&bin)
            .args(threads_and_calls),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let meta =
        serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap()).unwrap();
    (out, events, meta)
}

#[test]
fn function_entries_and_exits_with_exact_payloads() {
    let (out, events, meta) = trace_events_target("trace-fn", ["3", "1500"]);
    assert_eq!(tallies(&out.stdout)["traced"], 4500);
    assert_eq!(meta["dropped"], 0, "bursts fit a ring: nothing dropped");
    let nonstop = weft_process::cpu_flags().iter().any(|f| f == "nonstop_tsc");
    assert_eq!(meta["tsc_invariant"], nonstop, "as the kernel reports it");
    let kinds: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    // Per thread: alternate entry(i, base) / exit(3i + base), timestamps never going back.
    let mut by_thread: BTreeMap<i64, Vec<serde_json::Value>> = BTreeMap::new();
    for line in std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        by_thread
            .entry(e["tid"].as_i64().unwrap())
            .or_default()
            .push(e);
    }
    assert_eq!(by_thread.len(), 3);
    let mut bases: Vec<u64> = Vec::new();
    for (tid, evs) in &by_thread {
        assert_eq!(
            evs.len(),
            3000,
            "thread {tid}: an entry and an exit per call"
        );
        let base = evs[0]["args"][1].as_u64().unwrap();
        bases.push(base);
        let mut last = 0;
        for (k, e) in evs.iter().enumerate() {
            let tsc = e["tsc"].as_u64().unwrap();
            assert!(tsc >= last, "thread {tid}: order kept");
            last = tsc;
            let i = (k / 2) as u64;
            let kind = &kinds[e["event"].as_u64().unwrap() as usize];
            if k % 2 == 0 {
                assert_eq!(kind, "entry");
                assert_eq!(
                    (
                        e["args"][0].as_u64().unwrap(),
                        e["args"][1].as_u64().unwrap()
                    ),
                    (i, base)
                );
            } else {
                assert_eq!(kind, "exit");
                assert_eq!(e["args"][0].as_u64().unwrap(), 3 * i + base);
            }
        }
    }
    bases.sort();
    assert_eq!(bases, vec![0, 1000, 2000]);
    // Chrome/Perfetto JSON: every B has its E on the same thread.
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("trace.json")).unwrap()).unwrap();
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
    let text = run(weft().arg("events").arg(&events), Duration::from_secs(30));
    assert_eq!(text.status, 0, "{}", text.stderr);
    assert_eq!(text.stdout.lines().count(), 9000);
    assert!(
        text.stdout
            .lines()
            .any(|l| l.ends_with(":traced entry arg1=7 arg2=1000")),
        "{}",
        &text.stdout[..300]
    );
    // babeltrace2 (Debian's CTF reader) reads the same events from ctf/.
    let Some(bt) = babeltrace(&events) else {
        return;
    };
    let lines: Vec<&str> = bt.lines().collect();
    assert_eq!(lines.len(), 9000);
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains(":traced:entry:"))
            .count(),
        4500
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("{ arg1 = 7, arg2 = 1000 }"))
            .count(),
        1
    );
    // 2021 = 3 * 7 + 2000: call 7 of the third thread; no other call returns it.
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("{ ret = 2021 }"))
            .count(),
        1
    );
}

#[test]
fn discard_mode_accounts_for_every_event() {
    // Unpaced, two threads outrun the 1 ms drain: rings fill and events are
    // dropped. Every event is either recorded or counted as dropped.
    let (out, events, meta) = trace_events_target("trace-drops", ["2", "300000"]);
    let calls = tallies(&out.stdout)["traced"];
    assert_eq!(calls, 600_000);
    let dropped = meta["dropped"].as_u64().unwrap();
    let recorded = std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
        .count() as u64;
    assert!(dropped > 0, "{recorded} recorded: the rings never filled");
    assert_eq!(
        recorded + dropped,
        2 * calls,
        "an entry and an exit per call"
    );
    assert!(
        out.stderr.contains(&format!("({dropped} dropped)")),
        "{}",
        out.stderr
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
        assert_eq!(out.status, 1, "{req}");
        assert!(
            out.stderr.starts_with("weft: ") && out.stderr.contains(want),
            "{req}: {}",
            out.stderr
        );
    }
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

#[test]
fn tracing_starts_in_a_running_process() {
    let mut server = Server::start();
    let dir = scratch("trace-attach");
    let events = dir.join("ev");
    let w = weft()
        .args([
            "attach",
            "-p",
            &server.pid().to_string(),
            "--verbose",
            "--trace",
            "fn:work",
            "--args",
            "1",
            "--events-out",
        ])
        .arg(&events)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = KillOnDrop(w);
    let _stderr = wait_attached(&mut w.0);
    server.send("go 800 2");
    assert_eq!(server.line(), "done 1600");
    assert!(interrupt(&mut w.0).success());
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["dropped"], 0);
    let kinds: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    let (mut entries, mut exits) = (0, 0);
    for line in std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        match kinds[e["event"].as_u64().unwrap() as usize].as_str() {
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

variant_test!(usdt_probes_with_arguments_and_semaphores, dynamic, |v| {
    if !std::path::Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
        && !std::path::Path::new("/usr/include/sys/sdt.h").exists()
    {
        skip("sys/sdt.h missing (bash scripts/install-deps.sh installs systemtap-sdt-dev)");
        return;
    }
    let bin = build("usdt", v);
    let plain = run(
        std::process::Command::new(&bin).arg("700"),
        Duration::from_secs(30),
    );
    assert_eq!(
        tallies(&plain.stdout)["guarded_enabled"],
        0,
        "semaphore down without weft"
    );
    let dir = scratch(&format!("usdt-{}", v.name));
    let events = dir.join("ev");
    let out = run(
        weft()
            .args([
                "run",
                "--trace",
                "usdt:weft_test:tick",
                "--trace",
                "usdt:weft_test:guarded",
                "--events-out",
            ])
            .arg(&events)
            .arg("--")
            .arg(&bin)
            .arg("700"),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}: {}", v.name, out.stderr);
    let tally = tallies(&out.stdout);
    assert_eq!(
        tally["guarded_enabled"], 700,
        "{}: weft raised the semaphore",
        v.name
    );
    let text = run(weft().arg("events").arg(&events), Duration::from_secs(30)).stdout;
    let ticks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("usdt-") && l.contains(":weft_test:tick probe"))
        .collect();
    assert_eq!(ticks.len(), 700, "{}", v.name);
    for (i, l) in ticks.iter().enumerate() {
        let want = format!("arg1={i} arg2={} arg3={}", 3 * i, i % 5);
        assert!(l.ends_with(&want), "{}: {l} should end with {want}", v.name);
    }
    let guarded = text
        .lines()
        .filter(|l| l.contains(":weft_test:guarded probe"))
        .count();
    assert_eq!(guarded, 700, "{}", v.name);
});

variant_test!(weft_probe_header_sites_trace_exactly, |v| {
    let bin = build("probes", v);
    let dir = scratch(&format!("probes-{}", v.name));
    let events = dir.join("ev");
    let n = 500;
    let mut cmd = weft();
    cmd.arg("run");
    let listing = run(
        weft().args(["inspect", "usdt"]).arg(&bin),
        Duration::from_secs(30),
    );
    // The loop over variants asserted that some variant described a global
    // as symbol(%rip), so that decoding was tested: gcc -O2 does so in
    // every -O2 build (and -O0 in none), so each -O2 variant asserts it.
    if v.flags.contains(&"-O2") {
        assert!(
            listing.stdout.contains("(%rip)"),
            "{}: no global described as symbol(%rip), so that decoding went untested\n{}",
            v.name,
            listing.stdout
        );
    }
    for probe in ["step", "wide", "idle", "totals"] {
        cmd.args(["--trace", &format!("usdt:weft_probe:{probe}")]);
    }
    cmd.arg("--events-out")
        .arg(&events)
        .arg("--")
        .arg(&bin)
        .arg(n.to_string());
    let out = run(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status, 0, "{}: {}", v.name, out.stderr);
    let tally = tallies(&out.stdout);
    assert_eq!(tally["steps"], n, "{}", v.name);
    let text = run(weft().arg("events").arg(&events), Duration::from_secs(30)).stdout;
    let args_of = |probe: &str| -> Vec<Vec<i64>> {
        let tag = format!(":weft_probe:{probe} probe");
        text.lines()
            .filter(|l| l.contains(&tag))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|w| w.split_once('=').map(|(_, x)| x.parse().unwrap()))
                    .collect()
            })
            .collect()
    };
    let steps = args_of("step");
    assert_eq!(steps.len() as u64, n, "{}", v.name);
    for (i, a) in steps.iter().enumerate() {
        let i = i as i64;
        // The third argument points into a four-slot array.
        let slot = a[2] - steps[0][2];
        assert_eq!(
            (a[0], a[1], slot, a[3]),
            (i, 3 * i, 8 * (i % 4), 7),
            "{}",
            v.name
        );
    }
    let wide = args_of("wide");
    assert_eq!(wide.len() as u64, n, "{}", v.name);
    for (i, a) in wide.iter().enumerate() {
        let i = i as i64;
        let mut want: Vec<i64> = (0..11).map(|k| i + k).collect();
        want.push(-i);
        assert_eq!(a, &want, "{}: all twelve arguments", v.name);
    }
    assert_eq!(args_of("idle").len() as u64, tally["idles"], "{}", v.name);
    let totals = args_of("totals");
    assert_eq!(totals.len() as u64, n, "{}", v.name);
    for (i, a) in totals.iter().enumerate() {
        let i = i as i64;
        assert_eq!(a, &[i * (i + 1) / 2, 2 * i], "{}: globals", v.name);
    }
});

#[test]
fn libstdcxx_throw_and_catch_fire_once_each() {
    let bin = build("throws", &O2);
    let dir = scratch("usdt-throw");
    let events = dir.join("ev");
    let (tally, text) = traced_run(
        &bin,
        &[
            "--trace",
            "usdt:libstdcxx:throw",
            "--trace",
            "usdt:libstdcxx:catch",
        ],
        &events,
        &["300"],
    );
    assert_eq!((tally["throws"], tally["caught"]), (100, 100));
    let count = |probe: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(":libstdcxx:{probe} probe")))
            .count() as u64
    };
    assert_eq!(count("throw"), tally["throws"], "{text}");
    assert_eq!(count("catch"), tally["caught"], "{text}");
}

/// Debian's python3.11 fires `function__entry` only where a frame starts
/// in a fresh evaluation loop, which for Python code means a generator
/// function's call (cpython gh-98894: ordinary calls lost the probe in
/// 3.11), and `function__return` at every return and yield. The script
/// tallies its own calls of both kinds.
#[test]
fn python_function_probes_carry_file_and_function_names() {
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        skip("Debian's python3 missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    let script = "\
calls = {'gen': 0, 'plain': 0}
def gen():
    yield 1
def plain():
    calls['plain'] += 1
for i in range(37):
    g = gen()
    calls['gen'] += 1
for i in range(53):
    plain()
print('tally gen', calls['gen'])
print('tally plain', calls['plain'])
";
    let dir = scratch("usdt-python");
    let events = dir.join("ev");
    let (tally, text) = traced_run(
        std::path::Path::new(python),
        &[
            "--trace",
            "usdt:python:function__entry@arg1/s,arg2/s",
            "--trace",
            "usdt:python:function__return@arg1/s,arg2/s",
        ],
        &events,
        &["-c", script],
    );
    assert_eq!((tally["gen"], tally["plain"]), (37, 53));
    let named = |probe: &str, function: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(":python:{probe} probe")))
            .filter(|l| l.contains(&format!("arg1=\"<string>\" arg2=\"{function}\" ")))
            .count() as u64
    };
    assert_eq!(named("function__entry", "gen"), tally["gen"], "{text}");
    assert_eq!(named("function__return", "plain"), tally["plain"]);
    // The same strings in the Chrome trace, as JSON strings.
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("trace.json")).unwrap()).unwrap();
    let gens = json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "python:function__entry" && e["args"]["arg2"] == "gen")
        .filter(|e| e["args"]["arg1"] == "<string>" && e["args"]["arg3"].is_i64())
        .count() as u64;
    assert_eq!(gens, tally["gen"]);
    // babeltrace2 reads the strings from the CTF output.
    if let Some(text) = babeltrace(&events) {
        let read = text
            .lines()
            .filter(|l| l.contains("function__entry") && l.contains("arg2 = { text = \"gen\" }"))
            .count() as u64;
        assert_eq!(read, tally["gen"]);
    }
}

// `@arg1/s` records a string argument's text: cut at --string-max bytes
// and marked, empty, or null, each as often as the target passed it.
variant_test!(function_string_arguments_are_recorded_as_text, |v| {
    let bin = build("events", v);
    let events = scratch(&format!("trace-strings-{}", v.name)).join("events");
    let (tally, text) = traced_run(
        &bin,
        &["--trace", "entry:labelled@arg1/s", "--string-max", "16"],
        &events,
        &["1", "10"],
    );
    let shown = |value: &str| {
        text.lines()
            .filter(|l| l.contains(":labelled entry ") && l.contains(&format!("arg1={value} ")))
            .count() as u64
    };
    assert_eq!(
        shown("\"alpha\""),
        tally["label_word"],
        "{}: {text}",
        v.name
    );
    assert_eq!(shown("\"\""), tally["label_empty"], "{}", v.name);
    assert_eq!(
        shown("\"0123456789abcdef\"..."),
        tally["label_long"],
        "{}",
        v.name
    );
    assert_eq!(shown("(null)"), tally["label_null"], "{}", v.name);
    assert_eq!(tally["label_null"], 10);
});

/// Checks an events directory of the events target: in each thread the
/// entries of `traced` carry consecutive first arguments and each exit the
/// matching result. Returns the events and, by thread, the last entry's
/// first argument.
fn check_traced_sequences(dir: &std::path::Path) -> (u64, BTreeMap<i64, i64>) {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("meta.json")).unwrap()).unwrap();
    let kinds: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    // By thread: the last entry's arguments.
    let mut last: BTreeMap<i64, (i64, i64)> = BTreeMap::new();
    let mut events = 0;
    for line in std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let tid = e["tid"].as_i64().unwrap();
        let args: Vec<i64> = e["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as i64)
            .collect();
        events += 1;
        match kinds[e["event"].as_u64().unwrap() as usize].as_str() {
            "entry" => {
                if let Some((a, _)) = last.get(&tid) {
                    assert_eq!(args[0], a + 1, "{}: consecutive calls", dir.display());
                }
                last.insert(tid, (args[0], args[1]));
            }
            _ => {
                if let Some((a, b)) = last.get(&tid) {
                    assert_eq!(args[0], 3 * a + b, "{}: the call's result", dir.display());
                }
            }
        }
    }
    (events, last.into_iter().map(|(t, (a, _))| (t, a)).collect())
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
    std::thread::sleep(Duration::from_millis(300));
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
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap()).unwrap();
    assert_eq!(meta["ring_mode"], "flight");
    assert_eq!(kept + meta["dropped"].as_u64().unwrap(), 4 * calls as u64);
    // A 64 KiB ring keeps about 2340 records of 32 (entry) and 24 (exit) bytes.
    assert!(kept > 2 * 2300 && kept <= 2 * 2341, "{kept}");
}

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
    let bin = build("rich", v);
    let events = scratch(&format!("rich-{}", v.name)).join("events");
    let (tally, text) = traced_run(
        &bin,
        &["--trace", "event:rich:*", "--string-max", "16"],
        &events,
        &["3", "500"],
    );
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
    if let Some(text) = babeltrace(&events) {
        let read = text
            .lines()
            .filter(|l| l.contains("rich:request") && l.contains("label = {"))
            .count() as u64;
        assert_eq!(read, tally["request"], "{}", v.name);
    }
});

/// A rich event site starts recording when weft attaches to the running
/// program and stops when weft detaches; the program carries on.
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
    let w = weft()
        .args(["attach", "-p", &target.0.id().to_string(), "--verbose"])
        .args(["--trace", "event:rich:request", "--events-out"])
        .arg(&events)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut w = KillOnDrop(w);
    let err = wait_attached(&mut w.0);
    writeln!(to_target, "go 300").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 800");
    assert!(interrupt(&mut w.0).success());
    let rest: Vec<String> = err.try_iter().collect();
    assert!(
        rest.iter().any(|l| l.contains("stays mapped")),
        "weft says its memory stays: {rest:?}"
    );
    // Detached: the sites are off, and the program runs on.
    writeln!(to_target, "go 200").unwrap();
    assert_eq!(from_target.next().unwrap().unwrap(), "done 1200");
    writeln!(to_target, "quit").unwrap();
    let status = target.0.wait().unwrap();
    assert!(status.success());
    let text = run(weft().arg("events").arg(&events), Duration::from_secs(30)).stdout;
    let requests = text
        .lines()
        .filter(|l| l.contains(":rich:request probe"))
        .count();
    assert_eq!(
        requests, 600,
        "exactly the events of the batch run while attached"
    );
}

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
        let events = scratch(&format!("monotonic-{target}")).join("events");
        let before = monotonic_now();
        let out = run(
            weft()
                .args([
                    "run",
                    "--clock",
                    "monotonic",
                    "--trace",
                    trace,
                    "--events-out",
                ])
                .arg(&events)
                .arg("--")
                .arg(&bin)
                .args(args),
            Duration::from_secs(60),
        );
        let after = monotonic_now();
        assert_eq!(out.status, 0, "{target}: {}", out.stderr);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap())
                .unwrap();
        assert_eq!(
            (meta["clock"].as_str(), meta["ticks_per_ns"].as_f64()),
            (Some("monotonic"), Some(1.0))
        );
        let mut last: BTreeMap<i64, u64> = BTreeMap::new();
        let mut count = 0;
        for line in std::fs::read_to_string(events.join("events.jsonl"))
            .unwrap()
            .lines()
        {
            let e: serde_json::Value = serde_json::from_str(line).unwrap();
            let t = e["tsc"].as_u64().unwrap();
            assert!(
                before <= t && t <= after,
                "{target}: {before} <= {t} <= {after}"
            );
            let previous = last.insert(e["tid"].as_i64().unwrap(), t).unwrap_or(0);
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

/// Each function exit carries its duration: the metrics target's naps last
/// at least the milliseconds they were asked for (nanosleep), and not much
/// more.
#[test]
fn exits_carry_their_duration() {
    let bin = build("metrics", &O2);
    let events = scratch("trace-durations").join("events");
    let out = run(
        weft()
            .args(["run", "--trace", "fn:nap", "--args", "1", "--events-out"])
            .arg(&events)
            .arg("--")
            .arg(&bin),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap()).unwrap();
    let kinds: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    let mut asked: BTreeMap<i64, i64> = BTreeMap::new();
    let mut naps = 0;
    for line in std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let tid = e["tid"].as_i64().unwrap();
        if kinds[e["event"].as_u64().unwrap() as usize] == "entry" {
            asked.insert(tid, e["args"][0].as_i64().unwrap());
            continue;
        }
        let ms = asked.remove(&tid).expect("an exit after its entry");
        let took = e["duration_ns"].as_u64().expect("an exit's duration") as f64 / 1e6;
        assert!(
            took >= ms as f64 && took < ms as f64 * 1.5 + 5.0,
            "nap({ms}) took {took} ms"
        );
        naps += 1;
    }
    assert!(naps >= 10, "{naps} naps");
}

/// Threads run one after another reuse each other's thread control block
/// (so the same thread pointer): each still gets its own ring and its own
/// thread id, and no thread's events are filed under another's.
#[test]
fn threads_reusing_a_thread_pointer_keep_their_own_events() {
    let bin = build("events", &O2);
    let events = scratch("trace-serial").join("events");
    let out = run(
        weft()
            .args([
                "run",
                "--trace",
                "entry:traced",
                "--args",
                "2",
                "--events-out",
            ])
            .arg(&events)
            .arg("--")
            .arg(&bin)
            .args(["6", "200", "serial"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    // By thread id: the thread index (arg2 / 1000) of its events, and how many.
    let mut threads: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
    for line in std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let index = e["args"][1].as_u64().unwrap() / 1000;
        let t = threads
            .entry(e["tid"].as_i64().unwrap())
            .or_insert((index, 0));
        assert_eq!(
            t.0, index,
            "thread {} wrote another thread's events",
            e["tid"]
        );
        t.1 += 1;
    }
    assert_eq!(threads.len(), 6, "{threads:?}");
    assert!(threads.values().all(|&(_, n)| n == 200), "{threads:?}");
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
        let events = scratch(&format!("rich-mode-{mode}")).join("events");
        let (tally, text) = traced_run(
            &bin,
            &[
                "--trace",
                "event:rich:request",
                "--ring-mode",
                mode,
                "--ring-size",
                "64K",
            ],
            &events,
            &["2", "100000"],
        );
        assert_eq!(tally["request"], 200_000);
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(events.join("meta.json")).unwrap())
                .unwrap();
        let lost = meta["dropped"].as_u64().unwrap();
        let kept = text
            .lines()
            .filter(|l| l.contains(":rich:request probe"))
            .count() as u64;
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
