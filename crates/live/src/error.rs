//! Errors of the live applier.

/// What went wrong while instrumenting a live process.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Controlling the process failed.
    #[error(transparent)]
    Process(#[from] weft_process::Error),
    /// Reading an image failed.
    #[error(transparent)]
    Image(#[from] weft_image::Error),
    /// Generating code failed.
    #[error(transparent)]
    Patch(#[from] weft_patch::Error),
    /// The process has no vDSO `clock_gettime` to take timestamps from.
    #[error("process {pid} has no vDSO clock_gettime for --clock monotonic (use --clock tsc)")]
    NoVdsoClock {
        /// The process.
        pid: i32,
    },
    /// An event ring size that is not a power of two in the allowed range.
    #[error(
        "ring size {0} bytes is not a power of two from 64 KiB to 64 MiB (write for example 1M or 4M)"
    )]
    BadRingSize(u64),
    /// A pattern matched no function.
    #[error("pattern '{pattern}' matches no function{}", near_list(.near))]
    NoMatch {
        /// The pattern as written.
        pattern: String,
        /// Similar names that do exist.
        near: Vec<String>,
    },
    /// `FUNCTION+OFFSET` does not fall on an instruction boundary.
    #[error(
        "{function}+{offset:#x} is not the start of an instruction (nearest boundaries: {} and {})",
        boundary(.before), boundary(.after)
    )]
    NotABoundary {
        /// The function.
        function: String,
        /// The offset asked for.
        offset: u64,
        /// The last boundary before it, as an offset.
        before: Option<u64>,
        /// The first boundary after it.
        after: Option<u64>,
    },
    /// No room for patch memory within reach of a module.
    #[error("no free address range within 2 GiB of {module} for patch memory")]
    NoRoom {
        /// The module.
        module: String,
    },
    /// The shared region is full.
    #[error("the shared region is full ({what})")]
    Full {
        /// What ran out.
        what: &'static str,
    },
    /// A plan could not be built.
    #[error(transparent)]
    Plan(weft_plan::Error),
    /// A site could not be rebuilt without removed probes.
    #[error("cannot rebuild a splice without the removed probes: {0}")]
    Rebuild(crate::SkipReason),
    /// Local resource failure (memfd, mmap).
    #[error("{what}: {source}")]
    Io {
        /// What weft was doing.
        what: String,
        /// Why.
        source: std::io::Error,
    },
}

impl From<weft_plan::Exhausted> for Error {
    fn from(e: weft_plan::Exhausted) -> Error {
        Error::Full { what: e.what }
    }
}

impl From<weft_plan::Error> for Error {
    fn from(e: weft_plan::Error) -> Error {
        match e {
            weft_plan::Error::Pattern(e) => Error::Image(e),
            weft_plan::Error::Exhausted(e) => e.into(),
            other => Error::Plan(other),
        }
    }
}

fn boundary(offset: &Option<u64>) -> String {
    offset.map_or("none".to_string(), |o| format!("+{o:#x}"))
}

fn near_list(near: &[String]) -> String {
    if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean: {}?)", near.join(", "))
    }
}

/// Result of live instrumentation.
pub type Result<T, E = Error> = std::result::Result<T, E>;
