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
    /// The function laid out again by the instrument and entered through
    /// a jump at its entry (abstract execution's traced copies). The
    /// point is the function's entry.
    Rebuild(Arc<dyn Rebuild>),
}

impl fmt::Debug for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Count => f.write_str("Count"),
            Action::Program(p) => f.debug_tuple("Program").field(p).finish(),
            Action::Expand(e) => f.debug_tuple("Expand").field(e).finish(),
            Action::Rebuild(r) => f.debug_tuple("Rebuild").field(r).finish(),
        }
    }
}

impl PartialEq for Action {
    fn eq(&self, other: &Action) -> bool {
        match (self, other) {
            (Action::Count, Action::Count) => true,
            (Action::Program(a), Action::Program(b)) => a == b,
            (Action::Expand(a), Action::Expand(b)) => Arc::ptr_eq(a, b),
            (Action::Rebuild(a), Action::Rebuild(b)) => Arc::ptr_eq(a, b),
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
    /// At a system call point (`Syscall`, `AfterSyscall`): the call's
    /// number, when the code puts a constant in `rax` before its `syscall`
    /// (each such point is resolved on its own).
    pub syscall: Option<u64>,
    /// The point's address in the process, where the action has that one
    /// point (a system call's: for `AfterSyscall`, the instruction after
    /// the `syscall`, where the thread goes on once the call returned).
    pub addr: Option<u64>,
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

/// A function to lay out again, as the applier hands it to a [`Rebuild`].
#[derive(Debug, Clone, Copy)]
pub struct Rebuilding<'a> {
    /// Module file name.
    pub module: &'a str,
    /// The module's file.
    pub path: &'a std::path::Path,
    /// The function's name, as the pattern matched it.
    pub function: &'a str,
    /// Its code, at the addresses where it runs.
    pub code: &'a weft_code::FunctionCode,
    /// Runtime address minus ELF virtual address, for the module.
    pub bias: u64,
    /// Addresses inside the function that code elsewhere jumps to (no
    /// jump may be written over them).
    pub entered_from_outside: &'a [u64],
    /// Every address inside the function (past its first byte) that some
    /// branch of the module targets, from inside or outside: no jump may
    /// be written over one at a return address (a target reached from both
    /// sides counts as internal in `entered_from_outside`).
    pub branch_targets: &'a [u64],
    /// C++ landing pads inside the function (the unwinder jumps there):
    /// (pad, entry of the function whose call sites lead to it).
    pub landing_pads: &'a [(u64, u64)],
    /// Where the new layout is placed (within reach of the function).
    pub at: u64,
    /// The module's file, for what the code reaches (functions, PLT
    /// stubs and GOT slots, at ELF virtual addresses: runtime minus `bias`).
    pub image: &'a weft_image::Image,
    /// The process it is laid out in.
    pub pid: i32,
    /// (PLT stub, function entry), runtime addresses, sorted: the module's
    /// stubs that reach one of its own functions in this process (no other
    /// module of the process defines the name, so the dynamic linker binds
    /// it, now or lazily, to this one).
    pub plt_callees: &'a [(u64, u64)],
    /// Bytes left at `at` for the new layout: a [`Rebuild`] whose bytes
    /// would not fit says so (and keeps no trace of the function).
    pub room: u64,
    /// Bytes from the function's entry that its entry's jump may cover:
    /// the function's own, and for a function that ends in a `ret` or a
    /// jump, the padding after it (`nop` or `int3` no branch reaches)
    /// before the next function. A function of 1 to 4 bytes (`ret`, a
    /// getter) gets its jump that way.
    pub entry_room: u64,
}

/// A function laid out again: its bytes, and the 5-byte jumps to write
/// into the original.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuiltCode {
    /// The bytes to place at [`Rebuilding::at`].
    pub bytes: Vec<u8>,
    /// (original address, target): the function's entry first, then any
    /// other place where execution re-enters the function (return
    /// addresses of calls made from the copy).
    pub jumps: Vec<(u64, u64)>,
}

/// Why a function has no new layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotRebuilt {
    /// The layout takes more than [`Rebuilding::room`]: `needs` bytes.
    NoRoom {
        /// Bytes the layout takes.
        needs: u64,
    },
    /// The function cannot have one: why, for the user.
    Refused(String),
}

impl fmt::Display for NotRebuilt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRebuilt::NoRoom { needs } => {
                write!(f, "its copy takes {needs} bytes, more than the room left")
            }
            NotRebuilt::Refused(why) => f.write_str(why),
        }
    }
}

/// Lays out a function again (see [`Action::Rebuild`]). The applier may
/// call it for several functions at once, from threads of its own, each
/// at its own [`Rebuilding::at`].
pub trait Rebuild: fmt::Debug + Send + Sync {
    /// The new layout, or why the function cannot have one.
    fn rebuild(&self, f: &Rebuilding<'_>) -> Result<RebuiltCode, NotRebuilt>;

    /// Called once the applier has placed a batch of new layouts in
    /// process `pid` (before any thread runs them): `placed` holds the
    /// entry of every function whose layout is in place. Returns bytes to
    /// write, (address, bytes), in those layouts or over the jumps written
    /// for them: how the layouts of one batch reach each other directly.
    fn link(&self, pid: i32, placed: &[u64]) -> Vec<(u64, Vec<u8>)> {
        let _ = (pid, placed);
        Vec::new()
    }
}
