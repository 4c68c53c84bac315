//! Whole workloads: `weft run` follows fork and exec, `weft attach
//! --follow` the processes created while attached. Each process (and each
//! image after exec) is its own part of the report, checked against the
//! programs' own tallies and against bpftrace's per-process counts.

use crate::support::*;
use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

/// The parts of a JSON report: (pid, command, calls of `function` at its
/// entry, or None when the part has no such row).
fn parts(doc: &serde_json::Value, function: &str) -> Vec<(i64, String, Option<u64>)> {
    doc["processes"]
        .as_array()
        .unwrap_or_else(|| panic!("a part per process in {doc}"))
        .iter()
        .map(|p| {
            // A part with metrics and no counts has no "counts".
            let calls = p["counts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["function"] == function && c["point"] == "entry")
                .map(|c| c["calls"].as_u64().unwrap());
            (
                p["pid"].as_i64().unwrap(),
                p["command"].as_str().unwrap().to_string(),
                calls,
            )
        })
        .collect()
}

variant_test!(fork_children_and_exec_images_are_measured_apart, |v| {
    // forkexec: main calls work 500 times, forks a child that calls it 300
    // times, then execs sh. Each image is a part of its own.
    let bin = build("forkexec", v);
    let plain = run(
        Command::new(&bin).args(["500", "300"]),
        Duration::from_secs(30),
    );
    let counted = count_run(
        &format!("workload-forkexec-{}", v.name),
        &["--count", "work", "--metric", "calls:fn=work"],
        &bin,
        &["500", "300"],
        Duration::from_secs(60),
    );
    let out = &counted.out;
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "output changed under weft");
    let doc = read_json(&counted.json);
    let parts = parts(&doc, "work");
    // The child's own tally counts the parent's calls before the fork too.
    let child_tally: u64 = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("child tally work ")?.parse().ok())
        .expect("the child's tally");
    let parent_tally = tallies(&out.stdout)["work"];
    assert_eq!(parent_tally, 500);
    assert_eq!(parts.len(), 3, "{doc}");
    // Commands are the kernel's (at most 15 bytes of the file name).
    let (root, ref first, parent_calls) = parts[0];
    assert!(first.starts_with("forkexec"), "{doc}");
    assert_eq!(parent_calls, Some(parent_tally));
    let (child, ref command, child_calls) = parts[1];
    assert_ne!(child, root);
    assert_eq!(command, first);
    assert_eq!(child_calls, Some(child_tally - parent_tally), "{doc}");
    // The image exec'd last: the same pid, another program, no `work`.
    let (pid, ref command, calls) = parts[2];
    assert_eq!((pid, command.as_str(), calls), (root, "sh", None), "{doc}");
    // Metrics per part, and the total.
    let processes = doc["processes"].as_array().unwrap();
    assert_eq!(processes[0]["metrics"][0]["value"], 500.0);
    assert_eq!(processes[1]["metrics"][0]["value"], 300.0);
    assert_eq!(counted.count("work", "entry"), child_tally);
    assert_eq!(doc["metrics"][0]["value"], child_tally as f64);
});

#[test]
fn a_shell_running_two_programs_reports_each_with_its_own_tally() {
    let a = build("basic", &O2);
    let b = build("basic", &variant("o0_nopie"));
    let script = format!("{} 120; {} 333", a.display(), b.display());
    let counted = count_run(
        "workload-shell",
        &["--count", "work", "--count", "rec"],
        "sh",
        &["-c", &script],
        Duration::from_secs(60),
    );
    let out = &counted.out;
    // The shell's status is the last program's (basic exits 7).
    assert_eq!(out.status, 7, "{}", out.stderr);
    let doc = read_json(&counted.json);
    let works: Vec<u64> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("tally work ")?.parse().ok())
        .collect();
    assert_eq!(works, [120, 333]);
    let counted_parts: Vec<u64> = parts(&doc, "work")
        .into_iter()
        .filter(|(_, command, _)| command.starts_with("basic"))
        .map(|(_, _, calls)| calls.expect("a work row"))
        .collect();
    assert_eq!(counted_parts, works, "{doc}");
    // The shell itself has neither function, and that is no error.
    assert!(parts(&doc, "work")
        .iter()
        .any(|(_, c, n)| c == "sh" && n.is_none()));
}

