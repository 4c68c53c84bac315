//! Knowing when a process has gone without tracing it: a pidfd.

use crate::{Error, Result};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use std::os::fd::OwnedFd;
use std::time::Duration;

/// Becomes readable when the process exits (pidfd_open(2)).
#[derive(Debug)]
pub struct ExitWatch {
    pid: i32,
    fd: Option<OwnedFd>,
}

impl ExitWatch {
    /// Watches `pid`. Falls back to polling `/proc` on kernels without pidfd.
    pub fn new(pid: i32) -> Result<ExitWatch> {
        let Some(target) = Pid::from_raw(pid) else {
            return Err(Error::NoSuchProcess(pid));
        };
        match pidfd_open(target, PidfdFlags::empty()) {
            Ok(fd) => Ok(ExitWatch { pid, fd: Some(fd) }),
            Err(rustix::io::Errno::SRCH) => Err(Error::NoSuchProcess(pid)),
            Err(_) => Ok(ExitWatch { pid, fd: None }),
        }
    }

    /// Waits up to `timeout` for the process to exit; true if it has.
    pub fn wait(&self, timeout: Duration) -> bool {
        match &self.fd {
            Some(fd) => {
                let mut fds = [PollFd::new(fd, PollFlags::IN)];
                // poll(2) takes milliseconds; keep that granularity.
                let ms = timeout.as_millis().min(i32::MAX as u128) as u64;
                let ts = Timespec {
                    tv_sec: (ms / 1000) as _,
                    tv_nsec: ((ms % 1000) * 1_000_000) as _,
                };
                poll(&mut fds, Some(&ts)).is_ok_and(|n| n > 0)
            }
            None => {
                let step = Duration::from_millis(10).min(timeout);
                let deadline = std::time::Instant::now() + timeout;
                loop {
                    if !crate::is_alive(self.pid) {
                        return true;
                    }
                    if std::time::Instant::now() >= deadline {
                        return false;
                    }
                    std::thread::sleep(step);
                }
            }
        }
    }
}
