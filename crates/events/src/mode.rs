//! How a trace is taken: what a writer does when its ring is full, and
//! which clock stamps the events, chosen here from what the user asked and
//! what the CPU offers.

use serde::{Deserialize, Serialize};
use std::fmt;

/// What a thread does when its event ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RingMode {
    /// Drop the event and count it.
    #[default]
    Discard,
    /// Wait (yielding) until weft has made room, for at most a second
    /// after weft's last drain.
    Block,
    /// Overwrite the oldest whole records; weft copies the rings on
    /// request and at the end.
    Flight,
}

/// The clock of event timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClockKind {
    /// The time-stamp counter (`rdtsc`).
    #[default]
    Tsc,
    /// CLOCK_MONOTONIC in nanoseconds, read through the target's vDSO.
    Monotonic,
}

/// What the user asked for (`--clock`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockChoice {
    /// The TSC where it is invariant, else CLOCK_MONOTONIC.
    Auto,
    /// The TSC.
    Tsc,
    /// CLOCK_MONOTONIC.
    Monotonic,
}

/// The clock a trace uses, and what the user should know about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChosenClock {
    /// The clock.
    pub kind: ClockKind,
    /// A note or warning for the user, if the choice needs one.
    pub note: Option<&'static str>,
}

impl ClockChoice {
    /// The clock to use on a CPU whose TSC is (or is not) `invariant`.
    pub fn resolve(self, invariant: bool) -> ChosenClock {
        let kind = match self {
            ClockChoice::Tsc => ClockKind::Tsc,
            ClockChoice::Monotonic => ClockKind::Monotonic,
            ClockChoice::Auto if invariant => ClockKind::Tsc,
            ClockChoice::Auto => ClockKind::Monotonic,
        };
        let note = match (self, kind, invariant) {
            (ClockChoice::Auto, ClockKind::Monotonic, _) => Some(
                "this CPU's TSC is not invariant (CPUID 0x80000007): event timestamps come from \
                 CLOCK_MONOTONIC through the vDSO",
            ),
            (_, ClockKind::Tsc, false) => Some(
                "warning: this CPU's TSC is not invariant (CPUID 0x80000007), so timestamps of \
                 events on different cores may not compare; counts and values are unaffected",
            ),
            _ => None,
        };
        ChosenClock { kind, note }
    }
}

impl fmt::Display for RingMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RingMode::Discard => "discard",
            RingMode::Block => "block",
            RingMode::Flight => "flight",
        })
    }
}

impl RingMode {
    /// What the mode calls events it could not keep.
    pub fn lost(self) -> &'static str {
        match self {
            RingMode::Flight => "overwritten",
            RingMode::Discard | RingMode::Block => "dropped",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_takes_the_tsc_only_where_it_is_invariant() {
        assert_eq!(ClockChoice::Auto.resolve(true).kind, ClockKind::Tsc);
        assert_eq!(ClockChoice::Auto.resolve(true).note, None);
        let fallback = ClockChoice::Auto.resolve(false);
        assert_eq!(fallback.kind, ClockKind::Monotonic);
        assert!(fallback.note.unwrap().contains("CLOCK_MONOTONIC"));
        let forced = ClockChoice::Tsc.resolve(false);
        assert_eq!(forced.kind, ClockKind::Tsc);
        assert!(forced.note.unwrap().starts_with("warning"));
        assert_eq!(ClockChoice::Monotonic.resolve(true).note, None);
    }

    #[test]
    fn modes_are_written_as_before() {
        let json = serde_json::to_string(&(RingMode::Flight, ClockKind::Monotonic)).unwrap();
        assert_eq!(json, r#"["flight","monotonic"]"#);
        let old: (RingMode, ClockKind) = serde_json::from_str(r#"["block","tsc"]"#).unwrap();
        assert_eq!(old, (RingMode::Block, ClockKind::Tsc));
    }
}
