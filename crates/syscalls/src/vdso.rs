//! The vDSO's calls: `clock_gettime`, `gettimeofday`, `time`, `getcpu`,
//! `clock_getres` and `getrandom` run in the program, from code the
//! kernel maps into it, without a `syscall` instruction. Probes at the
//! entry and at the returns of each such function of the vDSO module
//! (`linux-vdso.so.1`) capture them as the system calls they
//! stand for, their number marked with [`VDSO_BIT`]; re-execution feeds
//! them there ([`crate::reexec`]).
//!
//! The capture is one program at a function's entry that calls the
//! function itself (`weft_plan::Primitive::CallFunction`) and then writes
//! the whole call, as a `syscall` instruction's program does
//! (`crate::whole`): the arguments are still the entry's after the call,
//! so the buffer the function filled is found by them, and the entry's
//! instant stays in the program's frame. Session 24; before, a probe at
//! the entry wrote an entry record and kept the buffer's address in
//! per-thread counters for a probe at each return, which wrote a return
//! record (a `clock_gettime` loop: 140 ns added a call). Re-execution's
//! feed still has a probe at each end ([`crate::reexec`]).

use crate::vectored::Record;
use std::sync::Arc;
use weft_plan::{
    Allocate, Exhausted, Expand, Expr, Guarded, PointKind, PointSpec, Primitive, Resolved,
};

/// Set in the number a vDSO call's entry records: the call ran in the
/// vDSO, not in the kernel.
pub const VDSO_BIT: u64 = 1 << 32;

/// The vDSO's functions that stand for system calls, and their numbers.
const FUNCTIONS: [(&str, u64); 6] = [
    ("__vdso_clock_gettime", 228),
    ("__vdso_gettimeofday", 96),
    ("__vdso_time", 201),
    ("__vdso_getcpu", 309),
    ("__vdso_clock_getres", 229),
    ("__vdso_getrandom", 318),
];

/// The functions of [`FUNCTIONS`] (and no other x86-64 vDSO function:
/// `__vdso_sgx_enter_enclave` is left alone); one pattern, so that a
/// kernel whose vDSO lacks one of them (`getrandom` came in 6.11) still
/// has the others.
const PATTERN: &str = "linux-vdso.so.1:__vdso_[cgt]*";

/// The system call that the vDSO function `function` stands for.
pub(crate) fn call_of(function: &str) -> Option<u64> {
    FUNCTIONS
        .iter()
        .find(|(name, _)| *name == function)
        .map(|&(_, nr)| nr)
}

/// Probes at the entry (`expand(false)`'s program) and the returns
/// (`expand(true)`'s) of each vDSO function of [`FUNCTIONS`].
pub(crate) fn vdso_specs(
    expand: impl Fn(bool) -> Arc<dyn Expand>,
) -> Result<Vec<PointSpec>, weft_plan::Error> {
    let spec = |kind, exit| -> Result<PointSpec, weft_plan::Error> {
        let mut s = PointSpec::parse(PATTERN)?.with_action(weft_plan::Action::Expand(expand(exit)));
        s.kind = kind;
        Ok(s)
    };
    Ok(vec![
        spec(PointKind::Entry, false)?,
        spec(PointKind::Exit, true)?,
    ])
}

/// The program at the entry of the vDSO function that stands for call
/// `nr`: the user-time timer stopped, the function called, the timer
/// started again, and one record of the whole call: its result and the
/// bytes it filled, its number with [`VDSO_BIT`], its six arguments (the
/// function's, `rdi`, `rsi`, ...), the user time and the entry's instant.
pub(crate) fn call_program(
    at: &Resolved<'_>,
    alloc: &mut dyn Allocate,
    nr: u64,
    user_timer: Option<u64>,
) -> Result<Vec<Guarded>, Exhausted> {
    let always = |primitive| Guarded {
        predicate: None,
        primitive,
    };
    let mut program: Vec<Guarded> = user_timer
        .map(|n| always(Primitive::PauseCpuTimer(n)))
        .into_iter()
        .collect();
    program.push(always(Primitive::CallFunction { code: 0 }));
    program.extend(user_timer.map(|n| always(Primitive::ResumeCpuTimer(n))));
    let mut record = Record::result();
    if let Some(w) = crate::writes::writes(nr) {
        let (address, count) = w.values();
        record.sized(format!("data:{}", w.arg), address, count);
        record.strings.cap = crate::DATA_MAX;
    }
    record.plain("nr", Expr::Const((nr | VDSO_BIT) as i64));
    for k in 1..=6 {
        record.plain(&format!("arg{k}"), Expr::Arg(k));
    }
    if let Some(n) = user_timer {
        record.plain("user_ns", Expr::ThreadTimer(n));
    }
    record.plain(crate::ENTRY_TIME, Expr::MadeCallTime);
    program.push(always(record.emit(at, crate::EXIT, alloc)?));
    Ok(program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_takes_the_vdso_functions_that_stand_for_calls_and_no_other() {
        let p = PointSpec::parse(PATTERN).unwrap().pattern;
        assert!(p.matches_module("linux-vdso.so.1"));
        for (name, nr) in FUNCTIONS {
            assert!(p.matches_function(name, None), "{name}");
            assert_eq!(call_of(name), Some(nr));
            assert_eq!(crate::name(nr), name.trim_start_matches("__vdso_"));
        }
        assert!(!p.matches_function("__vdso_sgx_enter_enclave", None));
    }
}
