//! Actions: what a probe does at its points.

use crate::{Allocate, Exhausted, Guarded, PointKind};
use std::fmt;
use std::sync::Arc;

/// What a probe does at its points.
#[derive(Clone)]
pub enum Action {
    /// Count executions in the probe's own counter (`lock inc`), read back
    /// by the applier's counts.
    Count,
    /// Run guarded primitives (in a mini-trampoline). Counters, timers and
    /// per-thread counters in it come from [`Allocate`].
    Program(Vec<Guarded>),
    /// A program chosen for each point the pattern resolves to, while the
    /// plan is applied (an event id of its own for every traced function).
    Expand(Arc<dyn Expand>),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Count => f.write_str("Count"),
            Action::Program(p) => f.debug_tuple("Program").field(p).finish(),
            Action::Expand(e) => f.debug_tuple("Expand").field(e).finish(),
        }
    }
}

impl PartialEq for Action {
    fn eq(&self, other: &Action) -> bool {
        match (self, other) {
            (Action::Count, Action::Count) => true,
            (Action::Program(a), Action::Program(b)) => a == b,
            (Action::Expand(a), Action::Expand(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// One point a pattern resolved to, as an [`Expand`] action sees it.
#[derive(Debug, Clone, Copy)]
pub struct Resolved<'a> {
    /// Module file name.
    pub module: &'a str,
    /// The function's name, as the pattern matched it (with `+0xOFF` for an
    /// instruction point).
    pub function: &'a str,
    /// Entry, exit or instruction.
    pub kind: PointKind,
}

/// Chooses the program of one resolved point, allocating what it needs.
/// Called by the applier while it applies the plan, once per point, in the
/// order the points are applied.
pub trait Expand: fmt::Debug + Send + Sync {
    /// The program to run at `at`.
    fn expand(
        &self,
        at: &Resolved<'_>,
        alloc: &mut dyn Allocate,
    ) -> Result<Vec<Guarded>, Exhausted>;
}
