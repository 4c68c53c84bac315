//! `--trace event:PROVIDER:NAME`: rich event sites (`include/weft/event.h`)
//! that write their own records once weft enables them.

use crate::{Error, Result};
use weft_image::glob_match;
use weft_live::{EventSite, Session};

/// The rich event sites of the session's modules matching
/// `PROVIDER:NAME` (globs).
pub fn event_sites(session: &mut Session, what: &str) -> Result<Vec<EventSite>> {
    let (provider, name) = what
        .split_once(':')
        .ok_or_else(|| Error::BadRequest(format!("'event:{what}': write event:PROVIDER:NAME")))?;
    let all = session.event_sites()?;
    let matching: Vec<EventSite> = all
        .iter()
        .filter(|s| glob_match(provider, &s.provider) && glob_match(name, &s.name))
        .cloned()
        .collect();
    if matching.is_empty() {
        let mut near: Vec<String> = all
            .iter()
            .map(|s| format!("{}:{}", s.provider, s.name))
            .collect();
        near.sort();
        near.dedup();
        let hint = weft_image::near_misses(what, near.iter().map(String::as_str), 5);
        return Err(Error::BadRequest(format!(
            "'event:{what}' matches no WEFT_EVENT site in the loaded modules{}",
            if hint.is_empty() {
                " (sites are in the section weft_events of programs built with weft/event.h)"
                    .to_string()
            } else {
                format!("; did you mean: {}?", hint.join(", "))
            }
        )));
    }
    Ok(matching)
}
