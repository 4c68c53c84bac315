//! Expressions and primitives: Paradyn's instrumentation language, which
//! `weft_patch::mini` compiles to machine code.
//!
//! A [`Guarded`] primitive runs when its predicate is non-zero. Counters in
//! a plan are indices from [`crate::Allocate`]; the applier replaces them by
//! addresses in the shared region before generating code.

/// An integer expression.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Expr {
    /// A constant.
    Const(i64),
    /// Argument 1-6 of the function (System V registers), at an entry.
    Arg(u8),
    /// The return value (`rax`), at an exit.
    Ret,
    /// A process-wide counter at this absolute address (in the cluster's view).
    Counter(u64),
    /// Per-thread counter `n` of the calling thread.
    ThreadCounter(u64),
    /// The calling thread's id.
    Tid,
    /// The total of the calling thread's timer `n`: nanoseconds for a CPU
    /// timer ([`Primitive::StartCpuTimer`]), TSC ticks for a wall timer.
    ThreadTimer(u64),
    /// General-purpose register `n` (encoding order: rax=0 ... r15=15) as
    /// it was at the point. For `rsp` (4) this needs the fixed frame of a
    /// mini-trampoline call (`weft_patch::Snippet::call_mini_fixed_frame`).
    Reg(u8),
    /// A load of `size` bytes (1, 2, 4 or 8; sign-extended when `signed`)
    /// from `base + index * scale + disp`, registers as at the point.
    Load {
        /// Base register, if any.
        base: Option<u8>,
        /// Index register and scale, if any.
        index: Option<(u8, u8)>,
        /// Displacement.
        disp: i64,
        /// Bytes loaded.
        size: u8,
        /// Sign-extend.
        signed: bool,
    },
    /// The low `size` bytes of a value, sign- or zero-extended.
    Narrow(Box<Expr>, u8, bool),
    /// A binary operation.
    Bin(BinOp, Box<Expr>, Box<Expr>),
    /// After [`Primitive::MakeCall`] in the same program: the number the
    /// call was made with (`rax` at the point, as the primitives before
    /// left it).
    MadeCallNumber,
    /// After [`Primitive::MakeCall`] or [`Primitive::CallFunction`] in the
    /// same program: the event clock just before the call (the instant the primitive before it read, if
    /// one did: one `rdtsc` for both), 0 where the thread has no slot.
    MadeCallTime,
}

/// Binary operators of the predicate language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/` (signed; by zero gives 0)
    Div,
    /// `<`
    Lt,
    /// `>`
    Gt,
    /// `<=`
    Le,
    /// `>=`
    Ge,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// logical `and`
    And,
    /// logical `or`
    Or,
}

