//! The ring writer: record layout, overflow in each ring mode, strings,
//! timestamps and the ring function.

use super::*;

#[test]
fn records_near_the_end_of_the_ring_stay_whole() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    let exec = emitter(table, 3, 3, Strings::NONE);
    // 40-byte records do not divide the data, so some straddle its end;
    // consuming after each one lets the ring go round three times.
    let size = r::record_size(3, 0);
    assert_eq!(size, 40);
    let mut straddled = 0;
    for i in 0..3 * RING_DATA / size {
        exec.call([i as i64, 2 * i as i64, 3 * i as i64, 0, 0, 0]);
        let ring = mem.ring_of_this_thread();
        let pos = mem.read(ring + r::TAIL);
        assert_eq!(mem.read(ring + r::HEAD), pos + size);
        let offset = pos & (RING_DATA - 1);
        straddled += u64::from(offset + size > RING_DATA);
        let rec = ring + r::HEADER + offset;
        assert_eq!(mem.read(rec + r::R_EVENT), 3 | 3 << 32);
        let args: Vec<u64> = (0..3).map(|k| mem.read(rec + r::R_ARGS + 8 * k)).collect();
        assert_eq!(args, [i, 2 * i, 3 * i]);
        mem.write(ring + r::TAIL, pos + size);
    }
    assert!(straddled >= 2, "records crossed the end {straddled} times");
    assert_eq!(mem.read(mem.ring_of_this_thread() + r::DROPPED), 0);
}

#[test]
fn events_go_into_the_thread_ring_and_overflow_is_counted() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    let exec = emitter(table, 7, 2, Strings::NONE);
    for i in 0..5 {
        exec.call([i, 100 + i, 0, 0, 0, 0]);
    }
    let ring = mem.ring_of_this_thread();
    let size = r::record_size(2, 0);
    assert_eq!(size, 32);
    assert_eq!(mem.read(ring + r::HEAD), 5 * size);
    let mut last_tsc = 0;
    for i in 0..5u64 {
        let rec = ring + r::HEADER + i * size;
        assert!(mem.read(rec + r::R_TSC) >= last_tsc);
        last_tsc = mem.read(rec + r::R_TSC);
        assert_eq!(mem.read(rec + r::R_EVENT) & 0xffff_ffff, 7);
        assert_eq!(mem.read(rec + r::R_EVENT) >> 32, 2, "argument count");
        assert_eq!(
            (mem.read(rec + r::R_ARGS), mem.read(rec + r::R_ARGS + 8)),
            (i, 100 + i)
        );
    }
    // Nobody consumes: the ring fills, then events are dropped and counted.
    let capacity = RING_DATA / size;
    for i in 0..capacity + 10 {
        exec.call([i as i64, 0, 0, 0, 0, 0]);
    }
    // 5 + capacity + 10 events in all; the ring holds `capacity` records.
    assert_eq!(mem.read(ring + r::HEAD), RING_DATA);
    assert_eq!(mem.read(ring + r::DROPPED), 15);
}

#[test]
fn string_values_carry_their_text() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    let exec = emitter(
        table,
        9,
        3,
        Strings {
            mask: 0b101,
            cap: 16,
            sized: 0,
            gathered: 0,
        },
    );
    let short = b"main.py\0";
    let exact = b"0123456789abcdef\0";
    let long = b"0123456789abcdefXYZ\0";
    let cases: [(&[u8], u64, &[u8], u64); 3] = [
        (short, 7, b"main.py", 8),
        (exact, 16, b"0123456789abcdef", 16),
        (long, 16 | r::STR_TRUNCATED, b"0123456789abcdef", 16),
    ];
    let mut pos = 0;
    for (text, word, copied, padded) in cases {
        exec.call([text.as_ptr() as i64, 42, 0, 0, 0, 0]);
        let ring = mem.ring_of_this_thread();
        let rec = ring + r::HEADER + pos;
        // The second string is null: no text, flagged.
        let shape = (mem.read(rec + r::R_EVENT) >> 32) as u32;
        assert_eq!(r::shape(shape), (3, padded));
        assert_eq!(mem.read(rec + r::R_ARGS), word);
        assert_eq!(mem.read(rec + r::R_ARGS + 8), 42);
        assert_eq!(mem.read(rec + r::R_ARGS + 16), r::STR_NULL);
        let start = rec + r::R_ARGS + 24;
        // SAFETY: the record lies in `mem`, `copied.len()` bytes after its values.
        let got = unsafe { std::slice::from_raw_parts(start as *const u8, copied.len()) };
        assert_eq!(got, copied);
        pos += r::record_size(3, padded);
        assert_eq!(mem.read(ring + r::HEAD), pos);
    }
}

