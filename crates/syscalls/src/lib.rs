//! The system call instrument (ULTra's capture, issue 13): probes at every
//! `syscall` instruction of the traced modules, before the kernel runs it
//! (number and six arguments) and at the instruction after it (the
//! result), written as events into the calling thread's ring with the
//! TSC; no stop and no system call of weft's per call. [`calls`] pairs
//! the two events of each call back up, per thread.
//!
//! [`fds`] works out the resources the calls operate on and [`deps`] the
//! order between different threads' operations on them; [`reexec`] plans
//! re-execution's feed probes and builds their feed from a record; [`vdso`]
//! captures and feeds the calls the vDSO answers without the kernel.
//! Replay is `weft_replay`'s (docs/syscalls.md).

mod calls;
mod decode;
pub mod deps;
pub mod fds;
mod format;
mod inputs;
pub mod killed;
pub mod known;
pub mod reexec;
mod stats;
#[cfg(test)]
mod test_calls;
mod vdso;
mod vectored;
mod whole;
mod writes;

pub use calls::{calls, calls_at_sites, is_delivery, is_exec, Buffer, Call, Event, Memory, Return};
pub use format::{errno_name, name, quoted, returns_address, strace_line};
pub use inputs::{path_arguments, sent_arguments, Sent};
pub use stats::{render as render_stats, stats, Row};
pub use vdso::VDSO_BIT;
pub use whole::{ENTRY_TIME, LEFT_RESULT, LEFT_RESULT_UNKNOWN};
pub use writes::{writes, Count, Writes};

/// Bytes of a buffer the kernel wrote that a return records at most (the
/// most text a ring record carries); a longer one is recorded cut, and
/// says so.
pub const DATA_MAX: u16 = 4096;

use std::sync::Arc;
use vectored::Record;
use weft_plan::{
    Action, Allocate, BinOp, Exhausted, Expand, Expr, Guarded, PointKind, PointSpec, Primitive,
    Resolved, Strings,
};

/// The kind an events trace gives a call's entry (its number and
/// arguments), and its return (its result).
pub use weft_plan::PointKind::{AfterSyscall as EXIT, Syscall as ENTRY};

/// Registers of a system call at its `syscall` instruction, in encoding
/// order numbers: `rax` (the number), then `rdi`, `rsi`, `rdx`, `r10`, `r8`,
/// `r9` (the arguments).
const ENTRY_REGISTERS: [u8; 7] = [0, 7, 6, 2, 10, 8, 9];

/// The probes that capture every system call the functions matching
/// `pattern` make (`*:*`: every module of the process, and then the
/// calls the vDSO answers without the kernel too): the entry's first, so
/// that a return falling inside the entry's splice joins it.
pub fn capture_specs(pattern: &str) -> Result<Vec<PointSpec>, weft_plan::Error> {
    let mut specs = syscall_specs(pattern, |exit| Arc::new(Capture { exit, vdso: false }))?;
    if pattern == EVERY_MODULE {
        specs.extend(vdso::vdso_specs(|exit| {
            Arc::new(Capture { exit, vdso: true })
        })?);
    }
    Ok(specs)
}

/// The pattern of every function of every module.
pub const EVERY_MODULE: &str = "*:*";

/// Probes before (`expand(false)`'s program) and after (`expand(true)`'s)
/// every `syscall` instruction of the functions matching `pattern`, the
/// one before first.
pub(crate) fn syscall_specs(
    pattern: &str,
    expand: impl Fn(bool) -> Arc<dyn weft_plan::Expand>,
) -> Result<Vec<PointSpec>, weft_plan::Error> {
    let spec = |kind, after| -> Result<PointSpec, weft_plan::Error> {
        let mut s = PointSpec::parse(pattern)?.with_action(Action::Expand(expand(after)));
        s.kind = kind;
        Ok(s)
    };
    Ok(vec![
        spec(PointKind::Syscall, false)?,
        spec(PointKind::AfterSyscall, true)?,
    ])
}