/// A primitive: an operation on a counter or a timer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Primitive {
    /// Process-wide counter at an absolute address := value.
    SetCounter(u64, Expr),
    /// Process-wide counter += value (atomic).
    AddCounter(u64, Expr),
    /// Process-wide counter -= value (atomic).
    SubCounter(u64, Expr),
    /// The calling thread's counter `n` += value.
    AddThreadCounter(u64, Expr),
    /// Start the calling thread's wall timer `n` (nesting).
    StartTimer(u64),
    /// Stop the calling thread's wall timer `n` (nesting).
    StopTimer(u64),
    /// Start the calling thread's CPU timer `n` (nesting), read from the
    /// per-thread virtual CPU clock (`weft_abi::vclock`).
    StartCpuTimer(u64),
    /// Stop the calling thread's CPU timer `n` (nesting).
    StopCpuTimer(u64),
    /// Resume the calling thread's CPU timer `n`: start it unless it runs
    /// (not nesting: resuming a running timer does nothing).
    ResumeCpuTimer(u64),
    /// Pause the calling thread's CPU timer `n`: stop it if it runs (not
    /// nesting: pausing a stopped timer does nothing). The user time a
    /// system call capture keeps between a thread's calls is such a timer:
    /// a signal handler's calls inside a blocked call pause and resume it
    /// before the blocked call's return resumes it, which would leave a
    /// nesting timer started twice, and stopped for good at the next call.
    PauseCpuTimer(u64),
    /// Write an event (TSC timestamp, id, up to twelve values, and the
    /// text of the values that are strings) into the calling thread's ring;
    /// dropped and counted if the ring is full (discard mode).
    Emit(u32, Vec<Expr>, Strings),
    /// Re-execution's feed at a system call (`weft_abi::feed`).
    Feed(Feed),
    /// Turns Syscall User Dispatch on for the calling thread, with the
    /// range the process's region names, if it names one: a thread or a
    /// process the program just made, which the kernel does not give its
    /// creator's setting (`weft_patch::dispatch`). The one primitive that
    /// makes a system call, once per thread.
    EnableDispatch,
    /// Marks the calling thread's block: a call made at weft's dispatch
    /// function returned (`weft_patch::region::threads::RETURNED`, set to
    /// 1), and leaves that word's address in rbp, for the function's
    /// caller (weft's SIGSYS handler, its signal delivery stub) to clear
    /// as it goes back to the program's code. The first primitive of the
    /// return of such a call, whose record the rest writes: a signal that
    /// comes meanwhile came after the call, which its delivery stub can
    /// then tell from weft's code before a call. Nothing without a slot.
    MarkReturned,
    /// Makes the system call of the `syscall` instruction at the point
    /// (a [`crate::PointKind::Syscall`] point), with the registers the
    /// program had there, and leaves the instruction out of the
    /// trampoline: the primitives before it run before the call, those
    /// after it after the call, where [`Expr::Ret`] and `Expr::Reg(0)` are
    /// its result. One program does the work of a probe before the
    /// instruction and one after it, with one call of generated code and
    /// one lookup of the thread's slot instead of two. An interrupted
    /// call the kernel restarts is made again at the program's own
    /// instruction. `rcx` and `r11`, which the instruction clobbers, are
    /// left holding what the program must not read after a `syscall`
    /// anyway ([`Expr::MadeCallTime`] and [`Expr::MadeCallNumber`], kept
    /// there across the call: a signal handler's calls in between keep
    /// theirs in frames of their own). With `left`, the call is also kept
    /// open in the thread's block until it returns, so that a call the
    /// thread leaves without returning (a signal handler's `siglongjmp`,
    /// a cancellation's unwinding) is recorded by the thread's next call.
    MakeCall {
        /// The record of a call left open, if one is to be written.
        left: Option<LeftCall>,
    },
    /// Writes the records of the calls the thread left open (see
    /// [`LeftCall`]): at a call whose entry writes its own record (an
    /// `exit` after a cancellation), so that they come before it.
    /// `ending`: the call ends the thread (`exit`, `exit_group`), so every
    /// call still open was left, wherever its frame lies.
    WriteLeftCalls {
        /// Whether the call ends the thread.
        ending: bool,
    },
    /// At a function's entry: calls the function, its code from the point
    /// on (relocated at `code`, which the applier fills in: 0 in a plan),
    /// with the argument registers the program had at the entry, on a
    /// stack 16-byte aligned below the program's frame; the point then
    /// returns to the function's caller with the function's result. The
    /// primitives before it run before the function's code, those after
    /// it after the function returned, where [`Expr::Ret`] is its result,
    /// the arguments are still the entry's, and [`Expr::MadeCallTime`]
    /// the instant before the call. Only for functions that take their
    /// arguments in registers, read nothing of their caller's frame, and
    /// are not unwound through (the vDSO's): one program instead of a
    /// probe at the entry and one at each return, with the buffer a
    /// function fills found at its return by the entry's arguments.
    CallFunction {
        /// Where the function's code from the point on lies, relocated.
        code: u64,
    },
    /// At a `syscall` instruction: hands the point's call to the process's
    /// SIGSYS handler as if Syscall User Dispatch had sent it there (its
    /// direct entry, `weft_patch::dispatch`), which makes and records it
    /// as it does a dispatched call, and leaves the instruction out, as
    /// [`Primitive::MakeCall`] does. For the calls the handler must see
    /// (those that install a signal mask or action) once a process's
    /// dispatch is off (`docs/syscalls.md`, "Settled processes"). `site`
    /// is the instruction's address, which the applier fills in (0 in a
    /// plan).
    ThroughHandler {
        /// The `syscall` instruction's address in the process.
        site: u64,
    },
}

