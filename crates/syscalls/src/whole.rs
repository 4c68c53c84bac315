//! One record per call: at a `syscall` instruction whose number its site
//! says, one program makes the call itself (`weft_plan::Primitive::MakeCall`)
//! and writes the whole call after it: its result and memory
//! (`crate::return_records`), then the number, the argument registers
//! (which the kernel keeps across the call, and a signal handler's
//! `rt_sigreturn` restores), the user time and the entry's instant. One
//! record instead of an entry's and a return's is half the ring writes
//! and one clock read fewer a call; one program instead of two is one
//! call of generated code and one lookup of the thread's slot fewer (a
//! `getppid` loop: 46 to 34 ns added a call, bench/RESULTS.md).
//!
//! The entry's instant and the number stay in the program's own frame
//! across the call: a signal handler's calls inside a blocked call
//! (interrupted, or restarted after the handler) nest inside it with
//! their own, and a jump to the instruction after a `syscall` runs no
//! probe at all. Calls whose return may not come back to the same thread
//! keep an entry record of their own ([`ENTRY_RECORDED`]).
//!
//! A call the thread leaves without returning (a signal handler's
//! `siglongjmp`, a cancellation) is kept open in the thread's block while
//! it runs (`weft_plan::LeftCall`), and gets its entry's record, with the
//! entry's instant inside, from the thread's next call.

use crate::vectored::Record;
use weft_plan::Resolved;
use weft_plan::{Allocate, BinOp, Exhausted, Expr, Guarded, LeftCall, Primitive};

/// The name of a whole call's value holding its entry's instant (0 when
/// unknown): what tells a reader that a return's record is the whole
/// call.
pub const ENTRY_TIME: &str = "entry_time";

/// The name of an entry's value holding, in the record of a call its
/// thread left, the result the call had then (read back from the signal
/// frame that took the thread out), or [`LEFT_RESULT_UNKNOWN`].
pub const LEFT_RESULT: &str = "left_result";
/// [`LEFT_RESULT`] when the call's result is not known: the call was
/// interrupted (`EINTR`, or to be restarted), or its signal frame was
/// not found.
pub const LEFT_RESULT_UNKNOWN: u64 = weft_abi::syscall::LEFT_RESULT_UNKNOWN;

/// `rt_sigreturn`, `clone`, `fork`, `vfork`, `execve`, `exit`,
/// `exit_group`, `execveat`, `clone3`: calls that do not return to their
/// site (a signal frame's return, an exec that succeeded, an exit) or
/// also return in a new thread or process, on another stack or thread
/// block. Their entries write their own records, as before.
pub(crate) const ENTRY_RECORDED: [u64; 9] = [15, 56, 57, 58, 59, 60, 231, 322, 435];

/// How many arguments the kernel takes for the calls a program makes
/// most and those whose records hold the most memory (x86-64 numbers,
/// `SYSCALL_DEFINEn`); the others have their six argument registers
/// recorded.
const ARGUMENTS: &[(u64, usize)] = &[
    (0, 3),   // read
    (1, 3),   // write
    (3, 1),   // close
    (4, 2),   // stat
    (5, 2),   // fstat
    (6, 2),   // lstat
    (7, 3),   // poll
    (8, 3),   // lseek
    (10, 3),  // mprotect
    (11, 2),  // munmap
    (12, 1),  // brk
    (13, 4),  // rt_sigaction
    (14, 4),  // rt_sigprocmask
    (16, 3),  // ioctl
    (17, 4),  // pread64
    (18, 4),  // pwrite64
    (19, 3),  // readv
    (20, 3),  // writev
    (21, 2),  // access
    (24, 0),  // sched_yield
    (28, 3),  // madvise
    (32, 1),  // dup
    (33, 2),  // dup2
    (39, 0),  // getpid
    (41, 3),  // socket
    (42, 3),  // connect
    (49, 3),  // bind
    (61, 4),  // wait4
    (62, 2),  // kill
    (63, 1),  // uname
    (72, 3),  // fcntl
    (79, 2),  // getcwd
    (87, 1),  // unlink
    (89, 3),  // readlink
    (95, 1),  // umask
    (102, 0), // getuid
    (104, 0), // getgid
    (107, 0), // geteuid
    (108, 0), // getegid
    (110, 0), // getppid
    (186, 0), // gettid
    (191, 4), // getxattr
    (192, 4), // lgetxattr
    (193, 4), // fgetxattr
    (194, 3), // listxattr
    (195, 3), // llistxattr
    (196, 3), // flistxattr
    (217, 3), // getdents64
    (228, 2), // clock_gettime
    (230, 4), // clock_nanosleep
    (232, 4), // epoll_wait
    (257, 4), // openat
    (262, 4), // newfstatat
    (267, 4), // readlinkat
    (293, 2), // pipe2
    (295, 5), // preadv
    (296, 5), // pwritev
    (302, 4), // prlimit64
    (318, 3), // getrandom
    (332, 5), // statx
    (439, 4), // faccessat2
];

/// The arguments the kernel takes for call `nr` (six where
/// [`ARGUMENTS`] does not say).
fn arguments(nr: u64) -> usize {
    ARGUMENTS
        .iter()
        .find(|&&(n, _)| n == nr)
        .map_or(6, |&(_, k)| k)
}

