//! `weft run` on targets with their own tallies, in every build variant:
//! counts equal the tallies and the program's output and exit code are
//! unchanged.

use crate::support::*;
use std::time::Duration;

/// A probe: weft flag, pattern, how it shows in the JSON, and the tally it must equal.
struct Probe {
    flag: &'static str,
    pattern: &'static str,
    function: &'static str,
    point: &'static str,
    tally: &'static str,
}

const fn entry(pattern: &'static str, tally: &'static str) -> Probe {
    Probe {
        flag: "--count",
        pattern,
        function: pattern,
        point: "entry",
        tally,
    }
}

fn check(target: &str, args: &[&str], probes: &[Probe], v: &Variant) {
    check_output(target, args, probes, v, false)
}

/// Like `check`; with `timing_dependent`, the tally lines (which depend on
/// timing, e.g. how many timer signals arrived) are left out of the
/// output comparison.
fn check_output(
    target: &str,
    args: &[&str],
    probes: &[Probe],
    v: &Variant,
    timing_dependent: bool,
) {
    let bin = build(target, v);
    let plain = run(
        std::process::Command::new(&bin).args(args),
        Duration::from_secs(60),
    );
    let mut weft_args = Vec::new();
    for p in probes {
        weft_args.extend([p.flag, p.pattern]);
    }
    let counted = count_run(
        &format!("{target}-{}", v.name),
        &weft_args,
        &bin,
        args,
        Duration::from_secs(60),
    );
    let with = &counted.out;
    assert_eq!(
        with.status, plain.status,
        "{target} {}: exit status\n{}",
        v.name, with.stderr
    );
    let timing_free = |s: &str| -> String {
        s.lines()
            .filter(|l| !(timing_dependent && l.starts_with("tally ")))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(
        timing_free(&with.stdout),
        timing_free(&plain.stdout),
        "{target} {}: output changed under weft\n{}",
        v.name,
        with.stderr
    );
    let tally = tallies(&with.stdout);
    let counts = counted.counts();
    for p in probes {
        let want = tally[p.tally];
        assert!(
            want > 0,
            "{target}: tally {} is zero: the test would prove nothing",
            p.tally
        );
        let got = count_of(&counts, p.function, p.point);
        assert_eq!(
            got, want,
            "{target} {}: {} {} vs the target's tally {}",
            v.name, p.flag, p.pattern, p.tally
        );
    }
}

variant_test!(calls_nested_calls_recursion_and_libc, |v| {
    check(
        "basic",
        &["2000"],
        &[
            entry("work", "work"),
            entry("leaf", "leaf"),
            entry("rec", "rec"),
            entry("puts", "puts"),
        ],
        v,
    );
});

variant_test!(threads_count_exactly, |v| {
    // Each thread adds in its CPU's lane of the counter; weft sums them.
    check("threads", &["2", "200000"], &[entry("work", "work")], v);
    check("threads", &["8", "20000"], &[entry("work", "work")], v);
});

variant_test!(setjmp_longjmp_entries_and_returns, |v| {
    let probes = [
        entry("middle", "middle"),
        entry("thrower", "thrower"),
        Probe {
            flag: "--count-exits",
            pattern: "middle",
            function: "middle",
            point: "exit",
            tally: "middle_returns",
        },
    ];
    check("jumps", &["3000"], &probes, v);
});

variant_test!(signal_handlers_interrupting_instrumented_code, |v| {
    check_output("signals", &["100"], &[entry("work", "work")], v, true);
});

variant_test!(hand_written_shapes, |v| {
    let probes = [
        entry("loophead", "loophead"),
        Probe {
            flag: "--count",
            pattern: "loophead+3",
            function: "loophead+0x3",
            point: "instruction",
            tally: "loophead_iterations",
        },
        Probe {
            flag: "--count",
            pattern: "loophead+0",
            function: "loophead+0x0",
            point: "instruction",
            tally: "loophead_iterations",
        },
        Probe {
            flag: "--count-exits",
            pattern: "loophead",
            function: "loophead",
            point: "exit",
            tally: "loophead",
        },
        entry("tiny_padded", "tiny_padded"),
        entry("tiny_packed", "tiny_packed"),
        entry("after_tiny", "after_tiny"),
        entry("riprel", "riprel"),
        entry("short_entry", "short_entry"),
        entry("endbr", "endbr"),
        entry("tailcaller", "tailcaller"),
        Probe {
            flag: "--count-exits",
            pattern: "tailcaller",
            function: "tailcaller",
            point: "exit",
            tally: "tailcaller",
        },
        entry("target_inside", "target_inside"),
        Probe {
            flag: "--count",
            pattern: "redzone+10",
            function: "redzone+0xa",
            point: "instruction",
            tally: "redzone",
        },
        entry("needs_trap", "needs_trap"),
    ];
    check("shapes", &["3000"], &probes, v);
    // The target checks its own results: nothing was corrupted (in this
    // variant's build, where the loop checked the -O2 PIE build only).
    let out = run(
        std::process::Command::new(build("shapes", v)).arg("10"),
        Duration::from_secs(10),
    );
    assert_eq!(tallies(&out.stdout)["corrupt"], 0, "{}", v.name);
});

#[test]
fn each_shape_reports_its_splice_method() {
    let bin = build("shapes", &O2);
    let mut cmd = weft();
    cmd.args(["run", "--verbose"]);
    for f in [
        "tiny_packed",
        "target_inside",
        "riprel",
        "needs_trap",
        "loophead",
    ] {
        cmd.args(["--count", f]);
    }
    let out = run(cmd.arg("--").arg(&bin).arg("10"), Duration::from_secs(30));
    assert_eq!(out.status, 0, "{}", out.stderr);
    let line = |f: &str| {
        out.stderr
            .lines()
            .find(|l| l.contains(&format!(":{f} [entry]")))
            .unwrap_or_else(|| panic!("{f}: {}", out.stderr))
            .to_string()
    };
    let expect = [
        ("riprel", ": jmp, "),
        ("tiny_packed", "jmp8 to a springboard at"),
        (
            "target_inside",
            "runs a relocated copy of the whole function",
        ),
        ("loophead", "runs a relocated copy of the whole function"),
        ("needs_trap", "int3 (branch target"),
    ];
    for (f, what) in expect {
        assert!(
            line(f).contains(what),
            "{f}: expected {what:?} in {}",
            line(f)
        );
    }
}

variant_test!(without_following_a_fork_child_shares_counters, |v| {
    // Not following (--no-follow), the child of fork keeps the
    // instrumentation: its calls add to the same counters
    // (docs/workloads.md). After exec the new image runs untouched.
    let bin = build("forkexec", v);
    let plain = run(
        std::process::Command::new(&bin).args(["500", "300"]),
        Duration::from_secs(30),
    );
    let counted = count_run(
        &format!("forkexec-{}", v.name),
        &["--no-follow", "--count", "work"],
        &bin,
        &["500", "300"],
        Duration::from_secs(30),
    );
    let with = &counted.out;
    assert_eq!(with.status, 0, "{}", with.stderr);
    assert_eq!(with.stdout, plain.stdout);
    assert!(with.stdout.contains("exec ok"));
    let child_total: u64 = with
        .stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("child tally work ")
                .and_then(|n| n.parse().ok())
        })
        .expect("child line");
    assert_eq!(counted.count("work", "entry"), child_total, "{}", v.name);
});

