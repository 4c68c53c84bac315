//! Unwinding a thread blocked in a captured call: it waits in weft's
//! code (the program that makes the call, a relocated `syscall`, the
//! SIGSYS handler's call), whose unwind entries weft gives the C
//! unwinder; and the calls weft's stop to hook that unwinder interrupts.
//! Ground truth: the same program without weft.

use super::*;

/// A backtrace taken in a signal handler while the thread is blocked in
/// `read()` and in `syscall(SYS_read)`, and the destructors that
/// `pthread_cancel` runs there: as without weft, one frame of weft's code
/// (no module) between the signal frame and the C library's function
/// added. Each way the call is made: through the SIGSYS handler (the
/// first calls of a site), and rewritten (`--no-dispatch`: `read` made by
/// its program, `syscall()` relocated); dynamic and static (libgcc's
/// unwinder linked in).
#[test]
fn a_thread_blocked_in_a_call_unwinds_as_without_weft() {
    for variant in [&O2, &O2_STATIC] {
        let target = build("syscalls_unwind", variant);
        let plain = run(
            &mut std::process::Command::new(&target),
            Duration::from_secs(60),
        );
        assert_eq!(plain.status, 0, "{}", plain.stderr);
        assert!(
            plain.stdout.contains("tally destroyed 2"),
            "{}",
            plain.stdout
        );
        for options in [&[][..], &["--no-dispatch"][..]] {
            let dir = scratch(&format!("syscalls-unwind-{}", variant.name));
            let out = dir.join("rec");
            let _ = std::fs::remove_dir_all(&out);
            let recorded = run(
                weft()
                    .args(["syscalls", "record"])
                    .args(options)
                    .arg("-o")
                    .arg(&out)
                    .arg("--")
                    .arg(&target),
                Duration::from_secs(120),
            );
            assert_eq!(recorded.status, 0, "{options:?}: {}", recorded.stderr);
            assert_eq!(
                tally_lines(&recorded.stdout),
                tally_lines(&plain.stdout),
                "{options:?}"
            );
            for mode in ["read", "syscall"] {
                let (want, mut got) = (frames(&plain.stdout, mode), frames(&recorded.stdout, mode));
                assert!(want.len() >= 5, "{mode}: {want:?}");
                assert_eq!(
                    got.len(),
                    want.len() + 1,
                    "{mode} {options:?}: {got:?} {want:?}"
                );
                // The handler, the signal frame, then weft's frame.
                let weft_frame = got.remove(2);
                assert!(!want.contains(&weft_frame), "{weft_frame} {want:?}");
                assert_eq!(got, want, "{mode} {} {options:?}", variant.name);
            }
        }
    }
}

/// Threads waiting in `sigwaitinfo` and `epoll_wait`, which fail with
/// EINTR when a stop interrupts them, while weft stops the process to
/// hook the C unwinder the main thread's first `backtrace()` loads: as
/// without weft, neither fails (weft makes such a call again when the
/// thread resumes; a new-user trial saw both fail, and a C program's
/// `pthread_cancel` of such a thread not cancel it).
#[test]
fn calls_a_stop_of_wefts_interrupts_do_not_fail_with_eintr() {
    let target = build("syscalls_eintr", &O2);
    let plain = run(
        &mut std::process::Command::new(&target),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "{}", plain.stderr);
    assert!(
        plain.stdout.contains("tally interrupted 0"),
        "{}",
        plain.stdout
    );
    let dir = scratch("syscalls-eintr");
    let (out, recorded) = record_into(&dir, &target, &[]);
    assert_eq!(recorded.stdout, plain.stdout);
    // Each thread's wait is recorded once, and returned what woke it.
    let calls = shown_calls(&out);
    let waits = |name: &str| -> Vec<i64> {
        calls
            .iter()
            .filter(|c| c["name"] == name)
            .filter_map(|c| c["result"].as_i64())
            .collect()
    };
    assert_eq!(waits("rt_sigtimedwait"), [12], "{calls:?}");
    assert_eq!(waits("epoll_wait"), [1], "{calls:?}");
}

