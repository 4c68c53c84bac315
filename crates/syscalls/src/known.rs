//! Which reads of a pipe or a connection took bytes the record does not
//! hold. A write's data is recorded up to [`crate::DATA_MAX`] bytes, so a
//! replay writes zeros past them; a read that took some of those bytes
//! reads zeros in the replay where the record holds what it really read,
//! and the two cannot be compared. Counting the bytes in and out of each
//! pipe (each direction of a connection, as `crate::deps` does), a read
//! whose recorded bytes reach past a write's recorded part is one.

use crate::deps::{directions, moved};
use crate::fds::Resources;
use crate::{Call, Memory};
use std::collections::HashSet;

/// The reads of `calls` (indices) whose recorded bytes came, in part,
/// from bytes of a write the record does not hold.
pub fn reads_of_unrecorded_bytes(calls: &[Call], resources: &Resources) -> HashSet<usize> {
    let held = |k: usize, what: Memory| {
        calls[k]
            .buffers
            .iter()
            .find(|b| b.what == what)
            .map_or(0, |b| b.bytes.len() as u64)
    };
    let mut out = HashSet::new();
    for d in directions(calls, resources) {
        // The stream's bytes not held: [from, to) past each write's
        // recorded part.
        let mut unknown: Vec<(u64, u64)> = Vec::new();
        let mut total = 0;
        for op in &d.writes {
            let n = moved(calls, op.call);
            let known = held(op.call, Memory::Sent).min(n);
            if known < n {
                unknown.push((total + known, total + n));
            }
            total += n;
        }
        let mut read = 0;
        for op in &d.reads {
            let k = op.call;
            let n = moved(calls, k);
            let compared = held(k, Memory::Filled).min(n);
            let (from, to) = (read, read + compared);
            if (unknown.iter()).any(|&(a, b)| a < to && from < b) {
                out.insert(k);
            }
            read += n;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Buffer;
    use std::collections::HashMap;

    fn with(c: Call, what: Memory, arg: usize, len: usize, truncated: bool) -> Call {
        let mut c = crate::test_calls::with(c, what, arg, vec![7; len]);
        if let Some(b) = c.buffers.last_mut() {
            b.truncated = truncated;
        }
        c
    }

    /// A call of `tid` from `entry`, returning a tick later.
    fn call(tid: i32, entry: u64, nr: u64, args: &[u64], result: i64) -> Call {
        crate::test_calls::call(tid, entry, entry + 1, nr, args, result)
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