#[test]
fn sized_values_carry_as_many_bytes_as_the_next_value_says() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    // Value 0: bytes, as many as value 1 says; value 2 a plain number.
    let exec = emitter(
        table,
        9,
        3,
        Strings {
            mask: 0b001,
            cap: 16,
            sized: 0b001,
            gathered: 0,
        },
    );
    let data = b"\0binary\0data, longer than sixteen";
    // (count asked, the slot's word, bytes copied, bytes the text takes)
    let cases: [(i64, u64, usize, u64); 6] = [
        (3, 3, 3, 8),
        (11, 11, 11, 16),
        (16, 16, 16, 16),
        (20, 16 | r::STR_TRUNCATED, 16, 16),
        (0, 0, 0, 0),
        (-14, 0, 0, 0),
    ];
    let mut pos = 0;
    for (count, word, copied, padded) in cases {
        exec.call([data.as_ptr() as i64, count, 7, 0, 0, 0]);
        let ring = mem.ring_of_this_thread();
        let rec = ring + r::HEADER + pos;
        let shape = (mem.read(rec + r::R_EVENT) >> 32) as u32;
        assert_eq!(r::shape(shape), (3, padded), "{count}");
        assert_eq!(mem.read(rec + r::R_ARGS), word, "{count}");
        assert_eq!(mem.read(rec + r::R_ARGS + 8) as i64, count);
        assert_eq!(mem.read(rec + r::R_ARGS + 16), 7);
        let start = rec + r::R_ARGS + 24;
        // SAFETY: the record lies in `mem`, `copied` bytes after its values.
        let got = unsafe { std::slice::from_raw_parts(start as *const u8, copied) };
        assert_eq!(got, &data[..copied]);
        pos += r::record_size(3, padded);
        assert_eq!(mem.read(ring + r::HEAD), pos);
    }
    // A null pointer: no bytes, flagged.
    exec.call([0, 5, 7, 0, 0, 0]);
    let rec = mem.ring_of_this_thread() + r::HEADER + pos;
    assert_eq!(mem.read(rec + r::R_ARGS), r::STR_NULL);
}

/// Longer buffers go 32 bytes a step, then 8, then 1: every byte lands
/// in its place.
#[test]
fn sized_values_longer_than_a_round_of_the_copy_are_whole() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let exec = emitter(
        mem.table(),
        9,
        2,
        Strings {
            mask: 0b001,
            cap: 128,
            sized: 0b001,
            gathered: 0,
        },
    );
    let data: Vec<u8> = (1..=200u8).collect();
    let mut pos = 0;
    for count in [32usize, 64, 75, 97, 128] {
        exec.call([data.as_ptr() as i64, count as i64, 0, 0, 0, 0]);
        let rec = mem.ring_of_this_thread() + r::HEADER + pos;
        assert_eq!(mem.read(rec + r::R_ARGS), count as u64);
        let padded = count.div_ceil(8) * 8;
        // SAFETY: the record lies in `mem`, its text (padded) after its
        // two values.
        let got =
            unsafe { std::slice::from_raw_parts((rec + r::R_ARGS + 16) as *const u8, padded) };
        assert_eq!(&got[..count], &data[..count], "{count}");
        pos += r::record_size(2, padded as u64);
    }
}

#[test]
fn gathered_values_carry_the_bytes_of_each_iovec_in_turn() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    // Value 0: an iovec array, value 1 the bytes to take, value 2 its
    // entries.
    let exec = emitter(
        table,
        9,
        3,
        Strings {
            mask: 0b001,
            cap: 16,
            sized: 0b001,
            gathered: 0b001,
        },
    );
    let (first, second, third) = (
        b"abc".to_vec(),
        b"defghij".to_vec(),
        b"klmnopqrstu".to_vec(),
    );
    let iov: [u64; 6] = [
        first.as_ptr() as u64,
        3,
        second.as_ptr() as u64,
        7,
        third.as_ptr() as u64,
        11,
    ];
    let all = b"abcdefghijklmnopqrstu";
    // (count, entries, the slot's word, bytes copied, bytes the text takes)
    let cases: [(i64, i64, u64, usize, u64); 7] = [
        (2, 3, 2, 2, 8),
        (3, 3, 3, 3, 8),
        (9, 3, 9, 9, 16),
        (16, 3, 16, 16, 16),
        (21, 3, 16 | r::STR_TRUNCATED, 16, 16),
        // Fewer bytes in the entries than the count: those there are.
        (12, 2, 10, 10, 16),
        (-11, 3, 0, 0, 0),
    ];
    let mut pos = 0;
    for (count, entries, word, copied, padded) in cases {
        exec.call([iov.as_ptr() as i64, count, entries, 0, 0, 0]);
        let ring = mem.ring_of_this_thread();
        let rec = ring + r::HEADER + pos;
        let shape = (mem.read(rec + r::R_EVENT) >> 32) as u32;
        assert_eq!(r::shape(shape), (3, padded), "{count}");
        assert_eq!(mem.read(rec + r::R_ARGS), word, "{count}");
        assert_eq!(mem.read(rec + r::R_ARGS + 8) as i64, count);
        assert_eq!(mem.read(rec + r::R_ARGS + 16) as i64, entries);
        let start = rec + r::R_ARGS + 24;
        // SAFETY: the record lies in `mem`, `copied` bytes after its values.
        let got = unsafe { std::slice::from_raw_parts(start as *const u8, copied) };
        assert_eq!(got, &all[..copied], "{count}");
        pos += r::record_size(3, padded);
        assert_eq!(mem.read(ring + r::HEAD), pos);
    }
    exec.call([0, 5, 1, 0, 0, 0]);
    let rec = mem.ring_of_this_thread() + r::HEADER + pos;
    assert_eq!(mem.read(rec + r::R_ARGS), r::STR_NULL);
}

