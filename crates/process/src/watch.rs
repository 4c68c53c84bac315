//! Knowing when a process has gone without tracing it: a pidfd.

use crate::{Error, Result};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
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
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd >= 0 {
            // SAFETY: the kernel just gave us this fd and nothing else owns it.
            let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
            return Ok(ExitWatch { pid, fd: Some(fd) });
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ESRCH) => Err(Error::NoSuchProcess(pid)),
            _ => Ok(ExitWatch { pid, fd: None }),
        }
    }

    /// Waits up to `timeout` for the process to exit; true if it has.
    pub fn wait(&self, timeout: Duration) -> bool {
        match &self.fd {
            Some(fd) => {
                let mut pfd = libc::pollfd {
                    fd: fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
                // SAFETY: one valid pollfd, count 1.
                let n = unsafe { libc::poll(&mut pfd, 1, ms) };
                n > 0
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
