//! Errors of reading an image.

use std::path::PathBuf;

/// What went wrong while reading an ELF image.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not an ELF file.
    #[error("{path} is not an ELF file")]
    NotElf {
        /// The file.
        path: PathBuf,
    },
    /// The file is ELF but not for x86-64.
    #[error("{path} is a {arch} ELF file; weft instruments x86-64 code only")]
    NotX86_64 {
        /// The file.
        path: PathBuf,
        /// Its architecture as `object` names it.
        arch: String,
    },
    /// The ELF file is malformed.
    #[error("{path}: malformed ELF: {what}")]
    Malformed {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// A pattern could not be parsed.
    #[error("bad pattern {0:?}: {1}")]
    BadPattern(String, &'static str),
}

/// Result of image reading.
pub type Result<T, E = Error> = std::result::Result<T, E>;
