//! Syscall User Dispatch (docs/syscalls.md): calls made from code no tool
//! could rewrite before it ran are recorded all the same, and a busy site
//! rewritten while the program runs loses no call.

use super::*;

/// Calls made from code the program writes into anonymous memory at run
/// time, by two threads, a thousand each: weft records every one, with
/// the result the program got (the program checks them against the C
/// library's answers), as many as the program's own tally, and as many
/// as strace sees.
#[test]
fn calls_from_code_generated_at_run_time_are_recorded() {
    let target = build("syscalls_jit", &O2);
    let dir = scratch("syscalls-dispatch-jit");
    let (out, recorded) = record_into(&dir, &target, &["1000".as_ref()]);
    let own = tallies(&recorded.stdout);
    assert_eq!(
        own["wrong"], 0,
        "a call answered wrongly under weft: {}",
        recorded.stdout
    );
    assert_eq!((own["jit_getppid"], own["jit_getpid"]), (1000, 1000));
    assert!(
        recorded.stderr.contains("(0 dropped)"),
        "{}",
        recorded.stderr
    );
    let calls = shown_calls(&out);
    let count = |name: &str| calls.iter().filter(|c| c["name"] == name).count() as u64;
    // Each loop step makes the call twice: from the generated code and
    // through the C library.
    assert_eq!(count("getppid"), 2 * own["jit_getppid"], "getppid");
    assert_eq!(count("getpid"), 2 * own["jit_getpid"], "getpid");
    let ppid = calls.iter().find(|c| c["name"] == "getppid").unwrap()["result"].clone();
    assert!(
        (calls.iter())
            .filter(|c| c["name"] == "getppid")
            .all(|c| c["result"] == ppid),
        "every getppid returned the parent's id"
    );
    if !have("strace") {
        skip("strace is not installed (apt-get install strace): the counts were held to the program's own tally only");
        return;
    }
    let log = dir.join("strace.log");
    let traced = run(
        std::process::Command::new("strace")
            .args(["-f", "-qq", "-e", "trace=getpid,getppid", "-o"])
            .arg(&log)
            .arg(&target)
            .arg("1000"),
        Duration::from_secs(120),
    );
    assert_eq!(traced.status, 0, "strace: {}", traced.stderr);
    let lines = std::fs::read_to_string(&log).unwrap();
    let strace_count = |name: &str| {
        lines
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .nth(1)
                    .is_some_and(|c| c.starts_with(&format!("{name}(")))
            })
            .count() as u64
    };
    assert_eq!(
        (count("getppid"), count("getpid")),
        (strace_count("getppid"), strace_count("getpid"))
    );
}

/// A signal handler that writes into a pipe, every millisecond, while its
/// thread makes calls in a loop, so that it often comes in while weft's
/// code writes the thread's record of a call: the program runs as
/// without weft (every byte it wrote is in its pipe), and no record is
/// lost: the delivery stub puts such a signal off until the record is
/// written (`threads::DEFERRED`), where before the handler's calls were
/// dropped (and before that written over the record they interrupted,
/// which once crashed or hung such a program). Every handler run has its
/// delivery and its write in the record, and the record re-executes, each
/// handler run between the same two calls as in the record: the program
/// prints a trail of where in its loop each handler run found it, which
/// the rerun reproduces only so (signals that came in weft's code after a
/// call, in a vDSO function, or in the program's own code, each raised
/// where it came: a hardware breakpoint for the last; before session 29,
/// 5 reruns of 5 printed another trail). Four records: the second and
/// third with every fourth and third handler run lasting longer than the
/// timer's period, so that the next signal comes as it returns, where it
/// came: raised right after it (before session 30, such a signal in the
/// vDSO or in weft's code after a call ran one step later in the rerun,
/// the first handler's calls between); the fourth with the loop's call
/// one that weft's SIGSYS handler makes (`sigprocmask`, never rewritten),
/// whose record a signal interrupts after the call (before session 30,
/// raised one step late in 5 reruns of 5).
#[test]
fn a_signal_that_comes_while_a_record_is_written_is_put_off_and_nothing_is_lost() {
    for (k, more) in [&["0"][..], &["4"], &["3"], &["0", "masks"]]
        .into_iter()
        .enumerate()
    {
        a_timer_program_records_and_reruns(k, more);
    }
}

