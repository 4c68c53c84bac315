//! `weft syscalls reexec`: the real program run again, fed from its
//! record, prints what the recorded run printed, byte for byte, though
//! its time (read through the vDSO), its pid, its thread's id, its random
//! bytes and its input are new; a call the record does not have ends the
//! rerun with a report of both and the call's stack (gdb's).

use super::record_into;
use crate::support::*;
use std::process::Command;
use std::time::Duration;

/// `weft syscalls show OUT`, which must succeed.
fn shown(out: &std::path::Path) -> Finished {
    let shown = run(
        weft().args(["syscalls", "show"]).arg(out),
        Duration::from_secs(60),
    );
    assert_eq!(shown.status, 0, "{}", shown.stderr);
    shown
}

/// `weft ARGS...` with `input` on its standard input (a pipe).
fn with_input(input: &str, args: &[&std::ffi::OsStr]) -> Finished {
    run(
        Command::new("sh")
            .args(["-c", "printf '%s' \"$0\" | exec \"$@\"", input])
            .arg(env!("CARGO_BIN_EXE_weft"))
            .args(args),
        Duration::from_secs(120),
    )
}

/// `weft syscalls record -o OUT -- TARGET` or `weft syscalls reexec OUT
/// -- TARGET` (`how`) with `input` on standard input.
fn weft_with_input(
    input: &str,
    how: &str,
    out: &std::path::Path,
    target: &std::path::Path,
) -> Finished {
    let mut args: Vec<&std::ffi::OsStr> = vec!["syscalls".as_ref(), how.as_ref()];
    if how == "record" {
        args.push("-o".as_ref());
    }
    args.extend([out.as_os_str(), "--".as_ref(), target.as_os_str()]);
    with_input(input, &args)
}

#[test]
fn a_rerun_prints_what_the_recorded_run_printed() {
    let target = build("syscalls_reexec", &O2);
    let dir = scratch("syscalls-reexec");
    let out = dir.join("rec");
    let recorded = weft_with_input("recorded input", "record", &out, &target);
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    assert!(
        recorded.stdout.contains("read 14: recorded input"),
        "{}",
        recorded.stdout
    );
    // The environment is in the record, readable by its owner only.
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(out.join("command.json"))
            .unwrap()
            .permissions(),
    );
    assert_eq!(mode & 0o777, 0o600, "command.json's mode {mode:o}");
    // Run on its own, the program prints other ids and bytes: the
    // comparison below can fail.
    let plain = with_input(
        "other input",
        &[
            "run".as_ref(),
            "--count".as_ref(),
            "main".as_ref(),
            "--".as_ref(),
            target.as_os_str(),
        ],
    );
    assert_ne!(plain.stdout, recorded.stdout);
    // Its clocks are read in the vDSO, without a system call: the record
    // has them as the program printed them.
    let time_line = |out: &str| {
        out.lines()
            .find(|l| l.starts_with("main time "))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no time printed: {out}"))
    };
    let printed = time_line(&recorded.stdout);
    assert_ne!(time_line(&plain.stdout), printed, "the clock moved on");
    let realtime = printed
        .split_whitespace()
        .skip_while(|w| *w != "realtime")
        .nth(1)
        .and_then(|t| t.split_once('.'))
        .map(|(s, ns)| format!("{{tv_sec={s}, tv_nsec={}}}", ns.parse::<u64>().unwrap()))
        .expect("realtime S.N");
    let shown = run(
        weft().args(["syscalls", "show"]).arg(&out),
        Duration::from_secs(60),
    );
    assert!(
        shown.stdout.contains(&format!(
            "clock_gettime(CLOCK_REALTIME, {realtime}) = 0 (vDSO)"
        )),
        "{realtime} in\n{}",
        shown.stdout
    );
    let rerun = weft_with_input("other input", "reexec", &out, &target);
    assert_eq!(rerun.status, 0, "{}", rerun.stderr);
    assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
    assert!(
        rerun.stderr.contains("answered from the record")
            && rerun.stderr.contains("process and thread ids")
            && rerun.stderr.contains("random bytes")
            && rerun.stderr.contains("clocks")
            && rerun.stderr.contains("input from outside the workload"),
        "{}",
        rerun.stderr
    );
    // Its thread's id, which the loader asks the kernel for with
    // `set_tid_address` before `main`, is another number in the rerun:
    // no different result.
    assert!(
        !rerun.stderr.contains("returned other results"),
        "{}",
        rerun.stderr
    );
}

