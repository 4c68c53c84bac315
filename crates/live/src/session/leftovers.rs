//! What an earlier weft left in the target, taken out at a new session's
//! first episode.
//!
//! * A region whose weft finished but could not unmap it (its SIGTRAP
//!   handler kept for a queued trap, rich event rings a thread might still
//!   write, code a thread was still inside) says so in its sync page
//!   (`LEFT_BEHIND`). Its one splice left in, the C unwinder's hook
//!   (`unwind.rs`), goes back from its journal before its memory goes.
//! * A region whose weft died (`kill -9`) with its splices in place has no
//!   such mark, and its owner (`OWNER_PID`, `OWNER_START`) is gone. Its
//!   journal lists every change that weft made to the program: each is
//!   undone (splices in phases, `int3` first, while the dead weft's handler
//!   and trap table still resolve a trap), and the region is then marked
//!   left behind.
//!
//! Left-behind regions are unmapped once no thread's pc, registers or stack
//! refer to them, so attach cycles never pile memory up. A region whose
//! owner lives belongs to a weft at work and is never touched.

use super::remove::part_written;
use super::*;
use std::collections::BTreeMap as Groups;
use weft_abi::signal::SIGTRAP;
use weft_patch::region::journal::{self, Entry, Kind};
use weft_patch::region::{sync, Header, MAGIC, VERSION};

impl Session {
    /// Marks this session's region as left behind (see the module doc),
    /// when some of it is still mapped in the target after removal.
    pub(super) fn mark_left_behind(&self) {
        if self.clusters.iter().any(|c| c.mapped) {
            self.shm
                .store_u64(self.layout.header.sync_offset + sync::LEFT_BEHIND, 1);
        }
    }

    /// Unmaps the regions earlier wefts left behind that nothing in the
    /// target can use any more; returns how many bytes went.
    pub(super) fn reclaim_left_behind(&mut self, tracee: &mut Tracee) -> Result<u64> {
        let maps = weft_process::maps::read(self.pid)?;
        let own = self.shm.inode();
        let mut groups: Groups<u64, Vec<&weft_process::maps::MapEntry>> = Groups::new();
        for m in maps
            .iter()
            .filter(|m| is_weft_region(&m.path) && m.inode != own)
        {
            groups.entry(m.inode).or_default().push(m);
        }
        let mut freed = 0;
        for entries in groups.values() {
            let Some(data) = entries.iter().find(|m| m.offset == 0 && m.write) else {
                continue;
            };
            let Some(header) = read_header(tracee, data.start) else {
                continue;
            };
            let ranges: Vec<(u64, u64)> = entries.iter().map(|m| (m.start.0, m.end.0)).collect();
            let sync_page = data.start.0 + header.sync_offset;
            let left = tracee
                .memory()
                .read_u64(RemoteAddr(sync_page + sync::LEFT_BEHIND));
            if left.ok() != Some(1) {
                if !owner_gone(tracee, sync_page) {
                    continue;
                }
                self.undo_dead_weft(tracee, data.start.0, &header, &ranges)?;
            }
            let code: Vec<(u64, u64)> = entries
                .iter()
                .filter(|m| m.exec)
                .map(|m| (m.start.0, m.end.0))
                .collect();
            // Calls whose return that weft hooked return straight to their
            // callers from now on.
            let stacks = tracee
                .memory()
                .read_u64(RemoteAddr(sync_page + sync::RETURN_STACKS))
                .unwrap_or(0);
            if stacks != 0 {
                let in_code = |a: u64| code.iter().any(|&(s, e)| (s..e).contains(&a));
                super::returns::disarm_stacks(tracee, stacks, header.thread_slots, &in_code)?;
            }
            if self.memory_in_use(tracee, &ranges, &code)?.is_some()
                || self.registers_point_into(tracee, &ranges)?
            {
                continue;
            }
            // A finished weft leaves the unwinder's hook in while a thread
            // waits in its code (`Hook::FindFde`): out before the code goes.
            self.undo_splices_left(tracee, data.start.0, &header, &ranges)?;
            if !self.give_back_sigtrap(tracee, data.start.0, &header, &ranges)? {
                continue;
            }
            redirect_chains_into(tracee, &groups, data.start.0, &header, &ranges)?;
            // The per-thread CPU clock it mapped (version 8), read before
            // the region goes.
            let cpu_clock = tracee
                .memory()
                .read_u64(RemoteAddr(sync_page + sync::CPU_CLOCK))
                .unwrap_or(0);
            let freeing: Vec<(u64, u64)> = entries.iter().map(|m| (m.start.0, m.end.0)).collect();
            super::clusters::disarm_restartable_sequences(tracee, &freeing)?;
            for m in entries {
                tracee.remote_munmap(m.start, m.end.0 - m.start.0)?;
                freed += m.end.0 - m.start.0;
            }
            if stacks != 0 {
                let len = weft_patch::region::returns::area_size(header.thread_slots);
                tracee.remote_munmap(RemoteAddr(stacks), len)?;
                freed += len;
            }
            if header.version >= 8 && cpu_clock != 0 {
                tracee.remote_munmap(RemoteAddr(cpu_clock), weft_abi::vclock::MAP_SIZE)?;
                freed += weft_abi::vclock::MAP_SIZE;
            }
        }
        Ok(freed)
    }

