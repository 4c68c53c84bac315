//! Errors of event tracing.

/// What went wrong with tracing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `--trace` request does not parse.
    #[error("bad trace request {0}")]
    BadRequest(String),
    /// Reading or writing an events directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What weft was doing.
        what: String,
        /// Why.
        source: std::io::Error,
    },
    /// An events directory holds something unexpected.
    #[error("{0}")]
    Format(String),
    /// A probe plan could not be built.
    #[error(transparent)]
    Plan(#[from] weft_plan::Error),
    /// The instrumentation engine refused something.
    #[error(transparent)]
    Live(#[from] weft_live::Error),
}

impl From<weft_plan::Exhausted> for Error {
    fn from(e: weft_plan::Exhausted) -> Error {
        Error::Plan(e.into())
    }
}

/// Result of tracing.
pub type Result<T, E = Error> = std::result::Result<T, E>;
