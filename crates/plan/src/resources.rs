//! Resources a plan refers to, and the allocation trait through which an
//! applier hands them out.

use crate::{Exhausted, PointKind};

/// Hands out the resources of a plan. The live applier implements it on
/// its shared region; [`Tally`] only numbers them (for plans built
/// offline and for tests).
pub trait Allocate {
    /// A process-wide counter, zeroed: its index for [`crate::Expr::Counter`]
    /// and the counter primitives.
    fn counter(&mut self) -> Result<u64, Exhausted>;
    /// A per-thread wall timer (Paradyn's nesting timer).
    fn timer(&mut self) -> Result<u64, Exhausted>;
    /// A per-thread counter.
    fn thread_counter(&mut self) -> Result<u64, Exhausted>;
    /// An event id for records described by `info` (an id of the per-thread
    /// rings' records; see [`crate::Primitive::Emit`]).
    fn event(&mut self, info: EventInfo) -> Result<u32, Exhausted>;
    /// Whether CPU timers ([`crate::Primitive::StartCpuTimer`]) can be
    /// placed: the process will map the per-thread CPU clock.
    fn cpu_clock(&self) -> bool {
        false
    }
    /// The per-thread timer that times each thread's user code between
    /// its system calls (stopped at each `syscall` instruction, started
    /// after it): the same one to every asker in the process.
    fn user_timer(&mut self) -> Result<u64, Exhausted> {
        self.timer()
    }
    /// Re-execution's feed state ([`crate::Feed`]): the process-wide
    /// counter that holds the feed's address and the first of five
    /// per-thread counters; the same to every asker in the process.
    fn feed(&mut self) -> Result<(u64, u64), Exhausted> {
        let base = self.counter()?;
        let state = self.thread_counter()?;
        for _ in 1..5 {
            self.thread_counter()?;
        }
        Ok((base, state))
    }
    /// The two per-thread counters that keep, from a vDSO function's entry
    /// to its return, the address of the buffer it fills (whose bytes the
    /// return records, or gets from the record) and the stack pointer
    /// there (a return whose stack pointer is another is not that call's:
    /// a signal handler's call came in between): the same to every asker
    /// in the process.
    fn call_buffer(&mut self) -> Result<(u64, u64), Exhausted> {
        Ok((self.thread_counter()?, self.thread_counter()?))
    }
    /// The two per-thread counters that keep, from a `syscall`
    /// instruction whose number its site does not say (glibc's
    /// `syscall()`) to the instruction after it, the call's number and
    /// the stack pointer there (a return whose stack pointer is another
    /// is not that call's: a signal handler's call came in between): the
    /// same to every asker in the process.
    fn call_number(&mut self) -> Result<(u64, u64), Exhausted> {
        Ok((self.thread_counter()?, self.thread_counter()?))
    }
}

/// What an event id stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventInfo {
    /// Module file name.
    pub module: String,
    /// Function, or `PROVIDER:NAME`.
    pub function: String,
    /// Entry (arguments), exit (return value) or instruction.
    pub kind: PointKind,
    /// How many values its records carry.
    pub args: u8,
    /// Bit `i` set: value `i` (from 0) is a string or a byte array, whose
    /// bytes the record carries.
    pub strings: u16,
    /// Bit `i` set: value `i` is a byte array (shown in hex), not text.
    pub binary: u16,
    /// The values' names, when the site gives them (rich events); else
    /// `arg1`, `arg2`, ... (or `ret` at an exit).
    pub names: Vec<String>,
}

/// An allocator that numbers resources from 0 and keeps the events'
/// descriptions, without limits.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    /// Counters handed out.
    pub counters: u64,
    /// Timers handed out.
    pub timers: u64,
    /// Per-thread counters handed out.
    pub thread_counters: u64,
    /// Events, indexed by id.
    pub events: Vec<EventInfo>,
}

impl Allocate for Tally {
    fn counter(&mut self) -> Result<u64, Exhausted> {
        self.counters += 1;
        Ok(self.counters - 1)
    }

    fn timer(&mut self) -> Result<u64, Exhausted> {
        self.timers += 1;
        Ok(self.timers - 1)
    }

    fn thread_counter(&mut self) -> Result<u64, Exhausted> {
        self.thread_counters += 1;
        Ok(self.thread_counters - 1)
    }

    fn event(&mut self, info: EventInfo) -> Result<u32, Exhausted> {
        self.events.push(info);
        Ok(self.events.len() as u32 - 1)
    }
}
