//! Tests of the feed built from a record (`super::build_feed`) and of
//! what the rerun answers.

use super::*;
use crate::{Buffer, Return};

fn call(tid: i32, nr: u64, args: [u64; 6], result: i64) -> Call {
    Call {
        tid,
        ring: tid,
        entry_tsc: 0,
        user_ns: None,
        loader: false,
        nr,
        vdso: false,
        args,
        exit: Some(Return {
            tsc: Some(1),
            result,
        }),
        buffers: Vec::new(),
    }
}

#[test]
fn the_feed_holds_each_rings_calls_and_the_answers() {
    let mut time = call(10, 228, [1, 0x7000, 0, 0, 0, 0], 0);
    time.buffers.push(Buffer {
        what: Memory::Filled,
        arg: 1,
        bytes: vec![7; 16],
        truncated: false,
    });
    let calls = vec![
        call(10, 39, [0; 6], 10),
        call(10, 56, [0x1234, 0, 0, 0, 0, 0], 11),
        time,
        call(11, 1, [1, 0x8000, 5, 0, 0, 0], 5),
    ];
    let resources = crate::fds::resolve(&calls, &HashMap::new());
    let feed = build_feed(&calls, &resources, &[]);
    assert_eq!(feed.rings, vec![10, 11]);
    assert_eq!(feed.calls, vec![vec![0, 1, 2], vec![3]]);
    assert_eq!(feed.answers.get(&0), Some(&Answer::Id));
    assert_eq!(feed.answers.get(&2), Some(&Answer::Time));
    assert_eq!(feed.answers.get(&3), None, "a write is made");
    let b = &feed.bytes;
    let calls_at = word(b, word(b, f::THREADS) + f::THREAD_CALLS);
    let clone = calls_at + f::CALL_SIZE;
    assert_eq!(word(b, clone + f::CALL_FLAGS) & f::HAS_CHILD, f::HAS_CHILD);
    assert_eq!(word(b, clone + f::CALL_CHILD), 1, "the child's feed");
    let t = calls_at + 2 * f::CALL_SIZE;
    let flags = word(b, t + f::CALL_FLAGS);
    assert_eq!(flags & f::ANSWER, f::ANSWER);
    assert_eq!(flags >> f::FILL_SHIFT & 0xff, 2, "1 + the argument filled");
    let data = word(b, t + f::CALL_DATA) as usize;
    assert_eq!(&b[data..data + 16], &[7; 16]);
    let mut bytes = feed.bytes.clone();
    name_first_process(&mut bytes, 4242);
    assert_eq!(word(&bytes, f::MAP_USED), 1);
    assert_eq!(progress(&bytes).len(), 2);
    assert_eq!(divergence(&bytes), None);
}

#[test]
fn a_call_interrupted_and_made_again_is_left_out() {
    let wait = |result| call(10, 61, [u64::MAX, 0x7000, 0, 0, 0, 0], result);
    let calls = vec![wait(EINTR), wait(11), wait(EINTR)];
    let resources = crate::fds::resolve(&calls, &HashMap::new());
    let feed = build_feed(&calls, &resources, &[]);
    assert_eq!(
        feed.calls,
        vec![vec![1, 2]],
        "the last one was not made again"
    );
    assert_eq!(feed.interrupted, 1);
}

/// A read of standard input (inherited: outside the workload) with
/// no return, that its thread followed with other calls, was left: the
/// rerun waits for a signal there instead (`LEFT`). Not a `write` (its
/// own `SIGPIPE` may have been what took the thread out), an exit, nor
/// the thread's last call (where its record ended).
#[test]
fn a_call_the_thread_left_waits_for_a_signal_in_the_rerun() {
    let left = |nr| Call {
        exit: None,
        ..call(10, nr, [0, 0x7000, 1, 0, 0, 0], 0)
    };
    let calls = vec![
        left(0),
        call(10, 1, [1, 0x7000, 6, 0, 0, 0], 6),
        left(1),
        left(0),
        left(60),
    ];
    let resources = crate::fds::resolve(&calls, &HashMap::new());
    let feed = build_feed(&calls, &resources, &[]);
    let flags: Vec<bool> = (0..calls.len() as u64)
        .map(|k| {
            let at = f::HEADER_SIZE + f::THREAD_SIZE + k * f::CALL_SIZE + f::CALL_FLAGS;
            let word =
                u64::from_le_bytes(feed.bytes[at as usize..at as usize + 8].try_into().unwrap());
            word & f::LEFT != 0
        })
        .collect();
    assert_eq!(flags, [true, false, false, true, false]);
}

/// Each thread feed names its extra call (`THREAD_EXTRA`): its own,
/// after every recorded call and before the id map, with no flags.
#[test]
fn each_thread_feed_has_an_extra_call_of_its_own() {
    let calls = vec![
        call(10, 39, [0; 6], 10),
        call(11, 39, [0; 6], 10),
        call(10, 39, [0; 6], 10),
    ];
    let resources = crate::fds::resolve(&calls, &HashMap::new());
    let feed = build_feed(&calls, &resources, &[]);
    let word =
        |at: u64| u64::from_le_bytes(feed.bytes[at as usize..at as usize + 8].try_into().unwrap());
    let calls_end = word(f::THREADS) + f::THREAD_SIZE * 2 + f::CALL_SIZE * 3;
    let extras: Vec<u64> = (0..2)
        .map(|i| word(f::HEADER_SIZE + f::THREAD_SIZE * i + f::THREAD_EXTRA))
        .collect();
    assert_eq!(extras, [calls_end, calls_end + f::CALL_SIZE]);
    assert!(extras[1] + f::CALL_SIZE <= word(f::MAP));
    assert!(extras.iter().all(|&e| word(e + f::CALL_FLAGS) == 0));
}

#[test]
fn entry_and_return_of_one_instruction_share_a_site() {
    let entry = site_number("libc.so.6", "read+0x1a");
    assert_eq!(entry, site_number("libc.so.6", "read+0x1a"));
    assert_ne!(entry, site_number("libc.so.6", "write+0x1a"));
    assert_eq!(site_name(u64::from(entry)).unwrap(), "libc.so.6:read+0x1a");
}