fn a_timer_program_records_and_reruns(k: usize, more: &[&str]) {
    let target = build("syscalls_signals", &O2);
    // 150 ms of ticks: since session 31's faster drain the loop makes
    // some six million calls a second under weft, and `show --json` of a
    // 300 ms record took a debug build over a minute.
    let args: Vec<&std::ffi::OsStr> = std::iter::once("150")
        .chain(more.iter().copied())
        .map(std::ffi::OsStr::new)
        .collect();
    // Under dispatch throughout (`syscalls::settled` has the settled
    // record of this program).
    let (out, recorded) = record_into_with(
        &scratch(&format!("syscalls-dispatch-signals-{k}")),
        &["--settle-after", "never"],
        &target,
        &args,
    );
    assert_eq!(recorded.status, 0, "weft: {}", recorded.stderr);
    let own = tallies(&recorded.stdout);
    assert!(own["handled"] > 20, "the timer fired: {}", recorded.stdout);
    assert_eq!(
        own["handled"], own["piped"],
        "every byte written is in the pipe"
    );
    assert!(
        recorded.stderr.contains(" (0 dropped)"),
        "{}",
        recorded.stderr
    );
    let shown = run(
        weft().args(["syscalls", "show", "--json"]).arg(&out),
        Duration::from_secs(60),
    );
    assert_eq!(shown.status, 0, "{}", shown.stderr);
    let lines: Vec<serde_json::Value> = shown
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let writes = lines
        .iter()
        .filter(|c| c["name"] == "write" && c["result"] == 1)
        .count() as u64;
    let alarms = lines.iter().filter(|c| c["signal"] == 14).count() as u64;
    assert_eq!((writes, alarms), (own["handled"], own["handled"]));
    let rerun = reexec(&out, &target, &args);
    assert_eq!(rerun.status, 0, "{}", rerun.stderr);
    assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
}

/// Blocking reads a signal handler's call interrupts, each site
/// rewritten at the exec (`--no-dispatch`: one record a call): each read
/// keeps its own entry, so that it lasts as long as the program's own
/// clock says (the timer's 20 ms), and comes before the handler's
/// `getppid`, which comes inside it, as strace shows them.
#[test]
fn a_blocked_call_keeps_its_entry_when_a_handler_calls_inside_it() {
    let target = build("syscalls_interrupted", &O2);
    let dir = scratch("syscalls-interrupted");
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let recorded = run(
        weft()
            .args(["syscalls", "record", "--no-dispatch", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&target)
            .arg("5"),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.status, 0, "weft: {}", recorded.stderr);
    let own = tallies(&recorded.stdout);
    assert_eq!(own["interrupted"], 5, "{}", recorded.stdout);
    let calls = shown_calls(&out);
    let reads: Vec<(usize, &serde_json::Value)> = (calls.iter().enumerate())
        .filter(|(_, c)| c["name"] == "read" && c["errno"] == "EINTR")
        .collect();
    assert_eq!(reads.len(), 5, "{calls:?}");
    let weft_ns: u64 = reads
        .iter()
        .map(|(_, c)| c["duration_ns"].as_u64().unwrap_or(0))
        .sum();
    let read_ns = own["read_ns"];
    eprintln!("interrupted reads: weft {weft_ns} ns, the program's own clock {read_ns} ns");
    assert!(
        weft_ns <= read_ns && weft_ns * 10 >= read_ns * 9,
        "weft {weft_ns} ns, the program's clock {read_ns} ns"
    );
    // Each read, then the handler's getppid, then the next read.
    for &(k, _) in &reads {
        assert_eq!(calls[k + 1]["name"], "getppid", "{calls:?}");
    }
}

/// `xargs -P 4` forks and execs while it polls its children with
/// `wait4(WNOHANG)`, whose site turns busy: the copy of the session a
/// child got at its fork then asks for that site to be rewritten as the
/// child execs, and its old code is gone. Before session 22 that ended the
/// record with "cannot access ... memory" while the workload ran on; now
/// the record is whole: the workload's output is its own, every `echo`
/// is in it, nothing dropped.
#[test]
fn a_busy_site_of_a_process_that_execs_meanwhile_loses_nothing() {
    let pipeline = "seq 300 | xargs -P 4 -n 1 /bin/echo | sort -n | md5sum";
    let plain = run(
        std::process::Command::new("sh").args(["-c", pipeline]),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "{}", plain.stderr);
    let dir = scratch("syscalls-dispatch-xargs");
    let (out, recorded) = record_into(
        &dir,
        Path::new("/bin/sh"),
        &["-c".as_ref(), pipeline.as_ref()],
    );
    assert_eq!(recorded.stdout, plain.stdout);
    assert!(
        recorded.stderr.contains("(0 dropped)") && !recorded.stderr.contains("not rewritten"),
        "{}",
        recorded.stderr
    );
    let calls = shown_calls(&out);
    let echoed = calls
        .iter()
        .filter(|c| c["name"] == "write" && c["result"] == 4)
        .count();
    // "NNN\n" for 100 to 300: every echo's write is in the record.
    assert_eq!(echoed, 201, "writes of four bytes");
}
