//! Dependencies between the calls of different threads (ULTra's Section
//! 4): which operation must wait for which other thread's operation on
//! the same resource for a rerun to see what the recorded run saw.
//!
//! Order on a resource: the kernel commits a call somewhere between its
//! `syscall` instruction and its return, and those two TSCs are all the
//! in-process record has. So an operation provably came before another
//! when it returned before the other began; two that overlapped ran
//! together in the recorded run, in an order the record cannot tell, and
//! get no edge (whatever order the kernel chooses in a rerun was possible
//! in the recorded one too: a `read` blocked on an empty pipe waits for
//! the `write` by itself).
//!
//! [`Mode::Coarse`] keeps every such order on a resource. [`Mode::Fine`]
//! keeps an order only between operations that conflict: one of them
//! writes the resource, or both go through one open file description and
//! one of them uses its offset; reads through different descriptions
//! reorder freely. On a pipe or a connection, transfers keep their order
//! within each direction (writes into it, reads out of it), a read
//! depends on the write that brought its last byte, and a write on no
//! read (a full pipe holds it by itself): a rerun's writer and reader do
//! not run in lockstep, each waiting for the other's last transfer. A
//! read that took nothing keeps its order with the writes around it.
//!
//! A read from a pipe (or one end of a connection) depends on the writes
//! it took its bytes from, whether it overlapped them or not (a blocking
//! one waits for them by itself: [`Edge::waits_by_itself`]): counting the bytes
//! in and out of the pipe (each direction of the connection), a
//! read that was waiting for data when the write that brought its last
//! byte began (it began first) waits for that write, if the write
//! returned before the read did. A write that began first may have been
//! held by a full pipe until this very read made room: waiting for it
//! could never end, so it gets no such edge. The rerun then finds the
//! bytes the read took in the record there.
//!
//! Edges are between threads: a thread's own operations keep their order
//! by running in it. An edge an earlier one of the same thread already
//! implies (the same predecessor thread, no newer operation) is left out.

use crate::fds::{Access, Op, Resources};
use crate::Call;
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Which operations keep their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every operation on a resource keeps its recorded order.
    Coarse,
    /// Only conflicting ones do (see the module's documentation).
    Fine,
}

/// `to` waits until `from` has returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Edge {
    /// The earlier call (an index in the calls).
    pub from: usize,
    /// The later call, of another thread.
    pub to: usize,
    /// The resource they share (an index in [`Resources::resources`]).
    pub resource: usize,
    /// The later call waits for the earlier one by itself: a blocking
    /// read of a pipe or a connection, which the kernel holds until the
    /// bytes the earlier write brought are there (a rerun asks for no
    /// more than it took). A rerun need not hold it.
    pub waits_by_itself: bool,
}