/// A static program's start-up code (`brk`, `arch_prctl`, ... before
/// `main`) is fed too, each call once: the probes placed at its first
/// instruction follow it to `main` (they went in a second time at its
/// entry before, and the rerun diverged at its third call).
#[test]
fn a_static_program_re_executes_from_its_first_call() {
    let target = build("syscalls_reexec", &O2_STATIC);
    let dir = scratch("syscalls-reexec-static");
    let out = dir.join("rec");
    let recorded = weft_with_input("recorded input", "record", &out, &target);
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    let first = shown(&out);
    assert!(
        first
            .stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("brk(NULL)")),
        "the record begins at the start-up code's first call: {}",
        first.stdout
    );
    let rerun = weft_with_input("other input", "reexec", &out, &target);
    assert_eq!(rerun.status, 0, "{}", rerun.stderr);
    assert!(!rerun.stderr.contains("diverged"), "{}", rerun.stderr);
    assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
}

#[test]
fn a_call_the_record_does_not_have_ends_the_rerun() {
    let target = build("syscalls_reexec", &O2);
    let dir = scratch("syscalls-reexec-diverges");
    let (out, _) = record_into(&dir, &target, &[]);
    let rerun = super::reexec(&out, &target, &["/etc/hostname".as_ref()]);
    assert_eq!(rerun.status, 1, "{}\n{}", rerun.stderr, rerun.stdout);
    let line = rerun
        .stderr
        .lines()
        .find(|l| l.contains("diverged"))
        .unwrap_or_else(|| panic!("{}", rerun.stderr));
    assert!(
        line.contains("it made openat(AT_FDCWD, \"/etc/hostname\", O_RDONLY)")
            && line.contains("where the record has getrandom("),
        "{line}"
    );
    assert!(
        !rerun.stdout.contains("child"),
        "the rerun was ended: {}",
        rerun.stdout
    );
    // By weft, which says why: not reported as a kill, as if the program
    // had crashed (a session-24 new-user trial read it so).
    assert!(!rerun.stderr.contains("was killed by"), "{}", rerun.stderr);
    // The call's stack, against gdb's at the same `open`: the program's
    // two frames under it, at the same return addresses.
    let stack: Vec<&str> = rerun
        .stderr
        .lines()
        .skip_while(|l| !l.contains("its call stack"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(
        stack
            .first()
            .is_some_and(|f| f.starts_with("libc.so.6:open")),
        "{}",
        rerun.stderr
    );
    if !have("gdb") {
        skip("gdb is not installed (apt-get install gdb): the stack is not compared");
        return;
    }
    let input = dir.join("input");
    std::fs::write(&input, "input").unwrap();
    let gdb = run(
        Command::new("gdb")
            .args(["-q", "-batch", "-ex", "break open", "-ex"])
            .arg(format!("run /etc/hostname < {}", input.display()))
            .args(["-ex", "frame 1", "-ex", "info symbol $pc"])
            .args(["-ex", "frame 2", "-ex", "info symbol $pc"])
            .arg(&target),
        Duration::from_secs(60),
    );
    // `touch + 13 in section .text of /path`: as weft writes it,
    // `syscalls_reexec:touch+0xd`.
    let program = target.file_name().unwrap().to_string_lossy();
    let expected: Vec<String> = gdb
        .stdout
        .lines()
        .filter_map(|l| {
            let (symbol, _) = l.split_once(" in section ")?;
            let (function, offset) = symbol.split_once(" + ")?;
            Some(format!(
                "{program}:{function}+{:#x}",
                offset.parse::<u64>().ok()?
            ))
        })
        .collect();
    assert_eq!(expected.len(), 2, "gdb: {}\n{}", gdb.stdout, gdb.stderr);
    assert_eq!(
        stack[1..3],
        expected[..],
        "weft's stack (left), gdb's (right)"
    );
}

/// Re-executes `command` (run in `work`) from its record in `out` with
/// `--json`: it must run to its end, every recorded call made again and
/// every dependency `deps` reports kept (the later call began after the
/// earlier one returned, both stamped by the feed probes with the TSC,
/// within 10 µs: the TSCs of two CPUs of a virtual machine differ).
/// Returns the rerun.
fn reexec_keeps_every_dependency(
    out: &std::path::Path,
    work: &std::path::Path,
    command: &[&str],
) -> Finished {
    let report = out.with_extension("reexec.json");
    let rerun = run(
        weft()
            .current_dir(work)
            .args(["syscalls", "reexec", "--json"])
            .arg(&report)
            .arg(out)
            .arg("--")
            .args(command),
        Duration::from_secs(300),
    );
    assert_eq!(rerun.status, 0, "{}\n{}", rerun.stderr, rerun.stdout);
    assert!(!rerun.stderr.contains("diverged"), "{}", rerun.stderr);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let calls = report["calls"].as_array().unwrap();
    let deps = run(
        weft().args(["syscalls", "deps", "--json"]).arg(out),
        Duration::from_secs(60),
    );
    let deps: serde_json::Value = serde_json::from_str(&deps.stdout).unwrap();
    // An edge from a call that never returned in the record (a process's
    // end, which a write that found no reader waits for) has no return to
    // stamp.
    let shown = run(
        weft().args(["syscalls", "show", "--json"]).arg(out),
        Duration::from_secs(60),
    );
    let returned: Vec<bool> = shown
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["result"].is_i64())
        .collect();
    let edges: Vec<&serde_json::Value> = deps["edges"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| returned[e["from"].as_u64().unwrap() as usize])
        .collect();
    let mut kept = 0;
    for e in &edges {
        let (from, to) = (
            &calls[e["from"].as_u64().unwrap() as usize],
            &calls[e["to"].as_u64().unwrap() as usize],
        );
        // A blocking read, which waits for its bytes by itself, began
        // before the write that brought them perhaps, but returned after
        // it began.
        let (earlier, later) = match e["waits_by_itself"].as_bool() {
            Some(true) => (from["began_s"].as_f64(), to["ended_s"].as_f64()),
            _ => (from["ended_s"].as_f64(), to["began_s"].as_f64()),
        };
        let (Some(earlier), Some(later)) = (earlier, later) else {
            continue;
        };
        // Stamped with the TSC on two CPUs, which this virtual machine
        // keeps up to about 70 ticks apart (a thread that reads another's
        // stamp can read an earlier TSC).
        assert!(earlier <= later + 10e-6, "{e}: {from} then {to}");
        kept += 1;
    }
    assert!(
        kept >= 5 && kept * 10 >= edges.len() * 9,
        "{kept} of {} edges",
        edges.len()
    );
    rerun
}

/// `make -j2` on a two-file C project (make, two compilers, the linker:
/// ten processes and their pipes) recorded, its outputs removed, then
/// re-executed: the rerun builds the program again, to the last recorded
/// call, with every dependency kept.
#[test]
fn make_j2_re_executes_with_its_dependencies() {
    for tool in ["make", "gcc"] {
        if !have(tool) {
            skip(&format!(
                "{tool} is not installed (apt-get install make gcc)"
            ));
            return;
        }
    }
    let dir = scratch("syscalls-reexec-make");
    let work = dir.join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        work.join("a.c"),
        "#include <stdio.h>\nint b(void);\nint main(void) { printf(\"%d\\n\", b()); return 0; }\n",
    )
    .unwrap();
    std::fs::write(work.join("b.c"), "int b(void) { return 42; }\n").unwrap();
    std::fs::write(
        work.join("Makefile"),
        "prog: a.o b.o\n\tgcc -o prog a.o b.o\n%.o: %.c\n\tgcc -c -o $@ $<\n",
    )
    .unwrap();
    let out = dir.join("rec");
    let recorded = run(
        weft()
            .current_dir(&work)
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .args(["--", "make", "-j2"]),
        Duration::from_secs(300),
    );
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    for built in ["a.o", "b.o", "prog"] {
        std::fs::remove_file(work.join(built)).unwrap();
    }
    let rerun = reexec_keeps_every_dependency(&out, &work, &["make", "-j2"]);
    assert_eq!(rerun.stdout, recorded.stdout);
    let built = run(
        &mut Command::new(work.join("prog")),
        Duration::from_secs(10),
    );
    assert_eq!(built.stdout, "42\n");
}

