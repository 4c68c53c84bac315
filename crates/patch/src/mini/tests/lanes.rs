//! Counters in lanes, run in this process with the rseq area glibc
//! registered for its threads.

use super::*;
use crate::lanes::{CpuSource, Lanes};

extern "C" {
    /// glibc (2.35+): from the thread pointer to the thread's rseq area.
    static __rseq_offset: isize;
    /// glibc: the size of the registered rseq area, 0 if not registered.
    static __rseq_size: u32;
    fn sched_getcpu() -> i32;
}

const STRIDE: u64 = 4096;

/// Lanes fed by this process's own rseq area.
fn rseq_lanes() -> Lanes {
    // SAFETY: plain reads of glibc's exported constants.
    let (offset, size) = unsafe { (__rseq_offset, __rseq_size) };
    assert!(size > 0, "glibc registers an rseq area for every thread");
    Lanes {
        source: CpuSource::Rseq {
            offset: offset as i32,
        },
        count: 16,
        stride: STRIDE,
    }
}

fn lane_word(lanes: &[u64], counter: usize, lane: u64) -> u64 {
    // SAFETY: inside `lanes`; volatile since generated code writes it.
    unsafe { std::ptr::read_volatile(&lanes[counter + (lane * STRIDE / 8) as usize]) }
}

#[test]
fn adds_go_to_the_running_cpus_lane_and_reads_sum_the_lanes() {
    let mem = Memory::new(16);
    let mut lane_mem = vec![0u64; (16 * STRIDE / 8) as usize];
    // Junk in the other lanes of the counter a set must clear.
    for lane in 1..16 {
        lane_mem[2 + (lane * STRIDE / 8) as usize] = 7;
    }
    let base = lane_mem.as_ptr() as u64;
    let (added, copied) = (base + 8, base + 16);
    let table = ThreadTable {
        vclock: None,
        lanes: rseq_lanes(),
        ..mem.table()
    };
    let exec = Exec::new(4096);
    let program = [
        Guarded {
            predicate: None,
            primitive: Primitive::AddCounter(added, Expr::Arg(1)),
        },
        Guarded {
            predicate: None,
            primitive: Primitive::SetCounter(copied, Expr::Counter(added)),
        },
    ];
    exec.load(&mini_trampoline(exec.addr(), table, &program).unwrap());
    let mut cpus = std::collections::BTreeSet::new();
    for i in 1..=1000 {
        // SAFETY: plain libc call.
        let cpu = unsafe { sched_getcpu() };
        exec.call([i, 0, 0, 0, 0, 0]);
        cpus.insert(cpu as u64 & 15);
    }
    let want: u64 = (1..=1000).sum();
    let sum: u64 = (0..16).map(|l| lane_word(&lane_mem, 1, l)).sum();
    assert_eq!(sum, want);
    // The lanes used are those of CPUs this thread ran on: none beyond
    // the machine's CPUs.
    assert!(cpus.iter().any(|&l| lane_word(&lane_mem, 1, l) != 0));
    let cores = std::thread::available_parallelism().unwrap().get() as u64;
    for lane in cores.min(16)..16 {
        assert_eq!(lane_word(&lane_mem, 1, lane), 0, "lane {lane}");
    }
    // The set wrote the sum (read in code across the lanes) to the first
    // lane of the other counter and cleared the rest.
    assert_eq!(lane_word(&lane_mem, 2, 0), want);
    for lane in 1..16 {
        assert_eq!(lane_word(&lane_mem, 2, lane), 0, "lane {lane}");
    }
    drop(lane_mem);
}

#[test]
fn threads_on_two_cpus_count_exactly_in_their_own_lanes() {
    let mem = Memory::new(16);
    let lane_mem = vec![0u64; (16 * STRIDE / 8) as usize];
    let counter = lane_mem.as_ptr() as u64;
    let table = ThreadTable {
        vclock: None,
        lanes: rseq_lanes(),
        ..mem.table()
    };
    let exec = Exec::new(4096);
    let program = [Guarded {
        predicate: None,
        primitive: Primitive::AddCounter(counter, Expr::Const(1)),
    }];
    exec.load(&mini_trampoline(exec.addr(), table, &program).unwrap());
    let at = exec.addr();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            std::thread::spawn(move || {
                // SAFETY: a mini-trampoline behaves as a C function (see
                // `Exec::call`); `exec` outlives the threads (joined below).
                let f: extern "C" fn(i64, i64, i64, i64, i64, i64) =
                    unsafe { std::mem::transmute(at as *const u8) };
                for _ in 0..100_000 {
                    f(0, 0, 0, 0, 0, 0);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let sum: u64 = (0..16).map(|l| lane_word(&lane_mem, 0, l)).sum();
    assert_eq!(sum, 400_000);
    drop(lane_mem);
}
