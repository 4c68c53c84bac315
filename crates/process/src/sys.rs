//! The kernel calls behind [`Tracee`](crate::Tracee): ptrace through `nix`,
//! wait through `rustix`, with errors as `io::Error`.
//!
//! Two things stay raw, each for a reason `nix` cannot cover:
//!
//! * Resuming or detaching a thread with a pending signal (`PTRACE_CONT`,
//!   `PTRACE_DETACH`): the signal handed back may be a real-time one
//!   (glibc's `SIGCANCEL` and `SIGSETXID` are 32 and 33), which `nix`'s
//!   `Signal` cannot name.
//! * Waiting: `nix`'s `WaitStatus` rejects stops by real-time signals, so
//!   a stop would be reaped and lost; `rustix` reports raw numbers.

use nix::sys::ptrace::{self, Options};
use nix::unistd::Pid;
use rustix::process::{WaitId, WaitIdOptions, WaitOptions};
use std::io;

/// General-purpose registers of a thread, as `PTRACE_GETREGS` gives them.
pub type Registers = libc::user_regs_struct;

/// `PTRACE_EVENT_CLONE`, as it appears in a stop's status.
pub(crate) const PTRACE_EVENT_CLONE: i32 = ptrace::Event::PTRACE_EVENT_CLONE as i32;
/// `PTRACE_EVENT_EXEC`.
pub(crate) const PTRACE_EVENT_EXEC: i32 = ptrace::Event::PTRACE_EVENT_EXEC as i32;
/// `PTRACE_EVENT_STOP`: an interrupt, a new thread's first stop, or a group-stop.
pub(crate) const PTRACE_EVENT_STOP: i32 = ptrace::Event::PTRACE_EVENT_STOP as i32;

fn pid(tid: i32) -> Pid {
    Pid::from_raw(tid)
}

/// The stop signal of a system-call stop (`PTRACE_O_TRACESYSGOOD`): no
/// signal is queued for it, unlike a single step's SIGTRAP.
pub(crate) const SYSCALL_STOP: i32 = weft_abi::signal::SIGTRAP | 0x80;

/// `PTRACE_SEIZE` with `PTRACE_O_TRACECLONE` and `PTRACE_O_TRACESYSGOOD`,
/// plus `PTRACE_O_TRACEEXEC` if asked.
pub(crate) fn seize(tid: i32, trace_exec: bool) -> io::Result<()> {
    let mut options = Options::PTRACE_O_TRACECLONE | Options::PTRACE_O_TRACESYSGOOD;
    if trace_exec {
        options |= Options::PTRACE_O_TRACEEXEC;
    }
    Ok(ptrace::seize(pid(tid), options)?)
}

/// `PTRACE_INTERRUPT`.
pub(crate) fn interrupt(tid: i32) -> io::Result<()> {
    Ok(ptrace::interrupt(pid(tid))?)
}

/// `PTRACE_SYSCALL` with no signal: runs to the next system-call entry or
/// exit. Unlike a single step it sends the thread no SIGTRAP, which the
/// kernel would force on a thread that blocks it by resetting the
/// program's SIGTRAP action to the default.
pub(crate) fn to_syscall_stop(tid: i32) -> io::Result<()> {
    Ok(ptrace::syscall(pid(tid), None)?)
}

/// How [`resume`] lets a thread go.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Resume {
    /// `PTRACE_CONT`: run on under ptrace.
    Continue,
    /// `PTRACE_DETACH`: run on untraced.
    Detach,
}

