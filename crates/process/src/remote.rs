//! Typed remote system calls: the few calls weft makes inside a target.

use crate::{RemoteAddr, Result, Tracee};
use weft_abi::{fcntl::AT_FDCWD, mman::MAP_FIXED_NOREPLACE, sigaction, syscall};

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
