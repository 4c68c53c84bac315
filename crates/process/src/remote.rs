//! Remote system calls: the mechanism that runs one on a stopped thread
//! of the target, and the few typed calls weft makes with it.

use crate::call_stub;
use crate::sys::{self, Wait, WaitFlags};
use crate::tracee::{StopReason, ThreadState};
use crate::{Error, RemoteAddr, Result, Tracee};
use weft_abi::{
    fcntl::AT_FDCWD,
    mman::{MAP_FIXED, MAP_FIXED_NOREPLACE},
    sigaction, syscall,
};

impl Tracee {
    /// `mmap` inside the target; `hint` is used with `MAP_FIXED_NOREPLACE`
    /// when given, so an existing mapping is never replaced.
    pub fn remote_mmap(
        &mut self,
        hint: Option<RemoteAddr>,
        len: u64,
        prot: i32,
        flags: i32,
        fd: i32,
        offset: u64,
    ) -> Result<RemoteAddr> {
        let mut flags = flags;
        if hint.is_some() {
            flags |= MAP_FIXED_NOREPLACE;
        }
        let addr = self.remote_syscall(
            "mmap",
            syscall::MMAP.into(),
            [
                hint.map_or(0, |h| h.0),
                len,
                prot as u64,
                flags as u64,
                fd as i64 as u64,
                offset,
            ],
        )?;
        Ok(RemoteAddr(addr))
    }

    /// [`Tracee::remote_mmap`] away from the program's own mappings: at
    /// the first free range from [`crate::maps::FAR_BASE`] on (or where
    /// the kernel chooses, if that fails), so that weft's mapping does
    /// not move where the program's next `mmap`s land.
    pub fn remote_mmap_far(
        &mut self,
        len: u64,
        prot: i32,
        flags: i32,
        fd: i32,
        offset: u64,
    ) -> Result<RemoteAddr> {
        let hint = crate::maps::read(self.pid)
            .ok()
            .and_then(|maps| crate::maps::free_range_from(&maps, crate::maps::FAR_BASE, len));
        if let Some(at) = hint {
            if let Ok(got) = self.remote_mmap(Some(RemoteAddr(at)), len, prot, flags, fd, offset) {
                return Ok(got);
            }
        }
        self.remote_mmap(None, len, prot, flags, fd, offset)
    }

    /// `mmap` inside the target at exactly `addr`, replacing what is
    /// mapped there (`MAP_FIXED`): for a forked child's own copy of
    /// memory it shares with its parent.
    pub fn remote_mmap_over(
        &mut self,
        addr: RemoteAddr,
        len: u64,
        prot: i32,
        flags: i32,
        fd: i32,
        offset: u64,
    ) -> Result<()> {
        let at = self.remote_syscall(
            "mmap",
            syscall::MMAP.into(),
            [
                addr.0,
                len,
                prot as u64,
                (flags | MAP_FIXED) as u64,
                fd as i64 as u64,
                offset,
            ],
        )?;
        if at != addr.0 {
            return Err(Error::RemoteSyscall {
                pid: self.pid,
                name: "mmap",
                source: std::io::Error::other(format!(
                    "mapped at {at:#x} instead of {:#x}",
                    addr.0
                )),
            });
        }
        Ok(())
    }

    /// `munmap` inside the target.
    pub fn remote_munmap(&mut self, addr: RemoteAddr, len: u64) -> Result<()> {
        self.remote_syscall("munmap", syscall::MUNMAP.into(), [addr.0, len, 0, 0, 0, 0])
            .map(|_| ())
    }

    /// `openat(AT_FDCWD, path, flags)` inside the target; `path` is the
    /// address of a NUL-terminated string in target memory.
    pub fn remote_open(&mut self, path: RemoteAddr, flags: i32) -> Result<i32> {
        let fd = self.remote_syscall(
            "openat",
            syscall::OPENAT.into(),
            [AT_FDCWD as i64 as u64, path.0, flags as u64, 0, 0, 0],
        )?;
        Ok(fd as i32)
    }

