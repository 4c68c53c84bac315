//! Errors of plan building.

/// A resource the applier has no more of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("no room for more {what}")]
pub struct Exhausted {
    /// What ran out ("counters", "timers", ...).
    pub what: &'static str,
}

/// What can go wrong while building a plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A point pattern does not parse.
    #[error(transparent)]
    Pattern(#[from] weft_image::Error),
    /// The applier ran out of a resource.
    #[error(transparent)]
    Exhausted(#[from] Exhausted),
}

/// Result of plan building.
pub type Result<T, E = Error> = std::result::Result<T, E>;
