//! A process held by weft: every thread seized with ptrace and stopped.
//!
//! weft holds a process only while it changes it. [`Tracee::attach`] seizes
//! every thread (`PTRACE_SEIZE` with `PTRACE_O_TRACECLONE`, so threads born
//! meanwhile are held too) and interrupts them; dropping the `Tracee`
//! detaches, handing back any signal a thread was about to receive. Threads
//! are enumerated until `/proc/PID/task` is stable, because a thread not yet
//! seized can create another.

use crate::error::errno;
use crate::sys::{
    self, Resume, Wait, WaitFlags, PTRACE_EVENT_CLONE, PTRACE_EVENT_EXEC, PTRACE_EVENT_STOP,
};
use crate::{thread_ids, Error, ProcMemory, RemoteAddr, Result};
use nix::errno::Errno;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use weft_abi::signal::SIGTRAP;

/// What a thread is doing, as far as weft knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ThreadState {
    /// Seized and asked to stop, no stop seen yet.
    Stopping,
    /// In a ptrace-stop; `signals` were about to be delivered and are given back on resume.
    /// `mid_call`: stopped at a ptrace event inside a system call (`clone`,
    /// `exec`), whose result the kernel writes into `rax` only when the
    /// thread resumes: such a thread cannot run a remote call.
    Stopped { signals: Vec<i32>, mid_call: bool },
    /// Running under ptrace (between a resume and the next stop).
    Running,
}

/// Why [`Tracee::run_to`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// A thread reached the address; every thread is stopped again.
    Reached,
    /// The process exited with this code before reaching it.
    Exited(i32),
    /// The process was killed by this signal before reaching it.
    Killed(i32),
}

/// A process whose threads are all stopped under weft's control.
#[derive(Debug)]
pub struct Tracee {
    pub(crate) pid: i32,
    pub(crate) threads: BTreeMap<i32, ThreadState>,
    pub(crate) mem: ProcMemory,
    pub(crate) call_area: Option<crate::CallArea>,
    pub(crate) exit: Option<StopReason>,
    /// Threads interrupted in a call and then used for a remote system
    /// call: left in that call's exit stop, the kernel restarts nothing
    /// when they resume, so weft sets their call up for its restart then,
    /// unless a signal comes first (see [`Tracee::settle_restart`]).
    pub(crate) restart_owed: BTreeSet<i32>,
}

impl ThreadState {
    pub(crate) fn stopped() -> ThreadState {
        ThreadState::Stopped {
            signals: vec![],
            mid_call: false,
        }
    }
}

