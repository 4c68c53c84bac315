//! Which functions of a process image are linked, and the bytes that link
//! them (see `rebuild::link` for what linking is).
//!
//! A function is linked when all of these hold:
//!
//! * its copy was placed in the batch being linked, and it leaves only by
//!   returning or by direct tail calls to linked functions (its caller's
//!   frame then goes on exactly when the function returns);
//! * every call and tail call to it from a copy of the image can be sent
//!   straight to its copy, and the call's return record skipped: the
//!   copies of earlier batches never are, so a function they call is not
//!   linked later.
//!
//! Regeneration reads the linked functions of each image from the trace
//! (`ImageLoads::linked`), and takes every direct call and tail call to
//! one of them without a record.

use crate::rebuild::{LinkSite, Returned};
use std::collections::{HashMap, HashSet};

/// A copy placed and not yet linked.
#[derive(Debug, Clone)]
pub struct Copy {
    /// The function's entry.
    pub start: u64,
    /// Its id in the function table.
    pub id: u32,
    /// Where its copy goes on past the entry record.
    pub linked_entry: u64,
    /// Its calls and tail calls to function entries.
    pub sites: Vec<LinkSite>,
    /// It leaves only by returning or by direct tail calls
    /// ([`crate::rebuild::leaves_by_returning`], and no jump into another
    /// part of itself).
    pub leaves_by_returning: bool,
}

/// What linking knows of one process image.
#[derive(Debug, Default)]
pub struct ProcessLinks {
    /// Copies laid out since the last link.
    pub pending: Vec<Copy>,
    /// Linked functions: entry → where their copies go on.
    linked: HashMap<u64, u64>,
    /// Entries some copy calls through the entry record: never linked.
    unlinked_calls: HashSet<u64>,
}

impl ProcessLinks {
    /// The function entered at `entry` is never linked in this image.
    pub fn never_link(&mut self, entry: u64) {
        self.unlinked_calls.insert(entry);
    }

    /// Links the pending copies whose functions are in `placed`: returns
    /// the bytes to write, and the ids of the functions newly linked.
    pub fn link(&mut self, placed: &[u64]) -> (Vec<(u64, Vec<u8>)>, Vec<u32>) {
        let placed: HashSet<u64> = placed.iter().copied().collect();
        let copies: Vec<Copy> = std::mem::take(&mut self.pending)
            .into_iter()
            .filter(|c| placed.contains(&c.start))
            .collect();
        let mut entry: HashMap<u64, u64> = copies
            .iter()
            .filter(|c| c.leaves_by_returning && !self.unlinked_calls.contains(&c.start))
            .map(|c| (c.start, c.linked_entry))
            .collect();
        for s in copies.iter().flat_map(|c| &c.sites) {
            if let Some(&to) = entry.get(&s.target) {
                if patch(s, to).is_none() {
                    entry.remove(&s.target);
                }
            }
        }
        // A tail call to a function not linked leaves the frame to it.
        loop {
            let before = entry.len();
            for c in &copies {
                let leaves = c.sites.iter().any(|s| {
                    s.returned == Returned::Nothing
                        && !entry.contains_key(&s.target)
                        && !self.linked.contains_key(&s.target)
                });
                if leaves {
                    entry.remove(&c.start);
                }
            }
            if entry.len() == before {
                break;
            }
        }
        let mut bytes = Vec::new();
        for s in copies.iter().flat_map(|c| &c.sites) {
            let to = entry.get(&s.target).or_else(|| self.linked.get(&s.target));
            match to.and_then(|&to| patch(s, to)) {
                Some(p) => bytes.extend(p),
                None => {
                    self.unlinked_calls.insert(s.target);
                }
            }
        }
        let ids = copies
            .iter()
            .filter(|c| entry.contains_key(&c.start))
            .map(|c| c.id)
            .collect();
        self.linked.extend(entry);
        (bytes, ids)
    }
}