/// The dependencies of `calls` with their `resources`, in `mode`: the
/// edges, sorted by the later call.
pub fn edges(calls: &[Call], resources: &Resources, mode: Mode) -> Vec<Edge> {
    let mut by_resource: HashMap<usize, Vec<&Op>> = HashMap::new();
    for op in &resources.ops {
        by_resource.entry(op.resource).or_default().push(op);
    }
    let returned = |op: &Op| calls[op.call].exit.and_then(|e| e.tsc);
    // (later, earlier, resource) -> whether the later call waits for the
    // earlier one by itself.
    let mut out: BTreeMap<(usize, usize, usize), bool> = BTreeMap::new();
    let mut keep = |key: (usize, usize, usize), by_itself: bool| {
        let e = out.entry(key).or_insert(by_itself);
        *e &= by_itself;
    };
    for (&resource, ops) in &by_resource {
        let stream = matches!(
            resources.resources[resource].kind,
            crate::fds::Kind::Pipe | crate::fds::Kind::Socket
        );
        // Per thread, its operations on the resource so far. A process's
        // end (which closes its descriptors) waits for what came before
        // it; returning to no one, it comes before nothing here, only
        // before the writes that found no reader left (below).
        let mut threads: HashMap<i32, Earlier> = HashMap::new();
        // (later thread, earlier thread) -> the newest earlier operation
        // an edge already brought in.
        let mut implied: HashMap<(i32, i32), usize> = HashMap::new();
        let by_kind = mode == Mode::Fine && !stream;
        // On a process's table of descriptors, of two calls that took a
        // number while both were under way, the one that took the lower
        // number took it first (a rerun that let the other go first
        // would give each the other's number).
        let table = resources.resources[resource].kind == crate::fds::Kind::Descriptors;
        let took = |op: &Op| {
            (!matches!(calls[op.call].nr, 3 | 436))
                .then(|| calls[op.call].exit.map(|e| e.result))
                .flatten()
        };
        for &op in ops {
            let call = &calls[op.call];
            let before = |a: &Op| {
                returned(a).is_some_and(|t| t < call.entry_tsc)
                    || table
                        && returned(a).is_some()
                        && matches!((took(a), took(op)), (Some(x), Some(y)) if x < y)
            };
            for (&tid, earlier) in &threads {
                if tid == call.tid {
                    continue;
                }
                // The newest of the thread's operations that returned
                // before this one began and conflicts with it.
                let found = match by_kind {
                    true => earlier.newest_conflicting(calls, op, &before),
                    false => (earlier.ops.iter().rev())
                        .position(|a| {
                            before(a) && (mode == Mode::Coarse || conflict(calls, stream, a, op))
                        })
                        .map(|back| earlier.ops.len() - 1 - back),
                };
                let Some(at) = found else { continue };
                let a = earlier.ops[at];
                let seen = implied.entry((call.tid, tid)).or_insert(usize::MAX);
                if *seen != usize::MAX && *seen >= a.call {
                    continue;
                }
                *seen = a.call;
                keep((op.call, a.call, resource), false);
            }
            threads.entry(call.tid).or_default().push(calls, op);
        }
    }
    for (to, from, resource, by_itself) in transfers(calls, resources) {
        keep((to, from, resource), by_itself);
    }
    for (to, from, resource) in broken_pipes(calls, resources) {
        keep((to, from, resource), false);
    }
    for (to, from, resource) in ready_polls(calls, resources) {
        keep((to, from, resource), false);
    }
    out.into_iter()
        .map(|((to, from, resource), waits_by_itself)| Edge {
            from,
            to,
            resource,
            waits_by_itself,
        })
        .collect()
}

/// One thread's operations on a resource so far, and, for [`Mode::Fine`]
/// on a resource that is not a stream, where those that conflict with a
/// later one lie ([`conflict`]: a later write conflicts with any earlier
/// operation, a later read with earlier writes and with earlier users of
/// its description's offset if it uses it too; an interrupted one with
/// none). Looking there, a later operation finds its newest conflicting
/// one in a few steps: walking every operation back, six threads each
/// reading `/dev/zero` through descriptions of their own walked every
/// read of the others (none conflicts), and `deps` of a few hundred
/// thousand calls took minutes.
#[derive(Default)]
struct Earlier<'a> {
    ops: Vec<&'a Op>,
    /// Positions in `ops` of those not interrupted.
    plain: Vec<usize>,
    /// Of those that write the resource.
    writes: Vec<usize>,
    /// Of those that use their description's offset, by description.
    offsets: HashMap<usize, Vec<usize>>,
}

impl<'a> Earlier<'a> {
    fn push(&mut self, calls: &[Call], op: &'a Op) {
        let at = self.ops.len();
        self.ops.push(op);
        if interrupted(calls, op) {
            return;
        }
        self.plain.push(at);
        if op.access == Access::Write {
            self.writes.push(at);
        }
        if let (Some(d), true) = (op.description, op.offset) {
            self.offsets.entry(d).or_default().push(at);
        }
    }