    /// Puts back the code of the splices a finished weft left in, which
    /// still jump into its region (`ranges`): its journal lists them. With
    /// every thread stopped and none inside the region, at once.
    fn undo_splices_left(
        &mut self,
        tracee: &mut Tracee,
        data: u64,
        header: &Header,
        ranges: &[(u64, u64)],
    ) -> Result<()> {
        let mut text = TextBatch::new(self.pid)?;
        for e in journal_entries(tracee, data, header)? {
            if !matches!(e.kind, Kind::Code | Kind::PairedCode) {
                continue;
            }
            let Ok(now) = text.read(tracee.memory(), e.addr, e.old.len()) else {
                continue;
            };
            if now != e.old && (now == e.new || jumps_into(&now, e.addr, &e.new, ranges)) {
                text.write(tracee.memory(), e.addr, &e.old)?;
            }
        }
        text.flush(tracee.memory())
    }

    /// Undoes every change a dead weft's journal lists, then marks its
    /// region left behind (and its library-load handshake off).
    fn undo_dead_weft(
        &mut self,
        tracee: &mut Tracee,
        data: u64,
        header: &Header,
        ranges: &[(u64, u64)],
    ) -> Result<()> {
        let entries = journal_entries(tracee, data, header)?;
        let mut text = TextBatch::new(self.pid)?;
        let mut splices = Vec::new();
        for e in &entries {
            match e.kind {
                Kind::Code | Kind::PairedCode => {
                    let Ok(now) = text.read(tracee.memory(), e.addr, e.old.len()) else {
                        continue;
                    };
                    if now != e.old
                        && (part_written(&now, &e.old, &e.new)
                            || jumps_into(&now, e.addr, &e.new, ranges))
                    {
                        splices.push(Splice {
                            addr: e.addr,
                            bytes: e.old.clone(),
                            paired: e.kind == Kind::PairedCode,
                        });
                    }
                }
                Kind::Data => {
                    let mem = tracee.memory();
                    if mem.read_vec(RemoteAddr(e.addr), e.new.len()).ok() == Some(e.new.clone()) {
                        mem.write(RemoteAddr(e.addr), &e.old)?;
                    }
                }
                Kind::Semaphore => {
                    let mut b = [0u8; 2];
                    if tracee.memory().read(RemoteAddr(e.addr), &mut b).is_ok()
                        && u16::from_le_bytes(b) > 0
                    {
                        super::add_to_semaphore(tracee, RemoteAddr(e.addr), -1)?;
                    }
                }
            }
        }
        // In phases while the dead weft's handler can still resolve the
        // int3 of a phase; without it, at once: every thread is stopped.
        if self.handler_of(tracee, data, header, ranges)? {
            text.poke_in_phases(tracee.memory(), &splices)?;
        } else {
            for s in &splices {
                text.write(tracee.memory(), s.addr, &s.bytes)?;
            }
            text.flush(tracee.memory())?;
        }
        let sites: std::collections::BTreeSet<u64> = entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Code | Kind::PairedCode))
            .map(|e| e.addr)
            .collect();
        leave_dead_wefts_code(tracee, &sites, ranges)?;
        let sync_page = data + header.sync_offset;
        tracee
            .memory()
            .write(RemoteAddr(sync_page + sync::LISTENING), &0u32.to_le_bytes())?;
        tracee.memory().write(
            RemoteAddr(sync_page + sync::LEFT_BEHIND),
            &1u64.to_le_bytes(),
        )?;
        Ok(())
    }

    /// Whether the SIGTRAP action is the handler inside `ranges`.
    fn handler_of(
        &self,
        tracee: &mut Tracee,
        data: u64,
        header: &Header,
        ranges: &[(u64, u64)],
    ) -> Result<bool> {
        let scratch = RemoteAddr(data + header.scratch_offset);
        tracee.remote_sigaction(SIGTRAP, RemoteAddr(0), scratch)?;
        let handler = tracee.memory().read_u64(scratch)?;
        Ok(ranges.iter().any(|&(s, e)| handler >= s && handler < e))
    }

    /// Whether a register of some thread holds an address inside `ranges`
    /// (a thread between loading a ring's address and writing through it).
    fn registers_point_into(&self, tracee: &Tracee, ranges: &[(u64, u64)]) -> Result<bool> {
        let inside = |v: u64| ranges.iter().any(|&(s, e)| v >= s && v < e);
        for tid in tracee.threads() {
            let r = tracee.registers(tid)?;
            let words = [
                r.rax, r.rbx, r.rcx, r.rdx, r.rsi, r.rdi, r.rbp, r.rsp, r.r8, r.r9, r.r10, r.r11,
                r.r12, r.r13, r.r14, r.r15,
            ];
            if words.into_iter().any(inside) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// If the SIGTRAP action is still the left-behind handler, puts back
    /// the program's action kept in its trap table; false (leave the region
    /// alone) while a SIGTRAP is still queued for a thread, which that
    /// handler must take.
    fn give_back_sigtrap(
        &self,
        tracee: &mut Tracee,
        data: u64,
        header: &Header,
        ranges: &[(u64, u64)],
    ) -> Result<bool> {
        if !self.handler_of(tracee, data, header, ranges)? {
            return Ok(true);
        }
        if tracee
            .threads()
            .into_iter()
            .any(|t| tracee.signal_queued(t, SIGTRAP) || !tracee.pending_signals(t).is_empty())
        {
            return Ok(false);
        }
        let kept = RemoteAddr(data + header.trap_offset + trap_table::OLD_ACTION);
        tracee.remote_sigaction(SIGTRAP, kept, RemoteAddr(0))?;
        Ok(true)
    }
}

/// Before a region goes: another region whose handler chains to this one's
/// (it was installed while this one's was the action, so keeps this one's
/// handler as the program's action) chains to what this one kept instead,
/// so that no handler is ever left leading into unmapped memory.
fn redirect_chains_into(
    tracee: &Tracee,
    groups: &Groups<u64, Vec<&weft_process::maps::MapEntry>>,
    data: u64,
    header: &Header,
    ranges: &[(u64, u64)],
) -> Result<()> {
    let kept = tracee.memory().read_vec(
        RemoteAddr(data + header.trap_offset + trap_table::OLD_ACTION),
        trap_table::ACTION_SIZE as usize,
    )?;
    for entries in groups.values() {
        let Some(other) = entries.iter().find(|m| m.offset == 0 && m.write) else {
            continue;
        };
        if other.start.0 == data {
            continue;
        }
        let Some(h) = read_header(tracee, other.start) else {
            continue;
        };
        let at = RemoteAddr(other.start.0 + h.trap_offset + trap_table::OLD_ACTION);
        let handler = tracee.memory().read_u64(at)?;
        if ranges.iter().any(|&(s, e)| handler >= s && handler < e) {
            tracee.memory().write(at, &kept)?;
        }
    }
    Ok(())
}

/// Gets every thread out of a dead weft's reach once its splices are
/// undone, before anything new is spliced: a thread inside its code, or
/// sent there by one of its `int3`s, would come back to the original code
/// where its trampoline ends, which a new splice may cover. A thread
/// stopped on such an `int3` is backed up onto the restored instruction
/// and its SIGTRAP dropped; threads inside the code, or with such a
/// SIGTRAP still queued, run on (untraced, so the dead weft's handler
/// takes the signal) for 1, 2, 4, ... 64 ms until they are out.
fn leave_dead_wefts_code(
    tracee: &mut Tracee,
    sites: &std::collections::BTreeSet<u64>,
    ranges: &[(u64, u64)],
) -> Result<()> {
    let after_site = |pc: u64| sites.contains(&pc.wrapping_sub(1));
    for tid in tracee.threads() {
        let mut regs = tracee.registers(tid)?;
        if after_site(regs.rip) && tracee.pending_signals(tid).contains(&SIGTRAP) {
            regs.rip -= 1;
            tracee.set_registers(tid, &regs)?;
            tracee.discard_signal(tid, SIGTRAP);
        }
    }
    let inside = |pc: u64| ranges.iter().any(|&(s, e)| pc >= s && pc < e);
    for round in 0..7 {
        let mut busy = false;
        for tid in tracee.threads() {
            let pc = tracee.registers(tid)?.rip;
            busy |= inside(pc) || (after_site(pc) && tracee.signal_queued(tid, SIGTRAP));
        }
        if !busy {
            break;
        }
        tracee.let_run_untraced(std::time::Duration::from_millis(1 << round))?;
    }
    Ok(())
}

/// Whether the region's owner is gone: its pid names no process, or one
/// started at another time (a pid reused). weft's own regions, those with
/// no owner recorded, and those of a weft in another pid namespace (whose
/// pid means another process here) are never taken for a dead weft's.
fn owner_gone(tracee: &Tracee, sync_page: u64) -> bool {
    let word = |at: u64| tracee.memory().read_u64(RemoteAddr(sync_page + at)).ok();
    let (Some(pid), Some(start), Some(ns)) = (
        word(sync::OWNER_PID),
        word(sync::OWNER_START),
        word(sync::OWNER_PIDNS),
    ) else {
        return false;
    };
    if ns == 0 || weft_process::pid_namespace(std::process::id() as i32) != Some(ns) {
        return false;
    }
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    if pid <= 0 || pid == std::process::id() as i32 {
        return false;
    }
    weft_process::start_time(pid) != Some(start)
}

/// Whether `now`, at a splice whose bytes are `new`, is a `jmp rel32` (or
/// the `int3` of a phase over one) into the dead weft's memory with `new`'s
/// padding: the splice as it was before that weft rebuilt it, or while it
/// did.
/// The changes the journal of the region whose data area is at `data`
/// lists.
fn journal_entries(tracee: &Tracee, data: u64, header: &Header) -> Result<Vec<Entry>> {
    let base = data + header.journal_offset;
    let (which, count) = journal::selected(tracee.memory().read_u64(RemoteAddr(base))?);
    let count = count.min(header.journal_capacity);
    let bytes = tracee.memory().read_vec(
        RemoteAddr(base + journal::buffer(which, header.journal_capacity)),
        (count * journal::ENTRY_SIZE) as usize,
    )?;
    Ok(bytes
        .chunks_exact(journal::ENTRY_SIZE as usize)
        .filter_map(Entry::decode)
        .collect())
}

fn jumps_into(now: &[u8], addr: u64, new: &[u8], ranges: &[(u64, u64)]) -> bool {
    if now.len() < 5 || new.len() != now.len() || !matches!(now[0], 0xe9 | 0xcc) {
        return false;
    }
    let rel = i32::from_le_bytes([now[1], now[2], now[3], now[4]]);
    let target = addr.wrapping_add(5).wrapping_add_signed(i64::from(rel));
    ranges.iter().any(|&(s, e)| target >= s && target < e) && now[5..] == new[5..]
}

/// Whether a mapping's path is one of weft's region files (a memfd, or a
/// `/dev/shm` file for targets running as another user).
fn is_weft_region(path: &str) -> bool {
    path.starts_with("/memfd:weft") || path.starts_with("/dev/shm/weft-")
}

/// The header of a region mapped at `at`, if it is a region of this
/// version or later.
fn read_header(tracee: &Tracee, at: RemoteAddr) -> Option<Header> {
    let bytes = tracee
        .memory()
        .read_vec(at, std::mem::size_of::<Header>())
        .ok()?;
    let header: Header = bytemuck::pod_read_unaligned(&bytes);
    (header.magic == MAGIC && header.version >= VERSION).then_some(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_files_are_told_apart() {
        assert!(is_weft_region("/memfd:weft (deleted)"));
        assert!(is_weft_region("/dev/shm/weft-12-345 (deleted)"));
        assert!(!is_weft_region("/memfd:other (deleted)"));
        assert!(!is_weft_region("/usr/lib/weft.so"));
    }

    #[test]
    fn a_jump_into_the_dead_wefts_memory_is_recognised() {
        let addr = 0x40_0000u64;
        let ranges = [(0x50_0000, 0x60_0000)];
        let jmp = |to: u64, pad: usize| {
            let rel = (to as i64 - (addr as i64 + 5)) as i32;
            let mut b = vec![0xe9];
            b.extend_from_slice(&rel.to_le_bytes());
            b.extend(std::iter::repeat_n(0xcc, pad));
            b
        };
        let new = jmp(0x50_1000, 2);
        assert!(jumps_into(&jmp(0x50_2000, 2), addr, &new, &ranges));
        let mut phase = jmp(0x50_2000, 2);
        phase[0] = 0xcc;
        assert!(jumps_into(&phase, addr, &new, &ranges));
        // Elsewhere, or other padding: not the dead weft's.
        assert!(!jumps_into(&jmp(0x70_0000, 2), addr, &new, &ranges));
        assert!(!jumps_into(
            &[0x55, 1, 2, 3, 4, 0xcc, 0xcc],
            addr,
            &new,
            &ranges
        ));
    }
}
