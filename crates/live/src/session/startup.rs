//! Probes placed at a program's first instruction, before its dynamic
//! loader (or a static program's start-up code) has run: the loader's own
//! system calls, which map the libraries, are then recorded too.
//!
//! A program starts without a thread pointer (`fs` base 0) and gets one
//! only when the loader sets up its thread control block, while generated
//! code finds the calling thread's slot by `fs:0`. So weft points `fs` at a
//! start-up thread control block in its region
//! (`weft_patch::region::sync::STARTUP_TCB`, whose first word is its own
//! address) until then; the loader replaces it with the real one as it
//! would have replaced 0. Code made before weft knows where the C library
//! keeps a thread's id reads that offset from the region when it runs
//! (`sync::TID_OFFSET`, written at the program's entry), and the slot the
//! thread claimed under the start-up block hands its timers and counters
//! over to the slot it claims under its real one (`sync::STARTUP_SLOT`).
//!
//! [`Session::prepare`] resolves the patterns in the modules mapped at the
//! first instruction (the program, the loader, the vDSO) until
//! [`Session::end_startup`], and in the others after it; a pattern is
//! unmatched only if it matched in neither.

use super::*;
use weft_patch::region::sync;

/// A session that began at a program's first instruction.
#[derive(Debug, Clone)]
pub(super) struct Startup {
    /// The start-up thread control block, as the process sees it.
    pub(super) tcb: u64,
    /// Modules whose patterns were resolved before the end (the ones
    /// mapped at the first instruction), once prepared.
    pub(super) modules: Option<usize>,
    /// Per spec, whether it matched in those modules.
    pub(super) matched: Vec<bool>,
    /// Whether the program has its own thread pointer now.
    pub(super) ended: bool,
}

impl Session {
    /// Gives the process, stopped at its first instruction with no thread
    /// pointer, weft's start-up thread control block as its thread
    /// pointer, so probes may be placed before its loader runs. False, and
    /// nothing done, if it already has a thread pointer.
    pub fn begin_startup(&mut self, tracee: &mut Tracee) -> Result<bool> {
        let pid = tracee.pid();
        let regs = tracee.registers(pid)?;
        if regs.fs_base != 0 || self.startup.is_some() {
            return Ok(false);
        }
        // Stopped in `execve` still (its ptrace event), the kernel would
        // write the call's result over the registers of weft's own remote
        // calls: a trap at the first instruction ends the call first.
        if tracee.run_to(RemoteAddr(regs.rip))? != weft_process::StopReason::Reached {
            return Ok(false);
        }
        let mut regs = tracee.registers(pid)?;
        self.refresh_modules()?;
        self.adopt(tracee)?;
        let pc = regs.rip;
        let Some(mi) = self
            .modules
            .iter()
            .position(|m| (m.lo..m.hi).contains(&pc))
            .or((!self.modules.is_empty()).then_some(0))
        else {
            return Ok(false);
        };
        let ci = self.ensure_cluster(tracee, mi)?;
        let at = self.layout.header.sync_offset + sync::STARTUP_TCB;
        let tcb = self.clusters[ci].data + sync::STARTUP_TCB + self.layout.header.sync_offset;
        self.shm.write(at, &[0; sync::STARTUP_TCB_SIZE as usize]);
        self.shm.store_u64(at, tcb);
        regs.fs_base = tcb;
        tracee.set_registers(pid, &regs)?;
        self.startup = Some(Startup {
            tcb,
            modules: None,
            matched: Vec::new(),
            ended: false,
        });
        Ok(true)
    }

    /// Called once the program has set up its thread pointer (at its
    /// entry, or a static program's `main`): weft learns where its C
    /// library keeps a thread's id, tells the code placed before, and
    /// resolves patterns in the libraries loaded since. Nothing to do for a
    /// session that did not begin at the first instruction, or while the
    /// thread pointer is still weft's.
    pub fn end_startup(&mut self, tracee: &Tracee) -> Result<()> {
        let Some(startup) = &self.startup else {
            return Ok(());
        };
        if startup.ended || tracee.registers(tracee.pid())?.fs_base == startup.tcb {
            return Ok(());
        }
        let offset = self.find_tid_offset(tracee);
        self.tid_offset = Some(offset);
        self.shm
            .store_u32(self.layout.header.sync_offset + sync::TID_OFFSET, offset);
        // Found again: the C library's rseq area is registered now.
        self.cpu_source = None;
        if let Some(s) = &mut self.startup {
            s.ended = true;
        }
        Ok(())
    }

    /// Whether the program still runs on weft's start-up thread pointer
    /// (where the thread-id offset and the CPU source cannot be read).
    pub(super) fn in_startup(&self) -> bool {
        self.startup.as_ref().is_some_and(|s| !s.ended)
    }

    /// What code cluster `ci` places before weft knows the thread-id
    /// offset needs (see the module's comment).
    pub(super) fn startup_view(&self, ci: usize) -> Option<weft_patch::mini::Startup> {
        let s = self.startup.as_ref()?;
        if self.tid_offset.is_some() {
            return None;
        }
        let sync_page = self.clusters[ci].data + self.layout.header.sync_offset;
        Some(weft_patch::mini::Startup {
            tid_offset_word: sync_page + sync::TID_OFFSET,
            slot_word: sync_page + sync::STARTUP_SLOT,
            tcb: s.tcb,
        })
    }

    /// The first module `prepare` resolves patterns in, and per spec
    /// whether it matched in the modules before it.
    pub(super) fn startup_done(&self) -> (usize, &[bool]) {
        match &self.startup {
            Some(Startup {
                modules: Some(n),
                matched,
                ended: true,
                ..
            }) => (*n, matched),
            _ => (0, &[]),
        }
    }
}
