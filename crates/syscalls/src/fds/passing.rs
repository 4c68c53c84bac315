//! Descriptors passed over a Unix socket (`SCM_RIGHTS`): a `sendmsg`'s
//! control messages name descriptors of the sender, a `recvmsg`'s the new
//! descriptors of the receiver, which refer to the same open file
//! descriptions. The simulation queues the sent descriptions on the
//! socket, per end they went through, and installs them under the
//! received numbers, first in, first out.

use super::Simulation;
use crate::{Call, Memory};

/// Descriptions passed in one message: the end they went through, and
/// each passed descriptor's description (none for one the simulation
/// did not know).
pub(super) type Passed = (usize, Vec<Option<usize>>);

/// `SOL_SOCKET` and `SCM_RIGHTS`.
const SOL_SOCKET: u32 = 1;
const SCM_RIGHTS: u32 = 1;
/// `recvmsg`'s flag that makes the received descriptors close-on-exec.
const MSG_CMSG_CLOEXEC: u64 = 0x4000_0000;

/// The descriptors of the `SCM_RIGHTS` messages among control messages
/// (`struct cmsghdr`s, each 8-byte aligned), in order.
pub(super) fn rights(control: &[u8]) -> Vec<i32> {
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = control.get(at..at + n)?;
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(b);
        Some(u64::from_le_bytes(v))
    };
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(level), Some(kind)) =
        (word(at, 8), word(at + 8, 4), word(at + 12, 4))
    {
        let len = len as usize;
        if len < 16 {
            break;
        }
        if (level as u32, kind as u32) == (SOL_SOCKET, SCM_RIGHTS) {
            let end = (at + len).min(control.len());
            out.extend(
                control[(at + 16).min(end)..end]
                    .chunks_exact(4)
                    .map(|f| i32::from_le_bytes([f[0], f[1], f[2], f[3]])),
            );
        }
        at += len.div_ceil(8) * 8;
    }
    out
}

/// The control messages a message call recorded.
fn control(call: &Call) -> Vec<i32> {
    call.buffers
        .iter()
        .find(|b| b.what == Memory::Control)
        .map_or_else(Vec::new, |b| rights(&b.bytes))
}

impl Simulation {
    /// A `sendmsg` of process `pid` that returned: the descriptions of the
    /// descriptors it passed, queued on its socket's end.
    pub(super) fn sent_rights(&mut self, call: &Call, pid: i32) {
        let fds = control(call);
        if fds.is_empty() {
            return;
        }
        let Some(end) = self.lookup(pid, call.args[0] as i32) else {
            return;
        };
        let passed: Vec<Option<usize>> = fds.iter().map(|&fd| self.lookup(pid, fd)).collect();
        let resource = self.descriptions[end].resource;
        self.passing
            .entry(resource)
            .or_default()
            .push_back((end, passed));
    }

    /// A `recvmsg` of process `pid` that returned: the descriptors it got
    /// refer to the descriptions sent through another end of its socket,
    /// the oldest message first.
    pub(super) fn received_rights(&mut self, call: &Call, pid: i32) {
        let fds = control(call);
        if fds.is_empty() {
            return;
        }
        let Some(end) = self.lookup(pid, call.args[0] as i32) else {
            return;
        };
        let resource = self.descriptions[end].resource;
        let Some(queue) = self.passing.get_mut(&resource) else {
            return;
        };
        let Some(at) = queue.iter().position(|(from, _)| *from != end) else {
            return;
        };
        let Some((_, passed)) = queue.remove(at) else {
            return;
        };
        let cloexec = call.args[2] & MSG_CMSG_CLOEXEC != 0;
        for (fd, d) in fds.into_iter().zip(passed) {
            if let Some(d) = d {
                self.install(pid, fd, d, cloexec);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    use crate::test_calls::with;

    /// A call of `tid` from `entry`, returning a tick later.
    fn call(tid: i32, entry: u64, nr: u64, args: &[u64], result: i64) -> Call {
        crate::test_calls::call(tid, entry, entry + 1, nr, args, result)
    }

    /// A control message passing descriptor `fd`.
    fn passing(fd: i32) -> Vec<u8> {
        [
            &20u64.to_le_bytes()[..],
            &1u32.to_le_bytes(),
            &1u32.to_le_bytes(),
            &fd.to_le_bytes(),
        ]
        .concat()
    }

    /// Parent 10 passes its pipe's write end over a socket pair to child
    /// 11, which writes into it under the number it received: the pipe
    /// the parent reads.
    #[test]
    fn a_passed_descriptor_is_the_senders_description() {
        let pair = |a: i32, b: i32| [a.to_le_bytes(), b.to_le_bytes()].concat();
        let calls = vec![
            with(call(10, 1, 293, &[0, 0], 0), Memory::Filled, 0, pair(3, 4)), // pipe2
            with(
                call(10, 3, 53, &[1, 1, 0, 0], 0),
                Memory::Filled,
                3,
                pair(5, 6),
            ), // socketpair
            call(10, 5, 57, &[], 11),                                          // fork
            with(
                call(10, 7, 46, &[5, 0, 0], 1),
                Memory::Control,
                1,
                passing(4),
            ), // sendmsg
            with(
                call(11, 9, 47, &[6, 0, 0], 1),
                Memory::Control,
                1,
                passing(7),
            ), // recvmsg
            call(11, 11, 1, &[7, 0, 5], 5),                                    // write(7)
            call(10, 13, 0, &[3, 0, 64], 5),                                   // read(3)
        ];
        let r = crate::fds::resolve(&calls, &HashMap::new());
        let resource_of = |k: usize| {
            r.ops
                .iter()
                .find(|op| op.call == k)
                .map(|op| r.resources[op.resource].name.clone())
        };
        assert_eq!(resource_of(5), resource_of(6));
        assert!(
            resource_of(5).is_some_and(|n| n.starts_with("pipe:")),
            "{r:?}"
        );
        assert!(!r.unresolved.contains(&5));
    }

    #[test]
    fn the_descriptors_of_rights_messages_are_read_in_order() {
        let mut control = Vec::new();
        // Credentials (SOL_SOCKET, SCM_CREDENTIALS): left out.
        control.extend_from_slice(&28u64.to_le_bytes());
        control.extend_from_slice(&1u32.to_le_bytes());
        control.extend_from_slice(&2u32.to_le_bytes());
        control.extend_from_slice(&[0; 12]);
        control.extend_from_slice(&[0; 4]);
        // Rights: descriptors 5 and 7.
        control.extend_from_slice(&24u64.to_le_bytes());
        control.extend_from_slice(&1u32.to_le_bytes());
        control.extend_from_slice(&1u32.to_le_bytes());
        control.extend_from_slice(&5i32.to_le_bytes());
        control.extend_from_slice(&7i32.to_le_bytes());
        assert_eq!(rights(&control), [5, 7]);
        assert_eq!(rights(&control[..20]), Vec::<i32>::new());
    }
}
