//! The dependencies between recorded calls, on made-up records.

use super::*;
use crate::{fds, Buffer, Memory};

use crate::test_calls::call;

fn with_path(mut c: Call, arg: usize, path: &str) -> Call {
    c.buffers.push(Buffer {
        what: Memory::Path,
        arg,
        bytes: path.as_bytes().to_vec(),
        truncated: false,
    });
    c
}

fn with_fds(mut c: Call, arg: usize, fds: [i32; 2]) -> Call {
    c.buffers.push(Buffer {
        what: Memory::Filled,
        arg,
        bytes: [fds[0].to_le_bytes(), fds[1].to_le_bytes()].concat(),
        truncated: false,
    });
    c
}

const AT_FDCWD: u64 = -100i64 as u64;

/// Parent 10 opens a file and forks 11; both read it through the
/// shared description, 12 (forked before the open) opens it again
/// and reads it, then 10 writes it.
fn shared_file() -> Vec<Call> {
    vec![
        call(10, 1, 2, 57, &[], 12), // fork -> 12
        with_path(call(10, 3, 4, 257, &[AT_FDCWD, 0, 2], 3), 1, "data/f"), // openat O_RDWR
        call(10, 5, 6, 57, &[], 11), // fork -> 11
        call(11, 7, 8, 0, &[3, 0, 10], 10), // read(3)
        call(10, 9, 10, 0, &[3, 0, 10], 10), // read(3)
        with_path(
            call(12, 11, 12, 257, &[AT_FDCWD, 0, 0], 3),
            1,
            "./data/../data/f",
        ),
        call(12, 13, 14, 0, &[3, 0, 10], 10), // read(3): its own description
        call(10, 15, 16, 1, &[3, 0, 10], 10), // write(3)
    ]
}

#[test]
fn descriptors_follow_fork_and_paths_resolve_as_text() {
    let calls = shared_file();
    let r = fds::resolve(&calls, &HashMap::new());
    assert_eq!(r.process, [10, 10, 10, 11, 10, 12, 12, 10]);
    let names: Vec<&str> = r.resources.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "stdin",
            "stdout",
            "stderr",
            "./data/f",
            "descriptors of 10",
            "descriptors of 12"
        ]
    );
    let reads: Vec<(usize, Option<usize>)> = r
        .ops
        .iter()
        .filter(|o| calls[o.call].nr == 0)
        .map(|o| (o.call, o.description))
        .collect();
    assert_eq!(reads.len(), 3);
    assert_eq!(reads[0].1, reads[1].1, "11 and 10 share the description");
    assert_ne!(reads[0].1, reads[2].1, "12 opened its own");
    assert!(r.unresolved.is_empty());
}

#[test]
fn fine_keeps_only_writes_and_a_shared_descriptions_offset() {
    let calls = shared_file();
    let r = fds::resolve(&calls, &HashMap::new());
    let pairs = |mode| -> Vec<(usize, usize)> {
        edges(&calls, &r, mode)
            .iter()
            .map(|e| (e.from, e.to))
            .collect()
    };
    // Coarse: 11's read after 10's open; 10's read after 11's read;
    // 12's open after 10's read and 11's; 10's write after 12's read.
    assert_eq!(
        pairs(Mode::Coarse),
        [(1, 3), (3, 4), (3, 5), (4, 5), (6, 7)]
    );
    // Fine: 11's read and 10's share an offset; 12 reads through its
    // own; the write orders everything before it.
    assert_eq!(pairs(Mode::Fine), [(3, 4), (6, 7)]);
}

