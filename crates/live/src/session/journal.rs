//! The journal in the shared region (`weft_patch::region::journal`): the
//! session lists every change it makes to the program's memory before
//! making it, so that a weft that dies leaves enough in the target for the
//! next one to undo it (`leftovers.rs`). The region also names its owner,
//! so that the next weft can tell a dead weft's region from a live one's.

use super::*;
use weft_patch::region::journal::{self, Entry, Kind};
use weft_patch::region::sync;

impl Session {
    /// Rewrites the journal from the session's state: every active site's
    /// splice and springboard, every enabled rich event site, every raised
    /// semaphore. Written to the buffer not in use, then switched to with
    /// one store, so it is whole at every instant.
    pub(super) fn write_journal(&self) {
        let mut entries: Vec<Entry> = Vec::new();
        for s in self.sites.iter().filter(|s| s.active) {
            let kind = if s.board.is_some() {
                Kind::PairedCode
            } else {
                Kind::Code
            };
            for r in s.record.iter().chain(s.board.iter()) {
                entries.push(Entry {
                    addr: r.addr,
                    kind,
                    old: r.old.clone(),
                    new: r.new.clone(),
                });
            }
        }
        if let Some(function) = self.rich.ring_function() {
            for &site in self.rich.enabled() {
                entries.push(Entry {
                    addr: site.0 + weft_patch::region::event_site::RING_OF_THREAD,
                    kind: Kind::Data,
                    old: 0u64.to_le_bytes().to_vec(),
                    new: function.to_le_bytes().to_vec(),
                });
            }
        }
        for &addr in &self.semaphores {
            entries.push(Entry {
                addr: addr.0,
                kind: Kind::Semaphore,
                old: vec![],
                new: vec![],
            });
        }
        let h = &self.layout.header;
        let mut bytes = Vec::with_capacity(entries.len() * journal::ENTRY_SIZE as usize);
        for e in entries.iter().take(h.journal_capacity as usize) {
            // Every splice fits (at most two instructions); an entry that
            // did not would only be missing from a dead weft's undo.
            if let Some(b) = e.encode() {
                bytes.extend_from_slice(&b);
            }
        }
        let count = bytes.len() as u64 / journal::ENTRY_SIZE;
        let base = h.journal_offset;
        let (in_use, _) = journal::selected(self.shm.load_u64(base + journal::CURRENT));
        let next = 1 - in_use;
        self.shm
            .write(base + journal::buffer(next, h.journal_capacity), &bytes);
        self.shm
            .store_u64(base + journal::CURRENT, journal::current(next, count));
    }
}

/// Names this weft as the region's owner in its sync page, and `pid` as
/// the process whose SIGTRAP action the trap table keeps.
pub(super) fn stamp_owner(shm: &SharedMemory, layout: &Layout, pid: i32) {
    shm.store_u64(layout.header.trap_offset + trap_table::PROCESS, pid as u64);
    let me = std::process::id() as i32;
    let at = layout.header.sync_offset;
    shm.store_u64(at + sync::OWNER_PID, me as u64);
    shm.store_u64(
        at + sync::OWNER_START,
        weft_process::start_time(me).unwrap_or(0),
    );
    shm.store_u64(
        at + sync::OWNER_PIDNS,
        weft_process::pid_namespace(me).unwrap_or(0),
    );
}
