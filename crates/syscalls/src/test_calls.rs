//! Calls as a record holds them, made up for the unit tests of the
//! modules that read records (`deps`, `fds`, `known`, `killed`).

use crate::{Buffer, Call, Memory, Return};

/// A call of thread `tid` from TSC `entry` to `exit`, with its number, its
/// first arguments (the others 0) and its result.
pub(crate) fn call(tid: i32, entry: u64, exit: u64, nr: u64, args: &[u64], result: i64) -> Call {
    Call {
        tid,
        ring: tid,
        entry_tsc: entry,
        user_ns: None,
        loader: false,
        nr,
        vdso: false,
        args: std::array::from_fn(|i| args.get(i).copied().unwrap_or(0)),
        exit: Some(Return {
            tsc: Some(exit),
            result,
        }),
        buffers: Vec::new(),
    }
}

/// `c` with a buffer of argument `arg` holding `bytes` (whole).
pub(crate) fn with(mut c: Call, what: Memory, arg: usize, bytes: Vec<u8>) -> Call {
    c.buffers.push(Buffer {
        what,
        arg,
        bytes,
        truncated: false,
    });
    c
}