/// A shell pipeline whose reader takes the data in pieces of the sizes
/// the writer's timing gave it: re-executed, each read takes the recorded
/// bytes (it waits for the write that brought them, and asks for no
/// more), so the rerun makes the recorded calls to the end and prints the
/// recorded output, `date`'s nanoseconds included.
#[test]
fn a_pipeline_re_executes_with_its_dependencies() {
    let dir = scratch("syscalls-reexec-pipeline");
    let script = "seq 1 20000 | sort -rn | tail -3; date +%s%N";
    let out = dir.join("rec");
    let recorded = run(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", script]),
        Duration::from_secs(300),
    );
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    assert!(
        recorded.stdout.starts_with("3\n2\n1\n"),
        "{}",
        recorded.stdout
    );
    let rerun = reexec_keeps_every_dependency(&out, &dir, &["sh", "-c", script]);
    assert_eq!(rerun.stdout, recorded.stdout);
}

/// Readers that end before their writer is done: `head` closes the pipe,
/// a shell's `read` leaves it to its exit. The writer's next write
/// found no reader in the record (`EPIPE`, and the `SIGPIPE` that ended
/// it): re-executed, that write waits for the reader's close or end
/// (`deps`' broken pipes; an end is done once weft sees its thread gone),
/// so the rerun makes the recorded calls and prints the recorded output,
/// three times running (before, about one rerun in four went on writing
/// and diverged). Replayed, neither waits for ever.
#[test]
fn a_pipeline_whose_reader_ends_first_re_executes() {
    let dir = scratch("syscalls-reexec-epipe");
    for (name, script, printed) in [
        (
            "head",
            "seq 1 20000 | sort -rn | head -3",
            "20000\n19999\n19998\n",
        ),
        // A shell of its own, not a subshell: a forked one inherits
        // whether its parent had caught a SIGCHLD yet, which decides a
        // `wait4` of dash's (a signal's timing, docs/syscalls.md).
        ("read", "seq 1 100000 | sh -c 'read x; echo $x'", "1\n"),
    ] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        let (out, recorded) = record_into(
            &dir.join(name),
            "sh".as_ref(),
            &["-c".as_ref(), script.as_ref()],
        );
        assert_eq!(recorded.stdout, printed);
        let shown = shown(&out);
        assert!(
            shown.stdout.contains("WTERMSIG(s) == SIGPIPE"),
            "{script}: the writer died of SIGPIPE\n{}",
            shown.stdout
        );
        for _ in 0..3 {
            let rerun = reexec_keeps_every_dependency(&out, &dir, &["sh", "-c", script]);
            assert_eq!(rerun.stdout, recorded.stdout, "{script}: {}", rerun.stderr);
        }
        let replayed = run(
            weft().args(["syscalls", "replay"]).arg(&out),
            Duration::from_secs(120),
        );
        assert_eq!(replayed.status, 0, "{script}: {}", replayed.stderr);
    }
}

