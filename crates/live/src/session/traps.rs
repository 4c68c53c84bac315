//! The in-process trap table: `int3` splices redirected to their
//! trampolines by weft's SIGTRAP handler, with no ptrace stop per hit.

use super::*;
use weft_abi::signal::SIGTRAP;
use weft_patch::trap;

#[derive(Debug, Clone, Copy)]
pub(super) struct TrapHandler {
    pub(super) cluster: usize,
    pub(super) installed: bool,
    /// The handler's entry (`sa_handler`).
    pub(super) entry: u64,
}

impl Session {
    /// Generates and installs weft's SIGTRAP handler (once).
    pub(super) fn install_trap_handler(&mut self, tracee: &mut Tracee, ci: usize) -> Result<()> {
        if self.trap.is_some_and(|t| t.installed) {
            return Ok(());
        }
        let base = self.layout.header.trap_offset;
        let cluster = self.clusters[ci];
        let at = cluster.code + cluster.used;
        let capacity = self.layout.header.trap_capacity;
        let code = trap::handler_code(at, cluster.data + base, capacity)?;
        let placed = self.alloc_code(ci, &code.bytes)?;
        debug_assert_eq!(placed, at);
        self.shm.write(
            base + trap_table::NEW_ACTION,
            &trap::kernel_sigaction(code.handler, trap::HANDLER_FLAGS, code.restorer, 0),
        );
        self.shm.write(
            base + trap_table::DEFAULT_ACTION,
            &trap::kernel_sigaction(0, trap::RESTORER_FLAG, code.restorer, 0),
        );
        tracee.remote_sigaction(
            SIGTRAP,
            RemoteAddr(cluster.data + base + trap_table::NEW_ACTION),
            RemoteAddr(cluster.data + base + trap_table::OLD_ACTION),
        )?;
        self.trap = Some(TrapHandler {
            cluster: ci,
            installed: true,
            entry: code.handler,
        });
        Ok(())
    }

