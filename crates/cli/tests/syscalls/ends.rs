//! How `weft syscalls reexec` ends a rerun that cannot reach the end of
//! its record: one whose record ends inside a call, and one whose call
//! waits for what is not part of the rerun.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

/// A program killed while blocked in a read nobody would end: its record
/// ends inside that read, and its rerun, blocked there too, is ended once
/// it has been in the read as long as the record went on after it began,
/// with a line that says so, rather than waiting for ever.
#[test]
fn a_rerun_ends_where_its_record_ends_inside_a_call() {
    let target = build("syscalls_blocked", &O2);
    let dir = scratch("syscalls-reexec-blocked");
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let stdout = dir.join("stdout");
    let weft_run = weft()
        .args(["syscalls", "record", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&target)
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut weft_run = KillOnDrop(weft_run);
    let pid: i32 = (0..200)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(50));
            let text = std::fs::read_to_string(&stdout).ok()?;
            text.split_whitespace().nth(1)?.parse().ok()
        })
        .expect("the program said its pid within 10 s");
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert!(
        wait_bounded(&mut weft_run.0, Duration::from_secs(30)).is_some(),
        "weft ended with its program"
    );
    let rerun = run(
        weft()
            .args(["syscalls", "reexec"])
            .arg(&out)
            .arg("--")
            .arg(&target),
        Duration::from_secs(60),
    );
    assert!(
        rerun.stderr.contains("the record ends inside read(3"),
        "{}",
        rerun.stderr
    );
    assert_ne!(rerun.status, 0, "the rerun was ended, as the record was");
}

/// A call that waits for something outside the rerun (here the other end
/// of a FIFO, which a thread of the test opened in the record and nobody
/// opens in the rerun) would wait for ever: the rerun is ended once it
/// has waited `--stall` past ten times the recorded call's time, with a
/// line that names the call.
#[test]
fn a_rerun_waiting_for_what_is_not_there_is_ended() {
    let dir = scratch("syscalls-reexec-stall");
    let made = run(
        Command::new("mkfifo").arg(dir.join("f")),
        Duration::from_secs(10),
    );
    assert_eq!(made.status, 0, "mkfifo: {}", made.stderr);
    let fifo = dir.join("f");
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(fifo, "hello\n")
    });
    let out = dir.join("rec");
    let recorded = run(
        weft()
            .current_dir(&dir)
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .args(["--", "cat", "f"]),
        Duration::from_secs(60),
    );
    writer.join().unwrap().unwrap();
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    assert_eq!(recorded.stdout, "hello\n");
    let started = std::time::Instant::now();
    let rerun = run(
        weft()
            .current_dir(&dir)
            .args(["syscalls", "reexec", "--stall", "1s"])
            .arg(&out)
            .args(["--", "cat", "f"]),
        Duration::from_secs(60),
    );
    assert_eq!(rerun.status, 1, "{}", rerun.stderr);
    assert!(
        rerun.stderr.contains("the rerun stalled")
            && rerun
                .stderr
                .contains("openat(AT_FDCWD, \"f\", O_RDONLY) = 3"),
        "{}",
        rerun.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "ended after {:?}",
        started.elapsed()
    );
}
