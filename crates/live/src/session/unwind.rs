//! Unwind information for the `syscall` instructions in weft's code
//! (`weft_patch::unwind`): each cluster's table of entries, the list of
//! code areas in the sync page, and the hook at libgcc's
//! `_Unwind_Find_FDE` in every module that has it (libgcc_s, a static
//! program), so a thread blocked in a captured call unwinds as it would
//! without weft: `backtrace()` sees the program's frames, cancellation
//! and C++ exceptions run its cleanups and destructors.

use super::*;
use weft_patch::region::sync::{UNWIND_AREAS, UNWIND_AREA_COUNT};
use weft_patch::unwind::{self as uw, Frame};

use super::clusters::PlacedMini;
use weft_patch::mini::MADE_CALL_CFA;
use weft_patch::unwind::{Rule, SYSCALL_LEN};

/// The function the hook goes at: the one lookup of libgcc's unwinder
/// (`_Unwind_RaiseException`, `_Unwind_ForcedUnwind`, `_Unwind_Backtrace`
/// all find their frames' entries through it).
const FIND_FDE: &str = "_Unwind_Find_FDE";

/// Bytes of a code area that hold code: its unwind table follows.
pub(super) const CODE_BYTES: u64 = CODE_AREA - uw::TABLE_BYTES;

/// The frames of the `syscall`s of a mini-trampoline placed for a probe
/// at `point`: where it makes the point's call (the program stands on its
/// `syscall`, or after it), and a feed's own calls (the program stands at
/// the point, before or after its call).
pub(super) fn frames_of(mini: &PlacedMini, point: u64) -> Vec<Frame> {
    let made = mini.made_calls.iter().flat_map(|&at| {
        let rule = Rule::Point {
            cfa_offset: MADE_CALL_CFA,
            returns_to: point + SYSCALL_LEN,
        };
        Frame::at_syscall(at, rule)
    });
    let own = mini.own_calls.iter().flat_map(|&(at, cfa_offset)| {
        let rule = Rule::Point {
            cfa_offset,
            returns_to: point,
        };
        Frame::at_syscall(at, rule).map(|f| Frame {
            on_the_call: false,
            ..f
        })
    });
    made.chain(own).collect()
}

impl Session {
    /// Lists cluster `ci`'s code area where the hook looks.
    pub(super) fn list_unwind_area(&self, ci: usize) {
        if (ci as u64) < UNWIND_AREA_COUNT {
            let at = self.layout.header.sync_offset + UNWIND_AREAS + ci as u64 * 8;
            self.shm.store_u64(at, self.clusters[ci].code);
        }
    }

    /// The table of cluster `c`, as offsets in the shared file: from its
    /// first byte to the end of its last entry.
    pub(super) fn unwind_table(&self, c: &Cluster) -> std::ops::Range<u64> {
        let table = c.code_offset + CODE_BYTES;
        let count = self.shm.load_u64(table).min(uw::TABLE_CAPACITY);
        table..table + uw::TABLE_HEADER + count * uw::ENTRY_BYTES
    }

    /// Adds `frames` (in cluster `ci`'s code) to its table: entries first,
    /// then the count, so the hook never reads a half-written one. Frames
    /// past the table's capacity go without (a backtrace from them stops
    /// there, as before weft had tables).
    pub(super) fn add_unwind_frames(&mut self, ci: usize, frames: &[Frame]) {
        if frames.is_empty() {
            return;
        }
        let c = self.clusters[ci];
        let table = c.code_offset + CODE_BYTES;
        let mut count = self.shm.load_u64(table);
        for f in frames {
            if count >= uw::TABLE_CAPACITY {
                break;
            }
            let at = table + uw::TABLE_HEADER + count * uw::ENTRY_BYTES;
            self.shm.write(at, &uw::entry(f));
            count += 1;
        }
        self.shm.store_u64(table, count);
    }

    /// Whether some cluster's table has an entry.
    fn has_unwind_frames(&self) -> bool {
        self.clusters
            .iter()
            .filter(|c| c.mapped)
            .any(|c| self.unwind_table(c).end > c.code_offset + CODE_BYTES + uw::TABLE_HEADER)
    }

    /// The modules with a `_Unwind_Find_FDE` weft has not tried to hook
    /// yet, once weft's code has entries to find.
    pub(super) fn unhooked_fde_finders(&self) -> Vec<usize> {
        if !self.has_unwind_frames() {
            return Vec::new();
        }
        (0..self.modules.len())
            .filter(|mi| !self.fde_finders_tried.contains(mi))
            .filter(|&mi| self.modules[mi].image.function_named(FIND_FDE).is_some())
            .collect()
    }

    /// Hooks `_Unwind_Find_FDE` in every module that has it and was not
    /// tried yet. One that cannot be hooked is passed over: unwinding
    /// through weft's code then stops there, as without the hook.
    pub(super) fn hook_fde_finders(&mut self, tracee: &mut Tracee) -> Result<()> {
        for mi in self.unhooked_fde_finders() {
            self.fde_finders_tried.insert(mi);
            self.install_hook(tracee, mi, FIND_FDE, Hook::FindFde)?;
        }
        Ok(())
    }

    /// Takes the unwinder's hooks out, with the threads stopped, as weft's
    /// memory goes (`remove_all` leaves them in while a thread may still
    /// wait in weft's code, which then stays mapped with them).
    pub(super) fn unhook_fde_finders(&mut self, tracee: &mut Tracee) -> Result<()> {
        let hooks: Vec<usize> = (0..self.sites.len())
            .filter(|&s| self.sites[s].active && self.sites[s].hook == Some(Hook::FindFde))
            .collect();
        if hooks.is_empty() {
            return Ok(());
        }
        let (mut text, mut splices, mut notes) =
            (TextBatch::new(self.pid)?, Vec::new(), Vec::new());
        for &s in &hooks {
            self.take_out(tracee, &mut text, s, &mut notes, &mut splices)?;
        }
        text.poke_in_phases(tracee.memory(), &splices)?;
        for s in hooks {
            self.forget_site(s);
        }
        self.write_trap_table();
        Ok(())
    }

    /// The hook's code at `at` for cluster `ci`, going on to `continuation`.
    pub(super) fn find_fde_hook(
        &self,
        ci: usize,
        at: u64,
        continuation: u64,
    ) -> weft_patch::Result<Vec<u8>> {
        let areas = self.clusters[ci].data + self.layout.header.sync_offset + UNWIND_AREAS;
        uw::find_fde_hook(
            at,
            areas,
            UNWIND_AREA_COUNT as u32,
            CODE_BYTES,
            continuation,
        )
    }
}
