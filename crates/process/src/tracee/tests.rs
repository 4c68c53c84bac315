//! Tests of launching, following and reaping children (`super`).

use super::*;
use crate::LaunchSpec;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use std::sync::Mutex;

/// A Tracee waits for any child (`waitpid(-1)`), so tests that start
/// children run one at a time.
pub(crate) static CHILDREN: Mutex<()> = Mutex::new(());

fn launch(program: &str, args: &[&str]) -> Result<Tracee> {
    Tracee::launch(&LaunchSpec {
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        no_aslr: false,
        env: None,
        pid: None,
    })
}

#[test]
fn launch_reports_exec_failure_with_its_errno() {
    let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    match launch("/nonexistent/weft-test-program", &[]) {
        Err(Error::Launch { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(Errno::ENOENT as i32))
        }
        other => panic!("expected a launch error, got {other:?}"),
    }
}

#[test]
fn launched_child_runs_to_its_exit_code() {
    let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    let tracee = launch("sh", &["-c", "exit 3"]).unwrap();
    let pid = tracee.pid();
    assert_eq!(tracee.threads(), vec![pid]);
    tracee.detach().unwrap();
    assert_eq!(wait_child_exit(pid).unwrap(), 3);
}

#[test]
fn attach_makes_remote_system_calls_and_detaches() {
    let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    let tracee = launch("sleep", &["30"]).unwrap();
    let pid = tracee.pid();
    tracee.detach().unwrap();
    let mut tracee = Tracee::attach(pid).unwrap();
    assert!(tracee.registers(pid).unwrap().rip != 0);
    let got = tracee
        .remote_syscall("getpid", weft_abi::syscall::GETPID.into(), [0; 6])
        .unwrap();
    assert_eq!(got, pid as u64);
    drop(tracee);
    assert!(!child_has_exited(pid).unwrap());
    signal::kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    assert_eq!(wait_child_exit(pid).unwrap(), 128 + Signal::SIGKILL as i32);
}

extern "C" {
    /// glibc's offset of a thread's `struct rseq` from its thread pointer
    /// (2.35 and later); the same in every process of this C library.
    static __rseq_offset: isize;
    /// Its size, 0 if glibc registered none.
    static __rseq_size: u32;
}

#[test]
fn a_threads_restartable_sequence_is_where_its_c_library_put_it() {
    // SAFETY: plain reads of two constants glibc sets before main.
    let (offset, size) = unsafe { (__rseq_offset, __rseq_size) };
    if size == 0 {
        assert!(
            std::env::var_os("WEFT_CI").is_none_or(|v| v.is_empty()),
            "WEFT_CI is set, so a skip is a failure: glibc registered no restartable sequence"
        );
        eprintln!("skipped: glibc registered no restartable sequence here");
        return;
    }
    let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
    let tracee = launch("sleep", &["30"]).unwrap();
    let pid = tracee.pid();
    tracee.detach().unwrap();
    // Past its dynamic loader, which registers the main thread's.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let tracee = Tracee::attach(pid).unwrap();
    let config = tracee.rseq(pid).unwrap();
    let tcb = tracee.registers(pid).unwrap().fs_base;
    drop(tracee);
    signal::kill(Pid::from_raw(pid), Signal::SIGKILL).unwrap();
    let _ = wait_child_exit(pid);
    assert_eq!(
        config.area.wrapping_sub(tcb) as i64,
        offset as i64,
        "{config:?}"
    );
    assert!(config.len >= 32, "{config:?}");
    assert_eq!(
        config.signature, 0x5305_3053,
        "glibc's RSEQ_SIG: {config:?}"
    );
}
