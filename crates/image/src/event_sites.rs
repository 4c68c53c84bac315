//! Rich event sites (`include/weft/event.h`): the descriptors of the
//! section `weft_events`, read from the file. Their string pointers are
//! link-time addresses, or, in position-independent files, zero words that
//! `R_X86_64_RELATIVE` relocations fill in at load time with their addend.

use crate::FileAddr;
use object::{Object, ObjectSection};
use std::collections::HashMap;

/// `WEFT_EVENT_MAGIC`: "WEFTEVT1".
pub const SITE_MAGIC: u64 = u64::from_le_bytes(*b"WEFTEVT1");
/// Bytes of one descriptor (`struct weft_event_site`).
pub const SITE_SIZE: u64 = 88;
/// The section holding the descriptors.
pub const EVENT_SITES: &str = "weft_events";

/// A site as the file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSiteInfo {
    /// Link-time address of its descriptor.
    pub addr: FileAddr,
    /// Provider.
    pub provider: String,
    /// Name.
    pub name: String,
    /// The field list, `id:i path:s body:b`.
    pub fields: String,
}

/// The descriptors of `file`; `string` reads a NUL-terminated string at a
/// link-time address.
pub(crate) fn parse<'d>(
    file: &object::File<'d>,
    string: &dyn Fn(FileAddr) -> Option<String>,
) -> Vec<EventSiteInfo> {
    let Some(section) = file.section_by_name(EVENT_SITES) else {
        return Vec::new();
    };
    let Ok(data) = section.data() else {
        return Vec::new();
    };
    let start = FileAddr(section.address());
    // A section running past the end of the address space holds no site
    // weft could enable.
    let Some(end) = start.get().checked_add(section.size()).map(FileAddr) else {
        return Vec::new();
    };
    // A relocation's "offset" is the link-time address it patches.
    let relative: HashMap<FileAddr, i64> = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .map(|(at, r)| (FileAddr(at), r))
        .filter(|(at, _)| (start..end).contains(at))
        .filter(|(_, r)| {
            matches!(
                r.flags(),
                object::RelocationFlags::Elf {
                    r_type: object::elf::R_X86_64_RELATIVE
                }
            )
        })
        .map(|(at, r)| (at, r.addend()))
        .collect();
    let pointer = |at: FileAddr, stored: u64| {
        FileAddr(match relative.get(&at) {
            Some(&addend) => addend as u64,
            None => stored,
        })
    };
    data.chunks_exact(SITE_SIZE as usize)
        .enumerate()
        .filter_map(|(i, d)| {
            let addr = start + i as u64 * SITE_SIZE;
            let word = |at: usize| u64::from_le_bytes(d[at..at + 8].try_into().expect("8"));
            if word(0) != SITE_MAGIC {
                return None;
            }
            let text = |at: usize| string(pointer(addr + at as u64, word(at)));
            Some(EventSiteInfo {
                addr,
                provider: text(8)?,
                name: text(16)?,
                fields: text(24)?,
            })
        })
        .collect()
}
