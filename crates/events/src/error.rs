//! Errors of event tracing.

use std::path::PathBuf;

/// What went wrong with tracing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `--trace` request does not parse.
    #[error("bad trace request {0}")]
    BadRequest(String),
    /// A `usdt:` request matches no probe of the process's modules.
    #[error("bad trace request {0}")]
    NoUsdtProbe(String),
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
    /// weft will not write where it was asked to: the place is a link
    /// another user could have planted, or holds something weft must not
    /// overwrite.
    #[error("{what} {} {why}", path.display())]
    Refused {
        /// `events directory` or `output file`.
        what: &'static str,
        /// The path as the user gave it.
        path: PathBuf,
        /// Why, and what to do.
        why: Refusal,
    },
    /// A file of an events directory is damaged or does not agree with
    /// the others (`meta.json`, `ctf/metadata`, the streams).
    #[error("{}: {why}; {todo}", file.display())]
    Inconsistent {
        /// The file at fault (or the one found to disagree).
        file: PathBuf,
        /// What is wrong.
        why: String,
        /// What to do.
        todo: String,
    },
    /// A CTF stream is corrupt in the middle: the packets before `offset`
    /// were read, nothing after it.
    #[error("{}: unreadable from byte {offset}: {why}", stream.display())]
    Corrupt {
        /// The stream file.
        stream: PathBuf,
        /// Where its last whole, valid packet ends.
        offset: u64,
        /// What is wrong there.
        why: String,
    },
    /// Writing a CTF stream failed (a full disk): weft cut the stream back
    /// to its whole packets and wrote no more events.
    #[error(
        "writing {} failed: {source}; weft wrote no more events, and the {kept} bytes of whole \
         packets before stay readable (weft events, babeltrace2)",
        stream.display()
    )]
    WriteStopped {
        /// The stream file.
        stream: PathBuf,
        /// Its bytes of whole packets.
        kept: u64,
        /// Why the write failed.
        source: std::io::Error,
    },
    /// A probe plan could not be built.
    #[error(transparent)]
    Plan(#[from] weft_plan::Error),
    /// The instrumentation engine refused something.
    #[error(transparent)]
    Live(#[from] weft_live::Error),
}

/// Why weft refused a path (see [`Error::Refused`]); each says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// The events directory is a symbolic link.
    #[error("is a symbolic link; give the directory itself")]
    SymbolicLink,
    /// The events directory is a file or a device.
    #[error("is not a directory; give a new or empty directory")]
    NotADirectory,
    /// A place owned by another user than the one weft runs as.
    #[error("is owned by user {owner}, not by weft's user {euid}; give a path of your own")]
    OtherOwner {
        /// Its owner.
        owner: u32,
        /// weft's effective user.
        euid: u32,
    },
    /// The events directory holds an earlier weft trace.
    #[error("holds an earlier weft trace; give --force to replace it, or another directory")]
    EarlierTrace,
    /// The events directory holds something that is not weft's.
    #[error(
        "is not empty and is not a weft trace (it holds {entry:?}); give a new or empty directory"
    )]
    NotWeft {
        /// One entry that is not weft's.
        entry: String,
    },
    /// The output file is a symbolic link another user owns.
    #[error(
        "is a symbolic link owned by user {owner}, not by weft's user {euid} or root, so weft \
         does not follow it; remove it or give another path"
    )]
    UntrustedLink {
        /// The link's owner.
        owner: u32,
        /// weft's effective user.
        euid: u32,
    },
    /// The output file is a directory.
    #[error("is a directory; give a file name")]
    IsADirectory,
    /// The output file has other names (hard links), one of which may be
    /// a file someone else made weft's victim.
    #[error("has {links} hard links, so rewriting it would change other files too; remove it or give another path")]
    HardLinked {
        /// Its link count.
        links: u64,
    },
}

impl From<weft_plan::Exhausted> for Error {
    fn from(e: weft_plan::Exhausted) -> Error {
        Error::Plan(e.into())
    }
}

/// Result of tracing.
pub type Result<T, E = Error> = std::result::Result<T, E>;
