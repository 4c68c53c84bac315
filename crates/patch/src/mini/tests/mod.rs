//! Tests that run generated code in this process: the harness (executable
//! memory, a heap block standing for counters and the thread table), then
//! one file per role of `mini`.

mod calls;
mod cpu_timers;
mod expr;
mod lanes;
mod open_calls;
mod returns;
mod ring;
mod threads;

use super::ring_writer::CLOCK_MONOTONIC;
use super::*;
use crate::region::threads as t;
use weft_plan::{BinOp, Strings};

/// Executable memory for running generated code in this process.
struct Exec {
    ptr: *mut u8,
    len: usize,
}

impl Exec {
    fn new(len: usize) -> Exec {
        // SAFETY: an anonymous private mapping; checked for failure.
        let ptr = unsafe { libc_mmap(len) };
        Exec { ptr, len }
    }
    fn load(&self, code: &[u8]) {
        assert!(code.len() <= self.len);
        // SAFETY: the mapping is writable and at least code.len() long.
        unsafe { std::ptr::copy_nonoverlapping(code.as_ptr(), self.ptr, code.len()) };
    }
    fn addr(&self) -> u64 {
        self.ptr as u64
    }
    /// Calls the code as `fn(a1..a6)`.
    fn call(&self, args: [i64; 6]) {
        // SAFETY: the code is a mini-trampoline: it preserves every
        // register, keeps the stack balanced and returns with `ret`, so
        // it behaves as a C function of six integer arguments.
        let f: extern "C" fn(i64, i64, i64, i64, i64, i64) =
            unsafe { std::mem::transmute(self.ptr) };
        f(args[0], args[1], args[2], args[3], args[4], args[5]);
    }
}

/// mmap(len, RWX) without the libc crate (patch does not depend on it).
unsafe fn libc_mmap(len: usize) -> *mut u8 {
    extern "C" {
        fn mmap(addr: *mut u8, len: usize, prot: i32, flags: i32, fd: i32, off: i64) -> *mut u8;
    }
    // PROT_READ|WRITE|EXEC = 7, MAP_PRIVATE|MAP_ANONYMOUS = 0x22
    // SAFETY: plain anonymous mapping request.
    let p = unsafe { mmap(std::ptr::null_mut(), len, 7, 0x22, -1, 0) };
    assert!(!p.is_null() && p as isize != -1, "mmap failed");
    p
}

/// A mini-trampoline that emits event `event` with arguments 1 to
/// `nargs`, loaded and ready to call.
fn emitter(table: ThreadTable, event: u32, nargs: u8, strings: Strings) -> Exec {
    let exec = Exec::new(4096);
    let emit = vec![Guarded {
        predicate: None,
        primitive: Primitive::Emit(event, (1..=nargs).map(Expr::Arg).collect(), strings),
    }];
    exec.load(&mini_trampoline(exec.addr(), table, &emit).unwrap());
    exec
}

/// The ring size the tests use.
const RING_DATA: u64 = crate::region::ring::DEFAULT_DATA;

/// Counters and a thread table in one heap block, with stable addresses.
struct Memory {
    words: Vec<u64>,
}

impl Memory {
    fn new(slots: u64) -> Memory {
        let bytes = slots * 8 + slots * t::block_size(RING_DATA) + 4096;
        Memory {
            words: vec![0; (bytes / 8) as usize],
        }
    }
    fn base(&self) -> u64 {
        self.words.as_ptr() as u64
    }
    fn counter(&self, i: usize) -> u64 {
        self.base() + (i as u64) * 8
    }
    fn table(&self) -> ThreadTable {
        ThreadTable {
            addr: self.base() + 4096,
            slots: 16,
            ring_wait_until: self.base() + 4096 - 8,
            ring_overwrite: self.base() + 4096 - 16,
            ring_data: RING_DATA,
            no_slot: self.base() + 4096 - 24,
            // Never set: no dispatch range.
            dispatch: self.base() + 4096 - 48,
            return_stacks: self.base() + 4096 - 32,
            clock_gettime: 0,
            tid_offset: 0,
            startup: None,
            vclock: None,
            lanes: crate::lanes::Lanes {
                source: crate::lanes::CpuSource::None,
                count: 1,
                stride: 8,
            },
        }
    }
    fn read(&self, addr: u64) -> u64 {
        // SAFETY: addr lies inside `words` (checked by the tests' layout).
        unsafe { std::ptr::read_volatile(addr as *const u64) }
    }
    fn write(&self, addr: u64, value: u64) {
        // SAFETY: addr lies inside `words`; the tests write only fields
        // that generated code reads (a ring's tail, the deadline).
        unsafe { std::ptr::write_volatile(addr as *mut u64, value) }
    }
    /// The block of the last slot claimed (this thread's: the tests claim
    /// under one thread pointer, a later claim passing over earlier ones).
    fn block_of_this_thread(&self) -> u64 {
        let table = self.table();
        (0..table.slots)
            .filter(|&s| self.read(table.addr + s * 8) > RETIRED)
            .max_by_key(|&s| {
                let block = table.addr + table.slots * 8 + s * t::block_size(RING_DATA);
                (self.read(block + t::TID) != 999_999, s)
            })
            .map(|s| table.addr + table.slots * 8 + s * t::block_size(RING_DATA))
            .expect("a claimed slot")
    }
    /// The block of the slot claimed under thread pointer `key` (of two,
    /// the one whose id a test did not overwrite with 999,999): unlike
    /// [`Memory::block_of_this_thread`], right wherever the probing for a
    /// free slot wrapped around the table.
    fn block_keyed(&self, key: u64) -> u64 {
        let table = self.table();
        (0..table.slots)
            .filter(|&s| self.read(table.addr + s * 8) == key)
            .map(|s| table.addr + table.slots * 8 + s * t::block_size(RING_DATA))
            .max_by_key(|&block| self.read(block + t::TID) != 999_999)
            .expect("a slot claimed under the key")
    }
    fn ring_of_this_thread(&self) -> u64 {
        self.block_of_this_thread() + t::RING
    }
}