    /// The position of the newest operation that `before` takes and that
    /// conflicts with `op` (`conflict` without streams).
    fn newest_conflicting(
        &self,
        calls: &[Call],
        op: &Op,
        before: &dyn Fn(&Op) -> bool,
    ) -> Option<usize> {
        if interrupted(calls, op) {
            return None;
        }
        let newest = |positions: &[usize]| {
            positions
                .iter()
                .rev()
                .copied()
                .find(|&at| before(self.ops[at]))
        };
        if op.access == Access::Write {
            return newest(&self.plain);
        }
        let same_offset = match (op.description, op.offset) {
            (Some(d), true) => self.offsets.get(&d).and_then(|p| newest(p)),
            _ => None,
        };
        newest(&self.writes).max(same_offset)
    }
}

/// Whether `op`'s call was cut short by a signal (`EINTR`).
fn interrupted(calls: &[Call], op: &Op) -> bool {
    calls[op.call]
        .exit
        .is_some_and(|e| e.tsc.is_some() && e.result == EINTR)
}

/// Calls that put bytes into a pipe or a socket (`write`, `writev`,
/// `pwrite64`, `sendto`, `sendmsg`) and that take them out (`read`,
/// `readv`, `recvfrom`, `recvmsg`).
pub(crate) const PUTS: [u64; 5] = [1, 20, 18, 44, 46];
pub(crate) const TAKES: [u64; 4] = [0, 19, 45, 47];

/// One stream of bytes: a pipe, or one direction of a connection (what
/// one end reads, the other ends wrote).
pub(crate) struct Direction<'a> {
    /// The pipe or socket (an index in [`Resources::resources`]).
    pub resource: usize,
    /// The transfers into it, in the calls' order.
    pub writes: Vec<&'a Op>,
    /// The transfers out of it, in the calls' order.
    pub reads: Vec<&'a Op>,
}

/// Every stream of `resources`' pipes and connections.
pub(crate) fn directions<'a>(calls: &[Call], resources: &'a Resources) -> Vec<Direction<'a>> {
    use crate::fds::Kind;
    let mut by_resource: HashMap<usize, Vec<&Op>> = HashMap::new();
    for op in &resources.ops {
        if matches!(
            resources.resources[op.resource].kind,
            Kind::Pipe | Kind::Socket
        ) {
            by_resource.entry(op.resource).or_default().push(op);
        }
    }
    let mut out = Vec::new();
    for (resource, ops) in by_resource {
        let socket = resources.resources[resource].kind == Kind::Socket;
        let ends: BTreeSet<Option<usize>> = match socket {
            true => ops.iter().map(|op| op.description).collect(),
            false => [None].into(),
        };
        for end in ends.into_iter().filter(|e| !socket || e.is_some()) {
            let from_other_end =
                |op: &Op| !socket || op.description.is_some() && op.description != end;
            out.push(Direction {
                resource,
                writes: (ops.iter().copied())
                    .filter(|op| PUTS.contains(&calls[op.call].nr) && from_other_end(op))
                    .collect(),
                reads: (ops.iter().copied())
                    .filter(|op| {
                        TAKES.contains(&calls[op.call].nr) && (!socket || op.description == end)
                    })
                    .collect(),
            });
        }
    }
    out
}

/// The bytes call `k` moved, as its return says (none without one).
pub(crate) fn moved(calls: &[Call], k: usize) -> u64 {
    calls[k]
        .exit
        .filter(|e| e.tsc.is_some())
        .map_or(0, |e| e.result.max(0) as u64)
}

/// Per pipe and per direction of a connection, each read's edge from the
/// write that brought its last byte (see the module's documentation):
/// (read, write, resource, whether the read waits for it by itself).
fn transfers(calls: &[Call], resources: &Resources) -> Vec<(usize, usize, usize, bool)> {
    let mut out = Vec::new();
    for d in directions(calls, resources) {
        // The writes, with the bytes sent once each is in.
        let mut written = Vec::new();
        let mut total = 0;
        for op in &d.writes {
            total += moved(calls, op.call);
            written.push((total, op.call));
        }
        let mut read = 0;
        for op in &d.reads {
            let k = op.call;
            let n = moved(calls, k);
            if n == 0 {
                continue;
            }
            read += n;
            let Some(&(_, w)) = written.get(written.partition_point(|&(t, _)| t < read)) else {
                continue;
            };
            let returned = |k: usize| calls[k].exit.and_then(|e| e.tsc);
            // The write returned before the read began; or the read
            // was waiting when the write began and it returned first.
            let before = returned(w).is_some_and(|t| t < calls[k].entry_tsc);
            let overlapped = calls[k].entry_tsc < calls[w].entry_tsc && returned(w) < returned(k);
            if calls[w].tid != calls[k].tid && (before || overlapped) {
                out.push((k, w, d.resource, !op.nonblocking));
            }
        }
    }
    out
}