/// A weft that attached and detaches while a thread waits in its code
/// leaves its memory mapped and the unwinder's hook in, so the thread
/// unwinds as before (a new-user trial: 3 frames after the detach, no
/// destructor). The next weft to attach, once no thread is inside, puts
/// the unwinder's code back with that memory gone; its own hook goes as it
/// detaches with nothing inside. An exception thrown after both still
/// unwinds (a hook left jumping into unmapped memory would crash it).
#[test]
fn a_thread_waiting_in_a_detached_wefts_code_still_unwinds() {
    let target = build("syscalls_unwind", &O2);
    let args = ["2000", "4000", "4000"];
    let plain = run(
        std::process::Command::new(&target).args(args),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "{}", plain.stderr);
    let dir = scratch("syscalls-unwind-detached");
    let started = std::time::Instant::now();
    let (mut child, pid) = spawn_piped(&target, &args);
    let record = |name: &str, duration: &str| {
        let out = dir.join(name);
        let _ = std::fs::remove_dir_all(&out);
        run(
            weft()
                .args(["syscalls", "record", "-o"])
                .arg(&out)
                .args(["-p", &pid, "-d", duration]),
            Duration::from_secs(60),
        )
    };
    // Attached from 0.3 s for 2 s (and the attach's own time): the
    // worker's read from 2 s on.
    let first = record("first", "2s");
    assert_eq!(first.status, 0, "{}", first.stderr);
    assert!(
        first.stderr.contains("weft's memory stays mapped"),
        "{}",
        first.stderr
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "attached too long"
    );
    // The signal and the cancel at 6 s; the main thread then sleeps.
    std::thread::sleep(Duration::from_millis(7000).saturating_sub(started.elapsed()));
    let second = record("second", "1s");
    assert_eq!(second.status, 0, "{}", second.stderr);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(
        !maps.contains("weft"),
        "weft's memory is gone: {}\n{maps}",
        second.stderr
    );
    let stdout = output_once_ended(&mut child);
    assert_eq!(tally_lines(&stdout), tally_lines(&plain.stdout));
    let (want, mut got) = (frames(&plain.stdout, "read"), frames(&stdout, "read"));
    assert_eq!(got.len(), want.len() + 1, "{got:?} {want:?}");
    got.remove(2);
    assert_eq!(got, want);
}

/// Attached while the program waits in `epoll_wait` (a call the kernel
/// does not restart), weft rewrites its site: the call made again after
/// the attach's stop goes through weft's code, not into the middle of the
/// splice (a new-user trial's program died of a SIGTRAP there), and times
/// out as the program asked.
#[test]
fn a_call_made_again_after_an_attach_goes_through_the_rewritten_site() {
    let target = build("syscalls_eintr", &O2);
    let (mut child, pid) = spawn_piped(&target, &["timed", "2000"]);
    let dir = scratch("syscalls-eintr-attach");
    let out = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out);
    let attached = run(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .args(["-p", &pid, "-d", "500ms"]),
        Duration::from_secs(60),
    );
    assert_eq!(attached.status, 0, "{}", attached.stderr);
    let stdout = output_once_ended(&mut child);
    assert_eq!(stdout, "tally timed_out 1\ntally interrupted 0\n");
}

/// `target ARGS...` started with its output piped, given 300 ms to get
/// going: the child (killed if the test ends first) and its pid.
fn spawn_piped(target: &Path, args: &[&str]) -> (KillOnDrop, String) {
    let child = std::process::Command::new(target)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(Duration::from_millis(300));
    (KillOnDrop(child), pid)
}

/// What `child` (its standard output piped) wrote, once it ended with
/// status 0 (30 s at most).
fn output_once_ended(child: &mut KillOnDrop) -> String {
    use std::io::Read;
    assert_eq!(wait_bounded(&mut child.0, Duration::from_secs(30)), Some(0));
    let mut stdout = String::new();
    let piped = child.0.stdout.take().expect("standard output piped");
    std::io::BufReader::new(piped)
        .read_to_string(&mut stdout)
        .unwrap();
    stdout
}

/// The program's "tally" lines.
fn tally_lines(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter(|l| l.starts_with("tally"))
        .map(String::from)
        .collect()
}

/// Where each frame of the backtrace of `mode` ("read", "syscall") lies,
/// as the program printed it (module+offset, or an address in no module).
fn frames(stdout: &str, mode: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(&format!("frame {mode} ")))
        .filter_map(|l| l.split_once(' ').map(|(_, at)| at.to_string()))
        .collect()
}