    /// `close` inside the target.
    pub fn remote_close(&mut self, fd: i32) -> Result<()> {
        self.remote_syscall("close", syscall::CLOSE.into(), [fd as u64, 0, 0, 0, 0, 0])
            .map(|_| ())
    }

    /// `rt_sigaction(sig, new, old, sizeof(sigset_t))` inside the target; `new` and `old`
    /// are addresses of kernel `struct sigaction` in target memory (0 for none).
    pub fn remote_sigaction(&mut self, sig: i32, new: RemoteAddr, old: RemoteAddr) -> Result<()> {
        self.remote_syscall(
            "rt_sigaction",
            syscall::RT_SIGACTION.into(),
            [sig as u64, new.0, old.0, sigaction::SIGSET_SIZE, 0, 0],
        )
        .map(|_| ())
    }
}

/// The mechanism.
impl Tracee {
    /// Makes a system call inside the target on one stopped thread and
    /// returns its result, restoring that thread's registers afterwards.
    ///
    /// The thread's `orig_rax` is set to -1 during the call so that the
    /// kernel does not apply syscall-restart logic to it. The call ends in a
    /// syscall-exit stop, from which the kernel restarts nothing, so a call
    /// the thread was blocked in is set up for its restart here, as the
    /// kernel would have (see [`restarted`]).
    pub fn remote_syscall(&mut self, name: &'static str, nr: i64, args: [u64; 6]) -> Result<u64> {
        let tid = self.call_thread()?;
        // A thread stopped as its dispatched call's SIGSYS was delivered
        // leaves that stop for this call: it makes its own call again
        // afterwards (see `took_dispatched_call`).
        let again = self.take_dispatch_signal(tid);
        // A thread whose calls weft's SIGSYS handler takes (Syscall User
        // Dispatch) would send this one there too: off for the call.
        let dispatch = self.dispatch(tid).ok().filter(|c| c.mode != 0);
        if dispatch.is_some() {
            self.set_dispatch(tid, &crate::DispatchConfig::default())?;
        }
        let result = self.remote_syscall_undispatched(tid, name, nr, args, again);
        if let Some(config) = dispatch {
            self.set_dispatch(tid, &config)?;
        }
        result
    }

    /// [`remote_syscall`](Self::remote_syscall) on thread `tid`, whose
    /// calls run; with `again`, the thread is backed up onto its own
    /// `syscall` instruction afterwards.
    fn remote_syscall_undispatched(
        &mut self,
        tid: i32,
        name: &'static str,
        nr: i64,
        args: [u64; 6],
        again: bool,
    ) -> Result<u64> {
        use crate::ProcessMemory;
        let saved = self.registers(tid)?;
        // The stub goes in the call area, where it resumes the thread by
        // itself if weft dies during the call; without one, two bytes at
        // the thread's pc are borrowed for a bare `syscall`.
        let (gadget, borrowed) = match self.call_area {
            Some(area) => {
                let stub = call_stub::bytes(&restarted(saved));
                self.mem.write(area.addr, &stub)?;
                (area.addr, Some(area.original[..stub.len()].to_vec()))
            }
            None => {
                let at = RemoteAddr(saved.rip);
                let mut orig = vec![0u8; 2];
                self.mem.read(at, &mut orig)?;
                self.mem.write(at, &[0x0f, 0x05])?;
                (at, Some(orig))
            }
        };
        let mut regs = saved;
        regs.rax = nr as u64;
        regs.orig_rax = u64::MAX;
        regs.rdi = args[0];
        regs.rsi = args[1];
        regs.rdx = args[2];
        regs.r10 = args[3];
        regs.r8 = args[4];
        regs.r9 = args[5];
        regs.rip = gadget.0;
        let outcome = self
            .set_registers(tid, &regs)
            .and_then(|_| self.step_over_syscall(tid, gadget));
        // The thread's own registers first, then the bytes under the stub:
        // until the registers are back, the stub is the thread's way home.
        let restored = match &outcome {
            Ok((_, dispatched)) => {
                // Its call made before the stop was sent to the SIGSYS
                // handler as the stub ran: made again (see
                // `took_dispatched_call`).
                let back = match *dispatched || again {
                    true => {
                        let mut back = restarted(saved);
                        back.rip -= 2;
                        back
                    }
                    // A call the stop interrupted keeps its registers
                    // until the thread resumes (`Tracee::settle_restart`).
                    false => {
                        if restarted(saved) != saved {
                            self.restart_owed.insert(tid);
                        }
                        saved
                    }
                };
                self.set_registers(tid, &back)
            }
            Err(_) => Ok(()),
        };
        let outcome = outcome.map(|(result, _)| result);
        if let Some(orig) = borrowed {
            self.mem.write(gadget, &orig)?;
        }
        let result = outcome?;
        restored?;
        let ret = result as i64;
        if (-4095..0).contains(&ret) {
            return Err(Error::RemoteSyscall {
                pid: self.pid,
                name,
                source: std::io::Error::from_raw_os_error(-ret as i32),
            });
        }
        Ok(result)
    }