    /// Splices the `sigaction` hook (`weft_patch::sigaction_hook`) into
    /// the C library once weft's handler is installed, so that a SIGTRAP
    /// handler the program installs later is chained behind weft's instead
    /// of replacing it. glibc's `__libc_sigaction` is the one function
    /// every way of setting an action reaches; a static program's own
    /// copy is used when there is no libc.so. Without glibc's
    /// `__restore_rt`, or with the function already spliced for a probe,
    /// there is no hook, and [`Session::reclaim_sigtrap`] catches the
    /// program's change at the next episode.
    pub(super) fn install_sigaction_hook(&mut self, tracee: &mut Tracee) -> Result<()> {
        let hooked = self
            .sites
            .iter()
            .any(|s| s.active && matches!(s.hook, Some(Hook::Sigaction { .. })));
        if hooked || (!self.trap.is_some_and(|t| t.installed) && self.kept_actions.is_empty()) {
            return Ok(());
        }
        let mut candidates: Vec<usize> = (0..self.modules.len())
            .filter(|&m| self.modules[m].name.starts_with("libc.so"))
            .collect();
        if candidates.is_empty() {
            // A dynamic program before its loader mapped the C library: the
            // hook comes with the library (at the next `apply`).
            if self.modules.iter().any(|m| m.name.starts_with("ld-linux")) {
                return Ok(());
            }
            candidates = (0..self.modules.len()).collect();
        }
        for mi in candidates {
            let module = &self.modules[mi];
            let Some(restore_rt) = module.image.code_segments().find_map(|(vaddr, bytes)| {
                weft_patch::sigaction_hook::find_restore_rt(bytes, module.runtime(vaddr).0)
            }) else {
                continue;
            };
            let hook = Hook::Sigaction { restore_rt };
            for name in ["__libc_sigaction", "__sigaction"] {
                if self.install_hook(tracee, mi, name, hook)? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Keeps the program's action for `kept.signal` at `kept.action` (a
    /// kernel `struct sigaction` in the process's memory, where the
    /// instrument's handler finds it) while process `kept.process` names
    /// lives: the `sigaction` hook answers the program's calls for that
    /// signal from there, and keeps the signal out of every other action's
    /// mask. Call it before the plans are applied (the hook is spliced with
    /// the first of them).
    pub fn keep_signal_action(&mut self, kept: weft_patch::sigaction_hook::Kept) {
        self.kept_actions.retain(|k| k.signal != kept.signal);
        self.kept_actions.push(kept);
    }

    /// The actions the `sigaction` hook keeps: SIGTRAP's in the trap table
    /// of the cluster whose data is at `data` while weft's handler is
    /// installed, and the instruments'.
    pub(super) fn kept_signal_actions(&self, data: u64) -> Vec<weft_patch::sigaction_hook::Kept> {
        let table = data + self.layout.header.trap_offset;
        let trap = self
            .trap
            .filter(|t| t.installed)
            .map(|_| weft_patch::sigaction_hook::Kept {
                signal: SIGTRAP,
                action: table + trap_table::OLD_ACTION,
                process: table + trap_table::PROCESS,
            });
        trap.into_iter()
            .chain(self.kept_actions.iter().copied())
            .collect()
    }

    /// If the SIGTRAP action is no longer weft's handler (the program set
    /// one with a raw `rt_sigaction`, or no `sigaction` hook could be
    /// placed), keeps the program's action as the one weft chains to and
    /// puts weft's handler back in front; once per episode.
    pub(super) fn reclaim_sigtrap(&mut self, tracee: &mut Tracee) -> Result<()> {
        let Some(t) = self.trap.filter(|t| t.installed) else {
            return Ok(());
        };
        // Under Syscall User Dispatch every `rt_sigaction` of the program's
        // reaches weft's SIGSYS handler, which answers SIGTRAP's itself:
        // no remote call (which would move a thread stopped with a
        // dispatched call of its own; see `dispatch.rs`).
        if self.dispatching() {
            return Ok(());
        }
        let c = self.clusters[t.cluster];
        let base = self.layout.header.trap_offset;
        let scratch = self.layout.header.scratch_offset;
        tracee.remote_sigaction(SIGTRAP, RemoteAddr(0), RemoteAddr(c.data + scratch))?;
        let now = self.shm.read(scratch, trap_table::ACTION_SIZE as usize);
        let handler = u64::from_le_bytes(now[..8].try_into().expect("8 bytes"));
        if handler == t.entry {
            return Ok(());
        }
        self.shm.write(base + trap_table::OLD_ACTION, &now);
        tracee.remote_sigaction(
            SIGTRAP,
            RemoteAddr(c.data + base + trap_table::NEW_ACTION),
            RemoteAddr(0),
        )?;
        Ok(())
    }

    /// Rewrites the trap table: where each active splice (and springboard)
    /// starts, with its trampoline, since every splice passes through an
    /// `int3` while it is written or restored; and each splice taken out
    /// with 0, so that a thread that trapped on it just before re-executes
    /// the restored instruction (and any other SIGTRAP goes to the program).
    pub(super) fn write_trap_table(&mut self) {
        let mut by_site: BTreeMap<u64, u64> = BTreeMap::new();
        for s in &self.sites {
            // Where each splice's bytes start, and its springboard's.
            for r in s.record.iter().chain(s.board.iter()) {
                let entry = by_site.entry(r.addr).or_insert(0);
                if s.active {
                    *entry = s.entry;
                }
            }
        }
        let mut entries: Vec<(u64, u64)> = by_site.into_iter().collect();
        let capacity = self.layout.header.trap_capacity as usize;
        if entries.len() > capacity {
            // Keep every active site; drop removed ones beyond the capacity.
            entries.sort_by_key(|&(_, trampoline)| trampoline == 0);
            entries.truncate(capacity);
        }
        // The buffer not in use gets the new entries; one store of CURRENT
        // then switches the handler to it, so the table is whole at every
        // instant, whenever weft might die.
        let base = self.layout.header.trap_offset;
        let current = self.shm.load_u64(base + trap_table::CURRENT);
        let next = 1 - (current >> trap_table::BUFFER_BIT);
        let count = entries.len() as u64;
        self.shm.write(
            base + trap_table::buffer(next, capacity as u64),
            &trap::table_entries(entries),
        );
        self.shm
            .store_u64(base + trap_table::CURRENT, trap_table::current(next, count));
        // Sites are listed in both before their bytes go in, and in neither
        // once they are out.
        self.write_journal();
    }

    /// Threads this episode found stopped on the SIGTRAP of one of weft's
    /// `int3`s (ptrace took the signal before weft's handler saw it) get
    /// their pc backed up onto the `int3` and the signal dropped, first
    /// thing: if weft died now, such a signal could be lost with it, and
    /// the thread would run on past the `int3` without the instruction it
    /// replaced. Backed up, the thread simply traps again.
    pub(super) fn rewind_trapped_threads(&self, tracee: &mut Tracee) -> Result<()> {
        let sites: std::collections::BTreeSet<u64> = self
            .sites
            .iter()
            .filter(|s| s.choice.method == SpliceMethod::Trap && s.record.is_some())
            .map(|s| s.choice.point)
            .collect();
        if sites.is_empty() {
            return Ok(());
        }
        for tid in tracee.threads() {
            if !tracee.pending_signals(tid).contains(&SIGTRAP) {
                continue;
            }
            let mut regs = tracee.registers(tid)?;
            if sites.contains(&regs.rip.wrapping_sub(1)) {
                regs.rip -= 1;
                tracee.set_registers(tid, &regs)?;
                tracee.discard_signal(tid, SIGTRAP);
            }
        }
        Ok(())
    }

    /// A thread that hit a removed `int3` and is about to take SIGTRAP gets
    /// the signal dropped and its pc backed up to run the original byte.
    /// Returns whether a SIGTRAP is still queued for some thread (weft's
    /// handler must then stay to absorb it).
    pub(super) fn rewind_removed_traps(
        &self,
        tracee: &mut Tracee,
        removed: &[u64],
    ) -> Result<bool> {
        if !self.trap.is_some_and(|t| t.installed) {
            return Ok(false);
        }
        let mut queued = false;
        if removed.is_empty() {
            return Ok(false);
        }
        for tid in tracee.threads() {
            let mut regs = tracee.registers(tid)?;
            let after_removed = removed.contains(&(regs.rip.wrapping_sub(1)));
            if after_removed && tracee.pending_signals(tid).contains(&SIGTRAP) {
                regs.rip -= 1;
                tracee.set_registers(tid, &regs)?;
                tracee.discard_signal(tid, SIGTRAP);
                continue;
            }
            // A SIGTRAP still in the kernel's queue is weft's only if the
            // thread stands right after one of its int3s; any other is the
            // program's, for the program's own disposition.
            queued |= after_removed && tracee.signal_queued(tid, SIGTRAP);
        }
        Ok(queued)
    }

    /// [`Session::rewind_removed_traps`], then, while a SIGTRAP is still
    /// queued, letting the threads run briefly with weft detached: a thread
    /// that hit one of the removed `int3`s just as it was stopped takes the
    /// signal in weft's handler, which backs it up onto the restored
    /// instruction. (Run traced, the signal would wait in a ptrace stop,
    /// and be lost if weft died there.) Returns whether a SIGTRAP is still
    /// queued after a bounded wait (about 130 ms; on a loaded machine a
    /// thread may wait that long for a processor).
    pub(super) fn drain_removed_traps(&self, tracee: &mut Tracee, removed: &[u64]) -> Result<bool> {
        const ATTEMPTS: u32 = 7;
        for attempt in 0..ATTEMPTS {
            if !self.rewind_removed_traps(tracee, removed)? {
                return Ok(false);
            }
            tracee.let_run_untraced(std::time::Duration::from_millis(1 << attempt))?;
        }
        self.rewind_removed_traps(tracee, removed)
    }

    /// Gives the target back the SIGTRAP action weft replaced.
    pub(super) fn uninstall_trap_handler(&mut self, tracee: &mut Tracee) -> Result<()> {
        let Some(t) = self.trap.filter(|t| t.installed) else {
            return Ok(());
        };
        let c = self.clusters[t.cluster];
        let old = RemoteAddr(c.data + self.layout.header.trap_offset + trap_table::OLD_ACTION);
        tracee.remote_sigaction(SIGTRAP, old, RemoteAddr(0))?;
        self.trap = Some(TrapHandler {
            installed: false,
            ..t
        });
        Ok(())
    }
}
