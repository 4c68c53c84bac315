//! Errors of patch planning and code generation.

/// What went wrong while generating patch bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An instruction cannot be moved to another address.
    #[error("instruction at {addr:#x} cannot be relocated: {why}")]
    NotRelocatable {
        /// Its address.
        addr: u64,
        /// Why.
        why: &'static str,
    },
    /// A branch or RIP-relative operand does not reach from the new place.
    #[error("code at {from:#x} cannot reach {to:#x} (more than 2 GiB away)")]
    OutOfReach {
        /// Where the code is.
        from: u64,
        /// What it must reach.
        to: u64,
    },
    /// The encoder refused an instruction.
    #[error("encoding failed: {0}")]
    Encode(String),
}

/// Result of patch generation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<iced_x86::IcedError> for Error {
    fn from(e: iced_x86::IcedError) -> Error {
        Error::Encode(e.to_string())
    }
}
