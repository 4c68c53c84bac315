//! Errors of process control. Races with the target (a thread or the whole
//! process going away) are distinct from permission problems and from faults.

use nix::errno::Errno;
use std::io;

/// What went wrong while controlling a process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No process has this pid.
    #[error("no process with pid {0}")]
    NoSuchProcess(i32),
    /// The process went away (exited or was killed) while weft worked on it.
    #[error("process {0} exited while weft was working on it")]
    ProcessGone(i32),
    /// One thread went away; the rest of the process may still be there.
    #[error("thread {0} exited while weft was working on it")]
    ThreadGone(i32),
    /// The kernel refused to let weft trace or read the process.
    #[error("permission denied to trace process {pid} ({op})")]
    PermissionDenied {
        /// The process.
        pid: i32,
        /// What was refused.
        op: &'static str,
    },
    /// The process runs no user-space program (a kernel thread).
    #[error("process {0} has no program to instrument (a kernel thread?)")]
    NoExecutable(i32),
    /// Another tracer (a debugger, strace) already holds the process.
    #[error("process {0} is already traced by another program (a debugger or strace?)")]
    AlreadyTraced(i32),
    /// A ptrace request failed for another reason.
    #[error("ptrace {op} on thread {tid} failed: {source}")]
    Ptrace {
        /// The request.
        op: &'static str,
        /// The thread.
        tid: i32,
        /// The errno.
        source: io::Error,
    },
    /// Reading or writing target memory failed.
    #[error("cannot access {len} bytes of process {pid} memory at {addr:#x}: {source}")]
    Memory {
        /// The process.
        pid: i32,
        /// Where.
        addr: u64,
        /// How many bytes.
        len: usize,
        /// Why.
        source: io::Error,
    },
    /// A system call made inside the target returned an error.
    #[error("{name} inside process {pid} failed: {source}")]
    RemoteSyscall {
        /// The process.
        pid: i32,
        /// The system call.
        name: &'static str,
        /// The errno it returned.
        source: io::Error,
    },
    /// The program to launch could not be started.
    #[error("cannot start {program}: {source}")]
    Launch {
        /// The program.
        program: String,
        /// Why.
        source: io::Error,
    },
    /// The target stopped in a way weft did not expect.
    #[error("process {pid}: unexpected stop ({what})")]
    UnexpectedStop {
        /// The process.
        pid: i32,
        /// What weft saw.
        what: String,
    },
    /// A local system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What weft was doing.
        what: String,
        /// Why it failed.
        source: io::Error,
    },
}

/// The errno of an I/O error, if it carries one.
pub(crate) fn errno(e: &io::Error) -> Option<Errno> {
    e.raw_os_error().map(Errno::from_raw)
}

/// Result of process control.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Classifies an error from reading `/proc/PID/...`.
    pub(crate) fn from_proc_io(pid: i32, e: io::Error) -> Error {
        match errno(&e) {
            Some(Errno::ENOENT) | Some(Errno::ESRCH) => {
                if std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    Error::ProcessGone(pid)
                } else {
                    Error::NoSuchProcess(pid)
                }
            }
            Some(Errno::EACCES) | Some(Errno::EPERM) => Error::PermissionDenied {
                pid,
                op: "read /proc",
            },
            _ => Error::Io {
                what: format!("reading /proc/{pid}"),
                source: e,
            },
        }
    }

    /// Whether the error means the target (or one of its threads) went away.
    pub fn is_gone(&self) -> bool {
        matches!(
            self,
            Error::ProcessGone(_) | Error::ThreadGone(_) | Error::NoSuchProcess(_)
        )
    }
}
