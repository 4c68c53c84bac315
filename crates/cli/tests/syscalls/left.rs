//! Calls a thread leaves without returning: a signal handler's
//! `siglongjmp` out of a blocked `read`, and `pthread_cancel` of a thread
//! blocked in one. Their records come from the thread's next call
//! (`weft_patch::mini::open_calls`). Ground truth: strace, which shows
//! both reads with `= ? ERESTARTSYS`, and the program's own output.

use super::*;

/// `segments` with the results that are ids of the run read `pid`.
fn ids_as_pid(threads: Vec<Vec<(String, String)>>) -> Vec<Vec<(String, String)>> {
    let ids = ["set_tid_address", "getppid"];
    threads
        .into_iter()
        .map(|t| {
            t.into_iter()
                .map(|(n, r)| match ids.contains(&n.as_str()) {
                    true => (n, "pid".to_string()),
                    false => (n, r),
                })
                .collect()
        })
        .collect()
}

/// Each thread's calls equal strace's, the two reads it left among them
/// with no result (`?`) and in their place: before the handler's and the
/// cleanup's `write`. Each way a call is made: through the SIGSYS handler
/// (a site's first calls), and rewritten (`--no-dispatch`), dynamic and
/// static.
#[test]
fn calls_a_thread_leaves_are_recorded_where_strace_has_them() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    for variant in [&O2, &O2_STATIC] {
        let target = build("syscalls_left", variant);
        let dir = scratch(&format!("syscalls-left-{}", variant.name));
        let (plain, strace) = strace_f(&target, &dir.join("strace.log"));
        assert_eq!(plain.stdout, "alarm\nleft the read\ncleanup\ncancelled\n");
        assert!(strace[0].1 == "execve", "{:?}", strace[0]);
        let expected = segments(&strace[1..]);
        let left = |calls: &[Vec<(String, String)>]| -> usize {
            calls
                .iter()
                .flatten()
                .filter(|(n, r)| n == "read" && r == "?")
                .count()
        };
        assert_eq!(left(&expected), 2, "{expected:?}");
        for options in [&[][..], &["--no-dispatch"][..]] {
            let out = dir.join("rec");
            let _ = std::fs::remove_dir_all(&out);
            let recorded = record_with(&out, &target, &dir, options);
            assert_eq!(recorded.stdout, plain.stdout, "{options:?}");
            let got = segments(&shown_lines(&out).1);
            let (got, expected) = (ids_as_pid(got), ids_as_pid(expected.clone()));
            if options.is_empty() {
                assert_eq!(got, expected, "{} {options:?}", variant.name);
            } else {
                // Without dispatch the C library's first calls, before
                // weft rewrote their sites, are not recorded: from the
                // pipe on.
                let from_pipe = |s: &[Vec<(String, String)>]| -> Vec<Vec<(String, String)>> {
                    s.iter()
                        .map(|t| match t.iter().position(|(n, _)| n == "pipe2") {
                            Some(k) => t[k..].to_vec(),
                            None => t.clone(),
                        })
                        .collect()
                };
                assert_eq!(from_pipe(&got), from_pipe(&expected), "{options:?}");
            }
        }
    }
}

