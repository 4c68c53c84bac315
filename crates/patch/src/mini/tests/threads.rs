//! Thread slots (claim, exhaustion, retirement) and nesting timers.

use super::*;

#[test]
fn nested_timer_counts_outermost_interval_and_thread_counters() {
    let mem = Memory::new(16);
    let start = Exec::new(4096);
    let stop = Exec::new(4096);
    let inc = vec![
        Guarded {
            predicate: None,
            primitive: Primitive::StartTimer(3),
        },
        Guarded {
            predicate: None,
            primitive: Primitive::AddThreadCounter(2, Expr::Const(1)),
        },
    ];
    let dec = vec![
        Guarded {
            predicate: None,
            primitive: Primitive::AddThreadCounter(2, Expr::Const(-1)),
        },
        Guarded {
            predicate: None,
            primitive: Primitive::StopTimer(3),
        },
    ];
    start.load(&mini_trampoline(start.addr(), mem.table(), &inc).unwrap());
    stop.load(&mini_trampoline(stop.addr(), mem.table(), &dec).unwrap());
    start.call([0; 6]);
    start.call([0; 6]); // nested (recursion)
    let block = mem.block_of_this_thread();
    let timer = block + t::timer(3);
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 2);
    assert_eq!(mem.read(block + t::counter(2)), 2);
    stop.call([0; 6]);
    assert_eq!(
        mem.read(timer + t::TIMER_TOTAL),
        0,
        "inner stop does not read the clock"
    );
    std::thread::sleep(std::time::Duration::from_millis(5));
    stop.call([0; 6]);
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
    assert!(mem.read(timer + t::TIMER_TOTAL) > 0);
    assert_eq!(
        mem.read(timer + t::TIMER_SEQ) % 2,
        0,
        "sequence even when idle"
    );
    assert_eq!(mem.read(block + t::counter(2)), 0);
    stop.call([0; 6]); // unmatched stop: ignored
    assert_eq!(mem.read(timer + t::TIMER_COUNT), 0);
    // The slot records this thread's tid.
    assert!(mem.read(block + t::TID) > 0);
    // Another thread gets another slot.
    let (sa, sb) = (start.addr(), stop.addr());
    std::thread::spawn(move || {
        // SAFETY: as in Exec::call; the code stays mapped for the test's life.
        let f: extern "C" fn() = unsafe { std::mem::transmute(sa as *const u8) };
        f();
        // SAFETY: as above.
        let g: extern "C" fn() = unsafe { std::mem::transmute(sb as *const u8) };
        g();
    })
    .join()
    .unwrap();
    let table = mem.table();
    let claimed = (0..table.slots)
        .filter(|&s| mem.read(table.addr + s * 8) != 0)
        .count();
    assert_eq!(claimed, 2);
}

#[test]
fn a_thread_without_a_slot_is_counted() {
    let mem = Memory::new(16);
    let table = mem.table();
    // Every slot belongs to some other thread.
    for slot in 0..table.slots {
        mem.write(table.addr + slot * 8, 0x1000 + slot);
    }
    let exec = emitter(table, 1, 1, Strings::NONE);
    for i in 0..3 {
        exec.call([i, 0, 0, 0, 0, 0]);
    }
    assert_eq!(mem.read(table.no_slot), 3);
}

/// Offsets from the thread pointer where this thread's id lies (glibc
/// keeps it in `struct pthread`).
fn tid_offsets() -> Vec<u32> {
    extern "C" {
        fn gettid() -> i32;
    }
    let tp: u64;
    // SAFETY: reads fs:0, the thread pointer, which the x86-64 TLS ABI
    // makes point to itself.
    unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp) };
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { gettid() } as u32;
    (8..0x400u32)
        .step_by(4)
        .filter(|&off| {
            // SAFETY: glibc's struct pthread spans more than 0x400
            // bytes from the thread pointer, all mapped.
            unsafe { std::ptr::read_volatile((tp + u64::from(off)) as *const u32) == tid }
        })
        .collect()
}

/// The offset where two threads both find their own id (glibc's tid).
fn common_tid_offset() -> u32 {
    let mine = tid_offsets();
    let theirs = std::thread::spawn(tid_offsets).join().unwrap();
    *mine
        .iter()
        .find(|o| theirs.contains(o))
        .expect("glibc's tid field")
}

