//! `--trace event:PROVIDER:NAME`: rich event sites (`include/weft/event.h`)
//! that write their own records once weft enables them.

use crate::{Error, Result};
use weft_live::EventSite;

/// `PROVIDER:NAME` (globs) of an `event:` request.
pub fn event_request(what: &str) -> Result<(&str, &str)> {
    what.split_once(':')
        .ok_or_else(|| Error::BadRequest(format!("'event:{what}': write event:PROVIDER:NAME")))
}

/// What to tell the user when `event:WHAT` matches no site yet: it waits
/// for libraries loaded later, and these loaded `sites` are near misses.
pub fn pending_note(sites: &[EventSite], what: &str) -> String {
    let mut near: Vec<String> = sites
        .iter()
        .map(|s| format!("{}:{}", s.provider, s.name))
        .collect();
    near.sort();
    near.dedup();
    let hint = weft_image::near_misses(what, near.iter().map(String::as_str), 5);
    format!(
        "'event:{what}' matches no WEFT_EVENT site in the loaded modules yet; sites in \
         libraries loaded later will be traced{}",
        if hint.is_empty() {
            String::new()
        } else {
            format!(" (did you mean: {}?)", hint.join(", "))
        }
    )
}