/// `-EPIPE`: a write to a pipe or a socket no one reads any more.
const EPIPE: i64 = -32;

/// Each write that failed with `EPIPE`'s edge from the last close of
/// another end of its pipe or socket that began before it returned: a
/// `close`, or the end of the process that held it (a reader that exits
/// without closing, as `head` does in `seq 1 20000 | sort -rn | head -3`).
/// The result proves the order (no reader was left when the kernel
/// committed the write); a rerun whose writer came first would write on.
/// A write that never returned is taken the same way: its `SIGPIPE` ended
/// it (`sort` re-raises it from its handler and dies), or it was still
/// blocked when the record ended. The end of a process is done for a
/// waiter once its thread is gone.
fn broken_pipes(calls: &[Call], resources: &Resources) -> Vec<(usize, usize, usize)> {
    use crate::fds::Kind;
    let closes = |op: &Op| matches!(calls[op.call].nr, 3 | crate::fds::EXIT_GROUP);
    let mut out = Vec::new();
    for op in &resources.ops {
        let call = &calls[op.call];
        let broke = match call.exit {
            Some(e) if e.result == EPIPE => Some(e.tsc.unwrap_or(u64::MAX)),
            None => Some(u64::MAX),
            Some(_) => None,
        };
        let (true, Some(returned)) = (PUTS.contains(&call.nr), broke) else {
            continue;
        };
        if !matches!(
            resources.resources[op.resource].kind,
            Kind::Pipe | Kind::Socket
        ) {
            continue;
        }
        let last = resources
            .ops
            .iter()
            .filter(|c| c.resource == op.resource && closes(c))
            .filter(|c| c.description != op.description)
            .filter(|c| calls[c.call].tid != call.tid && calls[c.call].entry_tsc < returned)
            .max_by_key(|c| calls[c.call].entry_tsc);
        let Some(c) = last else {
            continue;
        };
        out.push((op.call, c.call, op.resource));
        // And that close or end came after every write through the same
        // end that went in before it: a process's end closes its
        // descriptors some time after its `exit_group` began, and writes
        // that filled the pipe in that time were taken.
        let filled = resources
            .ops
            .iter()
            .filter(|w| w.resource == op.resource && w.description == op.description)
            .filter(|w| PUTS.contains(&calls[w.call].nr) && calls[w.call].tid != calls[c.call].tid)
            .filter(|w| {
                calls[w.call]
                    .exit
                    .is_some_and(|e| e.result > 0 && e.tsc.is_some())
            })
            .filter(|w| calls[w.call].entry_tsc < call.entry_tsc)
            .max_by_key(|w| calls[w.call].entry_tsc);
        if let Some(w) = filled {
            out.push((c.call, w.call, op.resource));
        }
    }
    out
}

