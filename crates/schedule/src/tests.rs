//! The recorder on this test process: a thread whose TCB cursor points
//! into a pool laid out here makes system calls and sleeps, and its
//! records say where its stream was, with the call numbers. It needs BPF
//! privileges: without them it skips loudly, and fails under `WEFT_CI`.

use super::*;
use weft_abi::schedule::{Event, Kind, SIZE};

/// A pool of 4 buffers of 4 KiB, in this process, with handover number
/// `seq` in buffer 1's descriptor.
struct FakePool {
    mem: Vec<u8>,
}

const STRIDE: u64 = 8192;
const DESCS: u64 = 512;
const FIRST: u64 = 4096;

impl FakePool {
    fn new(seq: u64) -> FakePool {
        let mut mem = vec![0u8; (FIRST + 4 * STRIDE) as usize];
        let d = (DESCS + 64 + 8) as usize;
        mem[d..d + 8].copy_from_slice(&seq.to_le_bytes());
        FakePool { mem }
    }

    fn at(&self) -> PoolAt {
        let base = self.mem.as_ptr() as u64;
        PoolAt {
            first_buffer: base + FIRST,
            stride: STRIDE,
            descriptors: base + DESCS,
            buffers: 4,
        }
    }
}

/// Sets the calling thread's witness cursor (its TCB's word at `fs:0x40`,
/// which glibc leaves unused) and returns the one it had.
fn set_cursor(value: u64) -> u64 {
    let old: u64;
    // SAFETY: fs:0x40 is glibc's tcbhead_t.unused_vgetcpu_cache[1], a word
    // of this thread's own TCB that nothing in this process reads; the
    // test puts the old value back before the thread ends.
    unsafe {
        std::arch::asm!("mov {old}, fs:[0x40]", "mov fs:[0x40], {new}",
            old = out(reg) old, new = in(reg) value);
    }
    old
}

fn events(bytes: &[u8]) -> Vec<Event> {
    bytes.chunks_exact(SIZE).filter_map(Event::parse).collect()
}

#[test]
fn records_say_where_each_thread_stream_was() {
    let mut recorder = match Recorder::load() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
                panic!("WEFT_CI is set, so a skip is a failure: {e}");
            }
            return;
        }
    };
    let pool = FakePool::new(777);
    let at = pool.at();
    recorder.trace(std::process::id() as i32, at).unwrap();
    let cursor = at.first_buffer + STRIDE + 123;
    let tid = std::thread::spawn(move || {
        let old = set_cursor(cursor);
        // SAFETY: getppid and gettid take no arguments.
        unsafe { libc::getppid() };
        std::thread::sleep(Duration::from_millis(20));
        set_cursor(old);
        // SAFETY: as above.
        unsafe { libc::gettid() as u32 }
    })
    .join()
    .unwrap();
    // Until each event asserted below is in (a switch-in of the thread's
    // start may come before the rest, from another CPU's buffer).
    let complete = |got: &[Event]| {
        let mine = || got.iter().filter(|e| e.tid == tid);
        let out = mine().find(|e| e.kind == Kind::SwitchOut && e.seq == 777);
        mine().any(|e| e.kind == Kind::SyscallEntry && e.nr == libc::SYS_getppid as u32)
            && mine().any(|e| e.kind == Kind::SyscallExit && e.nr == libc::SYS_getppid as u32)
            && out.is_some_and(|o| mine().any(|e| e.kind == Kind::SwitchIn && e.ns > o.ns))
    };
    let mut got = Vec::new();
    for _ in 0..40 {
        got.extend(events(&recorder.take(Duration::from_millis(50)).unwrap()));
        if complete(&got) {
            break;
        }
    }
    recorder.forget(std::process::id() as i32);
    let mine: Vec<&Event> = got.iter().filter(|e| e.tid == tid).collect();
    let getppid = mine
        .iter()
        .find(|e| e.kind == Kind::SyscallEntry && e.nr == libc::SYS_getppid as u32)
        .unwrap_or_else(|| panic!("getppid's entry among {mine:?}"));
    assert_eq!((getppid.seq, getppid.offset), (777, 123));
    assert_eq!(getppid.pid, std::process::id());
    assert!(
        mine.iter()
            .any(|e| e.kind == Kind::SyscallExit && e.nr == libc::SYS_getppid as u32),
        "getppid's exit"
    );
    let out = mine
        .iter()
        .find(|e| e.kind == Kind::SwitchOut && e.seq == 777)
        .unwrap_or_else(|| panic!("a switch-out in the sleep among {mine:?}"));
    assert_eq!(out.offset, 123);
    let back = mine
        .iter()
        .find(|e| e.kind == Kind::SwitchIn && e.ns > out.ns)
        .expect("a switch-in after it");
    assert!(
        back.ns - out.ns >= 15_000_000,
        "slept 20 ms: {back:?} {out:?}"
    );
}