impl Tracee {
    /// Seizes and stops every thread of a running process.
    pub fn attach(pid: i32) -> Result<Tracee> {
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            return Err(Error::NoSuchProcess(pid));
        }
        if pid == std::process::id() as i32 {
            return Err(Error::PermissionDenied {
                pid,
                op: "attach to weft itself",
            });
        }
        // A refusal to be seized can come from a thread in the middle of
        // exiting: it is gone a moment later, so it is retried for a while
        // before it is believed.
        let mut attempt = 1;
        loop {
            let mem = ProcMemory::open(pid)?;
            let mut tracee = Tracee {
                pid,
                threads: BTreeMap::new(),
                mem,
                call_area: None,
                exit: None,
                restart_owed: BTreeSet::new(),
            };
            match tracee.seize_all().and_then(|()| tracee.wait_all_stopped()) {
                Ok(()) => return Ok(tracee),
                Err(Error::PermissionDenied { .. } | Error::AlreadyTraced(_)) if attempt < 25 => {
                    // Dropping the tracee lets go of the threads it held.
                    drop(tracee);
                    attempt += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The process id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The thread ids currently held.
    pub fn threads(&self) -> Vec<i32> {
        self.threads.keys().copied().collect()
    }

    /// The target's memory.
    pub fn memory(&self) -> &ProcMemory {
        &self.mem
    }

    /// How the process ended, if it did while held.
    pub fn exit_reason(&self) -> Option<StopReason> {
        self.exit
    }

    /// Registers of a stopped thread.
    pub fn registers(&self, tid: i32) -> Result<sys::Registers> {
        sys::get_regs(tid).map_err(|e| self.ptrace_error("GETREGS", tid, e))
    }

    /// Sets registers of a stopped thread.
    pub fn set_registers(&self, tid: i32, regs: &sys::Registers) -> Result<()> {
        crate::failpoint::step();
        sys::set_regs(tid, regs).map_err(|e| self.ptrace_error("SETREGS", tid, e))
    }

    /// A stopped thread's restartable-sequences registration (its
    /// `area` is 0 when it has none).
    pub fn rseq(&self, tid: i32) -> Result<sys::RseqConfig> {
        sys::rseq_config(tid).map_err(|e| self.ptrace_error("GET_RSEQ_CONFIGURATION", tid, e))
    }

    /// A stopped thread's Syscall User Dispatch setting.
    pub fn dispatch(&self, tid: i32) -> Result<sys::DispatchConfig> {
        sys::dispatch_config(tid)
            .map_err(|e| self.ptrace_error("GET_SYSCALL_USER_DISPATCH", tid, e))
    }

    /// Sets a stopped thread's Syscall User Dispatch (see
    /// [`DispatchConfig`](crate::DispatchConfig)).
    pub fn set_dispatch(&self, tid: i32, config: &sys::DispatchConfig) -> Result<()> {
        sys::set_dispatch_config(tid, config)
            .map_err(|e| self.ptrace_error("SET_SYSCALL_USER_DISPATCH", tid, e))
    }

    /// The instruction pointer of every held thread. A thread stopped in
    /// a system call that the kernel will restart when it resumes (its
    /// result one of the `-ERESTART*` codes), or that weft will make again
    /// (it failed with EINTR because of weft's stop: `settle_restart`),
    /// also counts at its `syscall` instruction, 2 bytes back, where it
    /// goes then.
    pub fn thread_pcs(&self) -> Result<Vec<(i32, RemoteAddr)>> {
        let mut out = Vec::new();
        for &tid in self.threads.keys() {
            match sys::get_regs(tid) {
                Ok(r) => {
                    out.push((tid, RemoteAddr(r.rip)));
                    let restart = match crate::remote::failed_with_eintr(&r) {
                        true if self.restart_owed.contains(&tid) => {
                            crate::remote::made_again(r).rip
                        }
                        _ => crate::remote::restarted(r).rip,
                    };
                    if restart != r.rip {
                        out.push((tid, RemoteAddr(restart)));
                    }
                }
                Err(e) if errno(&e) == Some(Errno::ESRCH) => {}
                Err(e) => return Err(self.ptrace_error("GETREGS", tid, e)),
            }
        }
        Ok(out)
    }

    /// Signals a stopped thread was about to receive (given back on detach).
    pub fn pending_signals(&self, tid: i32) -> Vec<i32> {
        match self.threads.get(&tid) {
            Some(ThreadState::Stopped { signals, .. }) => signals.clone(),
            _ => vec![],
        }
    }

    /// Drops one pending signal of a stopped thread so it is never delivered.
    pub fn discard_signal(&mut self, tid: i32, signal: i32) {
        if let Some(ThreadState::Stopped { signals, .. }) = self.threads.get_mut(&tid) {
            if let Some(k) = signals.iter().position(|&s| s == signal) {
                signals.remove(k);
            }
        }
    }

    /// Whether `signal` is queued but not yet taken for a thread or for the
    /// whole process (`SigPnd`/`ShdPnd` in `/proc/PID/task/TID/status`).
    pub fn signal_queued(&self, tid: i32, signal: i32) -> bool {
        self.status_mask_has(tid, &["SigPnd:", "ShdPnd:"], signal)
    }

    /// Whether thread `tid` blocks `signal` (`SigBlk`).
    pub fn signal_blocked(&self, tid: i32, signal: i32) -> bool {
        self.status_mask_has(tid, &["SigBlk:"], signal)
    }

    /// Whether one of the signal masks `fields` of `/proc/PID/task/TID/status`
    /// holds `signal` (false if the thread is gone).
    fn status_mask_has(&self, tid: i32, fields: &[&str], signal: i32) -> bool {
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid))
        else {
            return false;
        };
        let bit = 1u64 << (signal - 1);
        status.lines().any(|l| {
            fields.iter().any(|f| l.starts_with(f))
                && l.split_once(':')
                    .and_then(|(_, v)| u64::from_str_radix(v.trim(), 16).ok())
                    .is_some_and(|m| m & bit != 0)
        })
    }

    /// Runs remote system calls in `area` (see [`CallArea`](crate::CallArea))
    /// instead of borrowing two bytes at a thread's pc.
    pub fn set_call_area(&mut self, area: crate::CallArea) {
        self.call_area = Some(area);
    }

    /// Stops using the call area (before the memory holding it is unmapped).
    pub fn clear_call_area(&mut self) {
        self.call_area = None;
    }

    /// Lets the process run until some thread executes the instruction at
    /// `addr`, then stops every thread again with that thread's pc at `addr`.
    /// Uses a temporary `int3`; other signals are passed through.
    pub fn run_to(&mut self, addr: RemoteAddr) -> Result<StopReason> {
        use crate::ProcessMemory;
        let mut orig = [0u8; 1];
        self.mem.read(addr, &mut orig)?;
        self.mem.write(addr, &[0xcc])?;
        self.resume_all()?;
        let reached = loop {
            let w = sys::wait(-1, WaitFlags::Block).map_err(|e| Error::Io {
                what: "waitpid".into(),
                source: e,
            })?;
            match w {
                Wait::Stopped { tid, signal, event } => {
                    self.threads.entry(tid).or_insert(ThreadState::Running);
                    if event == 0 && signal == SIGTRAP {
                        let regs = self.registers(tid)?;
                        if regs.rip == addr.0 + 1 {
                            let mut regs = regs;
                            regs.rip = addr.0;
                            self.set_registers(tid, &regs)?;
                            self.threads.insert(tid, ThreadState::stopped());
                            break StopReason::Reached;
                        }
                    }
                    self.note_stop(tid, signal, event)?;
                    let signals = match self.threads.get_mut(&tid) {
                        Some(ThreadState::Stopped { signals, .. }) => std::mem::take(signals),
                        _ => vec![],
                    };
                    self.threads.insert(tid, ThreadState::Running);
                    let sig = self.hand_back(tid, &signals);
                    if let Err(e) = sys::resume(Resume::Continue, tid, sig) {
                        if errno(&e) != Some(Errno::ESRCH) {
                            return Err(self.ptrace_error("CONT", tid, e));
                        }
                    }
                }
                Wait::Exited { tid, code } if tid == self.pid => {
                    self.threads.clear();
                    self.exit = Some(StopReason::Exited(code));
                    return Ok(StopReason::Exited(code));
                }
                Wait::Signaled { tid, signal } if tid == self.pid => {
                    self.threads.clear();
                    self.exit = Some(StopReason::Killed(signal));
                    return Ok(StopReason::Killed(signal));
                }
                Wait::Exited { tid, code } => self.note_other_end(tid, code),
                Wait::Signaled { tid, signal } => self.note_other_end(tid, 128 + signal),
                Wait::Nothing => {}
            }
        };
        self.mem.write(addr, &orig)?;
        self.stop_all()?;
        Ok(reached)
    }

    /// Resumes every stopped thread, handing back its pending signal.
    fn resume_all(&mut self) -> Result<()> {
        let tids: Vec<i32> = self.threads.keys().copied().collect();
        for tid in tids {
            self.resume_thread(tid)?;
        }
        Ok(())
    }

    /// The threads resumed and not yet asked to stop.
    fn running(&self) -> Vec<i32> {
        self.threads
            .iter()
            .filter(|(_, s)| **s == ThreadState::Running)
            .map(|(t, _)| *t)
            .collect()
    }

    /// Stops every running thread again, seizing threads born meanwhile.
    fn stop_all(&mut self) -> Result<()> {
        for tid in self.running() {
            self.interrupt(tid)?;
        }
        self.seize_all()?;
        self.wait_all_stopped()
    }

    /// Lets every thread run for `d`, then stops them all again (threads
    /// born meanwhile included). Used to let threads leave code that is
    /// about to be unmapped.
    pub fn let_run(&mut self, d: Duration) -> Result<()> {
        self.resume_all()?;
        std::thread::sleep(d);
        self.stop_all()
    }

    /// Lets every thread run for `d` with weft detached, then seizes and
    /// stops them all again. Unlike [`Tracee::let_run`], signals arriving
    /// meanwhile go to the program's handlers instead of stopping at weft,
    /// so no signal is ever held in a ptrace stop, where it would be lost
    /// if weft died.
    pub fn let_run_untraced(&mut self, d: Duration) -> Result<()> {
        self.detach_all()?;
        std::thread::sleep(d);
        self.seize_all()?;
        self.wait_all_stopped()
    }

    pub(crate) fn push_signal(&mut self, tid: i32, signal: i32) {
        if let Some(ThreadState::Stopped { signals, .. }) = self.threads.get_mut(&tid) {
            signals.push(signal);
        }
    }

    /// Whether `signal`, which stopped `tid`, is the SIGSYS of a system
    /// call Syscall User Dispatch sent to the program's handler instead of
    /// running it; the thread is then backed up onto its `syscall`
    /// instruction (the kernel left the call's number in `rax`), and makes
    /// the call again when it runs on, to be sent to the handler again.
    /// For a thread moved on from this stop: its signal could only be sent
    /// again without the kernel's account of the call, which the handler
    /// needs. (A thread left in the stop gets the signal as it was when
    /// weft lets it go.)
    pub(crate) fn took_dispatched_call(&mut self, tid: i32, signal: i32) -> bool {
        if !crate::remote::is_dispatch_signal(tid, signal) {
            return false;
        }
        let Ok(mut regs) = self.registers(tid) else {
            return false;
        };
        regs.rip -= 2;
        self.set_registers(tid, &regs).is_ok()
    }

    /// Seizes every thread not yet held until `/proc/PID/task` is stable.
    fn seize_all(&mut self) -> Result<()> {
        // Threads that were exiting when seized: never held, never retried.
        let mut exiting = std::collections::BTreeSet::new();
        loop {
            let tids = match thread_ids(self.pid) {
                Ok(t) => t,
                Err(e) if e.is_gone() => return Err(Error::ProcessGone(self.pid)),
                Err(e) => return Err(e),
            };
            let new: Vec<i32> = tids
                .into_iter()
                .filter(|t| !self.threads.contains_key(t) && !exiting.contains(t))
                .collect();
            if new.is_empty() {
                return Ok(());
            }
            for tid in new {
                match sys::seize(tid, false) {
                    Ok(()) => {}
                    Err(e) => match errno(&e) {
                        Some(Errno::ESRCH) if tid != self.pid => continue,
                        Some(Errno::ESRCH) => return Err(Error::ProcessGone(self.pid)),
                        // An exiting thread (a zombie until its tracer, maybe
                        // an earlier weft, reaps it) runs no more code.
                        Some(Errno::EPERM) if tid != self.pid && thread_exiting(self.pid, tid) => {
                            exiting.insert(tid);
                            continue;
                        }
                        // A thread born since the last look, of a thread
                        // weft holds: PTRACE_O_TRACECLONE seized it already,
                        // and its first stop is on its way.
                        Some(Errno::EPERM) if tracer_of(tid) == Some(std::process::id() as i32) => {
                            self.threads.insert(tid, ThreadState::Stopping);
                            continue;
                        }
                        Some(Errno::EPERM) => {
                            if tracer_of(tid).is_some_and(|t| t != 0) {
                                return Err(Error::AlreadyTraced(self.pid));
                            }
                            return Err(Error::PermissionDenied {
                                pid: self.pid,
                                op: "ptrace seize",
                            });
                        }
                        _ => return Err(self.ptrace_error("SEIZE", tid, e)),
                    },
                }
                self.threads.insert(tid, ThreadState::Running);
                self.interrupt(tid)?;
            }
        }
    }

    fn interrupt(&mut self, tid: i32) -> Result<()> {
        match sys::interrupt(tid) {
            Ok(()) => {
                self.threads.insert(tid, ThreadState::Stopping);
                Ok(())
            }
            Err(e) if errno(&e) == Some(Errno::ESRCH) => {
                self.threads.remove(&tid);
                Ok(())
            }
            Err(e) => Err(self.ptrace_error("INTERRUPT", tid, e)),
        }
    }

    /// Collects stops until every held thread is in a ptrace-stop.
    fn wait_all_stopped(&mut self) -> Result<()> {
        self.wait_all_stopped_within(Duration::from_secs(10))
    }

    fn wait_all_stopped_within(&mut self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut nap = Duration::from_micros(20);
        while self
            .threads
            .values()
            .any(|s| !matches!(s, ThreadState::Stopped { .. }))
        {
            let w = sys::wait(-1, WaitFlags::NoHang).map_err(|e| Error::Io {
                what: "waitpid".into(),
                source: e,
            })?;
            match w {
                Wait::Nothing => {
                    if Instant::now() > deadline {
                        return Err(Error::UnexpectedStop {
                            pid: self.pid,
                            what: "threads did not stop within 10 s (uninterruptible sleep?)"
                                .into(),
                        });
                    }
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(2));
                }
                Wait::Stopped { tid, signal, event } => {
                    self.note_stop(tid, signal, event)?;
                }
                Wait::Exited { tid, code } if tid == self.pid => {
                    self.threads.clear();
                    self.exit = Some(StopReason::Exited(code));
                    return Err(Error::ProcessGone(self.pid));
                }
                Wait::Signaled { tid, signal } if tid == self.pid => {
                    self.threads.clear();
                    self.exit = Some(StopReason::Killed(signal));
                    return Err(Error::ProcessGone(self.pid));
                }
                Wait::Exited { tid, code } => self.note_other_end(tid, code),
                Wait::Signaled { tid, signal } => self.note_other_end(tid, 128 + signal),
            }
        }
        Ok(())
    }

