//! Starting a program under weft: forked, stopped, seized and followed
//! to its `exec`, with the environment and address layout asked for.

use crate::sys::{self, Resume, Wait, WaitFlags, PTRACE_EVENT_EXEC};
use crate::tracee::{ThreadState, ORIGINAL_OPEN_FILES};
use crate::{Error, ProcMemory, Result, Tracee};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{self, Signal};
use nix::unistd::{self, ForkResult, Pid};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::io::Read;

/// How to start a program under weft.
#[derive(Debug, Clone)]
pub struct LaunchSpec {
    /// The program (looked up in PATH like a shell does).
    pub program: String,
    /// Its arguments, not including the program name.
    pub args: Vec<String>,
    /// Start it with address space layout randomization off
    /// (`ADDR_NO_RANDOMIZE`, as rr and gdb do): its stack, heap and
    /// libraries are where they were in the last run so started, and so
    /// are the addresses it computes with (glibc's temporary file names
    /// mix in the address of a stack variable).
    pub no_aslr: bool,
    /// Its environment (`NAME=value` each); none: weft's own.
    pub env: Option<Vec<String>>,
    /// The process id to start it with, when that id is free and weft may
    /// choose ids (`clone3`'s `set_tid`, which needs `CAP_SYS_ADMIN`):
    /// a re-execution gets the recorded pid, so what the kernel says of
    /// the process (a signal's sender) agrees with what the rerun answers.
    /// Otherwise the kernel picks one, as for any child
    /// ([`Tracee::pid`] says which it got).
    pub pid: Option<i32>,
}

/// `struct clone_args` of `clone3(2)`, as far as `set_tid` goes
/// (`CLONE_ARGS_SIZE_VER1`).
#[repr(C)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
}

/// A child of this process with id `pid`, like `fork` but by `clone3`
/// with `set_tid`: Ok(0) in the child, Ok(pid) in the parent, or why the
/// kernel would not (EEXIST: the id is taken; EPERM: no `CAP_SYS_ADMIN`).
///
/// # Safety
///
/// As after `fork`: the child may only call async-signal-safe functions
/// until it execs. More than that, the C library does not know of the
/// child (its cached thread id is the parent's), so the child must not
/// call what uses that id either (`raise`, `pthread_kill`).
unsafe fn fork_with_pid(pid: i32) -> std::result::Result<i32, Errno> {
    let set_tid = [pid];
    let args = CloneArgs {
        flags: 0,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: set_tid.as_ptr() as u64,
        set_tid_size: 1,
    };
    // SAFETY: `args` and the one-element `set_tid` array it points to
    // live across the call, and the size given is the struct's; with no
    // stack given the child runs on a copy of this one, as after fork.
    let r = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    Errno::result(r).map(|r| r as i32)
}