#[test]
fn a_pipe_orders_its_transfers_and_the_close_its_reader_sees() {
    let calls = vec![
        with_fds(call(10, 1, 2, 293, &[0, 0], 0), 0, [3, 4]), // pipe2
        call(10, 3, 4, 57, &[], 11),                          // fork -> 11
        call(11, 5, 6, 3, &[4], 0),                           // close(4)
        call(11, 7, 10, 0, &[3, 0, 64], 5),                   // read(3), blocked first
        call(10, 8, 9, 1, &[4, 0, 5], 5),                     // write(4)
        call(10, 11, 12, 3, &[4], 0),                         // close(4)
        call(11, 13, 14, 0, &[3, 0, 64], 0),                  // read(3) = 0: EOF
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    assert_eq!(r.resources[3].name, "pipe:1");
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    // The blocked read overlapped the write, which returned first
    // with the bytes it read: it waits for it. The write came after
    // the child's close, the EOF after the parent's.
    assert_eq!(e, [(4, 3), (2, 4), (3, 5), (5, 6)]);
    assert_eq!(edges(&calls, &r, Mode::Coarse).len(), 4);
}

/// A stream's writes do not wait for the reads before them, only
/// reads for the writes that brought their bytes (a blocking read by
/// itself): a writer and a reader in turn do not run in lockstep. A
/// read that found nothing (`EAGAIN`) keeps its place before the
/// write after it.
#[test]
fn a_streams_writes_do_not_wait_for_its_reads() {
    let calls = vec![
        with_fds(call(10, 1, 2, 293, &[0, 0o4000], 0), 0, [3, 4]), // pipe2(O_NONBLOCK)
        call(10, 3, 4, 57, &[], 11),                               // fork -> 11
        call(11, 5, 6, 3, &[4], 0),                                // close(4)
        call(10, 7, 8, 1, &[4, 0, 5], 5),                          // write(4) 5
        call(11, 9, 10, 0, &[3, 0, 64], 5),                        // read(3) 5
        call(10, 11, 12, 1, &[4, 0, 5], 5),                        // write(4) 5
        call(11, 13, 14, 0, &[3, 0, 64], 5),                       // read(3) 5
        call(11, 15, 16, 0, &[3, 0, 64], -11),                     // read(3): EAGAIN
        call(10, 17, 18, 1, &[4, 0, 5], 5),                        // write(4) 5
        call(11, 19, 20, 0, &[3, 0, 64], 5),                       // read(3) 5
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let fine = |calls: &[Call]| -> Vec<(usize, usize, bool)> {
        let r = fds::resolve(calls, &HashMap::new());
        edges(calls, &r, Mode::Fine)
            .iter()
            .map(|e| (e.from, e.to, e.waits_by_itself))
            .filter(|&(from, _, _)| from >= 3)
            .collect()
    };
    // Non-blocking: each read waits for its write.
    assert_eq!(
        fine(&calls),
        [
            (3, 4, false),
            (5, 6, false),
            (5, 7, false),
            (7, 8, false),
            (8, 9, false)
        ]
    );
    let coarse = edges(&calls, &r, Mode::Coarse);
    assert!(
        coarse.iter().any(|e| (e.from, e.to) == (4, 5)),
        "coarse keeps the write after the read: {coarse:?}"
    );
    // Blocking: the reads wait for their bytes by themselves.
    let mut blocking = calls.clone();
    blocking[0].args[1] = 0;
    assert_eq!(
        fine(&blocking),
        [
            (3, 4, true),
            (5, 6, true),
            (5, 7, false),
            (7, 8, false),
            (8, 9, true)
        ]
    );
}

/// A reader that exits without closing (`head`): the writer's next
/// write fails with `EPIPE` after the reader's end, an order only the
/// result proves.
#[test]
fn a_write_that_found_no_reader_waits_for_the_readers_end() {
    let mut exit = call(11, 13, 0, 231, &[0], 0);
    exit.exit = None;
    let calls = vec![
        with_fds(call(10, 1, 2, 293, &[0, 0], 0), 0, [3, 4]), // pipe2
        call(10, 3, 4, 57, &[], 11),                          // fork -> 11
        call(11, 5, 6, 3, &[4], 0),                           // close(4)
        call(10, 7, 8, 3, &[3], 0),                           // close(3)
        call(10, 9, 10, 1, &[4, 0, 5], 5),                    // write(4)
        call(11, 11, 12, 0, &[3, 0, 5], 5),                   // read(3)
        exit,                                                 // exit_group
        call(10, 15, 16, 1, &[4, 0, 5], -32),                 // write(4) = -EPIPE
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    assert!(
        e.contains(&(6, 7)),
        "the EPIPE after the reader's end: {e:?}"
    );
    assert!(
        e.contains(&(4, 6)),
        "the end after the write that went in: {e:?}"
    );
    assert_eq!(
        e.iter().filter(|&&(from, _)| from == 6).count(),
        1,
        "the end comes before the EPIPE alone: {e:?}"
    );
}

/// A parent that `poll`s its child's pipe (Python's `subprocess` with
/// `capture_output`): a `poll` woken by the write it overlapped waits
/// for it, and one that found the end (`POLLHUP`) waits for the
/// child's exit.
#[test]
fn a_poll_waits_for_what_made_its_descriptor_ready() {
    let polled = |c: Call, revents: u16| {
        let mut c = c;
        c.buffers.push(Buffer {
            what: Memory::Filled,
            arg: 0,
            bytes: [
                3i32.to_le_bytes().as_slice(),
                &1u16.to_le_bytes(),
                &revents.to_le_bytes(),
            ]
            .concat(),
            truncated: false,
        });
        c
    };
    let mut exit = call(11, 15, 0, 231, &[0], 0);
    exit.exit = None;
    let calls = vec![
        with_fds(call(10, 1, 2, 293, &[0, 0], 0), 0, [3, 4]), // pipe2
        call(10, 3, 4, 57, &[], 11),                          // fork -> 11
        call(11, 5, 6, 3, &[3], 0),                           // close(3)
        call(10, 7, 8, 3, &[4], 0),                           // close(4)
        polled(call(10, 9, 14, 7, &[0, 1, u64::MAX], 1), 1),  // poll: POLLIN
        call(11, 10, 12, 1, &[4, 0, 5], 5),                   // write(4)
        exit,                                                 // exit_group
        polled(call(10, 16, 20, 7, &[0, 1, u64::MAX], 1), 0x10), // poll: POLLHUP
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    assert!(e.contains(&(5, 4)), "the poll woken by the write: {e:?}");
    assert!(
        e.contains(&(6, 7)),
        "the POLLHUP after the child's end: {e:?}"
    );
}

/// The write that wakes a poller often returns after the poll did
/// (a session-23 new-user trial's asyncio program): it still readied
/// the pipe, having begun before, and returned before the poller's
/// next call. One still going on at that call (a full pipe the
/// poller's read empties) is not waited for.
#[test]
fn a_poll_waits_for_the_write_that_woke_it() {
    let polled = |c: Call| {
        let mut c = c;
        c.buffers.push(Buffer {
            what: Memory::Filled,
            arg: 0,
            bytes: [3i32.to_le_bytes(), [1, 0, 1, 0]].concat(),
            truncated: false,
        });
        c
    };
    let calls = |write_returns: u64| {
        vec![
            with_fds(call(10, 1, 2, 293, &[0, 0], 0), 0, [3, 4]), // pipe2
            call(10, 3, 4, 57, &[], 11),                          // fork -> 11
            call(11, 5, 6, 3, &[3], 0),                           // close(3)
            call(10, 7, 8, 3, &[4], 0),                           // close(4)
            polled(call(10, 9, 14, 7, &[0, 1, u64::MAX], 1)),     // poll: POLLIN
            call(11, 12, write_returns, 1, &[4, 0, 5], 5),        // write(4)
            call(10, 16, 17, 0, &[3, 0, 5], 5),                   // read(3)
        ]
    };
    let from_write = |write_returns| {
        let calls = calls(write_returns);
        let r = fds::resolve(&calls, &HashMap::new());
        edges(&calls, &r, Mode::Fine)
            .iter()
            .any(|e| (e.from, e.to) == (5, 4))
    };
    assert!(
        from_write(15),
        "returned after the poll, before its next call"
    );
    assert!(!from_write(18), "returned after the poller's read");
}

/// `x=$(seq 3)`: the shell (10) reads the pipe, its reads cut short by
/// signals twice before the bytes come; the child (11) writes and
/// closes. The interrupted reads keep no order with anything (a
/// replay that made them waited for the bytes while the child's close
/// waited for them: it stalled); the read that took the bytes still
/// follows the write.
#[test]
fn interrupted_reads_keep_no_order() {
    let calls = vec![
        with_fds(call(10, 1, 2, 293, &[0, 0], 0), 0, [3, 4]), // pipe2
        call(10, 3, 4, 57, &[], 11),                          // fork -> 11
        call(10, 5, 6, 3, &[4], 0),                           // close(4)
        call(10, 7, 8, 0, &[3, 0, 128], EINTR),               // read, interrupted
        call(11, 9, 10, 3, &[3], 0),                          // close(3)
        call(10, 11, 12, 0, &[3, 0, 128], EINTR),             // read, interrupted
        call(11, 13, 14, 1, &[4, 0, 6], 6),                   // write(4)
        call(11, 15, 16, 3, &[4], 0),                         // close(4)
        call(10, 17, 18, 0, &[3, 0, 128], 6),                 // read: the bytes
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    assert!(
        !e.iter()
            .any(|&(a, b)| [3, 5].contains(&a) || [3, 5].contains(&b)),
        "an interrupted read in an edge: {e:?}"
    );
    assert!(e.contains(&(6, 8)), "the read after the write: {e:?}");
}

fn with_sent(mut c: Call, arg: usize, bytes: &[u8]) -> Call {
    c.buffers.push(Buffer {
        what: Memory::Sent,
        arg,
        bytes: bytes.to_vec(),
        truncated: false,
    });
    c
}

/// A server (10) bound to any address on port 8000 and a client (11)
/// connecting to the loopback there: the client's socket and the one
/// the server accepts are one connection; the `connect` comes after
/// the `listen` it needed.
#[test]
fn a_connection_joins_the_connected_and_the_accepted_socket() {
    let any = [2, 0, 0x1f, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let loopback = [2, 0, 0x1f, 0x40, 127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    let calls = vec![
        call(10, 1, 2, 41, &[2, 1, 0], 3),                      // socket
        with_sent(call(10, 3, 4, 49, &[3, 0, 16], 0), 1, &any), // bind
        call(10, 5, 6, 50, &[3, 128], 0),                       // listen
        call(10, 7, 20, 43, &[3, 0, 0], 4),                     // accept, blocked
        call(11, 8, 9, 41, &[2, 1, 0], 3),                      // socket
        with_sent(call(11, 10, 11, 42, &[3, 0, 16], 0), 1, &loopback), // connect
        with_sent(call(11, 12, 13, 1, &[3, 0, 2], 2), 1, b"hi"), // write
        call(10, 21, 22, 0, &[4, 0, 64], 2),                    // read
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let resource = |k: usize, nr: u64| {
        r.ops
            .iter()
            .find(|o| {
                o.call == k
                    && calls[o.call].nr == nr
                    && r.resources[o.resource].name.starts_with("socket:")
            })
            .map(|o| r.resources[o.resource].name.clone())
    };
    assert_eq!(resource(6, 1), resource(7, 0), "{:?}", r.resources);
    assert_eq!(resource(6, 1).as_deref(), Some("socket:2 (to port:8000)"));
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .map(|e| (e.from, e.to))
        .collect();
    assert!(e.contains(&(2, 5)), "connect after listen: {e:?}");
    assert!(e.contains(&(6, 7)), "the read after the write: {e:?}");
}

#[test]
fn close_on_exec_descriptors_are_gone_after_an_execve() {
    let o_cloexec = 0o2000000;
    let calls = vec![
        with_path(call(10, 1, 2, 257, &[AT_FDCWD, 0, o_cloexec], 3), 1, "/a"),
        with_path(call(10, 3, 4, 257, &[AT_FDCWD, 0, 0], 4), 1, "/b"),
        call(10, 5, 6, 33, &[4, 7], 7), // dup2(4, 7)
        with_path(call(10, 7, 8, 59, &[], 0), 0, "/bin/x"),
        call(10, 9, 10, 0, &[3, 0, 1], 1),
        call(10, 11, 12, 0, &[7, 0, 1], 1),
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let used: Vec<&str> = r
        .ops
        .iter()
        .filter(|o| o.call >= 4)
        .map(|o| r.resources[o.resource].name.as_str())
        .collect();
    assert_eq!(used, ["fd:3 of 10", "/b"]);
}

/// Three processes on one file, through a description they share and one
/// each: random reads, `pread64`s, writes and `lseek`s, some interrupted,
/// overlapping across processes. The edges `Mode::Fine` finds by looking
/// only where conflicting operations lie are those of walking every
/// earlier operation back and asking `conflict` of each.
#[test]
fn fine_edges_on_a_file_are_those_of_a_walk_through_every_operation() {
    let mut seed = 0x2545_f491_u64;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    let mut calls = vec![
        with_path(call(10, 1, 2, 257, &[AT_FDCWD, 0, 2], 3), 1, "data/f"), // shared, fd 3
        call(10, 3, 4, 57, &[], 11),
        call(10, 5, 6, 57, &[], 12),
    ];
    let mut free = [7u64; 3];
    for (k, tid) in [10, 11, 12].into_iter().enumerate() {
        let own = with_path(
            call(tid, free[k], free[k] + 1, 257, &[AT_FDCWD, 0, 2], 4),
            1,
            "data/f",
        );
        calls.push(own);
        free[k] += 2;
    }
    for _ in 0..600 {
        let k = next(3) as usize;
        let tid = [10, 11, 12][k];
        let entry = free[k] + next(40);
        let exit = entry + 1 + next(30);
        free[k] = exit + 1;
        let fd = 3 + next(2);
        let result = if next(10) == 0 { EINTR } else { 8 };
        let c = match next(5) {
            0 | 1 => call(tid, entry, exit, 0, &[fd, 0, 8], result), // read
            2 => call(tid, entry, exit, 17, &[fd, 0, 8, 0], result), // pread64
            3 => call(tid, entry, exit, 1, &[fd, 0, 8], result),     // write
            _ => call(tid, entry, exit, 8, &[fd, 0, 0], 0),          // lseek
        };
        calls.push(c);
    }
    let r = fds::resolve(&calls, &HashMap::new());
    let file = (r.resources.iter())
        .position(|x| x.name.ends_with("data/f"))
        .unwrap();
    let found: BTreeSet<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .filter(|e| e.resource == file)
        .map(|e| (e.from, e.to))
        .collect();
    // The walk through every earlier operation.
    let returned = |op: &Op| calls[op.call].exit.and_then(|e| e.tsc);
    let mut walked = BTreeSet::new();
    let mut threads: HashMap<i32, Vec<&Op>> = HashMap::new();
    let mut implied: HashMap<(i32, i32), usize> = HashMap::new();
    for op in r.ops.iter().filter(|o| o.resource == file) {
        let call = &calls[op.call];
        let mut tids: Vec<i32> = threads.keys().copied().collect();
        tids.sort();
        for tid in tids.into_iter().filter(|&t| t != call.tid) {
            let earlier = &threads[&tid];
            let Some(a) = earlier.iter().rev().find(|a| {
                returned(a).is_some_and(|t| t < call.entry_tsc) && conflict(&calls, false, a, op)
            }) else {
                continue;
            };
            let seen = implied.entry((call.tid, tid)).or_insert(usize::MAX);
            if *seen != usize::MAX && *seen >= a.call {
                continue;
            }
            *seen = a.call;
            walked.insert((a.call, op.call));
        }
        threads.entry(call.tid).or_default().push(op);
    }
    assert!(
        walked.len() > 100,
        "a workload with few edges: {}",
        walked.len()
    );
    assert_eq!(found, walked);
}

/// Two threads of a process open files while both calls are under way;
/// the one that got the lower number got it first, and the other waits
/// for it in a rerun (or gets that number). A close in one thread and an
/// open after it in the other keep their order too; a fork's child has a
/// table of its own.
#[test]
fn a_processs_threads_keep_the_order_they_took_descriptor_numbers_in() {
    const CLONE_THREAD: u64 = 0x10000;
    let calls = vec![
        call(10, 1, 2, 56, &[CLONE_THREAD], 20), // clone -> thread 20
        with_path(call(10, 5, 9, 257, &[AT_FDCWD, 0, 0], 3), 1, "a"), // openat -> 3
        with_path(call(20, 6, 8, 257, &[AT_FDCWD, 0, 0], 4), 1, "b"), // openat -> 4, overlapping
        call(10, 10, 11, 3, &[3], 0),            // close(3)
        with_path(call(20, 12, 13, 257, &[AT_FDCWD, 0, 0], 3), 1, "c"), // openat -> 3 again
        call(10, 14, 15, 57, &[], 30),           // fork -> 30
        with_path(call(30, 16, 17, 257, &[AT_FDCWD, 0, 0], 5), 1, "d"), // the child's own table
    ];
    let r = fds::resolve(&calls, &HashMap::new());
    let tables: Vec<&str> = (r.resources.iter())
        .filter(|x| x.kind == fds::Kind::Descriptors)
        .map(|x| x.name.as_str())
        .collect();
    assert_eq!(tables, ["descriptors of 10", "descriptors of 30"]);
    let e: Vec<(usize, usize)> = edges(&calls, &r, Mode::Fine)
        .iter()
        .filter(|e| r.resources[e.resource].kind == fds::Kind::Descriptors)
        .map(|e| (e.from, e.to))
        .collect();
    // The lower number first; the close after the other thread's open
    // (it returned before the close began); the open after the close.
    assert_eq!(e, [(1, 2), (2, 3), (3, 4)], "{e:?}");
}
