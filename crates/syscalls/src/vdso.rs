//! The vDSO's calls: `clock_gettime`, `gettimeofday`, `time`, `getcpu`,
//! `clock_getres` and `getrandom` run in the program, from code the
//! kernel maps into it, without a `syscall` instruction. Probes at the
//! entry and at the returns of each such function of the vDSO module
//! (`linux-vdso.so.1`) capture them as the system calls they
//! stand for, their number marked with [`VDSO_BIT`]; re-execution feeds
//! them there ([`crate::reexec`]).
//!
//! A function's arguments are gone from the registers at its return, so
//! the entry keeps the address of the buffer it fills in a per-thread
//! counter ([`weft_plan::Allocate::call_buffer`]) for the return.

use std::sync::Arc;
use weft_plan::{Expand, Expr, PointKind, PointSpec};

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

/// The values an entry of vDSO call `nr` records: its number with
/// [`VDSO_BIT`], then its arguments (the function's, `rdi`, `rsi`, ...).
pub(crate) fn entry_values(nr: u64) -> Vec<Expr> {
    std::iter::once(Expr::Const((nr | VDSO_BIT) as i64))
        .chain((1..=6).map(Expr::Arg))
        .collect()
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
