//! `--trace event:PROVIDER:NAME`: rich event sites (`include/weft/event.h`)
//! that write their own records once weft enables them.

use crate::{Error, Result};
use weft_live::{EventSite, Session};

/// The rich event sites of the session's modules matching
/// `PROVIDER:NAME` (globs), recorded in the session so that matching sites
/// of libraries loaded later are enabled too; strings and byte arrays are
/// copied up to `cap` bytes. When nothing matches yet, the error-free
/// answer is an empty list and [`pending_note`] says so.
pub fn event_sites(session: &mut Session, what: &str, cap: u16) -> Result<Vec<EventSite>> {
    let (provider, name) = what
        .split_once(':')
        .ok_or_else(|| Error::BadRequest(format!("'event:{what}': write event:PROVIDER:NAME")))?;
    Ok(session.trace_event_sites(provider, name, cap)?)
}

/// What to tell the user when `event:WHAT` matches no site yet: it waits
/// for libraries loaded later, and these loaded ones are near misses.
pub fn pending_note(session: &mut Session, what: &str) -> Result<String> {
    let mut near: Vec<String> = session
        .event_sites()?
        .iter()
        .map(|s| format!("{}:{}", s.provider, s.name))
        .collect();
    near.sort();
    near.dedup();
    let hint = weft_image::near_misses(what, near.iter().map(String::as_str), 5);
    Ok(format!(
        "'event:{what}' matches no WEFT_EVENT site in the loaded modules yet; sites in \
         libraries loaded later will be traced{}",
        if hint.is_empty() {
            String::new()
        } else {
            format!(" (did you mean: {}?)", hint.join(", "))
        }
    ))
}
