//! The live applier: puts probe plans into a running process and takes
//! them out again.
//!
//! A [`Session`] owns the shared region (a memfd mapped into weft and, next
//! to each instrumented module, into the target), the modules it has
//! analysed, and the points it has spliced. It acts only while the caller
//! holds the process stopped (a [`weft_process::Tracee`]); between those
//! episodes the target runs untraced and weft reads counters from shared
//! memory with no system call.
//!
//! ```no_run
//! use weft_live::Session;
//! use weft_plan::PointSpec;
//! use weft_process::Tracee;
//! let mut session = Session::new(1234)?;
//! let prepared = session.prepare(&[PointSpec::parse("libc.so.6:malloc")?])?; // target runs
//! let mut tracee = Tracee::attach(1234)?;                                     // target stops
//! let report = session.apply(&mut tracee, prepared)?;
//! drop(tracee);                                                               // target runs, counting
//! # let _ = report;
//! # Ok::<(), weft_live::Error>(())
//! ```

pub mod clock;
mod error;
pub mod ifunc;
mod module;
mod session;
mod shared;
mod text;

pub use error::{Error, Result};
pub use module::{Module, VDSO_NAME};
pub use session::rich::{EventSite, FieldKind};
pub use session::{
    decode_records, from_hex, to_hex, AddReport, Count, EventIds, EventRecord, PointInfo, Prepared,
    RawRecords, Session, Settled, SkipReason, SkippedPoint, ThreadReading,
};
pub use shared::{wait_any, SharedMemory, Waited};
pub use weft_patch::region::ring;
pub use weft_patch::sigaction_hook::Kept as KeptAction;
