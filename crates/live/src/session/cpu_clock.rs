//! The per-thread CPU clock (`weft_abi::vclock`) in the target: the
//! session maps the clock's BPF map into the process before it places
//! the first CPU timer, tells generated code where it lies, reads CPU
//! timers, and unmaps it when weft detaches (or, after a weft died, when
//! the next one takes its region out: the address is in the sync page).
//!
//! The map reaches the target through `pidfd_getfd`: the target, run by a
//! remote system call, takes weft's descriptor of the map (a BPF map
//! cannot be reopened through `/proc/PID/fd`). That needs the target to
//! be allowed to trace weft (root, or weft's user) and to share weft's
//! pid namespace; otherwise CPU time stays sampled and weft says so.

use super::*;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use weft_abi::vclock::{self as v, Conversion, View};
use weft_abi::{mman, syscall};
use weft_patch::region::sync;

/// The clock as the session knows it.
#[derive(Debug)]
pub(super) struct CpuClock {
    /// weft's descriptor of the clock's map.
    fd: OwnedFd,
    conversion: Conversion,
    /// Where the target maps it, once it does.
    mapped: Option<u64>,
    /// Where the target mapped it last: thread blocks keep the addresses
    /// of their entries there, which weft still reads after detaching.
    last_mapped: Option<u64>,
}

impl CpuClock {
    /// Where thread entry `slot` is in the target's mapping, if it maps
    /// the clock.
    pub(super) fn entry_address(&self, slot: u64) -> Option<u64> {
        Some(self.mapped? + (v::FIRST_THREAD + slot) * v::ENTRY_SIZE)
    }

    /// The clock as a forked child of the process knows it: the same
    /// mapping (inherited), weft's descriptor duplicated.
    pub(super) fn copy(&self) -> Result<CpuClock> {
        Ok(CpuClock {
            fd: self.fd.try_clone().map_err(|e| Error::Io {
                what: "duplicating the CPU clock's descriptor".into(),
                source: e,
            })?,
            conversion: self.conversion,
            mapped: self.mapped,
            last_mapped: self.last_mapped,
        })
    }
}

impl Session {
    /// Gives the session the per-thread CPU clock (its map's descriptor,
    /// duplicated, and its calibration): `cpu_time` is measured on it
    /// from now on, if the process may map it (see
    /// [`can_map_cpu_clock`](Self::can_map_cpu_clock)).
    pub fn set_cpu_clock(&mut self, fd: BorrowedFd<'_>, conversion: Conversion) -> Result<()> {
        let fd = fd.try_clone_to_owned().map_err(|e| Error::Io {
            what: "duplicating the CPU clock's descriptor".into(),
            source: e,
        })?;
        self.cpu_clock = Some(CpuClock {
            fd,
            conversion,
            mapped: None,
            last_mapped: None,
        });
        Ok(())
    }

    /// Why the process cannot map the CPU clock, if it cannot: it lives in
    /// another pid namespace than weft, or runs as another user than weft
    /// (without the right to trace weft, it cannot take weft's descriptor).
    pub fn cpu_clock_obstacle(&self) -> Option<String> {
        let ours = weft_process::pid_namespace(std::process::id() as i32);
        if ours != weft_process::pid_namespace(self.pid) {
            return Some("the process is in another pid namespace".into());
        }
        let (uid, _) = weft_process::process_ids(self.pid).ok()?;
        // SAFETY: geteuid has no arguments and cannot fail.
        let our_uid = unsafe { libc::geteuid() };
        (uid != 0 && uid != our_uid).then(|| {
            format!("the process runs as user {uid}, which may not take weft's descriptor")
        })
    }

    /// Maps the clock into the stopped process unless it is already.
    pub(super) fn ensure_cpu_clock(&mut self, tracee: &mut Tracee) -> Result<()> {
        let Some(clock) = &self.cpu_clock else {
            return Ok(());
        };
        if clock.mapped.is_some() {
            return Ok(());
        }
        let weft = u64::from(std::process::id());
        let pidfd = tracee.remote_syscall(
            "pidfd_open",
            syscall::PIDFD_OPEN.into(),
            [weft, 0, 0, 0, 0, 0],
        )? as i32;
        let fd = tracee.remote_syscall(
            "pidfd_getfd",
            syscall::PIDFD_GETFD.into(),
            [pidfd as u64, clock.fd.as_raw_fd() as u64, 0, 0, 0, 0],
        );
        tracee.remote_close(pidfd)?;
        let fd = fd? as i32;
        let at = tracee.remote_mmap_far(
            v::MAP_SIZE,
            mman::PROT_READ | mman::PROT_WRITE,
            mman::MAP_SHARED,
            fd,
            0,
        );
        tracee.remote_close(fd)?;
        let at = at?.0;
        if let Some(clock) = &mut self.cpu_clock {
            clock.mapped = Some(at);
            clock.last_mapped = Some(at);
        }
        self.shm
            .store_u64(self.layout.header.sync_offset + sync::CPU_CLOCK, at);
        Ok(())
    }

    /// Where generated code finds the clock, once the process maps it.
    pub(super) fn cpu_clock_view(&self) -> Option<View> {
        let clock = self.cpu_clock.as_ref()?;
        Some(View {
            base: clock.mapped?,
            conversion: clock.conversion,
        })
    }

    /// Unmaps the clock once nothing can read it (the clusters are gone).
    pub(super) fn unmap_cpu_clock(&mut self, tracee: &mut Tracee) -> Result<()> {
        if self.clusters.iter().any(|c| c.mapped) {
            return Ok(());
        }
        if let Some(at) = self.cpu_clock.as_mut().and_then(|c| c.mapped.take()) {
            tracee.remote_munmap(RemoteAddr(at), v::MAP_SIZE)?;
            self.shm
                .store_u64(self.layout.header.sync_offset + sync::CPU_CLOCK, 0);
        }
        Ok(())
    }

    /// Every thread's reading of a CPU timer, in nanoseconds; a running
    /// one adds its thread's CPU time since its start, which `cpu_now`
    /// gives for the thread's entry in the clock (its index from the
    /// first thread entry), if it can.
    pub fn cpu_timer_readings(
        &self,
        timer: u64,
        cpu_now: impl Fn(u64) -> Option<u64>,
    ) -> Vec<ThreadReading> {
        // Calls still running when weft detached are read up to now, as
        // wall timers are: the entries stay readable from weft's side.
        let base = self
            .cpu_clock
            .as_ref()
            .and_then(|c| c.last_mapped)
            .map_or(0, |at| at + v::FIRST_THREAD * v::ENTRY_SIZE);
        self.readings_of(timer, |block| {
            let entry = self.shm.load_u64(block + threads::VCLOCK);
            (entry >= base && base != 0)
                .then(|| cpu_now((entry - base) / v::ENTRY_SIZE))
                .flatten()
        })
    }
}