#[test]
fn a_slot_claimed_under_another_thread_id_is_retired() {
    let offset = common_tid_offset();
    let mem = Memory::new(16);
    let table = ThreadTable {
        tid_offset: offset,
        startup: None,
        ..mem.table()
    };
    let exec = emitter(table, 1, 1, Strings::NONE);
    exec.call([1, 0, 0, 0, 0, 0]);
    exec.call([2, 0, 0, 0, 0, 0]);
    let first = mem.block_of_this_thread();
    let ring = first + t::RING;
    assert_eq!(
        mem.read(ring + crate::region::ring::HEAD),
        48,
        "one slot, two events"
    );
    // As if another thread had claimed this slot with the same thread pointer.
    mem.write(first + t::TID, 999_999);
    exec.call([3, 0, 0, 0, 0, 0]);
    // The other thread's slot is passed over, never taken from it (a
    // parent keeps its slot when its forked child looks): two slots under
    // one thread pointer.
    let keys: Vec<u64> = (0..table.slots)
        .map(|s| mem.read(table.addr + s * 8))
        .collect();
    assert_eq!(keys.iter().filter(|&&k| k > RETIRED).count(), 2, "{keys:?}");
    assert_eq!(
        mem.read(first + t::TID),
        999_999,
        "the owner's slot is kept"
    );
    assert_eq!(
        mem.read(ring + crate::region::ring::HEAD),
        48,
        "the old ring kept"
    );
    let new = mem.block_of_this_thread();
    assert_ne!(new, first);
    assert_eq!(mem.read(new + t::RING + crate::region::ring::HEAD), 24);
}

/// `Expr::ThreadTimer` reads the calling thread's timer total (what the
/// system call recorder puts in each call's record as its user time).
#[test]
fn a_thread_timers_total_is_an_expression() {
    let mem = Memory::new(16);
    let copy = Exec::new(4096);
    let program = vec![Guarded {
        predicate: None,
        primitive: Primitive::AddThreadCounter(4, Expr::ThreadTimer(6)),
    }];
    copy.load(&mini_trampoline(copy.addr(), mem.table(), &program).unwrap());
    copy.call([0; 6]);
    let block = mem.block_of_this_thread();
    assert_eq!(mem.read(block + t::counter(4)), 0);
    mem.write(block + t::timer(6) + t::TIMER_TOTAL, 123_456_789);
    copy.call([0; 6]);
    assert_eq!(mem.read(block + t::counter(4)), 123_456_789);
}

/// Code placed at a program's first instruction runs before the program
/// has a thread pointer of its own (weft gives it a start-up thread
/// control block). The slot the thread claims there hands its timers and
/// counters over to the slot it claims under its own thread pointer, and
/// the thread-id offset, unknown when the code was made, is read when it
/// runs: no check while it is 0, the usual one once weft has written it.
#[test]
fn a_start_up_slot_hands_its_state_to_the_threads_own_slot() {
    use crate::mini::Startup;
    let mem = Memory::new(16);
    let tid_word = mem.base() + 4096 - 40;
    let slot_word = mem.base() + 4096 - 48;
    let tp: u64;
    // SAFETY: reads fs:0, the thread pointer, which the x86-64 TLS ABI
    // makes point to itself.
    unsafe { std::arch::asm!("mov {}, fs:0", out(reg) tp) };
    let table = |tcb| ThreadTable {
        startup: Some(Startup {
            tid_offset_word: tid_word,
            slot_word,
            tcb,
        }),
        ..mem.table()
    };
    let program = vec![Guarded {
        predicate: None,
        primitive: Primitive::AddThreadCounter(4, Expr::Const(5)),
    }];
    let code = |tcb| {
        let exec = Exec::new(4096);
        exec.load(&mini_trampoline(exec.addr(), table(tcb), &program).unwrap());
        exec
    };
    let keys = || {
        (0..16)
            .map(|s| mem.read(mem.table().addr + s * 8))
            .filter(|&k| k > RETIRED)
            .count()
    };
    // Under the start-up block (here the thread's own pointer stands for it).
    code(tp).call([0; 6]);
    let first = mem.block_keyed(tp);
    let first_slot = mem.read(first + t::SLOT);
    assert_eq!(
        mem.read(slot_word),
        first_slot + 1,
        "the start-up slot noted"
    );
    assert_eq!(mem.read(first + t::counter(4)), 5);
    mem.write(first + t::timer(6) + t::TIMER_TOTAL, 77);
    // The program sets up its thread pointer: the start-up block was
    // another address.
    let startup_tcb = 0x7eed_5000;
    mem.write(mem.table().addr + first_slot * 8, startup_tcb);
    let own = code(startup_tcb);
    own.call([0; 6]);
    let second = mem.block_keyed(tp);
    assert_ne!(second, first);
    assert_eq!(mem.read(second + t::counter(4)), 10, "the count went on");
    assert_eq!(mem.read(second + t::timer(6) + t::TIMER_TOTAL), 77);
    assert_eq!(mem.read(slot_word), 0, "handed over once");
    // With the offset unknown, the slot's id is not checked.
    let tid = mem.read(second + t::TID);
    mem.write(second + t::TID, 999_999);
    own.call([0; 6]);
    assert_eq!(keys(), 2);
    assert_eq!(mem.read(second + t::counter(4)), 15);
    // Once weft has written it, a slot under another id is passed over.
    mem.write(tid_word, u64::from(common_tid_offset()));
    own.call([0; 6]);
    assert_eq!(keys(), 3, "a slot of its own");
    let third = mem.block_keyed(tp);
    assert_eq!(mem.read(third + t::TID), tid);
    assert_eq!(mem.read(third + t::counter(4)), 5, "a new slot starts at 0");
}
