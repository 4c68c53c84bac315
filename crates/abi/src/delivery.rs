//! weft's own ABI for signal deliveries (docs/syscalls.md, "Signals and
//! their handlers"): while weft's SIGSYS handler is installed, it installs
//! the program's signal handlers behind a stub of its own
//! (`weft_patch::dispatch`), which records each delivery as a call of a
//! number no kernel call has, before the program's handler runs; a rerun
//! delivers the recorded signals where the record had them.
//!
//! A delivery's record is a call of number [`BASE`] + the signal, made at
//! the dispatch function with these argument registers:
//!
//! 1. the interrupted `rip`;
//! 2. the interrupted `rax` (a call's result, `-EINTR`, or the number of a
//!    call the kernel restarts);
//! 3. the signal, and in the high half [`AFTER_SYSCALL`], [`AT_SYSCALL`],
//!    [`IN_WEFT`], [`AFTER_CALL`] or [`ELSEWHERE`] (where `rip` was);
//! 4. to 6. the `siginfo_t`'s second to fourth words: `si_code`, then the
//!    union's first 16 bytes (`si_pid` and `si_uid`, then `si_status` or
//!    `si_value`).
//!
//! The kernel refuses the number (`ENOSYS`) and does nothing.

/// The number of a delivery's record of signal 0; signal `s`'s is
/// `BASE + s`. Above every call Linux has on x86-64, below the x32 bit.
pub const BASE: u64 = 1 << 16;
const _: () = assert!(BASE > 1024 && BASE + 64 < 0x4000_0000);

/// The signal a record's number stands for, if it is a delivery's.
pub fn signal(nr: u64) -> Option<i32> {
    (BASE + 1..=BASE + 64)
        .contains(&nr)
        .then(|| (nr - BASE) as i32)
}

/// Where the thread was: `rip` right after a `syscall` instruction (the
/// signal came as the call returned, `rax` its result or `-EINTR`).
pub const AFTER_SYSCALL: u64 = 1;
/// `rip` at a `syscall` instruction: a call the kernel restarts after the
/// handler, or one about to be made.
pub const AT_SYSCALL: u64 = 2;
/// Anywhere else: the signal came while the thread ran its own code.
pub const ELSEWHERE: u64 = 0;
/// Elsewhere in weft's code (or the vDSO): a call's program before its
/// call, since a signal that comes while the program writes the record of
/// one returned has its delivery's record dropped with the handler's.
pub const IN_WEFT: u64 = 3;
/// In weft's code after a call it made for the program returned, before
/// any more of the program's own code ran (the record of that call being
/// written, or the code after it): the signal came after the call.
pub const AFTER_CALL: u64 = 4;

/// The sync page's word saying what the stub does ([`OFF`], [`RECORD`],
/// [`RERUN`]).
pub const OFF: u64 = 0;
/// The stub records each delivery, then runs the program's handler.
pub const RECORD: u64 = 1;
/// The stub runs the program's handler only for a signal the rerun's feed
/// raised (`si_errno` [`RAISED`]); any other is dropped, since the record
/// says where each delivery came.
pub const RERUN: u64 = 2;

/// `si_errno` of a signal a rerun raises where its record had it
/// (`rt_tgsigqueueinfo` to the thread itself, `si_code` [`SI_QUEUE`]).
pub const RAISED: u32 = 0x5746_5452;
/// `SI_QUEUE`: the `si_code` the raise sends (the kernel lets any thread
/// send itself a signal with a negative code).
pub const SI_QUEUE: i32 = -1;
/// Byte offset in a raised `siginfo_t` of the recorded `si_code` (i32),
/// which the stub puts back: the union's last word (a `SIGCHLD`'s
/// `si_stime`, which the record does not hold).
pub const CODE_KEPT: u64 = 40;

/// The signals whose handlers are installed as they are, never behind the
/// stub (bit `s - 1` for signal `s`): faults, which come from the
/// instruction that raised them (`SIGILL`, `SIGTRAP`, `SIGBUS`, `SIGFPE`,
/// `SIGSEGV`, and weft's own `SIGTRAP` and `SIGSYS`), and those no handler
/// can take (`SIGKILL`, `SIGSTOP`).
pub const AS_THEY_COME: u64 =
    1 << 3 | 1 << 4 | 1 << 6 | 1 << 7 | 1 << 8 | 1 << 10 | 1 << 18 | 1 << 30;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_number_names_its_signal_and_no_call() {
        assert_eq!(signal(BASE + 17), Some(17));
        assert_eq!(signal(BASE + 64), Some(64));
        assert_eq!(signal(BASE), None);
        assert_eq!(signal(BASE + 65), None);
        assert_eq!(signal(61), None);
        for s in [4, 5, 7, 8, 9, 11, 19, 31] {
            assert_ne!(AS_THEY_COME & 1 << (s - 1), 0, "{s}");
        }
        for s in [1, 2, 10, 12, 14, 15, 17, 18, 28, 32, 33, 34, 64] {
            assert_eq!(AS_THEY_COME & 1 << (s - 1), 0, "{s}");
        }
    }
}