#[test]
fn flight_mode_overwrites_the_oldest_records() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    // Records of two sizes (a string of 1 or 20 bytes), so that the
    // writer skips records of a size other than its own.
    let exec = emitter(
        table,
        5,
        2,
        Strings {
            mask: 0b10,
            cap: 32,
            sized: 0,
            gathered: 0,
        },
    );
    mem.write(table.ring_overwrite, 1);
    let texts: [&[u8]; 2] = [b"x\0", b"twenty bytes of text\0"];
    let total = 3 * RING_DATA / 48;
    for i in 0..total {
        exec.call([
            i as i64,
            texts[(i % 2) as usize].as_ptr() as i64,
            0,
            0,
            0,
            0,
        ]);
    }
    let ring = mem.ring_of_this_thread();
    let (head, tail) = (mem.read(ring + r::HEAD), mem.read(ring + r::TAIL));
    assert!(head - tail <= RING_DATA && head - tail > RING_DATA - 64);
    // Walk the surviving records: consecutive, ending with the last.
    let mut pos = tail;
    let mut expected = None;
    let mut kept = 0;
    while pos < head {
        let rec = ring + r::HEADER + (pos & (RING_DATA - 1));
        let (nargs, text) = r::shape((mem.read(rec + r::R_EVENT) >> 32) as u32);
        let i = mem.read(rec + r::R_ARGS);
        if let Some(e) = expected {
            assert_eq!(i, e);
        }
        assert_eq!(mem.read(rec + r::R_ARGS + 8), [1, 20][(i % 2) as usize]);
        expected = Some(i + 1);
        kept += 1;
        pos += r::record_size(nargs, text);
    }
    assert_eq!(pos, head);
    assert_eq!(expected, Some(total));
    assert_eq!(
        kept + mem.read(ring + r::DROPPED),
        total,
        "every record kept or counted"
    );
}

#[test]
fn the_ring_function_returns_this_threads_ring() {
    let mem = Memory::new(16);
    let table = mem.table();
    let exec = Exec::new(4096);
    exec.load(&ring_function(exec.addr(), table).unwrap());
    // SAFETY: ring_function generates a System V function of no
    // arguments returning a pointer, preserving callee-saved registers.
    let f: extern "C" fn() -> u64 = unsafe { std::mem::transmute(exec.addr()) };
    let ring = f();
    assert_eq!(ring, mem.ring_of_this_thread());
    assert_eq!(f(), ring, "the same slot again");
    let other = std::thread::scope(|scope| scope.spawn(move || f()).join().unwrap());
    assert!(other != 0 && other != ring, "another thread, another ring");
    // Every slot taken by other threads (a new thread may reuse a
    // finished one's thread pointer, so replace the keys): null, counted.
    for slot in 0..table.slots {
        mem.write(table.addr + slot * 8, 0x1000 + slot);
    }
    let third = std::thread::scope(|scope| scope.spawn(move || f()).join().unwrap());
    assert_eq!((third, mem.read(table.no_slot)), (0, 1));
}