/// Python's `subprocess.run(..., capture_output=True)`: the parent
/// `poll`s its child's two pipes, and which of them is ready at each
/// `poll` is timing (here the child writes one, sleeps, then the other).
/// Re-executed, each `poll` is answered with the recorded readiness after
/// the writes, closes and exit that made it so (`deps`' ready polls), so
/// the parent reads the pipes in the recorded order: three reruns in a
/// row make every recorded call (before, three of four diverged at the
/// first read, of the other pipe).
#[test]
fn a_parent_polling_its_childs_pipes_re_executes() {
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        skip("Debian's python3 missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    let dir = scratch("syscalls-reexec-poll");
    let script = "import subprocess; r = subprocess.run(['sh', '-c', 'echo out; sleep 0.05; \
                  echo err >&2'], capture_output=True); print(r.stdout, r.stderr)";
    let (out, recorded) = record_into(&dir, python.as_ref(), &["-c".as_ref(), script.as_ref()]);
    assert_eq!(recorded.stdout, "b'out\\n' b'err\\n'\n");
    let shown = shown(&out);
    assert!(
        shown.stdout.contains("revents=POLLIN"),
        "the record's polls say what was ready:\n{}",
        shown.stdout
    );
    for _ in 0..3 {
        let rerun = reexec_keeps_every_dependency(&out, &dir, &[python, "-c", script]);
        assert_eq!(rerun.stdout, recorded.stdout, "{}", rerun.stderr);
        assert!(
            rerun
                .stderr
                .contains("which descriptors were ready (poll, epoll, select)"),
            "{}",
            rerun.stderr
        );
    }
}

/// ULTra's prediction by re-execution: `syscalls_spin` (two spins of
/// fixed work and a sleep between two calls) recorded once, then
/// re-executed in a control group with half a CPU: the time its fed calls
/// span predicts the elapsed time of the program itself in such a group
/// (`weft syscalls actual`) within 20 %, both 1.25x or more the unlimited
/// run (a measurement other tests disturbed is taken again, three times
/// at most). With --memory-max the rerun's group used no more than the
/// limit.
#[test]
fn a_rerun_under_half_a_cpu_predicts_the_programs_time() {
    let target = build("syscalls_spin", &O2);
    let dir = scratch("syscalls-reexec-predict");
    let (out, _) = record_into(&dir, &target, &["100".as_ref()]);
    let report = dir.join("reexec.json");
    let predicted = |limit: &[&str]| {
        let r = run(
            weft()
                .args(["syscalls", "reexec", "--json"])
                .arg(&report)
                .args(limit)
                .arg(&out)
                .arg("--")
                .arg(&target)
                .arg("100"),
            Duration::from_secs(60),
        );
        assert_eq!(r.status, 0, "reexec {limit:?}: {}", r.stderr);
        serde_json::from_str::<serde_json::Value>(&std::fs::read_to_string(&report).unwrap())
            .unwrap()
    };
    super::half_a_cpu_is_predicted(&target, &predicted, "predicted_s");
}

/// Which child a `wait4` finds is the rerun's timing: here the children
/// end in the other order in the rerun (their delays, read from files,
/// swapped after the record). Each `wait4` still finds what the record's
/// did: none for the one with `WNOHANG` that found none (answered), and
/// the recorded child for the others (each waits for that one, the one
/// with `WNOHANG` that found one too), so the rerun prints what the record
/// printed and makes every recorded call.
#[test]
fn each_wait_reaps_the_recorded_child_whichever_ends_first() {
    let target = build("syscalls_reap", &O2);
    let dir = scratch("syscalls-reexec-reap");
    let delays = |a: &str, b: &str| {
        std::fs::write(dir.join("delay_a"), a).unwrap();
        std::fs::write(dir.join("delay_b"), b).unwrap();
    };
    // The parent looks 100 ms on: before either ended, then after a did.
    for (recorded_a, printed, answered) in [
        ("150", "early none, first a, then b\n", 1),
        ("050", "early a, first a, then b\n", 0),
    ] {
        delays(recorded_a, "300");
        let out = dir.join("rec");
        let _ = std::fs::remove_dir_all(&out);
        let recorded = run(
            weft()
                .current_dir(&dir)
                .args(["syscalls", "record", "-o"])
                .arg(&out)
                .arg("--")
                .arg(&target),
            Duration::from_secs(60),
        );
        assert_eq!(recorded.status, 0, "{}", recorded.stderr);
        assert_eq!(recorded.stdout, printed);
        // Run itself so, b ends before the parent looks, then a.
        delays("300", "000");
        let itself = run(
            Command::new(&target).current_dir(&dir),
            Duration::from_secs(10),
        );
        assert_eq!(itself.stdout, "early b, first b, then a\n");
        let rerun = run(
            weft()
                .current_dir(&dir)
                .args(["syscalls", "reexec"])
                .arg(&out)
                .arg("--")
                .arg(&target),
            Duration::from_secs(60),
        );
        assert_eq!(rerun.status, 0, "{}", rerun.stderr);
        assert!(!rerun.stderr.contains("diverged"), "{}", rerun.stderr);
        assert_eq!(rerun.stdout, recorded.stdout);
        assert_eq!(
            rerun
                .stderr
                .contains("1 children not ended yet (wait4 WNOHANG)"),
            answered == 1,
            "{}",
            rerun.stderr
        );
    }
}

/// Which pipe an `epoll_wait` or a `select` finds ready first is timing
/// too: here the children write in the other order in the rerun (their
/// delays swapped after the record). Each wait is answered with what it
/// found in the record once the write that made its pipe ready is done
/// (`deps` maps an epoll event's data to the pipe through the `epoll_ctl`
/// that registered it, a `select`'s bits to descriptors), so the parent
/// reads the pipes in the recorded order and prints what it did.
#[test]
fn a_wait_for_pipes_reports_the_recorded_pipe_whichever_is_written_first() {
    let target = build("syscalls_ready", &O2);
    let dir = scratch("syscalls-reexec-ready");
    let delays = |a: &str, b: &str| {
        std::fs::write(dir.join("delay_a"), a).unwrap();
        std::fs::write(dir.join("delay_b"), b).unwrap();
    };
    for (how, call) in [("epoll", "epoll_wait("), ("select", "pselect6(")] {
        delays("100", "300");
        let out = dir.join(format!("rec-{how}"));
        let recorded = run(
            weft()
                .current_dir(&dir)
                .args(["syscalls", "record", "-o"])
                .arg(&out)
                .arg("--")
                .arg(&target)
                .arg(how),
            Duration::from_secs(60),
        );
        assert_eq!(recorded.status, 0, "{}", recorded.stderr);
        assert_eq!(recorded.stdout, "read a, then b\n");
        delays("300", "000");
        let itself = run(
            Command::new(&target).arg(how).current_dir(&dir),
            Duration::from_secs(10),
        );
        assert_eq!(
            itself.stdout, "read b, then a\n",
            "{how}: the swap changes the order"
        );
        let rerun = run(
            weft()
                .current_dir(&dir)
                .args(["syscalls", "reexec"])
                .arg(&out)
                .arg("--")
                .arg(&target)
                .arg(how),
            Duration::from_secs(60),
        );
        assert_eq!(rerun.status, 0, "{how}: {}", rerun.stderr);
        assert!(
            !rerun.stderr.contains("diverged"),
            "{how}: {}",
            rerun.stderr
        );
        assert_eq!(rerun.stdout, recorded.stdout, "{how}");
        assert!(
            rerun
                .stderr
                .contains("2 which descriptors were ready (poll, epoll, select)"),
            "{how}: {}",
            rerun.stderr
        );
        // The record's view: a wait after the write that readied its
        // pipe, or the writer's end (which closed it). Only one that
        // returned before the wait did: a write that woke the waiter may
        // return after it, and the TSCs leave the two unordered then (the
        // read after the wait waits for the bytes by itself), so one of
        // the two may have none.
        let deps = run(
            weft().args(["syscalls", "deps", "--json"]).arg(&out),
            Duration::from_secs(60),
        );
        let deps: serde_json::Value = serde_json::from_str(&deps.stdout).unwrap();
        let shown = shown(&out);
        let lines: Vec<&str> = shown.stdout.lines().collect();
        let waits_after_writes: std::collections::BTreeSet<u64> = deps["edges"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| {
                let line = |k: &str| lines[e[k].as_u64().unwrap() as usize];
                line("to").contains(call)
                    && (line("from").contains("write(") || line("from").contains("exit_group("))
            })
            .map(|e| e["to"].as_u64().unwrap())
            .collect();
        assert!(!waits_after_writes.is_empty(), "{how}: {}", deps["edges"]);
    }
}

/// Whether a join waits on a futex is timing: the rerun's thread, whose
/// life a file says (its read made again), ends after the main thread's
/// join where the recorded one ended before it, or the other way. The
/// rerun makes the futex wait the record lacks, or passes over the one it
/// has, instead of diverging, and says so.
#[test]
fn a_join_that_waits_in_one_run_only_re_executes() {
    let target = build("syscalls_join", &O2);
    let dir = scratch("syscalls-join");
    let life = dir.join("life");
    for (recorded, rerun, said) in [
        (
            "0000",
            "0400",
            "1 futex call(s) the record did not have were made",
        ),
        ("0400", "0000", "1 recorded ones were not needed"),
    ] {
        std::fs::write(&life, recorded).unwrap();
        let (out, first) = record_into(&dir, &target, &[life.as_os_str()]);
        assert_eq!(first.stdout, "thread\njoined\n");
        std::fs::write(&life, rerun).unwrap();
        let again = super::reexec(&out, &target, &[life.as_os_str()]);
        assert_eq!(again.status, 0, "{recorded} then {rerun}: {}", again.stderr);
        assert_eq!(again.stdout, first.stdout);
        assert!(again.stderr.contains(said), "{}", again.stderr);
    }
}
