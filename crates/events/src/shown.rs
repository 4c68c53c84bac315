//! An event's values as `events.jsonl`, the text listing and the trace
//! show them: integers, and strings and byte arrays resolved from the
//! record's text.

use serde::Serialize;
use weft_live::EventRecord;

/// One value of an event as shown: an integer or a string's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown<'a> {
    /// An integer (signed).
    Int(i64),
    /// A string's text, and whether it went on past what was copied.
    Str(&'a str, bool),
    /// A byte array in hex, and whether it went on past what was copied.
    Bytes(&'a str, bool),
    /// A null string or array pointer.
    Null,
}

/// The values of `e`, strings and byte arrays resolved, given its event's
/// masks (see [`crate::Meta::string_masks`]).
pub fn shown_values((mask, binary): (u16, u16), e: &EventRecord) -> Vec<Shown<'_>> {
    use weft_live::ring::{STR_NULL, STR_TRUNCATED};
    let mut texts = e.strings.iter();
    e.args
        .iter()
        .enumerate()
        .map(|(i, &v)| {
            if mask & (1 << i) == 0 {
                return Shown::Int(v as i64);
            }
            // One text per string value, null ones included (empty).
            let text = texts.next().map_or("", String::as_str);
            if v & STR_NULL != 0 {
                return Shown::Null;
            }
            if binary & (1 << i) != 0 {
                Shown::Bytes(text, v & STR_TRUNCATED != 0)
            } else {
                Shown::Str(text, v & STR_TRUNCATED != 0)
            }
        })
        .collect()
}

impl std::fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Shown::Int(v) => write!(f, "{v}"),
            Shown::Str(text, truncated) => {
                write!(f, "{text:?}")?;
                if *truncated {
                    f.write_str("...")?;
                }
                Ok(())
            }
            Shown::Bytes(hex, truncated) => {
                write!(f, "0x{hex}")?;
                if *truncated {
                    f.write_str("...")?;
                }
                Ok(())
            }
            Shown::Null => f.write_str("(null)"),
        }
    }
}

impl Serialize for Shown<'_> {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        match self {
            Shown::Int(v) => serializer.serialize_i64(*v),
            Shown::Str(text, false) => serializer.serialize_str(text),
            Shown::Str(text, true) => serializer.serialize_str(&format!("{text}...")),
            Shown::Bytes(..) => serializer.serialize_str(&self.to_string()),
            Shown::Null => serializer.serialize_none(),
        }
    }
}
