//! Memory an earlier weft left in the target: a region whose weft finished
//! but could not unmap it (its SIGTRAP handler kept for a queued trap, rich
//! event rings a thread might still write, code a thread was still inside)
//! says so in its sync page (`LEFT_BEHIND`). The next session takes such
//! regions out at its first episode, once no thread's pc, registers or
//! stack refer to them, so attach cycles never pile memory up. A region
//! without the mark belongs to a weft at work, or to one that died with
//! its splices in place, and is never touched.

use super::*;
use std::collections::BTreeMap as Groups;
use weft_abi::signal::SIGTRAP;
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
            let left = tracee.memory().read_u64(RemoteAddr(
                data.start.0 + header.sync_offset + sync::LEFT_BEHIND,
            ));
            if left.ok() != Some(1) {
                continue;
            }
            let ranges: Vec<(u64, u64)> = entries.iter().map(|m| (m.start.0, m.end.0)).collect();
            if self.memory_in_use(tracee, &ranges)?.is_some()
                || self.registers_point_into(tracee, &ranges)?
            {
                continue;
            }
            if !self.give_back_sigtrap(tracee, data.start.0, &header, &ranges)? {
                continue;
            }
            for m in entries {
                tracee.remote_munmap(m.start, m.end.0 - m.start.0)?;
                freed += m.end.0 - m.start.0;
            }
        }
        Ok(freed)
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
        let scratch = RemoteAddr(data + header.scratch_offset);
        tracee.remote_sigaction(SIGTRAP, RemoteAddr(0), scratch)?;
        let handler = tracee.memory().read_u64(scratch)?;
        if !ranges.iter().any(|&(s, e)| handler >= s && handler < e) {
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
}