impl Tracee {
    /// Starts a program stopped right after `execve`, before any of its code
    /// (or its dynamic loader's) has run. Its stdin, stdout and stderr are weft's.
    pub fn launch(spec: &LaunchSpec) -> Result<Tracee> {
        let fail = |source: std::io::Error| Error::Launch {
            program: spec.program.clone(),
            source,
        };
        let invalid = || fail(std::io::ErrorKind::InvalidInput.into());
        let program = CString::new(spec.program.clone()).map_err(|_| invalid())?;
        let mut argv: Vec<CString> = vec![program.clone()];
        for a in &spec.args {
            argv.push(CString::new(a.as_str()).map_err(|_| invalid())?);
        }
        // Prepared before the fork: the child must not allocate.
        let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        argv_ptrs.push(std::ptr::null());
        let envp: Option<Vec<CString>> = match &spec.env {
            Some(env) => Some(
                env.iter()
                    .map(|e| CString::new(e.as_str()).map_err(|_| invalid()))
                    .collect::<Result<_>>()?,
            ),
            None => None,
        };
        let envp_ptrs: Option<Vec<*const libc::c_char>> = envp.as_ref().map(|env| {
            env.iter()
                .map(|e| e.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        });
        // A pipe with CLOEXEC tells the parent whether exec failed: it reads
        // the child's errno, or end-of-file once exec succeeded.
        let (read_end, write_end) = unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| Error::Io {
            what: "pipe2".into(),
            source: e.into(),
        })?;
        // SAFETY: after fork the child only calls async-signal-safe functions
        // (close, kill, getpid, execvp, write, _exit) on memory prepared
        // before the fork, none that uses the C library's cached thread id
        // (`fork_with_pid`), and never returns from this function.
        let forked = match spec.pid.map(|pid| unsafe { fork_with_pid(pid) }) {
            Some(Ok(0)) => Ok(ForkResult::Child),
            Some(Ok(child)) => Ok(ForkResult::Parent {
                child: Pid::from_raw(child),
            }),
            // SAFETY: as for `fork_with_pid` above.
            None | Some(Err(_)) => unsafe { unistd::fork() },
        };
        let pid = match forked {
            Err(e) => {
                return Err(Error::Io {
                    what: "fork".into(),
                    source: e.into(),
                })
            }
            Ok(ForkResult::Child) => {
                drop(read_end);
                // The Rust runtime ignores SIGPIPE in weft, and an ignored
                // signal stays ignored across exec: give the program the
                // default action it would have had without weft.
                // SAFETY: no handler function is installed, only the
                // kernel's default action; sigaction is async-signal-safe.
                let _ = unsafe { signal::signal(Signal::SIGPIPE, signal::SigHandler::SigDfl) };
                // The open-file limit weft had before raising its own.
                let files = ORIGINAL_OPEN_FILES.load(std::sync::atomic::Ordering::Relaxed);
                if files != 0 {
                    let mut limit = libc::rlimit {
                        rlim_cur: 0,
                        rlim_max: 0,
                    };
                    // SAFETY: getrlimit and setrlimit are async-signal-safe
                    // system calls on a local struct.
                    unsafe {
                        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
                            limit.rlim_cur = files;
                            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
                        }
                    }
                }
                if spec.no_aslr {
                    // SAFETY: personality is an async-signal-safe system
                    // call; 0xffffffff only reads the current persona.
                    unsafe {
                        let persona = libc::personality(0xffff_ffff);
                        if persona != -1 {
                            libc::personality((persona | libc::ADDR_NO_RANDOMIZE) as libc::c_ulong);
                        }
                    }
                }
                // The child stops itself so the parent can seize it, then
                // execs. Not by `raise`, which signals the C library's idea
                // of this thread: the parent's, after `fork_with_pid`.
                // SAFETY: getpid and kill are async-signal-safe system calls.
                unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
                // SAFETY: a NUL-terminated program name and null-terminated
                // arrays of pointers to NUL-terminated strings (the arguments
                // and, if given, the environment), all alive (they were built
                // before the fork; `nix`'s execvp would allocate such an
                // array here, after the fork).
                unsafe {
                    match &envp_ptrs {
                        Some(envp) => {
                            libc::execvpe(program.as_ptr(), argv_ptrs.as_ptr(), envp.as_ptr())
                        }
                        None => libc::execvp(program.as_ptr(), argv_ptrs.as_ptr()),
                    }
                };
                // Only reached when exec failed: report errno and exit.
                let errno = Errno::last_raw();
                let _ = unistd::write(&write_end, &errno.to_ne_bytes());
                // SAFETY: _exit ends the child at once, without running the
                // parent's atexit handlers or flushing its stdio buffers.
                unsafe { libc::_exit(127) }
            }
            Ok(ForkResult::Parent { child }) => child.as_raw(),
        };
        drop(write_end);
        match sys::wait(pid, WaitFlags::Untraced).map_err(fail)? {
            Wait::Stopped { .. } => {}
            other => {
                return Err(fail(std::io::Error::other(format!(
                    "child did not stop: {other:?}"
                ))))
            }
        }
        sys::seize(pid, true).map_err(fail)?;
        let _ = signal::kill(Pid::from_raw(pid), Signal::SIGCONT);
        // Follow the child until its exec event.
        loop {
            match sys::wait(pid, WaitFlags::Block).map_err(fail)? {
                Wait::Stopped {
                    event: PTRACE_EVENT_EXEC,
                    ..
                } => break,
                Wait::Stopped { .. } => {
                    sys::resume(Resume::Continue, pid, 0).map_err(fail)?;
                }
                Wait::Exited { .. } | Wait::Signaled { .. } => {
                    let mut errno = [0u8; 4];
                    let n = std::fs::File::from(read_end).read(&mut errno).unwrap_or(0);
                    let source = if n == 4 {
                        std::io::Error::from_raw_os_error(i32::from_ne_bytes(errno))
                    } else {
                        std::io::Error::other("exited before exec")
                    };
                    return Err(fail(source));
                }
                Wait::Nothing => {}
            }
        }
        drop(read_end);
        let mem = ProcMemory::open(pid)?;
        let mut threads = BTreeMap::new();
        threads.insert(pid, ThreadState::stopped());
        Ok(Tracee {
            pid,
            threads,
            mem,
            call_area: None,
            exit: None,
            restart_owed: BTreeSet::new(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracee::tests::CHILDREN;
    use crate::wait_child_exit;

    #[test]
    fn a_launched_child_gets_the_environment_given_it_and_only_that() {
        let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        let tracee = Tracee::launch(&LaunchSpec {
            program: "sh".into(),
            args: vec!["-c".into(), "exit $((FROM_SPEC + ${HOME:-0}))".into()],
            no_aslr: true,
            env: Some(vec!["FROM_SPEC=5".into()]),
            pid: None,
        })
        .unwrap();
        let pid = tracee.pid();
        tracee.detach().unwrap();
        assert_eq!(
            wait_child_exit(pid).unwrap(),
            5,
            "weft's HOME is not passed"
        );
    }

    /// A process id no process has now, high up where the kernel's own
    /// choices are not soon: None if none was found.
    fn a_free_pid() -> Option<i32> {
        let max: i32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let start = max - 1000 - (std::process::id() as i32 % 4000);
        (start..start + 500).find(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
    }

    #[test]
    fn a_program_launched_with_a_free_pid_gets_it_and_with_a_taken_one_another() {
        let _one = CHILDREN.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: geteuid only reads this process's effective user id.
        let root = unsafe { libc::geteuid() } == 0;
        let free = a_free_pid().expect("no free pid near pid_max");
        for (asked, gets) in [(free, root), (std::process::id() as i32, false)] {
            let tracee = Tracee::launch(&LaunchSpec {
                program: "sh".into(),
                args: vec!["-c".into(), "exit 7".into()],
                no_aslr: false,
                env: None,
                pid: Some(asked),
            })
            .unwrap();
            let pid = tracee.pid();
            assert_eq!(
                pid == asked,
                gets,
                "asked for {asked}, got {pid} (root: {root})"
            );
            tracee.detach().unwrap();
            assert_eq!(wait_child_exit(pid).unwrap(), 7);
        }
    }
}
