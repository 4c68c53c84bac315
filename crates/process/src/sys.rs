//! Thin, checked wrappers around the raw ptrace and wait system calls.
//!
//! All of this crate's `unsafe` code that calls the kernel lives here. Every
//! wrapper turns `-1` into an `io::Error` taken from errno.

use std::io;

/// General-purpose registers of a thread, as `PTRACE_GETREGS` gives them.
pub type Registers = libc::user_regs_struct;

pub(crate) const PTRACE_O_TRACECLONE: libc::c_int = 0x8;
pub(crate) const PTRACE_EVENT_CLONE: libc::c_int = 3;
pub(crate) const PTRACE_EVENT_STOP: libc::c_int = 128;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret == -1 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(0) {
            return Err(err);
        }
    }
    Ok(ret)
}

/// A ptrace request whose `addr` and `data` are plain integers.
pub(crate) fn ptrace(
    request: libc::c_uint,
    tid: i32,
    addr: u64,
    data: u64,
) -> io::Result<libc::c_long> {
    // SAFETY: the requests passed here (SEIZE, INTERRUPT, CONT, DETACH,
    // SINGLESTEP, POKEDATA, GETEVENTMSG with a valid pointer given by the
    // caller through `ptrace_ptr`) take integer arguments; the kernel
    // validates the tid and reports errors through errno.
    unsafe {
        *libc::__errno_location() = 0;
        check(libc::ptrace(
            request,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        ))
    }
}

/// `PTRACE_GETREGS`.
pub(crate) fn get_regs(tid: i32) -> io::Result<Registers> {
    // SAFETY: user_regs_struct is plain old data; all-zero is a valid value.
    let mut regs: Registers = unsafe { std::mem::zeroed() };
    // SAFETY: PTRACE_GETREGS writes exactly one user_regs_struct to `data`,
    // which points at a live, writable one.
    unsafe {
        *libc::__errno_location() = 0;
        check(libc::ptrace(
            libc::PTRACE_GETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut regs as *mut Registers as *mut libc::c_void,
        ))?;
    }
    Ok(regs)
}

/// `PTRACE_SETREGS`.
pub(crate) fn set_regs(tid: i32, regs: &Registers) -> io::Result<()> {
    // SAFETY: PTRACE_SETREGS reads one user_regs_struct from `data`, which
    // points at a live one.
    unsafe {
        *libc::__errno_location() = 0;
        check(libc::ptrace(
            libc::PTRACE_SETREGS,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            regs as *const Registers as *mut libc::c_void,
        ))?;
    }
    Ok(())
}

/// `PTRACE_GETEVENTMSG`.
pub(crate) fn get_event_msg(tid: i32) -> io::Result<u64> {
    let mut msg: libc::c_ulong = 0;
    // SAFETY: PTRACE_GETEVENTMSG writes one unsigned long to `data`.
    unsafe {
        *libc::__errno_location() = 0;
        check(libc::ptrace(
            libc::PTRACE_GETEVENTMSG,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            &mut msg as *mut libc::c_ulong as *mut libc::c_void,
        ))?;
    }
    Ok(msg as u64)
}

/// The outcome of `waitpid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Stopped; `status >> 8` holds the signal and the event.
    Stopped { tid: i32, signal: i32, event: i32 },
    /// Exited with a code.
    Exited { tid: i32, code: i32 },
    /// Killed by a signal.
    Signaled { tid: i32, signal: i32 },
    /// `WNOHANG` and nothing to report.
    Nothing,
}

/// `waitpid(tid, __WALL | flags)`.
pub(crate) fn wait(tid: i32, flags: libc::c_int) -> io::Result<Wait> {
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waitpid writes one int to `status`, a live local.
        let ret = unsafe { libc::waitpid(tid, &mut status, libc::__WALL | flags) };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        if ret == 0 {
            return Ok(Wait::Nothing);
        }
        return Ok(if libc::WIFEXITED(status) {
            Wait::Exited {
                tid: ret,
                code: libc::WEXITSTATUS(status),
            }
        } else if libc::WIFSIGNALED(status) {
            Wait::Signaled {
                tid: ret,
                signal: libc::WTERMSIG(status),
            }
        } else {
            Wait::Stopped {
                tid: ret,
                signal: libc::WSTOPSIG(status),
                event: (status >> 16) & 0xff,
            }
        });
    }
}