/// Re-executing the program: the read the record shows left is made
/// again, and left again the same way (the rerun's timer cuts it), with
/// no divergence; the output is the recorded run's. With its thread
/// cancelled too: the rerun has the recorded pid, so glibc's cancellation
/// handler, which compares the signal's sender with `getpid()` (answered
/// from the record), acts on it (session 26: the join stalled); and in a
/// forked child, which gets its recorded pid too.
#[test]
fn a_program_that_leaves_a_call_re_executes() {
    let target = build("syscalls_left", &O2);
    let _pids = PIDS.lock().unwrap_or_else(|e| e.into_inner());
    for (args, output) in [
        (&["longjmp"][..], "alarm\nleft the read\n"),
        (&[][..], "alarm\nleft the read\ncleanup\ncancelled\n"),
        (
            &["fork"][..],
            "alarm\nleft the read\ncleanup\ncancelled\nchild ended 0\n",
        ),
    ] {
        let dir = scratch(&format!("syscalls-left-reexec-{}", args.len()));
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (out, recorded) = record_into(&dir, &target, &args);
        assert_eq!(recorded.stdout, output);
        let rerun = reexec(&out, &target, &args);
        assert_eq!(rerun.status, 0, "{args:?}: {}", rerun.stderr);
        assert!(!rerun.stderr.contains("diverged"), "{}", rerun.stderr);
        assert!(!rerun.stderr.contains("cancel"), "{}", rerun.stderr);
        assert!(!rerun.stderr.contains("runs as pid"), "{}", rerun.stderr);
        assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
    }
}

/// A call a signal handler jumps out of as it returns (a `kill` of its
/// own process, whose signal comes as the call returns) had finished: its
/// result comes back from the signal frame the kernel left below it, and
/// equals strace's (`0`). The thread's next call, which finds it left,
/// is its next `kill`; the last one is found by a call deeper on the
/// stack, which may have written over that frame (`?`, as before).
/// Rewritten sites (`--no-dispatch`): a dispatched call writes its entry
/// record ahead and keeps nothing open (docs/syscalls.md).
#[test]
fn a_call_left_as_it_returned_has_its_result() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let target = build("syscalls_left", &O2);
    let dir = scratch("syscalls-left-kill");
    let log = dir.join("strace.log");
    let traced = run(
        std::process::Command::new("strace")
            .args(["-f", "-o"])
            .arg(&log)
            .arg(&target)
            .args(["kill", "20"]),
        Duration::from_secs(60),
    );
    assert_eq!(traced.stdout, "jumped 20\n", "{}", traced.stderr);
    let kills = |calls: &[(String, String, String)]| -> Vec<String> {
        (calls.iter())
            .filter(|(_, name, _)| name == "kill")
            .map(|(_, _, result)| result.clone())
            .collect()
    };
    let expected = kills(&strace_calls(&std::fs::read_to_string(&log).unwrap()));
    assert_eq!(expected, vec!["0"; 20]);
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let recorded = run(
        weft()
            .args(["syscalls", "record", "--no-dispatch", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&target)
            .args(["kill", "20"]),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.stdout, "jumped 20\n", "{}", recorded.stderr);
    let got = kills(&shown_lines(&out).1);
    assert_eq!(got.len(), 20, "{got:?}");
    assert!(got[..19].iter().all(|r| r == "0"), "{got:?}");
    assert!(got[19] == "0" || got[19] == "?", "{got:?}");
}

/// Calls as (thread, name, result).
type Lines = Vec<(String, String, String)>;

/// `command` under `strace -f`, then recorded by weft dispatched and with
/// `--no-dispatch`: each run's output and its calls, strace's first.
fn strace_then_weft(dir: &Path, command: &[&str]) -> Vec<(Finished, Lines)> {
    let log = dir.join("strace.log");
    let traced = run(
        std::process::Command::new("strace")
            .args(["-f", "-o"])
            .arg(&log)
            .args(command),
        Duration::from_secs(60),
    );
    let calls = strace_calls(&std::fs::read_to_string(&log).unwrap_or_default());
    let mut runs = vec![(traced, calls)];
    for options in [&[][..], &["--no-dispatch"][..]] {
        let out = dir.join("rec");
        let _ = std::fs::remove_dir_all(&out);
        let recorded = run(
            weft()
                .args(["syscalls", "record"])
                .args(options)
                .arg("-o")
                .arg(&out)
                .arg("--")
                .args(command),
            Duration::from_secs(120),
        );
        let calls = parse_shown(
            &run(
                weft().args(["syscalls", "show"]).arg(&out),
                Duration::from_secs(60),
            )
            .stdout,
        );
        runs.push((recorded, calls));
    }
    runs
}

