//! Copies laid out before, kept for the next process that lays out the
//! same function at the same place. A program built without PIE (gcc's
//! `cc1` and driver on Debian) loads at the same address in every
//! process, address-space randomisation or not, so each `cc1` of a build
//! asks for the same 45,000 copies at the same places: the copy is the
//! same bytes, and planning and encoding it again was most of the setup
//! of every exec after the first. A PIE program or a library moves with
//! each process and is laid out anew.
//!
//! A copy is reused only when everything its layout reads is the same:
//! the function (file, address, load bias), its place, its role (with
//! the addresses a role writes to), the process's restartable sequence,
//! the flags, the places code elsewhere enters it and the PLT stubs it
//! reaches (hashed), its function id and resume place numbers.

use crate::rebuild::{Rebuilt, Role, Rseq};
use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// Bytes of copies kept at most: past this, copies are laid out anew.
const KEPT_BYTES: usize = 512 << 20;

/// What a copy's layout reads, but for its id and resume numbers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CopyKey {
    pub(super) path: String,
    pub(super) start: u64,
    pub(super) bias: u64,
    pub(super) at: u64,
    pub(super) role: Role,
    pub(super) rseq: Option<Rseq>,
    pub(super) validate: bool,
    pub(super) data: bool,
    pub(super) entry_room: u64,
    /// A hash of the places the layout keeps clear and the calls it
    /// treats apart (see [`inputs`]).
    pub(super) inputs: u64,
}

/// A hash of what a layout reads besides its key's fields: the function's
/// bytes and jump tables (a program rebuilt at the same path and run
/// again, as `make check` does, has other code at the same address), and
/// the address lists it keeps clear or treats apart. The bytes are hashed
/// as they lie in the file (hashing the decoded instructions one field at
/// a time took a quarter of a build's setup).
pub(super) fn inputs(
    code: &weft_code::FunctionCode,
    bytes: Option<&[u8]>,
    lists: &[&[u64]],
    plt_callees: &[(u64, u64)],
) -> u64 {
    let mut h = DefaultHasher::new();
    match bytes {
        Some(b) => b.hash(&mut h),
        // Not in the file (a vDSO's): the instructions themselves.
        None => code.instructions().iter().for_each(|i| i.hash(&mut h)),
    }
    for t in code.jump_tables() {
        (t.jump, t.table, &t.targets, &t.outside, t.elsewhere).hash(&mut h);
    }
    for list in lists {
        list.hash(&mut h);
    }
    plt_callees.hash(&mut h);
    h.finish()
}

/// A copy laid out, with the numbers it was laid out with.
#[derive(Debug)]
pub(super) struct Kept {
    pub(super) id: u32,
    pub(super) resumes: Vec<(u64, u32)>,
    pub(super) reentries: Vec<(u64, u32)>,
    pub(super) built: Rebuilt,
}

/// The copies kept.
#[derive(Debug, Default)]
pub(super) struct Copies {
    kept: Mutex<(HashMap<CopyKey, Arc<Kept>>, usize)>,
    /// Copies taken from here so far.
    reused: std::sync::atomic::AtomicU64,
}

impl Copies {
    /// The copy laid out for `key`, if one was.
    pub(super) fn get(&self, key: &CopyKey) -> Option<Arc<Kept>> {
        self.kept.lock().ok()?.0.get(key).cloned()
    }

    /// Notes that a kept copy was placed again.
    pub(super) fn reused(&self) {
        self.reused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many kept copies were placed again.
    pub(super) fn reuses(&self) -> u64 {
        self.reused.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Keeps `kept` for `key`, while the copies kept stay under
    /// [`KEPT_BYTES`].
    pub(super) fn keep(&self, key: CopyKey, kept: Kept) {
        if let Ok(mut k) = self.kept.lock() {
            let (map, bytes) = &mut *k;
            let len = kept.built.bytes.len();
            if *bytes + len <= KEPT_BYTES {
                *bytes += len;
                map.insert(key, Arc::new(kept));
            }
        }
    }
}
