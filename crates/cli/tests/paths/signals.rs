//! Programs that handle SIGSEGV themselves or block it, while weft's
//! buffer handovers are SIGSEGVs: the program's handler goes behind
//! weft's (the `sigaction` hook keeps it), blocked masks let SIGSEGV
//! through, and each program runs and regenerates as without weft.

use super::*;
use crate::support::*;
use std::path::Path;
use std::time::Duration;

variant_test!(
    own_fault_handlers_and_blocked_threads_keep_working,
    [o0_pie, o2_pie, o2_static],
    |v| {
        let target = build("paths_faults", v);
        let dir = scratch(&format!("paths-faults-{}", v.name));
        let trace = dir.join("trace");
        let plain = run(
            &mut std::process::Command::new(&target),
            Duration::from_secs(30),
        );
        assert_eq!(plain.status, 0, "{}", plain.stderr);
        // Tiny buffers: hundreds of handovers, in the program's own fault
        // handler, in the thread that blocks every signal and in the
        // handler whose mask blocks every signal.
        let tiny = [
            "--validate",
            "--paths-buffer-size",
            "4K",
            "--paths-buffers",
            "2",
        ];
        let out = paths_run(&trace, &tiny, &target, &[]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "the program's output");
        assert!(
            out.stdout.contains("own fault handler read back: yes")
                && out.stdout.contains("faults 200 ")
                && out.stdout.contains("with signals blocked"),
            "{}",
            out.stdout
        );
        assert!(!out.stderr.contains("lost"), "{}", out.stderr);
        assert!(
            out.stderr.contains("validated: regeneration gives the")
                && out.stderr.contains("the 2 thread stream(s) recorded"),
            "{}",
            out.stderr
        );
        assert_steps_equal_tally(&out.stdout, &trace);
    }
);

/// GNU grep and diff install a SIGSEGV handler (gnulib's c-stack, for a
/// stack overflow): with 4 KiB buffers they hand over thousands of times.
#[test]
fn grep_and_diff_keep_their_stack_overflow_handlers() {
    let dir = scratch("paths-grep-diff");
    let a = dir.join("a.txt");
    let b = dir.join("b.txt");
    let lines = |skip: u64| -> String {
        (skip..skip + 20_000)
            .map(|i| format!("{} {}\n", i, i * 7919 % 1000))
            .collect()
    };
    std::fs::write(&a, lines(0)).unwrap();
    std::fs::write(&b, lines(3)).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    for (name, program, args) in [
        ("grep", "/usr/bin/grep", vec!["-c", "7", a]),
        ("diff", "/usr/bin/diff", vec![a, b]),
    ] {
        let trace = dir.join(name);
        let plain = run(
            std::process::Command::new(program).args(&args),
            Duration::from_secs(30),
        );
        let tiny = [
            "--validate",
            "--paths-buffer-size",
            "4K",
            "--paths-buffers",
            "4",
        ];
        let out = paths_run(&trace, &tiny, Path::new(program), &args);
        assert_eq!(out.status, plain.status, "{name}: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "{name}'s output");
        assert!(
            out.stderr.contains("validated: regeneration gives the"),
            "{name}: {}",
            out.stderr
        );
        assert!(!out.stderr.contains("lost"), "{name}: {}", out.stderr);
    }
}

/// A timer's handler runs traced code between any two instructions of the
/// main loop, its stores included, with 4 KiB buffers: every block still
/// regenerates, and the calls equal the program's tally.
#[test]
fn asynchronous_signals_with_traced_handlers_keep_the_stream_in_order() {
    let target = build("paths_alarm", &O2);
    let dir = scratch("paths-alarm");
    let trace = dir.join("trace");
    let tiny = [
        "--validate",
        "--paths-buffer-size",
        "4K",
        "--paths-buffers",
        "2",
    ];
    let out = paths_run(&trace, &tiny, &target, &[]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert!(out.stdout.contains("alarms many"), "{}", out.stdout);
    assert!(
        out.stderr.contains("validated: regeneration gives the"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("lost"), "{}", out.stderr);
    assert_steps_equal_tally(&out.stdout, &trace);
}

/// The calls of `step` regenerated in every thread of `trace` equal the
/// target's own tally (its `tally step N` line in `stdout`).
fn assert_steps_equal_tally(stdout: &str, trace: &Path) {
    let tally: u64 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("tally step "))
        .and_then(|n| n.parse().ok())
        .expect("the target's tally");
    let calls = regenerated_calls(trace, "step");
    assert_eq!(
        calls.values().sum::<u64>(),
        tally,
        "step's calls regenerated in every thread vs the target's tally: {calls:?}"
    );
}