#[test]
fn monotonic_timestamps_come_from_clock_gettime() {
    use crate::region::ring as r;
    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
    }
    let now = || {
        let mut ts = Timespec { sec: 0, nsec: 0 };
        // SAFETY: a valid clock id and a pointer to a live timespec.
        unsafe { clock_gettime(CLOCK_MONOTONIC as i32, &mut ts) };
        (ts.sec * 1_000_000_000 + ts.nsec) as u64
    };
    let mem = Memory::new(16);
    let table = ThreadTable {
        clock_gettime: clock_gettime as *const () as u64,
        ..mem.table()
    };
    let exec = emitter(table, 2, 2, Strings::NONE);
    let before = now();
    exec.call([11, 22, 0, 0, 0, 0]);
    let after = now();
    let rec = mem.ring_of_this_thread() + r::HEADER;
    let stamp = mem.read(rec + r::R_TSC);
    assert!(
        before <= stamp && stamp <= after,
        "{before} <= {stamp} <= {after}"
    );
    // The values survive the call.
    assert_eq!(
        (mem.read(rec + r::R_ARGS), mem.read(rec + r::R_ARGS + 8)),
        (11, 22)
    );
}

fn now_tsc() -> u64 {
    // SAFETY: rdtsc exists on every x86-64 processor and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[test]
fn block_mode_waits_for_room_until_the_deadline() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    let exec = emitter(table, 1, 1, Strings::NONE);
    let size = r::record_size(1, 0);
    for i in 0..RING_DATA / size {
        exec.call([i as i64, 0, 0, 0, 0, 0]);
    }
    let ring = mem.ring_of_this_thread();
    let full = mem.read(ring + r::HEAD);
    assert!(full > RING_DATA - size, "the ring is full");
    let ticks_per_ms = {
        let (t0, c0) = (std::time::Instant::now(), now_tsc());
        std::thread::sleep(std::time::Duration::from_millis(20));
        (now_tsc() - c0) / t0.elapsed().as_millis().max(1) as u64
    };

    // A consumer makes room after 30 ms: the writer waits, then records.
    mem.write(table.ring_wait_until, now_tsc() + 5000 * ticks_per_ms);
    let waited = std::thread::scope(|scope| {
        scope.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(30));
            mem.write(ring + r::TAIL, size);
        });
        let started = std::time::Instant::now();
        exec.call([-1, 0, 0, 0, 0, 0]);
        started.elapsed()
    });
    assert!(waited >= std::time::Duration::from_millis(25), "{waited:?}");
    assert_eq!(mem.read(ring + r::DROPPED), 0);
    assert_eq!(mem.read(ring + r::HEAD), full + size);
    let rec = ring + r::HEADER + (full & (RING_DATA - 1));
    assert_eq!(mem.read(rec + r::R_ARGS), u64::MAX, "the waiting event");

    // Nobody consumes: the writer gives up at the deadline and counts a drop.
    mem.write(table.ring_wait_until, now_tsc() + 40 * ticks_per_ms);
    let started = std::time::Instant::now();
    exec.call([-2, 0, 0, 0, 0, 0]);
    let waited = started.elapsed();
    assert!(waited >= std::time::Duration::from_millis(30), "{waited:?}");
    assert_eq!(mem.read(ring + r::DROPPED), 1);
}

#[test]
fn a_template_copy_is_the_code_assembled_in_place() {
    use crate::region::ring as r;
    let mem = Memory::new(16);
    let table = mem.table();
    let program = |event: u32| {
        vec![
            Guarded {
                predicate: None,
                primitive: Primitive::Emit(event, vec![Expr::Arg(1), Expr::Arg(2)], Strings::NONE),
            },
            Guarded {
                predicate: None,
                primitive: Primitive::Emit(event + 1, vec![Expr::Arg(3)], Strings::NONE),
            },
        ]
    };
    assert_eq!(template::shape(&program(5)), template::shape(&program(40)));
    let made = template::MiniTemplate::new(table, &program(5)).unwrap();
    let made = made.expect("the code refers to nothing by a relative address outside it");
    let exec = Exec::new(4096);
    for event in [5, 40, 70_000] {
        let in_place = mini_trampoline(exec.addr(), table, &program(event)).unwrap();
        assert_eq!(made.code_of(&program(event)), in_place, "event {event}");
    }
    exec.load(&made.code_of(&program(40)));
    exec.call([11, 12, 13, 0, 0, 0]);
    let ring = mem.ring_of_this_thread();
    let first = ring + r::HEADER;
    let second = first + r::record_size(2, 0);
    assert_eq!(mem.read(first + r::R_EVENT), 40 | 2 << 32);
    assert_eq!(mem.read(second + r::R_EVENT), 41 | 1 << 32);
    assert_eq!(mem.read(second + r::R_ARGS), 13);
    // One `rdtsc` for both: the second record takes the first's time.
    assert_eq!(mem.read(first + r::R_TSC), mem.read(second + r::R_TSC));
}