/// The writes that send `site` to `to` (a copy's linked entry) and skip
/// its return record, if it can be.
fn patch(site: &LinkSite, to: u64) -> Option<Vec<(u64, Vec<u8>)>> {
    let rel = |from: u64, to: u64| -> Option<Vec<u8>> {
        let d = i32::try_from(to.wrapping_sub(from) as i64).ok()?;
        Some(d.to_le_bytes().to_vec())
    };
    let (at, width) = site.displacement?;
    let branch = match width {
        1 => vec![i8::try_from(to.wrapping_sub(at + 1) as i64).ok()? as u8],
        _ => rel(at + 4, to)?,
    };
    let mut writes = vec![(at, branch)];
    match site.returned {
        Returned::Nothing => {}
        Returned::Spliced { ret, after } => writes.push((ret + 1, rel(ret + 5, after)?)),
        Returned::Inline { at, after } => {
            let d = u8::try_from(after.checked_sub(at + 2)?).ok()?;
            writes.push((at, vec![0xEB, d]));
        }
        Returned::Kept => return None,
    }
    Some(writes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(target: u64, rel32: u64, returned: Returned) -> LinkSite {
        LinkSite {
            target,
            displacement: Some((rel32, 4)),
            returned,
        }
    }

    fn copy(start: u64, id: u32, sites: Vec<LinkSite>) -> Copy {
        Copy {
            start,
            id,
            linked_entry: start + 0x1000_0010,
            sites,
            leaves_by_returning: true,
        }
    }

    fn pending(copies: Vec<Copy>) -> ProcessLinks {
        ProcessLinks {
            pending: copies,
            ..ProcessLinks::default()
        }
    }

    #[test]
    fn calls_and_tail_calls_link_only_what_leaves_by_returning() {
        // a calls b (spliced return) and c (inline return); b tail-calls
        // c; c tail-calls d, which was not placed; e calls a through a
        // `setjmp`-like return.
        let (a, b, c, d, e) = (0x1000, 0x2000, 0x3000, 0x4000, 0x5000);
        let spliced = Returned::Spliced {
            ret: a + 0x20,
            after: 0x1000_1100,
        };
        let inline = Returned::Inline {
            at: 0x1000_1200,
            after: 0x1000_1210,
        };
        let mut p = pending(vec![
            copy(
                a,
                0,
                vec![site(b, 0x1000_1050, spliced), site(c, 0x1000_1150, inline)],
            ),
            copy(b, 1, vec![site(c, 0x1000_2050, Returned::Nothing)]),
            copy(c, 2, vec![site(d, 0x1000_3050, Returned::Nothing)]),
            copy(e, 4, vec![site(a, 0x1000_5050, Returned::Kept)]),
        ]);
        let (bytes, mut ids) = p.link(&[a, b, c, e]);
        ids.sort_unstable();
        // c leaves for d (not linked), so b's tail call leaves too; a is
        // called with a record that stays; e calls nothing linked.
        assert_eq!(ids, [4]);
        assert!(bytes.is_empty());

        let mut p = pending(vec![
            copy(
                a,
                0,
                vec![site(b, 0x1000_1050, spliced), site(c, 0x1000_1150, inline)],
            ),
            copy(b, 1, vec![site(c, 0x1000_2050, Returned::Nothing)]),
            copy(c, 2, vec![]),
        ]);
        let (bytes, mut ids) = p.link(&[a, b, c]);
        ids.sort_unstable();
        assert_eq!(ids, [0, 1, 2]);
        let to_b = (b + 0x1000_0010 - (0x1000_1050 + 4)) as i32;
        assert!(bytes.contains(&(0x1000_1050, to_b.to_le_bytes().to_vec())));
        let skip = (0x1000_1100 - (a + 0x20 + 5)) as i32;
        assert!(bytes.contains(&(a + 0x21, skip.to_le_bytes().to_vec())));
        assert!(bytes.contains(&(0x1000_1200, vec![0xEB, 0x0E])));
        assert_eq!(bytes.len(), 5);

        // A later batch calling an unlinked function never links it.
        let mut p = pending(vec![copy(a, 0, vec![site(b, 0x1000_1050, spliced)])]);
        assert_eq!(p.link(&[a]).0, vec![]);
        p.pending = vec![copy(b, 1, vec![])];
        assert_eq!(p.link(&[b]), (vec![], vec![]));
    }
}
