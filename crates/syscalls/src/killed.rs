//! Results no thread could record: a `write` to a pipe or a socket whose
//! reader has gone fails with `EPIPE`, and the `SIGPIPE` the kernel sends
//! with it kills the thread as the call returns (its default action), so
//! the call's return record is never written (`= ?`). The record still
//! says what happened, in the parent's `wait4`: the process was killed by
//! `SIGPIPE`. Such a process's last call, a write left without a result,
//! failed with `EPIPE`, as strace shows it (`-1 EPIPE`), unless the record
//! has the signal sent to it by a process of the workload.

use crate::calls::{Call, Memory, Return};
use std::collections::{HashMap, HashSet};

/// `SIGPIPE`, and `EPIPE` as a call returns it.
const SIGPIPE: u32 = 13;
const EPIPE: i64 = -32;

/// Calls that write to a descriptor: `write`, `pwrite64`, `writev`,
/// `sendto`, `sendmsg`, `sendfile`, `pwritev`, `pwritev2`, `splice`,
/// `vmsplice`, `sendmmsg`.
const WRITES: &[u64] = &[1, 18, 20, 44, 46, 40, 296, 328, 275, 278, 307];

/// The processes a recorded `wait4` reaped killed by a signal, and the
/// signal.
pub fn killed(calls: &[Call]) -> HashMap<i32, u32> {
    calls
        .iter()
        .filter_map(|c| {
            let child = c.exit.filter(|e| c.nr == 61 && e.result > 0)?.result as i32;
            let status = (c.buffers.iter())
                .find(|b| b.what == Memory::Filled && b.arg == 1)
                .and_then(|b| Some(u32::from_le_bytes(b.bytes.get(..4)?.try_into().ok()?)))?;
            let signal = status & 0x7f;
            (signal != 0 && signal != 0x7f).then_some((child, signal))
        })
        .collect()
}

/// The processes a recorded `wait4` reaped killed by `SIGPIPE`.
fn killed_by_sigpipe(calls: &[Call]) -> HashSet<i32> {
    killed(calls)
        .into_iter()
        .filter(|&(_, signal)| signal == SIGPIPE)
        .map(|(pid, _)| pid)
        .collect()
}

/// Gives the last call of each thread of a process that `SIGPIPE` killed,
/// a write with no result, the result `EPIPE` (no instant: as a call its
/// thread left, [`crate::calls::left_with_result`]). `pid_of` gives a
/// thread's process; `also`, processes the record has no `wait4` of that
/// weft saw `SIGPIPE` kill (the workload's first, which weft reaps).
pub fn writes_sigpipe_ended(calls: &mut [Call], pid_of: &dyn Fn(i32) -> i32, also: &[i32]) {
    let mut killed = killed_by_sigpipe(calls);
    killed.extend(also);
    if killed.is_empty() {
        return;
    }
    // A SIGPIPE a process of the workload sent: not the kernel's.
    let sent: HashSet<i32> = (calls.iter())
        .filter_map(|c| match c.nr {
            62 if c.args[1] == u64::from(SIGPIPE) => Some(c.args[0] as i32),
            234 if c.args[2] == u64::from(SIGPIPE) => Some(c.args[0] as i32),
            200 if c.args[1] == u64::from(SIGPIPE) => Some(pid_of(c.args[0] as i32)),
            _ => None,
        })
        .collect();
    let mut last: HashMap<i32, usize> = HashMap::new();
    for (k, c) in calls.iter().enumerate() {
        last.insert(c.tid, k);
    }
    for (&tid, &k) in &last {
        let pid = pid_of(tid);
        let c = &mut calls[k];
        if killed.contains(&pid)
            && !sent.contains(&pid)
            && c.exit.is_none()
            && WRITES.contains(&c.nr)
        {
            c.exit = Some(Return {
                tsc: None,
                result: EPIPE,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_calls::{call, with};

    /// A call of thread `tid` still open when the record ends.
    fn open(tid: i32, nr: u64, args: &[u64]) -> Call {
        Call {
            exit: None,
            ..call(tid, 0, 0, nr, args, 0)
        }
    }

    /// The shell's `wait4` that reaped `child`, ended with `status`.
    fn reaped(child: i32, status: u32) -> Call {
        let wait = call(1, 2, 3, 61, &[child as u64], child.into());
        with(wait, Memory::Filled, 1, status.to_le_bytes().to_vec())
    }

    #[test]
    fn a_write_of_a_process_sigpipe_killed_failed_with_epipe() {
        let mut calls = vec![
            call(2, 0, 1, 1, &[1, 0, 8192], 8192),
            open(2, 1, &[1, 0, 8192]),
            open(3, 0, &[0, 0, 1]),
            reaped(2, SIGPIPE),
            reaped(3, 15),
        ];
        writes_sigpipe_ended(&mut calls, &|tid| tid, &[]);
        assert_eq!(
            calls[1].exit.map(|e| (e.tsc, e.result)),
            Some((None, EPIPE))
        );
        assert_eq!(calls[2].exit, None, "killed by SIGTERM in a read");
    }

    #[test]
    fn a_process_weft_saw_sigpipe_kill_needs_no_wait4() {
        let mut calls = vec![open(2, 1, &[1, 0, 8192])];
        writes_sigpipe_ended(&mut calls, &|tid| tid, &[]);
        assert_eq!(calls[0].exit, None);
        writes_sigpipe_ended(&mut calls, &|tid| tid, &[2]);
        assert_eq!(calls[0].exit.map(|e| e.result), Some(EPIPE));
    }

    #[test]
    fn a_sigpipe_a_process_sent_says_nothing_of_the_write() {
        let mut calls = vec![
            open(2, 1, &[1, 0, 8192]),
            call(1, 0, 1, 62, &[2, u64::from(SIGPIPE)], 0),
            reaped(2, SIGPIPE),
        ];
        writes_sigpipe_ended(&mut calls, &|tid| tid, &[]);
        assert_eq!(calls[0].exit, None);
    }
}
