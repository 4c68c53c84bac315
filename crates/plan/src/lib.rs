//! The probe plan: what to insert where, built by instruments and carried
//! out by an applier.
//!
//! An instrument (metrics, events, and later paths and syscalls) turns a
//! user's request into [`PointSpec`]s: a function pattern, a point in each
//! matched function ([`PointKind`]) and an [`Action`] to run there. Actions
//! are Paradyn's guarded primitives ([`Guarded`], [`Primitive`], [`Expr`])
//! or a count. The resources an action refers to (process-wide counters,
//! per-thread wall timers and counters, event ids with their descriptions)
//! are handed out by an [`Allocate`] implementation that the applier
//! provides: an instrument never sees the process, its memory or the
//! applier's state.
//!
//! Code that depends on what a pattern matched (an event id per traced
//! function, say) is an [`Expand`] action: the applier calls it once per
//! resolved point, while applying.
//!
//! ```
//! use weft_plan::{Action, Allocate, Expr, Guarded, PointSpec, Primitive, Tally};
//! let mut resources = Tally::default();
//! let calls = resources.counter()?;
//! let spec = PointSpec::parse("libc.so.6:malloc")?.with_action(Action::Program(vec![Guarded {
//!     predicate: Some(Expr::bin(weft_plan::BinOp::Gt, Expr::Arg(1), Expr::Const(4096))),
//!     primitive: Primitive::AddCounter(calls, Expr::Const(1)),
//! }]));
//! assert_eq!(spec.pattern.function, "malloc");
//! # Ok::<(), weft_plan::Error>(())
//! ```
//!
//! This crate depends on neither the process nor the live applier, so a
//! plan can be built and checked on its own, and applied by the live
//! applier now or by a file rewriter later.

mod action;
mod error;
mod expr;
mod point;
mod resources;

pub use action::{Action, Expand, NotRebuilt, Rebuild, Rebuilding, RebuiltCode, Resolved};
pub use error::{Error, Exhausted, Result};
pub use expr::{
    reads_point_registers, BinOp, Expr, Feed, Guarded, LeftCall, Primitive, Strings, VdsoCall,
};
pub use point::{PointKind, PointSpec};
pub use resources::{Allocate, EventInfo, Tally};