/// The record a call made by [`Primitive::MakeCall`] gets if the thread
/// leaves it without returning: event `event` (the entry record of the
/// call's site) with the number and the six argument registers, the user
/// time if `user_timer` says which timer holds it, and the entry's
/// instant last. The record is written by the thread's next call that
/// finds the call's frame no longer on its stack, so its own time is
/// then; the instant in it is the entry's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LeftCall {
    /// The event the record is written as.
    pub event: u32,
    /// The number of the site's call: a call made with another number
    /// (`restart_syscall`) wrote its entry's record before the call and
    /// is left without one.
    pub site_number: u64,
    /// The CPU timer whose value is the call's user time, if recorded.
    pub user_timer: Option<u64>,
}

/// Re-execution at one `syscall` instruction: before it, the call is
/// checked against the calling thread's next recorded call and, if the
/// record answers it, turned into one the kernel refuses at once; after
/// it, such a call gets the recorded result and bytes. Needs the thread's
/// slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Feed {
    /// After the instruction (else before it).
    pub returning: bool,
    /// The process-wide counter holding the feed's address in the
    /// process (0: no feed; every call goes on to the kernel): an index
    /// from [`crate::Allocate::feed`], an address once resolved.
    pub base: u64,
    /// The first of the five per-thread counters of the thread's feed
    /// state: its thread feed's address, the thread id it was found for,
    /// the call under way, the last call that made a thread or a process
    /// and the site of that call.
    pub state: u64,
    /// The site's number (its `syscall` instruction's, the same before
    /// and after it), reported with a divergence.
    pub site: u32,
    /// After a `syscall` instruction: the address of the program's
    /// instruction after it, where this probe runs as the call returns
    /// (0 where unknown). A recorded delivery the rerun raises where the
    /// program's code was (`weft_abi::feed::RAISE_AT_RIP`) at that very
    /// address comes at this return: the rerun's splice there has run
    /// before the probe, so a breakpoint armed here would never stop it.
    pub returns_to: u64,
    /// At a vDSO function's entry and returns instead of a `syscall`
    /// instruction: the call it stands for.
    pub vdso: Option<VdsoCall>,
}

/// A vDSO function (`clock_gettime`, `time`, ...) fed as the system call
/// it stands for: checked at its entry, which the function then runs
/// (doing no harm: it only reads clocks), and given the recorded result
/// and bytes at its returns, over what it computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VdsoCall {
    /// The system call's number.
    pub nr: u64,
    /// The per-thread counter that keeps the address of the buffer the
    /// function fills from its entry to its return
    /// ([`crate::Allocate::call_buffer`]).
    pub buffer: u64,
}

/// Which values of an event are pointers to NUL-terminated strings whose
/// text the record carries, or to bytes as many as the next value says,
/// and how many bytes of each it copies at most. The pointers must be
/// valid or null, as USDT arguments are, for as many bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Strings {
    /// Bit `i` set: value `i` (from 0) is a string (or sized bytes).
    pub mask: u16,
    /// Bytes copied at most from each string (a multiple of 8).
    pub cap: u16,
    /// Bit `i` set (and in `mask`): value `i` points to bytes whose count
    /// is value `i + 1` (none when that is 0 or negative), not to a
    /// NUL-terminated string. What the kernel wrote into a buffer: a
    /// `read`'s data, its count the call's result.
    pub sized: u16,
    /// Bit `i` set (and in `sized`): value `i` points to an array of
    /// `struct iovec` (base, length) whose entries, value `i + 2` of them,
    /// hold the bytes, as many as value `i + 1` says, gathered in order:
    /// what `readv` or `recvmsg` filled, what `writev` or `sendmsg` sent.
    pub gathered: u16,
}

impl Strings {
    /// No strings.
    pub const NONE: Strings = Strings {
        mask: 0,
        cap: 0,
        sized: 0,
        gathered: 0,
    };

