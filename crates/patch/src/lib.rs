//! From probe points to bytes: where to splice, what the trampoline holds,
//! and how a trap is redirected. No process is touched here.
//!
//! * [`choose_splice`] decides, for one instruction point, between a `jmp
//!   rel32` over a window of whole instructions (safe only when no branch
//!   target and no thread's pc lies inside it) and a 1-byte `int3`.
//! * [`Trampoline::build`] emits the trampoline: the snippet (saving the
//!   flags below the red zone only when liveness says they are live),
//!   the displaced instructions relocated, and the jump back.
//! * [`trap`] generates the in-process SIGTRAP handler that redirects an
//!   `int3` to its trampoline without any ptrace round trip.
//! * [`region`] is the layout of the shared memory region: a versioned ABI.
//!
//! The same plan serves a live process (weft-live) and, later, a rewritten
//! file: this crate produces splice records (address, old bytes, new bytes)
//! and trampoline bytes for a given address, nothing else.

pub mod dispatch;
mod error;
pub mod lanes;
pub mod load_hook;
pub mod mini;
pub mod place;
pub mod region;
mod relocate;
pub mod sigaction_hook;
pub mod sigframe;
mod snippet;
mod splice;
mod trampoline;
pub mod trap;
pub mod unwind;

pub use error::{Error, Result};
pub use relocate::{can_relocate, relocate_one};
pub use snippet::Snippet;
pub use splice::{
    choose_short_window, choose_splice, SpliceChoice, SpliceContext, SpliceMethod, SpliceRecord,
    Unsafe, SHORT_JMP_BACKWARD, SHORT_JMP_FORWARD, SHORT_JMP_LEN,
};
pub use trampoline::{PointSnippet, Replaces, Trampoline};

/// Length of the `jmp rel32` used to splice.
pub const JMP_LEN: u64 = 5;
/// The `int3` opcode.
pub const INT3: u8 = 0xcc;
/// Bytes below the stack pointer that leaf functions may use (System V red zone).
pub const RED_ZONE: i64 = 128;
