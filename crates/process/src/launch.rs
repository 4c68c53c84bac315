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
        // (close, raise, execvp, write, _exit) on memory prepared before the
        // fork, and never returns from this function.
        let pid = match unsafe { unistd::fork() } {
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
                // The child stops itself so the parent can seize it, then execs.
                let _ = signal::raise(Signal::SIGSTOP);
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
}