    /// Runs the `syscall` at `gadget` to its exit stop and returns its
    /// result, and whether the thread took the SIGSYS of a call it had
    /// made before (Syscall User Dispatch), which is left out. Other
    /// signals the thread takes meanwhile are the program's: they are kept
    /// for delivery when the thread resumes.
    fn step_over_syscall(&mut self, tid: i32, gadget: RemoteAddr) -> Result<(u64, bool)> {
        let mut entered = false;
        let mut dispatched = false;
        for _ in 0..64 {
            crate::failpoint::step();
            sys::to_syscall_stop(tid).map_err(|e| self.ptrace_error("SYSCALL", tid, e))?;
            let w = sys::wait(tid, WaitFlags::Block).map_err(|e| Error::Io {
                what: "waitpid".into(),
                source: e,
            })?;
            match w {
                Wait::Stopped { signal, event, .. } => {
                    if event == 0 && signal == sys::SYSCALL_STOP {
                        // A thread stopped inside its own system call first
                        // reports that call's exit: only the exit after the
                        // stub's own entry is the stub's result.
                        let side = sys::syscall_side(tid)
                            .map_err(|e| self.ptrace_error("GET_SYSCALL_INFO", tid, e))?;
                        let regs = self.registers(tid)?;
                        match side {
                            Some(sys::SyscallSide::Entry) if regs.rip == gadget.0 + 2 => {
                                entered = true;
                            }
                            Some(sys::SyscallSide::Exit) if entered => {
                                return Ok((regs.rax, dispatched))
                            }
                            _ => {}
                        }
                    } else if event == 0 && is_dispatch_signal(tid, signal) {
                        dispatched = true;
                    } else if event == 0 {
                        self.push_signal(tid, signal);
                    }
                }
                Wait::Exited { tid: t, .. } | Wait::Signaled { tid: t, .. } if t == self.pid => {
                    return Err(self.process_ended(w));
                }
                _ => {
                    self.threads.remove(&tid);
                    return Err(Error::ThreadGone(tid));
                }
            }
        }
        Err(Error::UnexpectedStop {
            pid: self.pid,
            what: "remote system call did not complete".into(),
        })
    }
}

/// Which thread runs a remote call.
impl Tracee {
    /// Records that the whole process ended (`w`, its main thread's exit
    /// or death) and returns the error that says so.
    fn process_ended(&mut self, w: Wait) -> Error {
        self.exit = match w {
            Wait::Signaled { signal, .. } => Some(StopReason::Killed(signal)),
            Wait::Exited { code, .. } => Some(StopReason::Exited(code)),
            _ => self.exit,
        };
        self.threads.clear();
        Error::ProcessGone(self.pid)
    }