    /// A thread of this process ended, or, since the wait takes any child,
    /// another process weft started did (while this one is held in an
    /// episode): its exit code is kept for [`wait_child_exit`].
    fn note_other_end(&mut self, tid: i32, code: i32) {
        if self.threads.remove(&tid).is_none() {
            reaped().insert(tid, code);
        }
    }

    /// Records a ptrace-stop of `tid`.
    fn note_stop(&mut self, tid: i32, signal: i32, event: i32) -> Result<()> {
        let mut signals = match self.threads.remove(&tid) {
            Some(ThreadState::Stopped { signals, .. }) => signals,
            _ => vec![],
        };
        match event {
            PTRACE_EVENT_CLONE => {
                let child = sys::get_event_msg(tid)
                    .map_err(|e| self.ptrace_error("GETEVENTMSG", tid, e))?
                    as i32;
                self.threads.entry(child).or_insert(ThreadState::Stopping);
            }
            // weft's interrupt (SIGTRAP; a group-stop has its stop signal):
            // a call that fails with EINTR when interrupted (`epoll_wait`,
            // `sigtimedwait`, `semop`, a socket's with a timeout) failed
            // because of it, and is made again when the thread resumes
            // (`settle_restart`), as it would have gone on waiting without
            // weft. A new thread's first stop finds no call.
            PTRACE_EVENT_STOP
                if signal == SIGTRAP
                    && self
                        .registers(tid)
                        .is_ok_and(|r| crate::remote::failed_with_eintr(&r)) =>
            {
                self.restart_owed.insert(tid);
            }
            PTRACE_EVENT_STOP => {}
            0 => signals.push(signal),
            _ => {}
        }
        let mid_call = matches!(event, PTRACE_EVENT_CLONE | PTRACE_EVENT_EXEC);
        self.threads
            .insert(tid, ThreadState::Stopped { signals, mid_call });
        Ok(())
    }