/// The program at a `syscall` (its registers) or after it (`rax`); or
/// at a vDSO function's entry and returns.
#[derive(Debug)]
struct Capture {
    exit: bool,
    vdso: bool,
}

impl Expand for Capture {
    fn expand(
        &self,
        at: &Resolved<'_>,
        alloc: &mut dyn Allocate,
    ) -> Result<Vec<Guarded>, Exhausted> {
        // A vDSO function that stands for a call: one program at its
        // entry calls it and records the whole call (`vdso`); its returns
        // have nothing left to do.
        let vdso_call = self.vdso.then(|| vdso::call_of(at.function));
        if vdso_call.is_some_and(|nr| nr.is_none() || self.exit) {
            return Ok(Vec::new());
        }
        // The thread's user code is timed between its calls, on the
        // per-thread CPU clock when the process has it: stopped at each
        // `syscall` instruction (its total in the entry's record), started
        // after it.
        let user_timer = match alloc.cpu_clock() {
            true => Some(alloc.user_timer()?),
            false => None,
        };
        if let Some(Some(nr)) = vdso_call {
            return vdso::call_program(at, alloc, nr, user_timer);
        }
        // The C library's `syscall()`, whose site does not say the call's
        // number (it is the function's first argument): the entry keeps
        // the number and the stack pointer for the return. Other sites
        // whose number the decoder could not tell (a futex wait whose
        // number is set before a branch) have one number each, and would
        // pay a record of every call's shape in code: their returns
        // record the result alone.
        let generic = at.function.split('+').next() == Some("syscall");
        // weft's SIGSYS handler keeps the number in r14 for the return of
        // the call it makes at its dispatch function: nothing to keep, and
        // nothing a signal handler's call in between could overwrite.
        let dispatched = at.module == weft_abi::dispatch::MODULE_NAME;
        let unknown = match (!self.vdso && at.syscall.is_none() && generic, dispatched) {
            (false, _) => None,
            (true, true) => Some(Kept::Register(weft_abi::dispatch::NUMBER_REGISTER)),
            (true, false) => {
                let (number, stack) = alloc.call_number()?;
                Some(Kept::Counters { number, stack })
            }
        };
        // A call whose site says its number: one record (`whole`), where
        // it fits, written by one program at the instruction that makes
        // the call itself; the point after the instruction has nothing
        // left to do.
        if let (Some(nr), false, false) = (at.syscall, self.vdso, dispatched) {
            let records = return_records(Some(nr));
            if whole::is_whole(nr, &records, user_timer.is_some()) {
                if self.exit {
                    return Ok(Vec::new());
                }
                return whole::call_program(at, alloc, nr, records, user_timer);
            }
        }
        if let (Some(kept), true) = (unknown, self.exit) {
            let mut program = unknown_number_return(at, alloc, kept)?;
            // A call weft's SIGSYS handler made for a site not yet
            // rewritten returned: a signal while its record is written
            // came after it.
            if dispatched {
                program.insert(
                    0,
                    Guarded {
                        predicate: None,
                        primitive: Primitive::MarkReturned,
                    },
                );
            }
            if let Some(n) = user_timer {
                program.push(Guarded {
                    predicate: None,
                    primitive: Primitive::ResumeCpuTimer(n),
                });
            }
            return Ok(program);
        }
        let entry = |values: Vec<Expr>| Record {
            values,
            names: ENTRY_NAMES.map(String::from).to_vec(),
            strings: Strings::NONE,
        };
        let mut records = if self.exit {
            return_records(at.syscall)
        } else {
            let registers = ENTRY_REGISTERS.iter().map(|&r| Expr::Reg(r)).collect();
            vec![(None, entry(registers))]
        };
        for (_, record) in records.iter_mut().filter(|_| !self.exit) {
            if let Some(n) = user_timer {
                record.plain("user_ns", Expr::ThreadTimer(n));
            }
            // weft's SIGSYS handler makes the calls of code not rewritten
            // at the dispatch function, the address they were made from
            // in rcx.
            if at.module == weft_abi::dispatch::MODULE_NAME {
                record.plain(weft_abi::dispatch::SITE_VALUE, Expr::Reg(1));
            }
        }
        let mut emits = Vec::new();
        for (predicate, record) in records {
            emits.push(Guarded {
                predicate,
                primitive: record.emit(at, at.kind, alloc)?,
            });
        }
        let timer = |primitive| Guarded {
            predicate: None,
            primitive,
        };
        let mut program: Vec<Guarded> = Vec::new();
        if !self.exit {
            // The calls the thread left before this entry's (a cancelled
            // thread's blocked `read`, before its `exit`).
            // An exit leaves every call still open; where the site does
            // not say its number (glibc's `syscall()`, weft's dispatch
            // function, which makes a thread's first `exit` there), `rax`
            // does.
            let exits =
                calls::EXITS.map(|nr| Expr::bin(BinOp::Eq, Expr::Reg(0), Expr::Const(nr as i64)));
            let [exit, exit_group] = exits;
            let exiting = Expr::bin(BinOp::Or, exit, exit_group);
            match at.syscall {
                Some(nr) => program.push(timer(Primitive::WriteLeftCalls {
                    ending: calls::EXITS.contains(&nr),
                })),
                None => {
                    program.push(Guarded {
                        predicate: Some(exiting.clone()),
                        primitive: Primitive::WriteLeftCalls { ending: true },
                    });
                    program.push(Guarded {
                        predicate: Some(Expr::bin(BinOp::Eq, exiting, Expr::Const(0))),
                        primitive: Primitive::WriteLeftCalls { ending: false },
                    });
                }
            }
        }
        if let Some(Kept::Counters { number, stack }) = unknown {
            let keep = |counter: u64, value: Expr| Guarded {
                predicate: None,
                primitive: Primitive::AddThreadCounter(
                    counter,
                    Expr::bin(BinOp::Sub, value, Expr::ThreadCounter(counter)),
                ),
            };
            program.push(keep(number, Expr::Reg(0)));
            program.push(keep(stack, Expr::Reg(4)));
        }
        match (user_timer, self.exit) {
            (None, _) => program.extend(emits),
            (Some(n), false) => {
                program.push(timer(Primitive::PauseCpuTimer(n)));
                program.extend(emits);
            }
            (Some(n), true) => {
                program.extend(emits);
                program.push(timer(Primitive::ResumeCpuTimer(n)));
            }
        }
        if self.exit {
            program.extend(child_dispatch(at));
        }
        Ok(program)
    }
}

