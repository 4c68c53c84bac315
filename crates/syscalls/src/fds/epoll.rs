//! `epoll`: which open file descriptions an `epoll_wait` found ready. An
//! event carries the data its descriptor was registered with
//! (`epoll_ctl`'s `struct epoll_event`, recorded as it was sent), not the
//! descriptor: the simulation keeps, per process and epoll descriptor,
//! the description each registered data stands for, and gives a wait
//! that returned events a read of each of their descriptions, as a
//! `poll` that found descriptors ready has (`crate::deps` then orders the
//! wait after the write that made one ready, and `crate::reexec` answers
//! it with the recorded events).

use super::{Access, Simulation};
use crate::{Call, Memory};

/// `epoll_ctl`'s operations.
const EPOLL_CTL_ADD: u64 = 1;
const EPOLL_CTL_DEL: u64 = 2;
const EPOLL_CTL_MOD: u64 = 3;
/// Bytes of a `struct epoll_event` on x86-64 (packed: events, then data).
const EVENT: usize = 12;

/// The data of an event (`struct epoll_event`'s last eight bytes).
fn data(event: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(event.get(4..EVENT)?.try_into().ok()?))
}

impl Simulation {
    /// A successful `epoll_ctl` of process `pid`.
    pub(super) fn epoll_ctl(&mut self, pid: i32, call: &Call) {
        let (epfd, op, fd) = (call.args[0] as i32, call.args[1], call.args[2] as i32);
        let Some(d) = self.lookup(pid, fd) else {
            return;
        };
        let registered = self.epolls.entry((pid, epfd)).or_default();
        match op {
            EPOLL_CTL_ADD | EPOLL_CTL_MOD => {
                let sent = call
                    .buffers
                    .iter()
                    .find(|b| b.what == Memory::Sent && b.arg == 3);
                if let Some(data) = sent.and_then(|b| data(&b.bytes)) {
                    registered.retain(|_, &mut r| r != d);
                    registered.insert(data, d);
                }
            }
            EPOLL_CTL_DEL => registered.retain(|_, &mut r| r != d),
            _ => {}
        }
    }

    /// Call `k`, an `epoll_wait`, `epoll_pwait` or `epoll_pwait2` of
    /// process `pid` that returned events: a read of each description
    /// they stand for.
    pub(super) fn epoll_ready(&mut self, k: usize, call: &Call, pid: i32) {
        let Some(events) = call.buffers.iter().find(|b| b.what == Memory::Filled) else {
            return;
        };
        let Some(registered) = self.epolls.get(&(pid, call.args[0] as i32)) else {
            return;
        };
        let ready: Vec<usize> = (events.bytes.chunks_exact(EVENT))
            .filter_map(|e| registered.get(&data(e)?).copied())
            .collect();
        for d in ready {
            let resource = self.descriptions[d].resource;
            self.op(k, resource, Access::Read, Some((d, false)));
        }
    }

    /// Process `child` forked from `pid` has its epoll descriptors (the
    /// same instances: what either registers later is not shared here).
    pub(super) fn fork_epolls(&mut self, pid: i32, child: i32) {
        let inherited: Vec<_> = (self.epolls.iter())
            .filter(|((p, _), _)| *p == pid)
            .map(|(&(_, fd), registered)| ((child, fd), registered.clone()))
            .collect();
        self.epolls.extend(inherited);
    }
}