    /// Bytes of text a record may need at most.
    pub fn max_text(self) -> u64 {
        u64::from(self.mask.count_ones()) * u64::from(self.cap.div_ceil(8) * 8)
    }
}

impl Primitive {
    /// Whether it needs the calling thread's slot in the thread table.
    pub fn uses_thread_state(&self) -> bool {
        match self {
            Primitive::AddThreadCounter(..)
            | Primitive::StartTimer(_)
            | Primitive::StopTimer(_)
            | Primitive::StartCpuTimer(_)
            | Primitive::StopCpuTimer(_)
            | Primitive::ResumeCpuTimer(_)
            | Primitive::PauseCpuTimer(_)
            | Primitive::Emit(..)
            | Primitive::Feed(_)
            | Primitive::MarkReturned => true,
            Primitive::EnableDispatch
            | Primitive::MakeCall { .. }
            | Primitive::CallFunction { .. }
            | Primitive::ThroughHandler { .. } => false,
            Primitive::WriteLeftCalls { .. } => true,
            Primitive::SetCounter(_, e)
            | Primitive::AddCounter(_, e)
            | Primitive::SubCounter(_, e) => e.uses_thread_state(),
        }
    }
}

impl Expr {
    /// Whether it needs the calling thread's slot in the thread table.
    pub fn uses_thread_state(&self) -> bool {
        match self {
            Expr::ThreadCounter(_) | Expr::Tid | Expr::ThreadTimer(_) => true,
            Expr::Narrow(e, ..) => e.uses_thread_state(),
            Expr::Bin(_, a, b) => a.uses_thread_state() || b.uses_thread_state(),
            _ => false,
        }
    }

    /// `a op b`.
    pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        Expr::Bin(op, Box::new(a), Box::new(b))
    }

    /// Levels of operations: 0 for an operand, 1 for `a + b`. Generated
    /// code keeps one temporary on the stack per level.
    pub fn depth(&self) -> usize {
        match self {
            Expr::Narrow(e, ..) => 1 + e.depth(),
            Expr::Bin(_, a, b) => 1 + a.depth().max(b.depth()),
            _ => 0,
        }
    }

    /// Whether it or any of its operands satisfies `f`.
    pub fn any(&self, f: &dyn Fn(&Expr) -> bool) -> bool {
        f(self)
            || match self {
                Expr::Narrow(e, ..) => e.any(f),
                Expr::Bin(_, a, b) => a.any(f) || b.any(f),
                _ => false,
            }
    }

    /// Whether it reads the return value.
    pub fn reads_ret(&self) -> bool {
        self.any(&|e| matches!(e, Expr::Ret))
    }

    /// Whether it reads a function argument.
    pub fn reads_args(&self) -> bool {
        self.any(&|e| matches!(e, Expr::Arg(_)))
    }
}

/// Whether a program reads registers or memory as they were at the point
/// (USDT operands): its call then needs the fixed frame.
pub fn reads_point_registers(program: &[Guarded]) -> bool {
    fn reads(e: &Expr) -> bool {
        match e {
            Expr::Reg(_) | Expr::Load { .. } => true,
            Expr::Narrow(e, ..) => reads(e),
            Expr::Bin(_, a, b) => reads(a) || reads(b),
            _ => false,
        }
    }
    program.iter().any(|g| {
        g.predicate.as_ref().is_some_and(reads)
            || match &g.primitive {
                Primitive::Emit(_, args, _) => args.iter().any(reads),
                Primitive::SetCounter(_, e)
                | Primitive::AddCounter(_, e)
                | Primitive::SubCounter(_, e) => reads(e),
                Primitive::AddThreadCounter(_, e) => reads(e),
                // It reports the point's `rsp` with a divergence.
                Primitive::Feed(_) => true,
                // They need the registers as they were at the point.
                Primitive::MakeCall { .. }
                | Primitive::CallFunction { .. }
                | Primitive::ThroughHandler { .. } => true,
                _ => false,
            }
    })
}

/// A primitive and the predicate that guards it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Guarded {
    /// Run the primitive only if this is non-zero.
    pub predicate: Option<Expr>,
    /// The primitive.
    pub primitive: Primitive,
}
