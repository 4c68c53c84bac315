//! Which reads of a pipe or a connection took bytes the record does not
//! hold. A write's data is recorded up to [`crate::DATA_MAX`] bytes, so a
//! replay writes zeros past them; a read that took some of those bytes
//! reads zeros in the replay where the record holds what it really read,
//! and the two cannot be compared. Counting the bytes in and out of each
//! pipe (each direction of a connection, as `crate::deps` does), a read
//! whose recorded bytes reach past a write's recorded part is one.

use crate::fds::{Kind, Op, Resources};
use crate::{Call, Memory};
use std::collections::{BTreeSet, HashMap, HashSet};

/// Calls that put bytes into a pipe or a socket, and that take them out.
const PUTS: [u64; 5] = [1, 20, 18, 44, 46];
const TAKES: [u64; 4] = [0, 19, 45, 47];

/// The reads of `calls` (indices) whose recorded bytes came, in part,
/// from bytes of a write the record does not hold.
pub fn reads_of_unrecorded_bytes(calls: &[Call], resources: &Resources) -> HashSet<usize> {
    let moved = |k: usize| {
        calls[k]
            .exit
            .filter(|e| e.tsc.is_some())
            .map_or(0, |e| e.result.max(0) as u64)
    };
    let held = |k: usize, what: Memory| {
        calls[k]
            .buffers
            .iter()
            .find(|b| b.what == what)
            .map_or(0, |b| b.bytes.len() as u64)
    };
    let mut by_resource: HashMap<usize, Vec<&Op>> = HashMap::new();
    for op in &resources.ops {
        if matches!(
            resources.resources[op.resource].kind,
            Kind::Pipe | Kind::Socket
        ) {
            by_resource.entry(op.resource).or_default().push(op);
        }
    }
    let mut out = HashSet::new();
    for (resource, ops) in by_resource {
        let socket = resources.resources[resource].kind == Kind::Socket;
        let ends: BTreeSet<Option<usize>> = match socket {
            true => ops.iter().map(|op| op.description).collect(),
            false => [None].into(),
        };
        for end in ends.into_iter().filter(|e| !socket || e.is_some()) {
            let from_other_end =
                |op: &Op| !socket || op.description.is_some() && op.description != end;
            // The stream's bytes not held: [from, to) past each write's
            // recorded part.
            let mut unknown: Vec<(u64, u64)> = Vec::new();
            let mut total = 0;
            for op in ops
                .iter()
                .filter(|op| PUTS.contains(&calls[op.call].nr) && from_other_end(op))
            {
                let n = moved(op.call);
                let known = held(op.call, Memory::Sent).min(n);
                if known < n {
                    unknown.push((total + known, total + n));
                }
                total += n;
            }
            let mut read = 0;
            for op in ops.iter().filter(|op| {
                TAKES.contains(&calls[op.call].nr) && (!socket || op.description == end)
            }) {
                let k = op.call;
                let n = moved(k);
                let compared = held(k, Memory::Filled).min(n);
                let (from, to) = (read, read + compared);
                if (unknown.iter()).any(|&(a, b)| a < to && from < b) {
                    out.insert(k);
                }
                read += n;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Buffer, Return};

    fn call(tid: i32, entry: u64, nr: u64, args: &[u64], result: i64) -> Call {
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
                tsc: Some(entry + 1),
                result,
            }),
            buffers: Vec::new(),
        }
    }

    fn with(mut c: Call, what: Memory, arg: usize, len: usize, truncated: bool) -> Call {
        c.buffers.push(Buffer {
            what,
            arg,
            bytes: vec![7; len],
            truncated,
        });
        c
    }

    /// A write of 10,000 bytes, 4,096 recorded, read in three pieces: the
    /// first within the recorded part, the others past it.
    #[test]
    fn a_read_past_a_writes_recorded_bytes_is_found() {
        let pair = [3i32.to_le_bytes(), 4i32.to_le_bytes()].concat();
        let mut pipe = call(10, 1, 293, &[0, 0], 0);
        pipe.buffers.push(Buffer {
            what: Memory::Filled,
            arg: 0,
            bytes: pair,
            truncated: false,
        });
        let calls = vec![
            pipe,
            call(10, 3, 57, &[], 11),
            with(
                call(10, 5, 1, &[4, 0, 10000], 10000),
                Memory::Sent,
                1,
                4096,
                true,
            ),
            with(
                call(11, 7, 0, &[3, 0, 4000], 4000),
                Memory::Filled,
                1,
                4000,
                false,
            ),
            with(
                call(11, 9, 0, &[3, 0, 4000], 4000),
                Memory::Filled,
                1,
                4000,
                false,
            ),
            with(
                call(11, 11, 0, &[3, 0, 4096], 2000),
                Memory::Filled,
                1,
                2000,
                false,
            ),
        ];
        let r = crate::fds::resolve(&calls, &HashMap::new());
        let found = reads_of_unrecorded_bytes(&calls, &r);
        assert_eq!(found, [4, 5].into());
    }
}