    /// Before thread `tid` resumes: a call interrupted by weft's stop and
    /// left in a remote call's exit stop, or failed with EINTR because of
    /// the stop (`restart_owed`), is set up for its restart, as the kernel
    /// does when no handler runs; with a signal coming, its registers stay
    /// as the interrupted call left them, and the kernel restarts it or
    /// makes it fail with EINTR as the handler's SA_RESTART says. (Set up
    /// for its restart, a call a handler should have ended, a read a timer
    /// times out, would block for good.)
    fn settle_restart(&mut self, tid: i32) {
        if !self.restart_owed.remove(&tid) || self.signal_coming(tid) {
            return;
        }
        if let Ok(regs) = self.registers(tid) {
            let again = match crate::remote::failed_with_eintr(&regs) {
                true => crate::remote::made_again(regs),
                false => crate::remote::restarted(regs),
            };
            let _ = self.set_registers(tid, &again);
        }
    }

    /// Whether thread `tid` takes a signal when it resumes: one weft holds
    /// for it, or one queued for it or its process that it does not block
    /// and that does something (`/proc/PID/task/TID/status`): not one it
    /// ignores, nor one whose default is to be ignored with no handler
    /// (`SIGCHLD`, `SIGURG`, `SIGWINCH`), which interrupts no call without
    /// weft.
    pub(crate) fn signal_coming(&self, tid: i32) -> bool {
        if !self.pending_signals(tid).is_empty() {
            return true;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{}/task/{tid}/status", self.pid))
        else {
            return false;
        };
        let mask = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
                .unwrap_or(0)
        };
        /// `SIGCHLD`, `SIGURG`, `SIGWINCH`: ignored by default.
        const IGNORED_BY_DEFAULT: u64 = 1 << (17 - 1) | 1 << (23 - 1) | 1 << (28 - 1);
        let quiet = mask("SigIgn:") | (IGNORED_BY_DEFAULT & !mask("SigCgt:"));
        (mask("SigPnd:") | mask("ShdPnd:")) & !mask("SigBlk:") & !quiet != 0
    }