    /// Takes out the SIGSYS a stopped thread holds for a call Syscall User
    /// Dispatch sent to the handler (the first signal it took, while it is
    /// still in that signal-delivery stop): true if there was one.
    fn take_dispatch_signal(&mut self, tid: i32) -> bool {
        let holds = matches!(
            self.threads.get(&tid),
            Some(ThreadState::Stopped { signals, .. })
                if signals.first() == Some(&31) && is_dispatch_signal(tid, 31)
        );
        if let (true, Some(ThreadState::Stopped { signals, .. })) =
            (holds, self.threads.get_mut(&tid))
        {
            signals.remove(0);
        }
        holds
    }

    /// The thread remote system calls run on: one holding no signal,
    /// the main thread first. A thread moved from its signal-delivery stop
    /// to a syscall stop would get its signal back from the kernel with
    /// `si_code` SI_KERNEL instead of its own, so such a thread is used
    /// only when every thread holds one.
    pub(crate) fn call_thread(&mut self) -> Result<i32> {
        let order: Vec<i32> = std::iter::once(self.pid)
            .chain(self.threads.keys().copied())
            .collect();
        for idle_only in [true, false] {
            let usable = |tid: &&i32| match self.threads.get(tid) {
                Some(ThreadState::Stopped {
                    signals,
                    mid_call: false,
                }) => signals.is_empty() || !idle_only,
                _ => false,
            };
            if let Some(&tid) = order.iter().find(usable) {
                return Ok(tid);
            }
        }
        // Every thread is inside a `clone` or `exec`: one finishes its call.
        let tid = self.pid_or_any_thread()?;
        self.finish_call(tid)?;
        Ok(tid)
    }

    /// Runs a thread stopped at a ptrace event inside a system call to that
    /// call's exit stop, where its result is in `rax` and its registers can
    /// be changed.
    fn finish_call(&mut self, tid: i32) -> Result<()> {
        let mut signals = match self.threads.remove(&tid) {
            Some(ThreadState::Stopped { signals, .. }) => signals,
            _ => vec![],
        };
        for _ in 0..64 {
            sys::to_syscall_stop(tid).map_err(|e| self.ptrace_error("SYSCALL", tid, e))?;
            let w = sys::wait(tid, WaitFlags::Block).map_err(|e| Error::Io {
                what: "waitpid".into(),
                source: e,
            })?;
            match w {
                Wait::Stopped { signal, event, .. }
                    if event == 0 && signal == sys::SYSCALL_STOP =>
                {
                    self.threads.insert(
                        tid,
                        ThreadState::Stopped {
                            signals,
                            mid_call: false,
                        },
                    );
                    return Ok(());
                }
                Wait::Stopped {
                    signal, event: 0, ..
                } => {
                    if !self.took_dispatched_call(tid, signal) {
                        signals.push(signal)
                    }
                }
                Wait::Stopped { .. } | Wait::Nothing => {}
                Wait::Exited { tid: t, .. } | Wait::Signaled { tid: t, .. } if t == self.pid => {
                    return Err(self.process_ended(w));
                }
                Wait::Exited { .. } | Wait::Signaled { .. } => return Err(Error::ThreadGone(tid)),
            }
        }
        Err(Error::UnexpectedStop {
            pid: self.pid,
            what: "a thread did not finish its system call".into(),
        })
    }

    pub(crate) fn pid_or_any_thread(&self) -> Result<i32> {
        if self.threads.contains_key(&self.pid) {
            return Ok(self.pid);
        }
        self.threads
            .keys()
            .next()
            .copied()
            .ok_or(Error::ProcessGone(self.pid))
    }
}

