//! Errors of metric requests.

/// What is wrong with a metric request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request does not parse.
    #[error("bad metric request '{request}': {why}")]
    BadRequest {
        /// The request as written.
        request: String,
        /// What is wrong.
        why: String,
    },
    /// An expression does not parse.
    #[error("bad expression '{expr}': {why}")]
    BadExpr {
        /// The expression.
        expr: String,
        /// What is wrong.
        why: String,
    },
    /// A definition file is wrong.
    #[error("metric definitions: {0}")]
    Definitions(String),
    /// Measuring or storing the calibration failed.
    #[error("calibration: {0}")]
    Calibration(String),
    /// Generating code failed.
    #[error(transparent)]
    Patch(#[from] weft_patch::Error),
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

/// Result of metric planning.
pub type Result<T, E = Error> = std::result::Result<T, E>;