#[test]
fn a_pattern_no_program_of_the_workload_has_is_an_error_at_the_end() {
    let bin = build("basic", &O2);
    let out = run(
        weft()
            .args(["run", "--count", "wrok", "--", "sh", "-c"])
            .arg(format!("{} 10", bin.display())),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("pattern 'wrok' matches no function in any program of the workload"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("did you mean: work"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
}

#[test]
fn no_follow_measures_the_first_process_only() {
    let bin = build("forkexec", &O2);
    let counted = count_run(
        "workload-no-follow",
        &["--no-follow", "--count", "work"],
        &bin,
        &["500", "300"],
        Duration::from_secs(60),
    );
    assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
    let doc = read_json(&counted.json);
    assert!(doc.get("processes").is_none(), "{doc}");
    // Without its own region, the child's calls land in its parent's
    // counters (docs/workloads.md), and exec is said.
    assert_eq!(counted.count("work", "entry"), 800);
    let said = &counted.out.stderr;
    assert!(
        said.contains("ran exec (forkexec") && said.contains("became sh"),
        "{said}"
    );
}

/// bpftrace's count of uprobe `function` in libc per process, by the
/// command each process ran last: (command, count), sorted.
fn bpftrace_counts(function: &str, command: &str) -> Vec<(String, u64)> {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let out = run(
        Command::new("bpftrace")
            .arg("-e")
            // The workload only: the command bpftrace starts and its
            // descendants, up to 4 generations (make, cc, collect2, ld).
            .arg(format!(
                "uprobe:{libc}:{function} /{}/ {{ @[pid, comm] = count(); }}",
                (0..5)
                    .map(|up| format!("curtask{}->tgid == cpid", "->real_parent".repeat(up)))
                    .collect::<Vec<_>>()
                    .join(" || ")
            ))
            .arg("-c")
            .arg(command),
        Duration::from_secs(300),
    );
    // Lines "@[PID, COMM]: N".
    let mut by_pid: BTreeMap<i64, (String, u64)> = BTreeMap::new();
    for line in out.stdout.lines() {
        let Some(rest) = line.strip_prefix("@[") else {
            continue;
        };
        let (key, n) = rest.split_once("]: ").expect("@[pid, comm]: n");
        let (pid, comm) = key.split_once(", ").expect("pid, comm");
        let entry = by_pid.entry(pid.parse().unwrap()).or_default();
        // The same pid under two commands: calls before and after exec,
        // each image apart (weft's parts are per image too).
        if entry.0.is_empty() {
            *entry = (comm.to_string(), n.parse().unwrap());
        } else {
            panic!("process {pid} called {function} as {} and as {comm}: choose a function only one image calls", entry.0);
        }
    }
    assert!(
        !by_pid.is_empty(),
        "no counts from bpftrace:\n{}\n{}",
        out.stdout,
        out.stderr
    );
    let mut counts: Vec<(String, u64)> = by_pid.into_values().collect();
    counts.sort();
    counts
}

/// `make -j2` building a small C project: every process (make, cc, cc1,
/// as, collect2, ld) is its own part, and each part's count of a libc
/// function equals bpftrace's count for that process.
#[test]
fn make_j2_counts_every_compiler_process_as_bpftrace_does() {
    if !have("make") || !have("cc") || !have("bpftrace") {
        skip("make, cc or bpftrace missing (scripts/install-deps.sh installs them)");
        return;
    }
    let dir = scratch("workload-make");
    for i in 1..=4 {
        std::fs::write(
            dir.join(format!("f{i}.c")),
            format!("#include <stdio.h>\nint f{i}(int x) {{ return x * {i}; }}\n"),
        )
        .unwrap();
    }
    std::fs::write(
        dir.join("main.c"),
        "int f1(int), f2(int), f3(int), f4(int);\nint main(void) { return f1(1) + f2(2) + f3(3) + f4(4) - 30; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("Makefile"),
        "prog: main.o f1.o f2.o f3.o f4.o\n\tcc -o $@ $^\n%.o: %.c\n\tcc -O2 -c $<\nclean:\n\trm -f *.o prog\n",
    )
    .unwrap();
    // bpftrace wants the program's path.
    let make = format!("/usr/bin/make -s -C {} -j2", dir.display());
    let clean = || {
        let out = run(
            Command::new("make")
                .args(["-s", "-C"])
                .arg(&dir)
                .arg("clean"),
            Duration::from_secs(60),
        );
        assert_eq!(out.status, 0, "{}", out.stderr);
    };
    // fopen64 (fopen): no process calls it between vfork and exec, where
    // its call would be its parent's in weft's report.
    clean();
    let expected = bpftrace_counts("fopen64", &make);
    clean();
    let counted = count_run(
        "workload-make-weft",
        &["--count", "libc.so.6:fopen64"],
        "make",
        &["-s", "-C", dir.to_str().unwrap(), "-j2"],
        Duration::from_secs(300),
    );
    assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
    assert!(dir.join("prog").exists());
    let doc = read_json(&counted.json);
    let mut got: Vec<(String, u64)> = parts(&doc, "fopen64")
        .into_iter()
        .filter_map(|(_, command, calls)| Some((command, calls.filter(|&n| n > 0)?)))
        .collect();
    got.sort();
    assert_eq!(got, expected, "{doc}");
    for program in ["make", "cc", "cc1", "as", "ld"] {
        assert!(
            got.iter().any(|(c, _)| c == program),
            "no {program} in {got:?}"
        );
    }
}

#[test]
fn attach_follow_measures_children_created_while_attached() {
    let mut server = Server::start();
    let dir = scratch("attach-follow");
    let json = dir.join("counts.json");
    let before = maps_and_text(&server.pid().to_string());
    let mut attached = attach(server.pid().to_string(), |c| {
        c.args(["--follow", "--count", "work"])
            .args(["--format", "json", "--output"])
            .arg(&json)
    });
    server.send("go 100 1");
    assert_eq!(server.line(), "done 100");
    let mut children = Vec::new();
    for n in [250, 30] {
        server.send(&format!("fork {n}"));
        assert_eq!(server.line(), format!("child done {n}"));
        let forked = server.line();
        let pid: i64 = forked
            .strip_prefix("forked ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{forked}"));
        children.push((pid, n));
    }
    assert_eq!(attached.detach().code(), Some(0));
    let doc = read_json(&json);
    let parts = parts(&doc, "work");
    assert_eq!(parts.len(), 3, "{doc}");
    assert_eq!(parts[0].0, server.pid() as i64);
    assert_eq!(parts[0].2, Some(100));
    for (pid, n) in children {
        let part = parts.iter().find(|p| p.0 == pid).expect("the child's part");
        assert_eq!(part.2, Some(n), "{doc}");
    }
    // The server's code is its own again, and it still works.
    assert_same_code(
        &before,
        &maps_and_text(&server.pid().to_string()),
        "after detach",
    );
    server.send("fork 10");
    assert_eq!(server.line(), "child done 10");
    server.send("quit");
}

/// `--trace` follows the workload into one trace: every event of the fork
/// child is there with its pid, and babeltrace2 reads the same events.
#[test]
fn a_fork_child_traces_into_the_same_directory_with_its_pid() {
    let bin = build("forkexec", &O2);
    let dir = scratch("workload-trace");
    let events = dir.join("events");
    let out = run(
        weft()
            .args(["run", "--trace", "fn:work", "--events-out"])
            .arg(&events)
            .arg("--")
            .arg(&bin)
            .args(["50", "30"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let meta = read_json(&events.join("meta.json"));
    let root = meta["pid"].as_i64().unwrap();
    let threads = meta["threads"].as_object().expect("the threads' processes");
    assert_eq!(threads.len(), 2, "{meta}");
    let child = threads
        .values()
        .map(|p| p.as_i64().unwrap())
        .find(|&p| p != root)
        .expect("the child's thread");
    let mut entries: BTreeMap<i64, u64> = BTreeMap::new();
    let lines = std::fs::read_to_string(events.join("events.jsonl")).unwrap();
    for line in lines.lines() {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let kind = &meta["events"][e["event"].as_u64().unwrap() as usize][2];
        if kind == "entry" {
            *entries.entry(e["pid"].as_i64().unwrap()).or_default() += 1;
        }
    }
    assert_eq!(
        entries,
        BTreeMap::from([(root, 50), (child, 30)]),
        "{lines}"
    );
    // weft events shows PID/TID; babeltrace2 reads all 160 events, each
    // with its pid.
    let shown = run(weft().arg("events").arg(&events), Duration::from_secs(30));
    assert!(
        shown.stdout.contains(&format!(" {child}/{child} ")),
        "{}",
        shown.stdout
    );
    if have("babeltrace2") {
        let bt = run(
            Command::new("babeltrace2").arg(events.join("ctf")),
            Duration::from_secs(60),
        );
        assert_eq!(bt.status, 0, "{}", bt.stderr);
        assert_eq!(bt.stdout.lines().count(), 160, "{}", bt.stdout);
        // The packet context gives each event its process.
        let of_child = format!("pid = {child} }}");
        let child_events = bt.stdout.lines().filter(|l| l.contains(&of_child)).count();
        assert_eq!(child_events, 60, "{}", bt.stdout);
    } else {
        skip("babeltrace2 missing (scripts/install-deps.sh installs it)");
    }
}

/// A shell script that execs python3: its USDT function entries are traced
/// after the exec, as bpftrace sees them for the same script.
#[test]
fn a_script_execing_python_is_traced_as_bpftrace_sees_it() {
    let python = "/usr/bin/python3.11";
    if !std::path::Path::new(python).exists() || !have("bpftrace") {
        skip("Debian's python3.11 or bpftrace missing (scripts/install-deps.sh installs them)");
        return;
    }
    let dir = scratch("workload-python");
    // A lambda called from C (sorted): python 3.11 reports some of its
    // frames (not the ones it runs inline); bpftrace says which.
    std::fs::write(
        dir.join("work.py"),
        "for i in range(7):\n    sorted(range(3), key=lambda x: -x)\n",
    )
    .unwrap();
    let script = dir.join("run.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nexec {python} {}\n",
            dir.join("work.py").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // bpftrace runs python itself: it raises the probes' semaphore in the
    // process it starts, which a script's exec would replace.
    let bt = run(
        Command::new("bpftrace")
            .arg("-e")
            .arg(format!(
                "usdt:{python}:python:function__entry {{ @[str(arg1)] = count(); }}"
            ))
            .arg("-c")
            .arg(format!("{python} {}", dir.join("work.py").display())),
        Duration::from_secs(120),
    );
    // Lines "@[FUNCTION]: N" (bpftrace numbers the arguments from 0,
    // weft from 1: its arg2 is the function).
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for line in bt.stdout.lines() {
        if let Some((function, n)) = line.strip_prefix("@[").and_then(|l| l.split_once("]: ")) {
            *expected.entry(function.to_string()).or_default() += n.parse::<u64>().unwrap();
        }
    }
    assert!(expected.contains_key("<lambda>"), "{}", bt.stdout);
    let events = dir.join("events");
    let out = run(
        weft()
            .args([
                "run",
                "--trace",
                "usdt:python:function__entry@arg1/s,arg2/s",
            ])
            .arg("--events-out")
            .arg(&events)
            .arg("--")
            .arg(&script),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let mut got: BTreeMap<String, u64> = BTreeMap::new();
    for line in std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
    {
        let e: serde_json::Value = serde_json::from_str(line).unwrap();
        let function = e["strings"][1].as_str().unwrap().to_string();
        *got.entry(function).or_default() += 1;
    }
    assert_eq!(got, expected);
}

/// weft killed while it holds a forked child stopped: its watchdog lets
/// the child go, so the workload finishes as it would have.
#[test]
fn weft_killed_while_it_holds_a_new_process_leaves_the_workload_running() {
    let bin = build("forkexec", &O2);
    let plain = run(
        Command::new(&bin).args(["50", "30"]),
        Duration::from_secs(30),
    );
    // Every holder of the pipe (the program, its child, the sh it execs)
    // must end for `run` to see the end of its output: a child left
    // stopped would make it time out.
    let out = run(
        weft()
            .env("WEFT_KILL_AT", "fork")
            .args(["run", "--count", "work", "--"])
            .arg(&bin)
            .args(["50", "30"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 128 + 9, "weft was not killed: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout);
}