    fn resume_thread(&mut self, tid: i32) -> Result<()> {
        self.settle_restart(tid);
        let signals = match self.threads.get_mut(&tid) {
            Some(ThreadState::Stopped { signals, .. }) => std::mem::take(signals),
            _ => return Ok(()),
        };
        let sig = self.hand_back(tid, &signals);
        match sys::resume(Resume::Continue, tid, sig) {
            Ok(()) => {
                self.threads.insert(tid, ThreadState::Running);
                Ok(())
            }
            Err(e) if errno(&e) == Some(Errno::ESRCH) => {
                self.threads.remove(&tid);
                Ok(())
            }
            Err(e) => Err(self.ptrace_error("CONT", tid, e)),
        }
    }

    /// Detaches from every thread, handing back pending signals. The process runs on.
    pub fn detach(mut self) -> Result<()> {
        self.detach_all()
    }

    fn detach_all(&mut self) -> Result<()> {
        // PTRACE_DETACH needs a stopped thread: one still running, or seized
        // and not yet stopped (a clone child among them), would stay traced
        // by weft and stop with no one to resume it.
        for tid in self.running() {
            let _ = self.interrupt(tid);
        }
        // Errors only mean threads (or the process) went away meanwhile.
        let _ = self.wait_all_stopped_within(Duration::from_secs(2));
        for tid in self.threads.keys().copied().collect::<Vec<_>>() {
            self.settle_restart(tid);
        }
        let threads = std::mem::take(&mut self.threads);
        let mut first_error = None;
        for (tid, state) in threads {
            let sig = match state {
                ThreadState::Stopped { signals, .. } => self.hand_back(tid, &signals),
                _ => 0,
            };
            if let Err(e) = sys::resume(Resume::Detach, tid, sig) {
                if errno(&e) != Some(Errno::ESRCH) && first_error.is_none() {
                    first_error = Some(self.ptrace_error("DETACH", tid, e));
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The signals a stopped thread took while weft held it: the first is
    /// returned, for the resume to deliver; the others are queued for the
    /// thread again (a resume delivers one), so none is lost.
    fn hand_back(&self, tid: i32, signals: &[i32]) -> i32 {
        for &sig in signals.iter().skip(1) {
            // Fails only if the thread is gone, and its signals with it.
            let _ = sys::tgkill(self.pid, tid, sig);
        }
        signals.first().copied().unwrap_or(0)
    }

    pub(crate) fn ptrace_error(&self, op: &'static str, tid: i32, e: std::io::Error) -> Error {
        match errno(&e) {
            Some(Errno::ESRCH) if !crate::is_alive(self.pid) => Error::ProcessGone(self.pid),
            Some(Errno::ESRCH) => Error::ThreadGone(tid),
            Some(Errno::EPERM) => Error::PermissionDenied { pid: self.pid, op },
            _ => Error::Ptrace { op, tid, source: e },
        }
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        let _ = self.detach_all();
    }
}

/// The pid tracing `tid`, from `/proc/TID/status` (0 when none).
/// Whether thread `tid` of `pid` is exiting (a zombie or dead) or gone.
fn thread_exiting(pid: i32, tid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")) {
        Ok(status) => status.lines().any(|l| {
            l.strip_prefix("State:")
                .is_some_and(|v| matches!(v.trim().chars().next(), Some('Z' | 'X')))
        }),
        Err(_) => true,
    }
}

fn tracer_of(tid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).ok()?;
    status.lines().find_map(|l| {
        l.strip_prefix("TracerPid:")
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Waits for a child started with [`Tracee::launch`] (and since detached)
/// to end; returns the shell-style exit code (128 + signal when killed).
pub fn wait_child_exit(pid: i32) -> Result<i32> {
    if let Some(code) = reaped().remove(&pid) {
        return Ok(code);
    }
    loop {
        let waited = match sys::wait(pid, WaitFlags::Block) {
            Ok(w) => w,
            // Reaped by an episode's wait on another thread, which records
            // its code just after: wait for that (a second at most).
            Err(e) if e.raw_os_error() == Some(libc::ECHILD) => {
                for _ in 0..100 {
                    if let Some(code) = reaped().remove(&pid) {
                        return Ok(code);
                    }
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                return Err(Error::Io {
                    what: "waitpid".into(),
                    source: e,
                });
            }
            Err(e) => {
                return Err(Error::Io {
                    what: "waitpid".into(),
                    source: e,
                })
            }
        };
        match waited {
            Wait::Exited { code, .. } => return Ok(code),
            Wait::Signaled { signal, .. } => return Ok(128 + signal),
            _ => continue,
        }
    }
}

/// The signal that killed a child started with [`Tracee::launch`], if
/// one did, read before [`wait_child_exit`] reaps it (its exit code says
/// 128 + the signal, as a program's own `exit(139)` would).
pub fn killed_by(pid: i32) -> Option<i32> {
    sys::terminating_signal(pid)
}

/// Whether a child started with [`Tracee::launch`] has exited, without
/// reaping it (`waitid` with `WNOWAIT`): its `/proc` entries stay readable
/// until [`wait_child_exit`] reaps it.
pub fn child_has_exited(pid: i32) -> Result<bool> {
    if reaped().contains_key(&pid) {
        return Ok(true);
    }
    match sys::has_exited(pid) {
        // Reaped meanwhile by an episode's wait on another thread, which
        // records it just after (a session-26 trial's `reexec` of a Ruby
        // program ended with "waitid: No child processes" 3 times in 20):
        // it has exited.
        Err(e) if e.raw_os_error() == Some(libc::ECHILD) => Ok(true),
        other => other.map_err(|source| Error::Io {
            what: "waitid".into(),
            source,
        }),
    }
}

/// weft's soft limit of open files before `raise_open_file_limit` (0: not
/// raised), which a launched program gets back.
pub(crate) static ORIGINAL_OPEN_FILES: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Children of weft that an episode's wait reaped (pid, shell-style exit
/// code), kept until [`wait_child_exit`] asks for them.
fn reaped() -> std::sync::MutexGuard<'static, BTreeMap<i32, i32>> {
    static REAPED: std::sync::Mutex<BTreeMap<i32, i32>> = std::sync::Mutex::new(BTreeMap::new());
    REAPED.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
pub(crate) mod tests;