/// Each `poll` (or `epoll_wait`, `select`) that found a pipe or a socket
/// ready's edge from the last write or close through another end that
/// made it so: one that returned before the `poll` did, or one that began
/// before it returned and returned before the poller's next call (the
/// write that woke the poller returns after it, often: the TSCs alone
/// leave such a pair unordered, and a rerun answered before the write
/// reads nothing). Re-execution answers the `poll` with the recorded
/// readiness (`crate::reexec`), so the data or the end it reported must
/// be there first. A write still going on at the poller's next call
/// (held by a full pipe until the poller reads) is not waited for: that
/// wait would never end, and the read waits by itself.
fn ready_polls(calls: &[Call], resources: &Resources) -> Vec<(usize, usize, usize)> {
    use crate::fds::Kind;
    let readied = |op: &Op| {
        PUTS.contains(&calls[op.call].nr) || matches!(calls[op.call].nr, 3 | crate::fds::EXIT_GROUP)
    };
    let returned = |k: usize| calls[k].exit.and_then(|e| e.tsc);
    // A process's end, which returns to no one, closes its descriptors
    // when it begins, as far as the record can tell.
    let done = |k: usize| {
        returned(k).or((calls[k].nr == crate::fds::EXIT_GROUP).then_some(calls[k].entry_tsc))
    };
    // Each call's thread's next call's entry.
    let mut next_entry = vec![u64::MAX; calls.len()];
    let mut later: HashMap<i32, u64> = HashMap::new();
    for (k, c) in calls.iter().enumerate().rev() {
        if let Some(&t) = later.get(&c.tid) {
            next_entry[k] = t;
        }
        later.insert(c.tid, c.entry_tsc);
    }
    let mut out = Vec::new();
    for op in &resources.ops {
        let call = &calls[op.call];
        if !matches!(call.nr, 7 | 271 | 232 | 281 | 441 | 23 | 270)
            || !matches!(
                resources.resources[op.resource].kind,
                Kind::Pipe | Kind::Socket
            )
        {
            continue;
        }
        let Some(polled) = returned(op.call) else {
            continue;
        };
        let last = resources
            .ops
            .iter()
            .filter(|w| w.resource == op.resource && readied(w))
            .filter(|w| w.description != op.description && calls[w.call].tid != call.tid)
            .filter(|w| {
                done(w.call).is_some_and(|t| {
                    t < polled || calls[w.call].entry_tsc < polled && t < next_entry[op.call]
                })
            })
            .max_by_key(|w| done(w.call));
        if let Some(w) = last {
            out.push((op.call, w.call, op.resource));
        }
    }
    out
}

/// `-EINTR`: a call a signal cut short.
const EINTR: i64 = -4;

/// Whether two operations on one resource must keep their order. One a
/// signal interrupted (`EINTR`: a shell's read of `$(...)`'s pipe when a
/// child stops) did nothing to the resource, and when it happened is the
/// signal's doing: it keeps no order (a rerun does not make it).
fn conflict(calls: &[Call], stream: bool, a: &Op, b: &Op) -> bool {
    if interrupted(calls, a) || interrupted(calls, b) {
        return false;
    }
    if stream {
        if let Some(c) = stream_conflict(calls, a, b) {
            return c;
        }
    }
    a.access == Access::Write
        || b.access == Access::Write
        || a.description.is_some() && a.description == b.description && a.offset && b.offset
}

/// Whether two transfers on a pipe or a connection (`a` the earlier)
/// conflict, in [`Mode::Fine`]; none when one of them is not a transfer
/// (a `close`, a `shutdown`: they keep every order). Bytes in one
/// direction keep their order: writes into it among themselves, reads
/// out of it among themselves (on a connection, the direction is the end
/// written or read through). A read that took bytes depends on the write
/// that brought its last one ([`transfers`]) and on nothing else: a write
/// need not wait for the reads before it (a full pipe holds it by
/// itself), and writes and reads of the two directions of a connection
/// are apart. A read that took none (`EAGAIN`, the end) keeps its order
/// with the writes around it: a rerun must find nothing there too.
fn stream_conflict(calls: &[Call], a: &Op, b: &Op) -> Option<bool> {
    let put = |op: &Op| PUTS.contains(&calls[op.call].nr);
    let take = |op: &Op| TAKES.contains(&calls[op.call].nr);
    let took_none = |op: &Op| {
        calls[op.call]
            .exit
            .is_none_or(|e| e.tsc.is_none() || e.result <= 0)
    };
    if !(put(a) || take(a)) || !(put(b) || take(b)) {
        return None;
    }
    Some(match (put(a), put(b)) {
        (true, true) => a.description == b.description,
        (false, false) => a.description == b.description || took_none(a) || took_none(b),
        _ => took_none(a) || took_none(b),
    })
}

#[cfg(test)]
mod tests;