/// A call still blocked when its process is killed (`timeout` ends a
/// `cat` waiting on a pipe): its record, kept in the thread's block while
/// it ran, is written when weft finds the process gone, so the record
/// has the `read` strace shows as `= ? ERESTARTSYS`. Before, a rewritten
/// site's call (`--no-dispatch`) had no record at all.
#[test]
fn a_call_blocked_when_its_process_is_killed_is_recorded() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let dir = scratch("syscalls-left-killed");
    let runs = strace_then_weft(&dir, &["sh", "-c", "sleep 2 | timeout 0.5 cat"]);
    let unfinished = |calls: &[(String, String, String)]| -> usize {
        (calls.iter())
            .filter(|(_, name, result)| name == "read" && result == "?")
            .count()
    };
    for (k, (finished, calls)) in runs.iter().enumerate() {
        assert_eq!(finished.status, 124, "run {k}: {}", finished.stderr);
        assert_eq!(
            unfinished(calls),
            1,
            "run {k} (strace, weft, --no-dispatch): cat's read"
        );
    }
}

/// A `write` whose reader has gone (`yes | head -1`) fails with `EPIPE`,
/// and its `SIGPIPE` kills `yes` as the call returns: nothing of it runs to
/// write the result. The shell's `wait4` says `SIGPIPE` killed it, so its
/// last write failed with `EPIPE`, as strace shows (`weft_syscalls::killed`).
#[test]
fn a_write_its_sigpipe_ended_failed_with_epipe() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let dir = scratch("syscalls-left-sigpipe");
    let runs = strace_then_weft(&dir, &["sh", "-c", "yes | head -1"]);
    // The last write of each process that wrote more than a line.
    let last_writes = |calls: &[(String, String, String)]| -> Vec<String> {
        let mut last: std::collections::BTreeMap<&str, &str> = Default::default();
        for (tid, name, result) in calls {
            if name == "write" {
                last.insert(tid, result);
            }
        }
        (last.into_values())
            .filter(|r| *r != "2")
            .map(String::from)
            .collect()
    };
    for (k, (finished, calls)) in runs.iter().enumerate() {
        assert_eq!(finished.stdout, "y\n", "run {k}: {}", finished.stderr);
        assert_eq!(
            last_writes(calls),
            ["EPIPE"],
            "run {k} (strace, weft, --no-dispatch): yes's last write"
        );
    }
    // `yes` itself under weft, its reader outside: weft reaps it, and
    // notes what killed it (no `wait4` of the workload's says).
    let out = dir.join("rec-yes");
    let _ = std::fs::remove_dir_all(&out);
    let piped = run(
        std::process::Command::new("sh").arg("-c").arg(format!(
            "'{}' syscalls record -o '{}' -- yes | head -1",
            env!("CARGO_BIN_EXE_weft"),
            out.display()
        )),
        Duration::from_secs(120),
    );
    assert_eq!(piped.stdout, "y\n", "{}", piped.stderr);
    assert!(
        piped.stderr.contains("killed by SIGPIPE"),
        "{}",
        piped.stderr
    );
    let shown = shown_lines(&out).1;
    assert_eq!(last_writes(&shown), ["EPIPE"], "yes alone under weft");
}

/// `weft syscalls show OUT` of a record with calls dropped, which says so
/// and exits with 1: its lines as `parse_shown` reads them.
fn shown_with_drops(out: &Path) -> (Finished, Vec<(String, String, String)>) {
    let shown = run(
        weft().args(["syscalls", "show"]).arg(out),
        Duration::from_secs(60),
    );
    let said = shown.stderr.contains("dropped while recording");
    assert!(
        shown.status == 0 || shown.status == 1 && said,
        "{}",
        shown.stderr
    );
    let lines = parse_shown(&shown.stdout);
    (shown, lines)
}

