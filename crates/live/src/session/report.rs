//! What the applier tells its caller: the points it spliced and how, the
//! points it passed over and why, and the counts of counted probes.

use std::fmt;
use std::sync::Arc;
use weft_patch::{SpliceMethod, Unsafe};
use weft_plan::PointKind;

/// One spliced site, for reports and `--verbose`.
#[derive(Debug, Clone)]
pub struct PointInfo {
    /// Module file name.
    pub module: String,
    /// Function (and `+0xOFF` for an instruction point).
    pub function: String,
    /// Kind of probe.
    pub kind: PointKind,
    /// The instruction point.
    pub addr: u64,
    /// Jump or trap.
    pub method: SpliceMethod,
    /// Overwritten (jump) or relocated (trap) bytes.
    pub window: (u64, u64),
    /// Why a trap was needed.
    pub why_trap: Option<Unsafe>,
    /// Whether the trampoline saves flags or registers.
    pub saves_state: bool,
    /// Whether it is currently spliced.
    pub active: bool,
    /// Whether the trampoline runs a relocated copy of the whole function.
    pub relocated_function: bool,
    /// The point whose splice this one rides on, if it lies inside it.
    pub shares_splice_of: Option<u64>,
}

/// A point weft could not instrument, and why.
#[derive(Debug, Clone)]
pub struct SkippedPoint {
    /// Module.
    pub module: String,
    /// Function.
    pub function: String,
    /// Why.
    pub why: SkipReason,
}

/// What [`Session::apply`] did.
#[derive(Debug, Default, Clone)]
pub struct AddReport {
    /// New probes.
    pub probes: usize,
    /// New sites spliced with `jmp`.
    pub jumps: usize,
    /// New sites spliced with a `jmp rel8` to a springboard.
    pub springboards: usize,
    /// New sites spliced with `int3`.
    pub traps: usize,
    /// Points passed over.
    pub skipped: Vec<SkippedPoint>,
}

impl AddReport {
    /// Adds what a later episode of the same placing did.
    pub fn absorb(&mut self, later: AddReport) {
        self.probes += later.probes;
        self.jumps += later.jumps;
        self.springboards += later.springboards;
        self.traps += later.traps;
        self.skipped.extend(later.skipped);
    }
}

/// A counted probe and its current value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// Module file name.
    pub module: String,
    /// Function, or `NAME+0xOFF`.
    pub function: String,
    /// Kind.
    pub kind: PointKind,
    /// The count.
    pub calls: u64,
    /// Why the point was never instrumented, if it was not (its count
    /// then reads 0 without meaning it).
    pub not_measured: Option<String>,
}

/// Why a point was passed over. Kept as a value until it is reported.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SkipReason {
    /// The symbol is an IFUNC resolver, and the implementation it chooses
    /// in this process could not be told (why).
    IfuncResolver(String),
    /// The function's bytes are not in the file (a `.bss` symbol, say).
    NotInFile,
    /// Its first bytes do not decode.
    NoInstruction,
    /// An exit probe of a function with no `ret` and no tail call.
    NeverReturns,
    /// A system call probe of a function with no `syscall` instruction.
    NoSyscall,
    /// `FUNCTION+OFFSET` is not an instruction boundary; the nearest
    /// boundaries before and after, as offsets.
    NotABoundary {
        /// The last boundary before the offset.
        before: Option<u64>,
        /// The first boundary after it.
        after: Option<u64>,
    },
    /// The point lies in a function whose entry probe runs a relocated copy of it.
    InsideRelocatedFunction(u64),
    /// The point lies inside the splice of another point.
    InsideOtherSplice {
        /// The point.
        point: u64,
        /// The point whose splice covers it.
        splice: u64,
    },
    /// Neither a jump nor a trap is safe here.
    Unsafe(Unsafe),
    /// The function's entry is a loop head, so its trampoline would run a
    /// relocated copy that bypasses points already spliced inside it.
    LoopHeadOverSplices,
    /// The trampoline could not be generated.
    Trampoline(Arc<weft_patch::Error>),
    /// The code in memory is not the file's (patched by another tool).
    CodeChanged,
    /// The springboard's padding in memory is not the file's.
    PaddingChanged,
    /// The trampoline lies beyond a jump's reach from the point.
    OutOfReach(u64),
    /// Only an `int3` fits (or `WEFT_SPLICE=int3` forces one: `forced`),
    /// and thread `tid` blocks SIGTRAP.
    SigtrapBlocked {
        /// The thread.
        tid: i32,
        /// Whether the int3 was forced rather than the only fit.
        forced: bool,
    },
    /// The instrument could not lay the function out again (why).
    Rebuild(String),
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::IfuncResolver(why) => write!(
                f,
                "an IFUNC (its resolver chooses the implementation at run time), and the \
                 implementation this process uses could not be told: {why}"
            ),
            SkipReason::NotInFile => f.write_str("its bytes are not in the file"),
            SkipReason::NoInstruction => f.write_str("no decodable instruction"),
            SkipReason::NeverReturns => {
                f.write_str("no ret or tail call (the function never returns)")
            }
            SkipReason::NoSyscall => f.write_str("no syscall instruction"),
            SkipReason::NotABoundary { before, after } => {
                let offset = |o: &Option<u64>| o.map_or("none".to_string(), |o| format!("+{o:#x}"));
                write!(
                    f,
                    "not an instruction boundary; nearest: {} and {}",
                    offset(before),
                    offset(after)
                )
            }
            SkipReason::InsideRelocatedFunction(point) => write!(
                f,
                "{point:#x} is inside a function whose entry probe runs a relocated copy of it"
            ),
            SkipReason::InsideOtherSplice { point, splice } => write!(
                f,
                "{point:#x} is inside the splice of another point ({splice:#x})"
            ),
            SkipReason::Unsafe(why) => write!(f, "{why}"),
            SkipReason::LoopHeadOverSplices => f.write_str(
                "its entry is a loop head, so its trampoline must run a relocated copy of the \
                 function, which would bypass the points already spliced inside it",
            ),
            SkipReason::Trampoline(e) => write!(f, "{e}"),
            SkipReason::CodeChanged => f.write_str(
                "code in memory differs from the file (patched by another tool, or relocated text)",
            ),
            SkipReason::PaddingChanged => f.write_str("springboard padding differs from the file"),
            SkipReason::OutOfReach(entry) => {
                write!(f, "trampoline at {entry:#x} is out of jmp reach")
            }
            SkipReason::SigtrapBlocked { tid, forced } => write!(
                f,
                "{}, and thread {tid} blocks SIGTRAP (the kernel would kill the program when \
                 that thread hit it)",
                if *forced {
                    "WEFT_SPLICE=int3 forces an int3 here"
                } else {
                    "only an int3 fits here"
                }
            ),
            SkipReason::Rebuild(why) => write!(f, "not traced: {why}"),
        }
    }
}

/// One thread's value of a timer or per-thread counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadReading {
    /// The thread (as recorded when it first ran instrumentation).
    pub tid: i32,
    /// TSC ticks for a timer; the value for a counter.
    pub value: u64,
    /// Whether the timer is running (the thread is inside) / the counter is non-zero.
    pub inside: bool,
}