/// `clone`, `fork`, `vfork` and `clone3`: the calls that make a thread or
/// a process.
const MAKE_TASKS: [u64; 4] = [56, 57, 58, 435];

/// After a call that makes a thread or a process: the child (result 0),
/// which starts without its creator's Syscall User Dispatch, turns it on.
pub(crate) fn child_dispatch(at: &Resolved<'_>) -> Option<Guarded> {
    at.syscall
        .is_some_and(|nr| MAKE_TASKS.contains(&nr))
        .then(|| Guarded {
            predicate: Some(Expr::bin(BinOp::Eq, Expr::Reg(0), Expr::Const(0))),
            primitive: Primitive::EnableDispatch,
        })
}

/// The names of an entry's values.
const ENTRY_NAMES: [&str; 7] = ["nr", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6"];

/// Where the return of a call whose site does not say its number finds
/// the number.
#[derive(Debug, Clone, Copy)]
enum Kept {
    /// In the per-thread counters the entry kept it and the stack pointer
    /// in (see `Allocate::call_number`).
    Counters { number: u64, stack: u64 },
    /// In a register the caller keeps it in across the call.
    Register(u8),
}

/// Numbers above the last call Linux has on x86-64.
const CALLS: u64 = 470;

/// The return's program at a `syscall` instruction whose site does not say
/// the number (glibc's `syscall()`, which takes it as an argument): the
/// entry kept the number and the stack pointer in the per-thread counters
/// `kept` (see `Allocate::call_number`). One record for each call whose
/// memory a return records ([`return_values`]), guarded by its number and
/// by the stack pointer being the entry's; the result alone for any other
/// number, or when a signal handler's call came in between (its entry
/// kept another stack pointer), so that no copy follows another call's
/// arguments.
fn unknown_number_return(
    at: &Resolved<'_>,
    alloc: &mut dyn Allocate,
    kept: Kept,
) -> Result<Vec<Guarded>, Exhausted> {
    let (number, same_call, mut other) = match kept {
        Kept::Counters { number, stack } => (
            Expr::ThreadCounter(number),
            Expr::bin(BinOp::Eq, Expr::ThreadCounter(stack), Expr::Reg(4)),
            Expr::bin(BinOp::Ne, Expr::ThreadCounter(stack), Expr::Reg(4)),
        ),
        Kept::Register(r) => (Expr::Reg(r), Expr::Const(1), Expr::Const(0)),
    };
    let same_call = || same_call.clone();
    let mut program = Vec::new();
    let mut none_of: Option<Expr> = None;
    let emit = |alloc: &mut dyn Allocate, record: Record| record.emit(at, at.kind, alloc);
    for nr in 0..CALLS {
        let records = return_records(Some(nr));
        if records.len() == 1 && records[0].1.values.len() == 1 {
            continue;
        }
        let is = Expr::bin(BinOp::Eq, number.clone(), Expr::Const(nr as i64));
        let isnt = Expr::bin(BinOp::Ne, number.clone(), Expr::Const(nr as i64));
        none_of = Some(match none_of {
            None => isnt,
            Some(n) => Expr::bin(BinOp::And, n, isnt),
        });
        for (shape, record) in records {
            let this_call = Expr::bin(BinOp::And, same_call(), is.clone());
            let predicate = match shape {
                Some(p) => Expr::bin(BinOp::And, this_call, p),
                None => this_call,
            };
            program.push(Guarded {
                predicate: Some(predicate),
                primitive: emit(alloc, record)?,
            });
        }
    }
    if let Some(n) = none_of {
        other = Expr::bin(BinOp::Or, other, n);
    }
    program.push(Guarded {
        predicate: Some(other),
        primitive: emit(alloc, return_values(None))?,
    });
    Ok(program)
}

/// `-EFAULT`: the kernel could not read an argument's memory.
const EFAULT: i64 = -14;

/// A return's values and their names: the result, then for a call whose
/// number the site says, what it read from and wrote into the program's
/// memory. All of it is recorded after the call, from the argument
/// registers the kernel keeps, and only where the kernel itself read or
/// wrote that memory, so no copy touches an address the program did not
/// make valid: a path unless the call failed with `EFAULT`, the bytes it
/// wrote out (as many as it did), the buffer the kernel filled (see
/// [`writes`]). Names: `result`, `path:K`, `sent:K` and `data:K` (`K` the
/// argument), each sized one followed by its `count`.
fn return_values(nr: Option<u64>) -> Record {
    let result = || Expr::Reg(0);
    let mut record = Record::result();
    let Some(nr) = nr else {
        return record;
    };
    for &arg in path_arguments(nr) {
        let unless_efault = Expr::bin(BinOp::Ne, result(), Expr::Const(EFAULT));
        record.string(
            format!("path:{arg}"),
            Expr::bin(
                BinOp::Mul,
                Expr::Reg(writes::ARGUMENT_REGISTERS[arg]),
                unless_efault,
            ),
        );
    }
    for &(arg, count) in sent_arguments(nr) {
        let buffer = Expr::Reg(writes::ARGUMENT_REGISTERS[arg]);
        let count = match count {
            Sent::Result => result(),
            Sent::OnZero(n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Eq, result(), Expr::Const(0)),
                Expr::Const(n as i64),
            ),
            Sent::OnZeroUnless(k, value, n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(
                    BinOp::And,
                    Expr::bin(BinOp::Eq, result(), Expr::Const(0)),
                    // The argument is an `int`: its register's low half.
                    Expr::bin(
                        BinOp::Ne,
                        Expr::Narrow(Box::new(Expr::Reg(writes::ARGUMENT_REGISTERS[k])), 4, false),
                        Expr::Const(value as i64),
                    ),
                ),
                Expr::Const(n as i64),
            ),
            // The kernel read that many unless it faulted; a null
            // address (`sendto` on a connected socket) with a length
            // is not read at all.
            Sent::Arg(k) => Expr::bin(
                BinOp::Mul,
                Expr::Reg(writes::ARGUMENT_REGISTERS[k]),
                Expr::bin(
                    BinOp::And,
                    Expr::bin(BinOp::Ne, result(), Expr::Const(EFAULT)),
                    Expr::bin(BinOp::Ne, buffer.clone(), Expr::Const(0)),
                ),
            ),
        };
        record.sized(format!("sent:{arg}"), buffer, count);
    }
    if let Some(w) = writes(nr) {
        let (address, count) = w.values();
        record.sized(format!("data:{}", w.arg), address, count);
    }
    record.strings.cap = DATA_MAX;
    record
}