/// A read of standard input that the record's handler left: the rerun
/// waits for its own signal there (`pause`) instead of reading, so it
/// neither takes the rerun's input nor returns early from an input that
/// ends (the rerun's is empty: a read made again returned 0 at once, and
/// the program went another way; a session-26 new-user trial's `perl`).
#[test]
fn a_read_of_input_the_record_left_takes_no_input_in_the_rerun() {
    let target = build("syscalls_left", &O2);
    let dir = scratch("syscalls-left-stdin");
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    // Standard input a pipe whose writer writes nothing for a second.
    let recorded = run(
        std::process::Command::new("sh")
            .args(["-c", "sleep 1 | exec \"$@\"", "sh"])
            .arg(env!("CARGO_BIN_EXE_weft"))
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .arg("--")
            .arg(&target)
            .arg("stdin"),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    assert_eq!(recorded.stdout, "alarm\nleft the read\n");
    let rerun = reexec(&out, &target, &["stdin".as_ref()]);
    assert_eq!(rerun.status, 0, "{}", rerun.stderr);
    assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
}

/// The "(N dropped)" of weft's last line.
fn dropped(stderr: &str) -> u64 {
    stderr
        .rsplit_once(" dropped)")
        .and_then(|(head, _)| head.rsplit_once('(')?.1.parse().ok())
        .unwrap_or_else(|| panic!("no dropped count: {stderr}"))
}

/// A handler that jumps out of weft's own code (a 50 µs timer while the
/// program loops on `getppid`) leaves a record half-written: the thread's
/// later records are written over it, so the record goes on to the end.
/// Only that record and the calls of a handler that runs inside a record
/// being written (the `rt_sigprocmask` of its `siglongjmp`) are dropped,
/// and counted: at most two a jump. Before, every record after the first
/// such jump was dropped.
#[test]
fn a_record_a_handler_jumps_out_of_does_not_stop_the_recording() {
    let target = build("syscalls_left", &O2);
    let dir = scratch("syscalls-left-storm");
    let (out, recorded) = record_into(&dir, &target, &["storm".as_ref(), "20000".as_ref()]);
    let (calls, jumps) = recorded
        .stdout
        .trim()
        .strip_prefix("calls ")
        .and_then(|t| t.split_once(" jumps "))
        .map(|(c, j)| (c.parse::<u64>().unwrap(), j.parse::<u64>().unwrap()))
        .unwrap_or_else(|| panic!("{}", recorded.stdout));
    assert!(calls >= 20000, "{calls} calls");
    assert!(jumps > 20, "the timer cut the loop {jumps} times");
    assert!(
        dropped(&recorded.stderr) <= 2 * jumps,
        "{}",
        recorded.stderr
    );
    let (shown, lines) = shown_with_drops(&out);
    let getppids = lines.iter().filter(|(_, n, _)| n == "getppid").count() as u64;
    // A call a jump cut before it was made is counted by the loop and
    // not made; one cut after it returned is recorded as left.
    assert!(getppids + jumps >= calls, "{getppids} of {calls}");
    let last = lines.last().map(|l| l.1.as_str());
    assert_eq!(last, Some("exit_group"), "{}", shown.stdout);
}

/// Threads cancelled asynchronously while they loop on `getppid`: the
/// cancellation comes anywhere, inside a record weft's code is writing
/// too. Each thread's `exit` is recorded, as strace has it (before, a
/// thread cancelled in the middle of a record had no call recorded after
/// it: 2 to 6 exits of 40 here).
#[test]
fn threads_cancelled_anywhere_have_their_exit_recorded() {
    let target = build("syscalls_async_cancel", &O2);
    let dir = scratch("syscalls-async-cancel");
    let (out, recorded) = record_into(&dir, &target, &[]);
    assert_eq!(recorded.stdout, "cancelled 40\n");
    let (_, lines) = shown_with_drops(&out);
    let mut exited: Vec<&str> = lines
        .iter()
        .filter(|(_, n, _)| n == "exit")
        .map(|(t, _, _)| t.as_str())
        .collect();
    exited.sort();
    exited.dedup();
    assert_eq!(exited.len(), 40, "{exited:?}");
}

/// A process whose recorded pid is taken when it is re-executed (here by
/// a `sleep` the test starts with that pid) runs with another, and weft
/// says so. glibc's cancellation handler acts only on a signal whose
/// sender is `getpid()`, which the rerun answers with the recorded id:
/// the canceller's own signal, whose sender is the rerun's pid, is
/// dropped, and the rerun raises the recorded one (`weft_abi::delivery`),
/// with the recorded sender, so that the program re-executes to its end.
/// (From a record without its deliveries, made by weft before they were
/// recorded, the cancellation was ignored and the rerun stalled at the
/// join, which weft named.) The first process, and a forked child.
#[test]
fn a_rerun_without_its_recorded_pid_cancels_with_the_recorded_sender() {
    let target = build("syscalls_left", &O2);
    let _pids = PIDS.lock().unwrap_or_else(|e| e.into_inner());
    for args in [&[][..], &["fork"][..]] {
        let dir = scratch(&format!("syscalls-left-cancel-{}", args.len()));
        let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
        let (out, recorded) = record_into(&dir, &target, &args);
        assert!(
            recorded.stdout.contains("cancelled\n"),
            "{}",
            recorded.stdout
        );
        let shown = shown_lines(&out).1;
        let pid: i32 = match args.is_empty() {
            true => shown[0].0.parse().expect("a pid"),
            false => (shown.iter().find(|(_, name, _)| name == "clone"))
                .and_then(|(_, _, child)| child.parse().ok())
                .expect("the child's pid"),
        };
        let mut holder = hold_pid(pid);
        let rerun = run(
            weft()
                .args(["syscalls", "reexec", "--stall", "1s"])
                .arg(&out)
                .arg("--")
                .arg(&target)
                .args(&args),
            Duration::from_secs(120),
        );
        let _ = holder.kill();
        let _ = holder.wait();
        let said = match args.is_empty() {
            true => format!(
                "runs as pid {}, not as its recorded {pid}",
                rerun_pid(&rerun.stderr)
            ),
            false => format!("ran with other pids than recorded: {pid} as "),
        };
        assert!(rerun.stderr.contains(&said), "{said}: {}", rerun.stderr);
        assert_eq!(rerun.status, 0, "{args:?}: {}", rerun.stderr);
        assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
    }
}

/// The pid weft says a rerun's first process runs as, 0 if it says none.
fn rerun_pid(stderr: &str) -> i32 {
    stderr
        .split("runs as pid ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A `sleep` with process id `pid`, started when the kernel's last given
/// id is the one before (`/proc/sys/kernel/ns_last_pid`, root only): the
/// test's own children are the only others started meanwhile, so a few
/// tries get it. The last given id is put back after, so that the ids
/// the kernel gives next are not those other tests' records have (their
/// reruns' processes get their recorded pids when those are free); and
/// the tests that need their recorded pids wait meanwhile ([`PIDS`]).
fn hold_pid(pid: i32) -> std::process::Child {
    const LAST: &str = "/proc/sys/kernel/ns_last_pid";
    let last = || -> i32 {
        std::fs::read_to_string(LAST)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let before = last();
    for _ in 0..50 {
        std::fs::write(LAST, (pid - 1).to_string())
            .expect("writing ns_last_pid (the tests run as root)");
        let mut child = std::process::Command::new("sleep")
            .arg("120")
            .spawn()
            .expect("sleep");
        if child.id() as i32 == pid {
            let _ = std::fs::write(LAST, before.max(last()).to_string());
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("no sleep got pid {pid} in 50 tries");
}

/// Held by a test that holds a pid, and by one whose rerun needs its
/// recorded pids.
static PIDS: std::sync::Mutex<()> = std::sync::Mutex::new(());
