//! The follower against what really happens: a shell that forks a child
//! which execs, each step seen once, each process stopped where the
//! program says and running again once resumed. They need BPF privileges:
//! without them they skip loudly, and fail under `WEFT_CI`.

use super::*;
use std::process::{Command, Stdio};
use std::time::Instant;

fn loaded() -> Option<Follower> {
    match Follower::load() {
        Ok(f) => Some(f),
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
                panic!("WEFT_CI is set, so a skip is a failure: {e}");
            }
            None
        }
    }
}

/// The state letter of `/proc/PID/stat` (`T` when stopped by a signal).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn stopped_within(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if state(pid) == Some('T') {
            return true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    false
}

fn next_event(f: &mut Follower) -> Event {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = f.next(Duration::from_millis(100)).unwrap() {
            return e;
        }
        assert!(Instant::now() < deadline, "no event within 10 s");
    }
}

fn cont(pid: i32) {
    // SAFETY: kill has no memory arguments.
    unsafe { libc::kill(pid, libc::SIGCONT) };
}

#[test]
fn a_fork_and_an_exec_stop_the_process_until_it_is_resumed() {
    let Some(mut follower) = loaded() else {
        return;
    };
    // The shell waits to be followed (it reads a line), then forks a
    // subshell, which runs `true` (vfork and exec: dash and bash use
    // vfork for a command they run last) and exits 3.
    let mut shell = Command::new("sh")
        .args(["-c", "read go; (/bin/true; exit 3); echo done $?"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let sh = shell.id() as i32;
    follower.follow(sh).unwrap();
    use std::io::Write;
    shell.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    // The shell's own exec may come after spawn returned (a vfork parent
    // goes on once the child's new memory is in place, just before the
    // exec tracepoint): then it stops too.
    let mut first = next_event(&mut follower);
    if first
        == (Event::Execed {
            pid: sh,
            stopped: true,
        })
    {
        assert!(stopped_within(sh, Duration::from_secs(5)));
        cont(sh);
        first = next_event(&mut follower);
    }
    let sub = match first {
        Event::Forked {
            parent,
            thread,
            child,
            shares_memory: false,
            stopped: true,
        } if parent == sh && thread == sh => child,
        other => panic!("expected the shell's fork, got {other:?}"),
    };
    assert!(
        stopped_within(sub, Duration::from_secs(5)),
        "subshell {sub} did not stop"
    );
    // Stopped for good: it has not run `true` after 100 ms.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(state(sub), Some('T'));
    assert_eq!(follower.next(Duration::ZERO).unwrap(), None);
    cont(sub);
    // `true` may be forked or vforked: either way its exec stops it.
    let (parent, child, shares_memory, stopped) = match next_event(&mut follower) {
        Event::Forked {
            parent,
            child,
            shares_memory,
            stopped,
            ..
        } => (parent, child, shares_memory, stopped),
        other => panic!("expected the subshell's fork, got {other:?}"),
    };
    assert_eq!(parent, sub);
    assert_eq!(stopped, !shares_memory);
    if stopped {
        assert!(stopped_within(child, Duration::from_secs(5)));
        cont(child);
    }
    assert_eq!(
        next_event(&mut follower),
        Event::Execed {
            pid: child,
            stopped: true
        }
    );
    assert!(
        stopped_within(child, Duration::from_secs(5)),
        "exec did not stop"
    );
    assert!(std::fs::read_link(format!("/proc/{child}/exe"))
        .unwrap()
        .ends_with("true"));
    cont(child);
    assert_eq!(next_event(&mut follower), Event::Exited { pid: child });
    assert_eq!(next_event(&mut follower), Event::Exited { pid: sub });
    let out = shell.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done 3\n");
    assert_eq!(next_event(&mut follower), Event::Exited { pid: sh });
}

#[test]
fn processes_outside_the_workload_are_left_alone() {
    let Some(mut follower) = loaded() else {
        return;
    };
    let out = Command::new("sh")
        .args(["-c", "/bin/true; /bin/true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(follower.next(Duration::from_millis(50)).unwrap(), None);
}