/// A wrapper that execs the real program (as pyenv's shims do): followed,
/// the program is measured after the exec; with --no-follow weft says
/// that it does not follow. The program's exit code comes back either way.
#[test]
fn exec_of_the_program_itself_is_followed_or_reported() {
    let bin = build("basic", &O2);
    let dir = scratch("exec-notice");
    let shim = dir.join("shim");
    std::fs::write(&shim, format!("#!/bin/sh\nexec {} 100\n", bin.display())).unwrap();
    std::fs::set_permissions(&shim, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = run(
        weft()
            .args(["run", "--no-follow", "--count", "libc.so.6:*"])
            .arg("--")
            .arg(&shim),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 7, "{}", out.stderr);
    assert!(
        out.stderr.contains("ran exec (shim became basic"),
        "{}",
        out.stderr
    );
    let followed = count_run(
        "exec-followed",
        &["--count", "work"],
        &shim,
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(followed.out.status, 7, "{}", followed.out.stderr);
    assert_eq!(
        followed.count("work", "entry"),
        tallies(&followed.out.stdout)["work"]
    );
    assert_eq!(followed.count("work", "entry"), 100);
}

#[test]
fn exit_code_and_table_output() {
    let bin = build("basic", &O2);
    let out = run(
        weft()
            .args(["run", "--count", "work", "--"])
            .arg(&bin)
            .arg("100"),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 7, "weft exits with the program's code");
    let row = out
        .stderr
        .lines()
        .find(|l| l.contains(" work "))
        .expect("a table row for work");
    assert!(row.trim_end().ends_with(" 100"), "{row}");
}

/// A program a signal killed: weft exits as a shell reports it (128 + the
/// signal) and says which signal, as a shell would have said had it
/// started the program itself; a program that exits 139 of its own is
/// not said to be killed.
#[test]
fn a_program_killed_by_a_signal_is_said_to_be() {
    let killed = run(
        weft().args([
            "run",
            "--count",
            "libc.so.6:kill",
            "--",
            "sh",
            "-c",
            "kill -SEGV $$",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(killed.status, 139, "{}", killed.stderr);
    assert!(
        killed.stderr.contains("was killed by SIGSEGV"),
        "{}",
        killed.stderr
    );
    let exited = run(
        weft().args([
            "run",
            "--count",
            "libc.so.6:kill",
            "--",
            "sh",
            "-c",
            "exit 139",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(exited.status, 139, "{}", exited.stderr);
    assert!(!exited.stderr.contains("killed"), "{}", exited.stderr);
}

variant_test!(cpp_functions_by_demangled_name, |v| {
    let bin = build("names", v);
    let counted = count_run(
        &format!("names-{}", v.name),
        &["--count", "geo::run", "--count", "geo::Square::area*"],
        &bin,
        &["300"],
        Duration::from_secs(60),
    );
    let out = &counted.out;
    assert_eq!(out.status, 0, "{}: {}", v.name, out.stderr);
    let tally = tallies(&out.stdout);
    let rows = counted.counts();
    let by_prefix = |p: &str| {
        rows.iter()
            .find(|r| r.function.starts_with(p))
            .unwrap_or_else(|| panic!("{p}: {rows:?}"))
    };
    assert_eq!(by_prefix("geo::run(").calls, tally["run"], "{}", v.name);
    assert_eq!(
        by_prefix("geo::Square::area(int) const").calls,
        tally["area"],
        "{}",
        v.name
    );
});

/// gcc -O2 splits `check` in two: `check.cold` holds its rare path, entered
/// by a jump and returning to check's caller from there. A glob reports
/// `check` alone, with the calls the target tallied (the cold part is no
/// function that is called); `check`'s exits are all its returns, those
/// of the cold part included (without them, one call in ten would never
/// return as far as weft could tell).
#[test]
fn a_split_off_cold_part_belongs_to_its_function() {
    let bin = build("cold", &O2);
    let symbols = run(
        std::process::Command::new("nm").arg(&bin),
        Duration::from_secs(30),
    );
    assert!(
        symbols.stdout.contains(" check.cold\n"),
        "the compiler did not split check: the test would prove nothing\n{}",
        symbols.stdout
    );
    let counted = count_run(
        "cold",
        &["--count", "chec*", "--count-exits", "check"],
        &bin,
        &["1000"],
        Duration::from_secs(60),
    );
    assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
    let tally = tallies(&counted.out.stdout);
    assert_eq!((tally["check"], tally["rare"]), (1000, 100));
    let counts = counted.counts();
    assert_eq!(count_of(&counts, "check", "entry"), 1000);
    assert_eq!(count_of(&counts, "check", "exit"), 1000);
    assert!(
        counts.iter().all(|c| !c.function.contains("cold")),
        "{:?}",
        counts.iter().map(|c| &c.function).collect::<Vec<_>>()
    );
}

/// `strlen`, `memcpy` and `strcmp` are IFUNCs in glibc: weft counts the
/// implementation the process's resolver chose, under the name asked for.
/// The count includes the C library's own calls, so the ground truth is a
/// difference: a run making N calls of each counts exactly N more than a
/// run making none (the target's own tally says N). Before, a plain
/// `strlen` matched nothing and `memcpy` an old version the process never
/// calls (0).
#[test]
fn ifunc_patterns_count_the_implementation_the_process_uses() {
    let bin = build("ifunc", &O2);
    let counts_for = |n: &str| {
        let counted = count_run(
            &format!("ifunc-{n}"),
            &[
                "--count",
                "libc.so.6:strlen",
                "--count",
                "libc.so.6:memcpy",
                "--count",
                "libc.so.6:strcmp",
                "--count",
                "libc.so.6:memmove",
            ],
            &bin,
            &[n],
            Duration::from_secs(60),
        );
        assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
        let tally = tallies(&counted.out.stdout);
        let rows = counted.counts();
        // memmove asked for too: a row of its own, which reads the same
        // counter when glibc chose one implementation for both (said in a
        // note).
        let shared = counted.out.stderr.contains("memcpy runs the same code as");
        if shared {
            assert_eq!(
                count_of(&rows, "memmove", "entry"),
                count_of(&rows, "memcpy", "entry")
            );
        }
        ["strlen", "memcpy", "strcmp"].map(|f| (tally[f], count_of(&rows, f, "entry")))
    };
    let none = counts_for("0");
    let some = counts_for("5000");
    for (i, f) in ["strlen", "memcpy", "strcmp"].iter().enumerate() {
        assert_eq!((none[i].0, some[i].0), (0, 5000), "{f}: the target's tally");
        assert_eq!(
            some[i].1 - none[i].1,
            5000,
            "{f}: {} then {}",
            none[i].1,
            some[i].1
        );
    }
}

/// The same in a running process: weft attaches to a target blocked in
/// `read`, the target makes exactly 3000 calls of each IFUNC and says so
/// with `write` (no other code of the C library runs meanwhile), weft
/// detaches: each count is exactly 3000.
#[test]
fn ifunc_patterns_count_exactly_in_an_attached_process() {
    let bin = build("ifunc", &O2);
    let mut target = Waiting::start(&bin, &["wait"]);
    let json = scratch("ifunc-attached").join("counts.json");
    let mut weft = attach(target.pid(), |c| {
        c.args(["--count", "libc.so.6:strlen", "--count", "libc.so.6:memcpy"])
            .args([
                "--count",
                "libc.so.6:strcmp",
                "--format",
                "json",
                "--output",
            ])
            .arg(&json)
    });
    assert_eq!(target.say("3000", "done"), "done\n");
    assert!(weft.detach().success());
    let rows = read_counts(&json);
    for f in ["strlen", "memcpy", "strcmp"] {
        assert_eq!(count_of(&rows, f, "entry"), 3000, "{f}");
    }
}

/// The same in C++: g++ -O2 moves `risky(int)`'s throwing path into
/// `risky(int) [clone .cold]`. A glob counts `risky(int)` alone, once per
/// call (the target's loop makes 300), and its exits are the 200 calls that
/// return: the 100 that throw leave through the unwinder, not a return.
#[test]
fn a_cplusplus_cold_clone_is_not_a_function_of_its_own() {
    let bin = build("throws", &O2);
    let symbols = run(
        std::process::Command::new("nm").arg("-C").arg(&bin),
        Duration::from_secs(30),
    );
    assert!(
        symbols.stdout.contains("risky(int) [clone .cold]"),
        "g++ did not split risky: the test would prove nothing\n{}",
        symbols.stdout
    );
    let counted = count_run(
        "throws-cold",
        &["--count", "risky*", "--count-exits", "risky*"],
        &bin,
        &["300"],
        Duration::from_secs(60),
    );
    assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
    let tally = tallies(&counted.out.stdout);
    assert_eq!((tally["throws"], tally["caught"]), (100, 100));
    let rows = counted.counts();
    assert!(
        rows.iter().all(|r| !r.function.contains("cold")),
        "{:?}",
        rows.iter().map(|r| &r.function).collect::<Vec<_>>()
    );
    assert_eq!(count_of(&rows, "risky(int)", "entry"), 300);
    assert_eq!(count_of(&rows, "risky(int)", "exit"), 200);
}

/// A process started with other GLIBC_TUNABLES (its loader may choose other
/// IFUNC implementations than weft's), which then clears its environment
/// in place as setproctitle does, so /proc/PID/environ no longer tells:
/// weft either passes strlen over, saying why, or counts exactly the 3000
/// calls the target makes; never a count of the wrong code.
#[test]
fn ifunc_choices_of_a_process_with_other_tunables_are_never_guessed() {
    use std::io::{BufRead, BufReader, Write};
    let bin = build("ifunc", &O2);
    let mut child = KillOnDrop(
        std::process::Command::new(&bin)
            .arg("wipe")
            .env(
                "GLIBC_TUNABLES",
                "glibc.cpu.hwcaps=-AVX2:-AVX512F:-AVX512VL",
            )
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("spawn the target"),
    );
    let mut out = BufReader::new(child.0.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ready\n");
    let pid = child.0.id();
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    assert!(
        environ.iter().all(|&b| b == 0),
        "the target did not clear its environment"
    );
    let json = scratch("ifunc-tunables").join("counts.json");
    let mut weft = attach(pid, |c| {
        c.args(["--count", "libc.so.6:strlen", "--count", "libc.so.6:getpid"])
            .args(["--format", "json", "--output"])
            .arg(&json)
    });
    let stdin = child.0.stdin.as_mut().unwrap();
    stdin.write_all(b"3000\n").unwrap();
    stdin.flush().unwrap();
    line.clear();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "done\n");
    assert!(weft.detach().success());
    let said: Vec<String> = weft.stderr.try_iter().collect();
    let rows = read_counts(&json);
    let counted = rows.iter().any(|r| r.function == "strlen");
    if counted {
        assert_eq!(count_of(&rows, "strlen", "entry"), 3000, "{said:?}");
    } else {
        assert!(
            said.iter()
                .any(|l| l.contains("strlen") && l.contains("GLIBC_TUNABLES")),
            "strlen neither counted nor passed over with a reason: {said:?}"
        );
    }
}
