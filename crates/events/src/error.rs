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
    /// The instrumentation engine refused something.
    #[error(transparent)]
    Live(#[from] weft_live::Error),
}

/// Result of tracing.
pub type Result<T, E = Error> = std::result::Result<T, E>;
