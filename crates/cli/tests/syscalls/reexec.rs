//! `weft syscalls reexec`: the real program run again, fed from its
//! record, prints what the recorded run printed, byte for byte, though
//! its time (read through the vDSO), its pid, its thread's id, its random
//! bytes and its input are new; a call the record does not have ends the
//! rerun with a report of both and the call's stack (gdb's).

use super::record_into;
use crate::support::*;
use std::process::Command;
use std::time::Duration;

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

#[test]
fn a_rerun_prints_what_the_recorded_run_printed() {
    let target = build("syscalls_reexec", &O2);
    let dir = scratch("syscalls-reexec");
    let out = dir.join("rec");
    let recorded = with_input(
        "recorded input",
        &[
            "syscalls".as_ref(),
            "record".as_ref(),
            "-o".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            target.as_os_str(),
        ],
    );
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    assert!(
        recorded.stdout.contains("read 14: recorded input"),
        "{}",
        recorded.stdout
    );
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
    let rerun = with_input(
        "other input",
        &[
            "syscalls".as_ref(),
            "reexec".as_ref(),
            out.as_os_str(),
            "--".as_ref(),
            target.as_os_str(),
        ],
    );
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
}

#[test]
fn a_call_the_record_does_not_have_ends_the_rerun() {
    let target = build("syscalls_reexec", &O2);
    let dir = scratch("syscalls-reexec-diverges");
    let (out, _) = record_into(&dir, &target, &[]);
    let rerun = run(
        weft()
            .args(["syscalls", "reexec"])
            .arg(&out)
            .arg("--")
            .arg(&target)
            .arg("/etc/hostname"),
        Duration::from_secs(120),
    );
    assert_eq!(rerun.status, 1, "{}\n{}", rerun.stderr, rerun.stdout);
    let line = rerun
        .stderr
        .lines()
        .find(|l| l.contains("diverged"))
        .unwrap_or_else(|| panic!("{}", rerun.stderr));
    assert!(
        line.contains("it made openat(-100, \"/etc/hostname\"")
            && line.contains("where the record has getrandom("),
        "{line}"
    );
    assert!(
        !rerun.stdout.contains("child"),
        "the rerun was ended: {}",
        rerun.stdout
    );
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