/// The registers of a thread interrupted in a system call, set up to
/// restart it when the thread runs again, as `arch_do_signal_or_restart`
/// (arch/x86/kernel/signal.c) does when no handler runs: back over the
/// 2-byte `syscall` with the call number in `rax` again, or
/// `restart_syscall` for a call that keeps its state in the restart block.
/// Any other registers are returned as they are.
pub(crate) fn restarted(mut regs: sys::Registers) -> sys::Registers {
    const ERESTARTSYS: i64 = -512;
    const ERESTARTNOINTR: i64 = -513;
    const ERESTARTNOHAND: i64 = -514;
    const ERESTART_RESTARTBLOCK: i64 = -516;
    if (regs.orig_rax as i64) < 0 {
        return regs;
    }
    match regs.rax as i64 {
        ERESTARTSYS | ERESTARTNOINTR | ERESTARTNOHAND => regs.rax = regs.orig_rax,
        ERESTART_RESTARTBLOCK => regs.rax = weft_abi::syscall::RESTART_SYSCALL.into(),
        _ => return regs,
    }
    regs.rip -= 2;
    regs
}

/// Whether the thread whose registers these are stands right after a
/// system call that failed with EINTR.
pub(crate) fn failed_with_eintr(regs: &sys::Registers) -> bool {
    const EINTR: i64 = -4;
    (regs.orig_rax as i64) >= 0 && regs.rax as i64 == EINTR
}

/// The registers of a thread after a call that failed with EINTR, set up
/// to make the call again: back over the 2-byte `syscall`, with the call
/// number in `rax` (the arguments are still in their registers). A
/// timeout the call had starts again.
pub(crate) fn made_again(mut regs: sys::Registers) -> sys::Registers {
    regs.rax = regs.orig_rax;
    regs.rip -= 2;
    regs
}

/// Whether `signal`, which stopped `tid` (in a signal-delivery-stop), is
/// the SIGSYS Syscall User Dispatch sends for a call it did not run.
pub(crate) fn is_dispatch_signal(tid: i32, signal: i32) -> bool {
    /// SIGSYS, and its `si_code` for a dispatched call.
    const SIGSYS: i32 = 31;
    const SYS_USER_DISPATCH: i32 = 2;
    signal == SIGSYS && sys::signal_code(tid).ok() == Some(SYS_USER_DISPATCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn regs(rax: i64, orig_rax: i64, rip: u64) -> sys::Registers {
        // SAFETY: user_regs_struct is plain integers; all zeroes is valid.
        let mut r: sys::Registers = unsafe { std::mem::zeroed() };
        (r.rax, r.orig_rax, r.rip) = (rax as u64, orig_rax as u64, rip);
        r
    }

    #[test]
    fn interrupted_calls_are_set_up_to_restart() {
        let nanosleep = 230;
        for code in [-512, -513, -514] {
            let r = restarted(regs(code, nanosleep, 0x1002));
            assert_eq!((r.rax, r.rip), (230, 0x1000), "{code}");
        }
        let r = restarted(regs(-516, nanosleep, 0x1002));
        assert_eq!((r.rax, r.rip), (219, 0x1000));
        // A finished call, or a thread not in a call, is left alone.
        for (rax, orig) in [(-4, nanosleep), (0, nanosleep), (-514, -1)] {
            let r = restarted(regs(rax, orig, 0x1002));
            assert_eq!((r.rax as i64, r.rip), (rax, 0x1002));
        }
    }

    /// A call that failed with EINTR (weft's stop interrupted it) is made
    /// again: its number back in `rax`, the thread back on its `syscall`.
    #[test]
    fn a_call_failed_with_eintr_is_made_again() {
        let epoll_wait = 232;
        assert!(failed_with_eintr(&regs(-4, epoll_wait, 0x1002)));
        let r = made_again(regs(-4, epoll_wait, 0x1002));
        assert_eq!((r.rax, r.rip), (232, 0x1000));
        for (rax, orig) in [(1, epoll_wait), (-514, epoll_wait), (-4, -1)] {
            assert!(!failed_with_eintr(&regs(rax, orig, 0x1002)), "{rax} {orig}");
        }
    }
}