/// `PTRACE_CONT` or `PTRACE_DETACH`, delivering `signal` (0 for none; any
/// number, real-time signals included).
pub(crate) fn resume(how: Resume, tid: i32, signal: i32) -> io::Result<()> {
    let request = match how {
        Resume::Continue => libc::PTRACE_CONT,
        Resume::Detach => libc::PTRACE_DETACH,
    };
    // SAFETY: CONT and DETACH take no pointer: `addr` is ignored and
    // `data` is the signal number; the kernel validates tid and signal.
    let ret = unsafe {
        libc::ptrace(
            request,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long as *mut libc::c_void,
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `tgkill(pid, tid, signal)`: queues `signal` for one thread again (any
/// number, real-time signals included).
pub(crate) fn tgkill(pid: i32, tid: i32, signal: i32) -> io::Result<()> {
    // SAFETY: tgkill takes three integers and no pointer.
    let ret = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, signal) };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Which side of a system call a syscall stop is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SyscallSide {
    /// Before the call runs (`rax` holds -ENOSYS).
    Entry,
    /// After it ran (`rax` holds its result).
    Exit,
}

/// `PTRACE_GET_SYSCALL_INFO` at a syscall stop: entry or exit. A thread
/// that was stopped inside a system call reports that call's exit first
/// when resumed with `PTRACE_SYSCALL`, so the stops do not simply alternate.
pub(crate) fn syscall_side(tid: i32) -> io::Result<Option<SyscallSide>> {
    // nix's `syscall_info` passes no buffer size (the `addr` argument), so
    // the kernel copies nothing: ask directly.
    let mut info = std::mem::MaybeUninit::<libc::ptrace_syscall_info>::zeroed();
    let size = std::mem::size_of::<libc::ptrace_syscall_info>();
    // SAFETY: the kernel writes at most `size` bytes into `info`, which
    // is that large; a zeroed ptrace_syscall_info is a valid value.
    let ret = unsafe {
        libc::ptrace(
            libc::PTRACE_GET_SYSCALL_INFO,
            tid,
            size as *mut libc::c_void,
            info.as_mut_ptr().cast::<libc::c_void>(),
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: zeroed, then (partly) written by the kernel.
    let info = unsafe { info.assume_init() };
    Ok(match info.op {
        libc::PTRACE_SYSCALL_INFO_ENTRY => Some(SyscallSide::Entry),
        libc::PTRACE_SYSCALL_INFO_EXIT => Some(SyscallSide::Exit),
        _ => None,
    })
}

/// A thread's Syscall User Dispatch setting (`struct ptrace_sud_config`):
/// with `mode` on, a system call made from outside `[offset, offset +
/// len)` is not run but sent to the thread as SIGSYS.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchConfig {
    /// `PR_SYS_DISPATCH_OFF` (0) or `PR_SYS_DISPATCH_ON` (1).
    pub mode: u64,
    /// Address of the selector byte (0: none, every call outside the
    /// range is dispatched).
    pub selector: u64,
    /// Start of the range whose calls run.
    pub offset: u64,
    /// Its length.
    pub len: u64,
}

/// `PTRACE_GET_SYSCALL_USER_DISPATCH_CONFIG` (Linux 6.4).
const GET_DISPATCH: libc::c_uint = 0x4211;
/// `PTRACE_SET_SYSCALL_USER_DISPATCH_CONFIG` (Linux 6.4).
const SET_DISPATCH: libc::c_uint = 0x4210;

/// A stopped thread's dispatch setting.
pub(crate) fn dispatch_config(tid: i32) -> io::Result<DispatchConfig> {
    let mut config = DispatchConfig::default();
    // SAFETY: the kernel writes at most `size_of::<DispatchConfig>()`
    // bytes (the size passed) into `config`, a plain struct of that size.
    let ret = unsafe {
        libc::ptrace(
            GET_DISPATCH,
            tid,
            std::mem::size_of::<DispatchConfig>() as *mut libc::c_void,
            (&mut config as *mut DispatchConfig).cast::<libc::c_void>(),
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(config)
}

/// Sets a stopped thread's dispatch setting.
pub(crate) fn set_dispatch_config(tid: i32, config: &DispatchConfig) -> io::Result<()> {
    // SAFETY: the kernel reads `size_of::<DispatchConfig>()` bytes (the
    // size passed) from `config`, which is that large.
    let ret = unsafe {
        libc::ptrace(
            SET_DISPATCH,
            tid,
            std::mem::size_of::<DispatchConfig>() as *mut libc::c_void,
            (config as *const DispatchConfig).cast::<libc::c_void>(),
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A thread's restartable-sequences registration, as
/// `PTRACE_GET_RSEQ_CONFIGURATION` (Linux 5.13) gives it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RseqConfig {
    /// Address of the thread's `struct rseq` (0: none registered).
    pub area: u64,
    /// Its registered length.
    pub len: u32,
    /// The signature the kernel expects before every abort handler.
    pub signature: u32,
    /// `RSEQ_FLAG_*` of the registration.
    pub flags: u32,
    /// Padding of the kernel's structure.
    pub pad: u32,
}

/// `PTRACE_GET_RSEQ_CONFIGURATION`.
const GET_RSEQ: libc::c_uint = 0x420f;

/// A stopped thread's restartable-sequences registration.
pub(crate) fn rseq_config(tid: i32) -> io::Result<RseqConfig> {
    let mut config = RseqConfig::default();
    // SAFETY: the kernel writes at most `size_of::<RseqConfig>()` bytes
    // (the size passed) into `config`, a plain struct of that size.
    let ret = unsafe {
        libc::ptrace(
            GET_RSEQ,
            tid,
            std::mem::size_of::<RseqConfig>() as *mut libc::c_void,
            (&mut config as *mut RseqConfig).cast::<libc::c_void>(),
        )
    };
    if ret == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(config)
}

/// `PTRACE_GETREGS`.
pub(crate) fn get_regs(tid: i32) -> io::Result<Registers> {
    Ok(ptrace::getregs(pid(tid))?)
}

/// `PTRACE_SETREGS`.
pub(crate) fn set_regs(tid: i32, regs: &Registers) -> io::Result<()> {
    Ok(ptrace::setregs(pid(tid), *regs)?)
}

/// `si_code` of a stopped thread's signal (`PTRACE_GETSIGINFO`), in a
/// signal-delivery-stop.
pub(crate) fn signal_code(tid: i32) -> io::Result<i32> {
    Ok(ptrace::getsiginfo(pid(tid))?.si_code)
}

/// `PTRACE_GETEVENTMSG`.
pub(crate) fn get_event_msg(tid: i32) -> io::Result<u64> {
    Ok(ptrace::getevent(pid(tid))? as u64)
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

/// Extra `waitpid` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitFlags {
    /// Block until something happens.
    Block,
    /// `WNOHANG`.
    NoHang,
    /// `WUNTRACED`: report a child stopped by a signal while not traced.
    Untraced,
}

/// `waitpid(tid, __WALL | flags)`; `tid` -1 waits for any child or tracee.
pub(crate) fn wait(tid: i32, flags: WaitFlags) -> io::Result<Wait> {
    // __WALL: also threads (clone children) and tracees that are not children.
    let all = nix::sys::wait::WaitPidFlag::__WALL.bits() as u32;
    let options = WaitOptions::from_bits_retain(all)
        | match flags {
            WaitFlags::Block => WaitOptions::empty(),
            WaitFlags::NoHang => WaitOptions::NOHANG,
            WaitFlags::Untraced => WaitOptions::UNTRACED,
        };
    // rustix's `waitpid(None)` is wait4(0): the caller's process group
    // only. Any child or tracee (-1) is rustix's `wait`.
    let which = if tid == -1 {
        None
    } else {
        Some(rustix::process::Pid::from_raw(tid).ok_or(io::ErrorKind::InvalidInput)?)
    };
    loop {
        let waited = match which {
            None => rustix::process::wait(options),
            Some(pid) => rustix::process::waitpid(Some(pid), options),
        };
        let (who, status) = match waited {
            Ok(Some(reported)) => reported,
            Ok(None) => return Ok(Wait::Nothing),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        let tid = who.as_raw_nonzero().get();
        return Ok(if let Some(code) = status.exit_status() {
            Wait::Exited { tid, code }
        } else if let Some(signal) = status.terminating_signal() {
            Wait::Signaled { tid, signal }
        } else {
            Wait::Stopped {
                tid,
                signal: (status.as_raw() >> 8) & 0xff,
                event: (status.as_raw() >> 16) & 0xff,
            }
        });
    }
}

/// Whether child `pid` has exited, without reaping it
/// (`waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`).
/// The signal that ended child `pid`, if one did and it is not reaped
/// yet (`waitid` with `WNOWAIT`: it stays a zombie).
pub(crate) fn terminating_signal(pid: i32) -> Option<i32> {
    let pid = rustix::process::Pid::from_raw(pid)?;
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), options) {
            Ok(status) => return status?.terminating_signal(),
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
}

pub(crate) fn has_exited(pid: i32) -> io::Result<bool> {
    let pid = rustix::process::Pid::from_raw(pid).ok_or(io::ErrorKind::InvalidInput)?;
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), options) {
            Ok(status) => return Ok(status.is_some()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