/// The values a whole call's record adds after its return's: the
/// number, the arguments the call takes, the user time if recorded, the
/// entry's instant.
fn added(nr: u64, user_time: bool) -> usize {
    1 + arguments(nr) + usize::from(user_time) + 1
}

/// Whether the return of call `nr` (its site says the number), whose
/// records are `records`, writes the whole call: not one of
/// [`ENTRY_RECORDED`], and every shape fits a ring record with the values
/// added (`sendto`'s data and address, a message's five buffers do not:
/// their entries keep records of their own).
pub(crate) fn is_whole(nr: u64, records: &[(Option<Expr>, Record)], user_time: bool) -> bool {
    !ENTRY_RECORDED.contains(&nr)
        && records
            .iter()
            .all(|(_, r)| r.values.len() + added(nr, user_time) <= MAX_VALUES)
}

/// Values a ring record holds at most (`weft_patch::region::ring::MAX_ARGS`).
const MAX_VALUES: usize = 12;

fn always(primitive: Primitive) -> Guarded {
    Guarded {
        predicate: None,
        primitive,
    }
}

/// The program of call `nr` at its `syscall` instruction, which makes the
/// call itself (`Primitive::MakeCall`): the user-time timer stopped (its
/// instant the call's entry), the call made, the timer started again (its
/// instant the record's), then one record of the call's shapes
/// (`records`), each under its condition. The entry's instant and the
/// number stay in the program's own frame across the call, so a signal
/// handler's calls in between (a blocked call interrupted, or restarted
/// after the handler) keep theirs apart and nest inside it. A call whose
/// number is not the site's (`restart_syscall`, which the kernel puts in
/// `rax` when a thread weft stopped in a sleep resumes) writes an entry
/// record of its own before the call, and its result alone after it.
pub(crate) fn call_program(
    at: &Resolved<'_>,
    alloc: &mut dyn Allocate,
    nr: u64,
    records: Vec<(Option<Expr>, Record)>,
    user_timer: Option<u64>,
) -> Result<Vec<Guarded>, Exhausted> {
    let mut program: Vec<Guarded> = user_timer
        .map(|n| always(Primitive::PauseCpuTimer(n)))
        .into_iter()
        .collect();
    let mut entry = Record {
        values: [0u8, 7, 6, 2, 10, 8, 9].map(Expr::Reg).to_vec(),
        names: ["nr", "arg1", "arg2", "arg3", "arg4", "arg5", "arg6"]
            .map(String::from)
            .to_vec(),
        strings: weft_plan::Strings::NONE,
    };
    if let Some(n) = user_timer {
        entry.plain("user_ns", Expr::ThreadTimer(n));
    }
    // The entry's instant: 0 here (the record's own time), that of the
    // call in the record of a call the thread left (`LeftCall`).
    entry.plain(ENTRY_TIME, Expr::Const(0));
    entry.plain(LEFT_RESULT, Expr::Const(LEFT_RESULT_UNKNOWN as i64));
    let entry = entry.emit(at, crate::ENTRY, alloc)?;
    let left = match &entry {
        Primitive::Emit(event, ..) => Some(LeftCall {
            event: *event,
            site_number: nr,
            user_timer,
        }),
        _ => None,
    };
    program.push(Guarded {
        predicate: Some(Expr::bin(BinOp::Ne, Expr::Reg(0), Expr::Const(nr as i64))),
        primitive: entry,
    });
    program.push(always(Primitive::MakeCall { left }));
    program.extend(user_timer.map(|n| always(Primitive::ResumeCpuTimer(n))));
    let site_number = || Expr::bin(BinOp::Eq, Expr::MadeCallNumber, Expr::Const(nr as i64));
    for (shape, mut record) in records {
        record.plain("nr", Expr::Const(nr as i64));
        let registers = crate::writes::ARGUMENT_REGISTERS;
        for (k, &r) in registers[..arguments(nr)].iter().enumerate() {
            record.plain(&format!("arg{}", k + 1), Expr::Reg(r));
        }
        if let Some(n) = user_timer {
            record.plain("user_ns", Expr::ThreadTimer(n));
        }
        record.plain(ENTRY_TIME, Expr::MadeCallTime);
        let emit = record.emit(at, crate::EXIT, alloc)?;
        let predicate = match shape {
            Some(p) => Expr::bin(BinOp::And, site_number(), p),
            None => site_number(),
        };
        program.push(Guarded {
            predicate: Some(predicate),
            primitive: emit,
        });
    }
    program.push(Guarded {
        predicate: Some(Expr::bin(
            BinOp::Ne,
            Expr::MadeCallNumber,
            Expr::Const(nr as i64),
        )),
        primitive: Record::result().emit(at, crate::EXIT, alloc)?,
    });
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_argument_counts_name_each_call_once() {
        for (k, (nr, n)) in ARGUMENTS.iter().enumerate() {
            assert!(*n <= 6, "{nr}");
            assert!(
                ARGUMENTS[k + 1..].iter().all(|(m, _)| m != nr),
                "{nr} twice"
            );
        }
        for (call, n) in [
            ("openat", 4),
            ("newfstatat", 4),
            ("getppid", 0),
            ("readv", 3),
        ] {
            let nr = (0..500).find(|&k| crate::name(k) == call).expect(call);
            assert_eq!(arguments(nr), n, "{call}");
        }
    }
}
