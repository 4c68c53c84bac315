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
