//! Settled processes: once weft has rewritten every `syscall` site it
//! turns the kernel's Syscall User Dispatch off (docs/syscalls.md,
//! "Settled processes"), and what it records must not change: strace's
//! calls, signal deliveries, new threads and forked children.

use super::*;

/// The time (seconds from the trace's start, as `show` gives it) at which
/// weft settled process `pid`'s image, from `meta.json`'s loaders.
fn settled_at(out: &Path, pid: &str) -> Option<f64> {
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("meta.json")).unwrap()).unwrap();
    let start = meta["start_tsc"].as_u64()? as f64;
    let ticks_per_ns = meta["ticks_per_ns"].as_f64()?;
    let loaders = meta["loaders"].as_array()?;
    let loader =
        (loaders.iter()).find(|l| l["pid"].as_i64().is_some_and(|p| p.to_string() == pid))?;
    Some((loader["settled"].as_u64()? as f64 - start) / ticks_per_ns / 1e9)
}

/// `weft syscalls record --settle-after 0 -o DIR/rec -- TARGET ARGS...`,
/// which must succeed, settling the program as soon as it can: the
/// record, what weft printed, and `show`'s text with the program's pid and
/// the time it settled at.
fn record_settled(
    dir: &Path,
    target: &Path,
    args: &[&std::ffi::OsStr],
) -> (std::path::PathBuf, Finished, Finished, f64) {
    let (out, recorded) = record_into_with(dir, &["--settle-after", "0"], target, args);
    assert_eq!(recorded.status, 0, "weft: {}", recorded.stderr);
    let (shown, _) = shown_lines(&out);
    let pid = shown.stdout.split_whitespace().next().unwrap();
    let settled = settled_at(&out, pid).expect("the process settled");
    (out, recorded, shown, settled)
}

/// The time `show` gives the first line holding `text`.
fn time_of(shown: &str, text: &str) -> f64 {
    let line = shown.lines().find(|l| l.contains(text)).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The calls of `syscalls` (forty-odd kinds) made after weft settled the
/// process are strace's, line for line.
#[test]
fn a_settled_process_records_the_calls_strace_sees() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let (target, dir, work, log, plain) = syscalls_under_strace("syscalls-settled", &["wait"]);
    assert_eq!(plain.status, 0, "strace: {}", plain.stderr);
    let strace_log = std::fs::read_to_string(&log).unwrap();
    let strace = calls_from_marker(strace_log.lines());
    let wait = std::ffi::OsStr::new("wait");
    let (_, recorded, shown, settled) = record_settled(&dir, &target, &[work.as_os_str(), wait]);
    assert_eq!(recorded.stdout, plain.stdout, "the program's output");
    assert!(
        settled < time_of(&shown.stdout, "close(-7)"),
        "settled at {settled} s, after the marker:\n{}",
        shown.stdout
    );
    assert_eq!(
        calls_from_marker(shown.stdout.lines()),
        strace,
        "weft's calls (left), strace's (right), settled"
    );
    each_strace_line_is_weft_s(&strace_log, &shown.stdout);
}

/// After settling: a handler the program installs still has its
/// deliveries recorded (its `rt_sigaction` and `rt_sigprocmask` handed to
/// weft's SIGSYS handler from their rewritten sites), and a thread it
/// makes and a child it forks, which leave dispatch off, have strace's
/// calls.
#[test]
fn a_settled_process_keeps_its_handlers_threads_and_children_recorded() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let target = build("syscalls_settled", &O2);
    let dir = scratch("syscalls-settled-workload");
    let log = dir.join("strace.log");
    let (plain, strace) = strace_f(&target, &log);
    assert_eq!(plain.stdout, "handled 6 child 3\n");
    let (_, recorded, shown, settled) = record_settled(&dir, &target, &[]);
    assert_eq!(recorded.stdout, plain.stdout, "the program's output");
    let weft_calls = parse_shown(&shown.stdout);
    assert!(
        settled < time_of(&shown.stdout, "dup(-7)"),
        "{}",
        shown.stdout
    );
    // strace's first line is the program's own execve, before weft's
    // entry; it shows each handler's return, which weft never rewrites;
    // the parent's id is strace's or weft's.
    assert_eq!(strace[0].1, "execve");
    let same = |calls: &[(String, String, String)]| -> Vec<(String, String, String)> {
        (calls.iter())
            .filter(|(_, name, _)| name != "rt_sigreturn")
            .map(|(tid, name, result)| match name.as_str() {
                "getppid" => (tid.clone(), name.clone(), "pid".to_string()),
                _ => (tid.clone(), name.clone(), result.clone()),
            })
            .collect()
    };
    let strace = same(&strace[1..]);
    let got = segments(&same(&weft_calls));
    assert_eq!(got.len(), 3, "main, its thread, the child: {got:?}");
    assert_eq!(
        got,
        segments(&strace),
        "weft's threads (left), strace's (right)"
    );
    let deliveries = |text: &str| text.lines().filter(|l| l.contains("--- SIGUSR1 {")).count();
    assert_eq!(deliveries(&shown.stdout), 6, "{}", shown.stdout);
    assert_eq!(deliveries(&std::fs::read_to_string(&log).unwrap()), 6);
}

/// A 1 ms timer whose handler notes where in a loop of calls each tick
/// found it (`syscalls_signals`, as in
/// `dispatch::a_signal_that_comes_while_a_record_is_written_is_put_off_and_nothing_is_lost`),
/// recorded settled and rerun under dispatch: the same trail. In the
/// settled record the handlers return without weft's SIGSYS handler
/// seeing their `rt_sigreturn`, so a tick pending as one returns finds
/// where the first came from its own frame (`returned_from_here`); with
/// `masks` the loop's call is one a rewritten site hands to that handler
/// (`rt_sigprocmask`: before its mark stayed set up to the trampoline's
/// clearing, 1 rerun in 2 came out with another trail).
#[test]
fn a_settled_timer_program_records_and_reruns_alike() {
    // (Shorter than the unsettled test's 300: the rerun of `masks`, every
    // call through the SIGSYS handler, takes a minute with a debug build.)
    const TICKING_MS: &str = "150";
    let target = build("syscalls_signals", &O2);
    // Two seconds of naps after the warm-up: a debug build's weft settles
    // the process in five stops over most of a second.
    for (k, more) in [&["0", "-", "2000"][..], &["0", "masks", "2000"]]
        .into_iter()
        .enumerate()
    {
        let dir = scratch(&format!("syscalls-settled-signals-{k}"));
        let args: Vec<&std::ffi::OsStr> = std::iter::once(TICKING_MS)
            .chain(more.iter().copied())
            .map(std::ffi::OsStr::new)
            .collect();
        let (out, recorded, shown, settled) = record_settled(&dir, &target, &args);
        assert!(
            recorded.stderr.contains(" (0 dropped)"),
            "{}",
            recorded.stderr
        );
        let own = tallies(&recorded.stdout);
        assert!(own["handled"] > 20, "the timer fired: {}", recorded.stdout);
        assert_eq!(own["handled"], own["piped"], "{}", recorded.stdout);
        let first_tick = time_of(&shown.stdout, "--- SIGALRM");
        assert!(
            settled < first_tick,
            "settled at {settled} s, first tick {first_tick} s"
        );
        let rerun = reexec(&out, &target, &args);
        assert_eq!(rerun.status, 0, "{}", rerun.stderr);
        assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
    }
}