/// The records a return writes, each with the condition it is written
/// under (none: always): [`return_values`]' one, or for a call whose
/// memory lies behind another structure, one for each shape of it
/// (`vectored`).
fn return_records(nr: Option<u64>) -> Vec<(Option<Expr>, Record)> {
    match nr {
        Some(nr) if vectored::covers(nr) => vectored::records(nr)
            .into_iter()
            .map(|(p, mut r)| {
                r.strings.cap = DATA_MAX;
                (p, r)
            })
            .collect(),
        _ => vec![(None, return_values(nr))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_captured_at_its_instruction_and_after_it() {
        let specs = capture_specs("*:*").unwrap();
        assert_eq!(specs[0].kind, PointKind::Syscall);
        assert_eq!(specs[1].kind, PointKind::AfterSyscall);
        let mut ids = weft_plan::Tally::default();
        let at = |kind, nr| Resolved {
            module: "libc.so.6",
            function: "getpid",
            kind,
            syscall: Some(nr),
            addr: None,
        };
        let program = |k: usize, nr, ids: &mut weft_plan::Tally| {
            let Action::Expand(e) = &specs[k].action else {
                panic!("{:?}", specs[k].action)
            };
            e.expand(&at(specs[k].kind, nr), ids).unwrap()
        };
        let emits = |p: &[Guarded]| -> Vec<(bool, Vec<Expr>)> {
            p.iter()
                .filter_map(|g| match &g.primitive {
                    Primitive::Emit(_, v, _) => Some((g.predicate.is_some(), v.clone())),
                    _ => None,
                })
                .collect()
        };
        // getpid: one program makes the call. Before it, a record only
        // for another number in rax (restart_syscall); after it, one
        // record with the number after the result and the entry's
        // instant last (or the result alone, for the other number).
        // Nothing is left for the point after the instruction.
        let whole = program(0, 39, &mut ids);
        let made = whole
            .iter()
            .position(|g| matches!(g.primitive, Primitive::MakeCall { .. }))
            .expect("the program makes the call");
        assert!(whole[made].predicate.is_none(), "always made");
        let (entry, ret) = (&whole[..made], &whole[made + 1..]);
        assert_eq!(emits(entry).len(), 1);
        assert!(emits(entry)[0].0, "guarded by rax being another number");
        let ret = emits(ret);
        assert_eq!(ret.len(), 2, "the whole call, and the result alone");
        assert_eq!(ret[0].1[..2], [Expr::Reg(0), Expr::Const(39)]);
        assert_eq!(ret[0].1.last(), Some(&Expr::MadeCallTime));
        assert_eq!(ret[1].1, [Expr::Reg(0)]);
        assert!(program(1, 39, &mut ids).is_empty());
        // execve: an entry record of the seven registers, a return record
        // of the result.
        let entry = emits(&program(0, 59, &mut ids));
        assert_eq!((entry[0].0, entry[0].1.len()), (false, 7));
        assert_eq!(entry[0].1[0], Expr::Reg(0), "rax: the number");
        let ret = emits(&program(1, 59, &mut ids));
        assert_eq!(ret.len(), 1);
        assert_eq!(ret[0].1[0], Expr::Reg(0), "rax: the result");
    }

    /// The program of capture spec `k` (0: the entry, 1: the return) at a
    /// site of `function` in `module` whose code does not say the number.
    fn expanded(
        module: &str,
        function: &str,
        k: usize,
        ids: &mut weft_plan::Tally,
    ) -> Vec<Guarded> {
        let specs = capture_specs("*:*").unwrap();
        let Action::Expand(e) = &specs[k].action else {
            panic!("{:?}", specs[k].action)
        };
        let at = Resolved {
            module,
            function,
            kind: specs[k].kind,
            syscall: None,
            addr: None,
        };
        e.expand(&at, ids).unwrap()
    }

    /// glibc's `syscall()`: the entry keeps the number and the stack
    /// pointer; the return has a guarded record per call whose memory it
    /// records (`read`'s data among them) and the result alone otherwise.
    #[test]
    fn a_site_without_a_number_keeps_it_for_the_return() {
        let mut ids = weft_plan::Tally::default();
        let program = |k, ids: &mut _| expanded("libc.so.6", "syscall+0x1d", k, ids);
        let entry = program(0, &mut ids);
        // The calls the thread left first: all of them if the call is
        // an exit.
        let endings = [true, false].map(|ending| Primitive::WriteLeftCalls { ending });
        assert_eq!(
            [&entry[0].primitive, &entry[1].primitive],
            endings.each_ref()
        );
        assert!(entry[..2].iter().all(|g| g.predicate.is_some()));
        assert!(matches!(
            &entry[2].primitive,
            Primitive::AddThreadCounter(_, Expr::Bin(BinOp::Sub, r, _)) if **r == Expr::Reg(0)
        ));
        assert!(matches!(
            &entry[3].primitive,
            Primitive::AddThreadCounter(_, Expr::Bin(BinOp::Sub, r, _)) if **r == Expr::Reg(4)
        ));
        let exit = program(1, &mut ids);
        assert!(exit.len() > 30, "{} records", exit.len());
        assert!(exit.iter().all(|g| g.predicate.is_some()));
        let read = exit
            .iter()
            .find(|g| format!("{:?}", g.predicate).contains("Const(0)"))
            .expect("read's record");
        let Primitive::Emit(_, values, strings) = &read.primitive else {
            panic!("{read:?}")
        };
        assert_eq!(values.len(), 3, "result, the data and its count");
        assert_eq!(strings.sized, 2);
        let Primitive::Emit(_, plain, _) = &exit.last().unwrap().primitive else {
            panic!()
        };
        assert_eq!(plain, &vec![Expr::Reg(0)]);
    }

    /// weft's dispatch function: the number is in r14 at the return, where
    /// the SIGSYS handler keeps it, so the entry keeps nothing a signal
    /// handler's call in between could overwrite; the entry records the
    /// address the call was made from (rcx).
    #[test]
    fn the_dispatch_function_reads_the_number_from_the_handlers_register() {
        let mut ids = weft_plan::Tally::default();
        let program =
            |k, ids: &mut _| expanded(weft_abi::dispatch::MODULE_NAME, "syscall+0x5", k, ids);
        let entry = program(0, &mut ids);
        assert!(entry
            .iter()
            .all(|g| !matches!(g.primitive, Primitive::AddThreadCounter(..))));
        let Primitive::Emit(_, values, _) = &entry.last().unwrap().primitive else {
            panic!("{entry:?}")
        };
        assert_eq!(values.last(), Some(&Expr::Reg(1)), "the site");
        let exit = program(1, &mut ids);
        let read = exit
            .iter()
            .find(|g| format!("{:?}", g.predicate).contains("Reg(14)"))
            .expect("a record guarded by the number in r14");
        assert!(!format!("{:?}", read.predicate).contains("ThreadCounter"));
    }
}
