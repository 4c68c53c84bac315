//! The per-thread virtual CPU clock: how much CPU time a thread has used,
//! to the nanosecond, read by the thread itself without a system call.
//!
//! A BPF program at the `sched_switch` tracepoint (`src/bpf/vclock.bpf.c`)
//! adds to each thread's entry the time it just ran and notes each CPU's
//! last switch, in a memory-mapped BPF array laid out as
//! [`weft_abi::vclock`] says. A thread that claimed an entry reads its CPU
//! time as its entry's nanoseconds plus the TSC time since its CPU's last
//! switch, under the entry's sequence number. Code weft generates in a
//! target does this (`weft_patch::mini`); [`VirtualClock::read_own`] is
//! the same algorithm in Rust, for weft's own threads and for the tests.
//!
//! The clock serves `cpu_time` timers, and is the clock of the syscall
//! recorder (user time between calls, preemption taken out) and of the
//! bottleneck search. Loading it needs BPF privileges (CAP_BPF and
//! CAP_PERFMON, or root) and a kernel with BTF; without them
//! [`VirtualClock::load`] says why and callers fall back to sampling.
//!
//! All unsafe code of this crate is here: the mapping of the map and the
//! atomic accesses to it.

use libbpf_rs::MapCore;
use memmap2::{MmapOptions, MmapRaw};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use weft_abi::vclock::{self as layout, Conversion, View};

/// The BPF object compiled by `build.rs`.
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/vclock.bpf.o"));

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused the program or its map (no privilege, no BTF,
    /// BPF disabled): CPU time has to be sampled.
    #[error("the per-thread CPU clock needs BPF ({step}: {reason})")]
    Unavailable {
        /// What was being done.
        step: &'static str,
        /// The kernel's or libbpf's answer.
        reason: String,
    },
    /// Mapping the clock's map into weft failed.
    #[error("mapping the CPU clock: {0}")]
    Map(#[from] std::io::Error),
}

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn unavailable(step: &'static str) -> impl Fn(libbpf_rs::Error) -> Error {
    move |e| Error::Unavailable {
        step,
        reason: e.to_string(),
    }
}

/// The loaded, attached clock. Dropping it detaches the program; the map
/// lives on while a process still maps it.
pub struct VirtualClock {
    mem: Mem,
    map: OwnedFd,
    conversion: Conversion,
    _link: libbpf_rs::Link,
    _object: libbpf_rs::Object,
}

impl std::fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VirtualClock")
            .field("map", &self.map.as_raw_fd())
            .field("conversion", &self.conversion)
            .finish()
    }
}

impl VirtualClock {
    /// Loads the program, maps its map, calibrates the TSC against
    /// `CLOCK_MONOTONIC` (about 20 ms) and attaches the program.
    pub fn load() -> Result<VirtualClock> {
        // libbpf's own messages would reach the user before weft's one
        // line saying why the clock is not available.
        libbpf_rs::set_print(None);
        let open = libbpf_rs::ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(unavailable("opening the BPF object"))?;
        let object = open
            .load()
            .map_err(unavailable("loading the BPF program"))?;
        let map = object
            .maps()
            .find(|m| m.name() == "vclock")
            .ok_or_else(|| Error::Unavailable {
                step: "finding the clock's map",
                reason: "the BPF object has no map `vclock`".into(),
            })?
            .as_fd()
            .try_clone_to_owned()?;
        let mem = MmapOptions::new()
            .len(layout::MAP_SIZE as usize)
            .map_raw(map.as_raw_fd())?;
        let mem = Mem(mem);
        mem.store_u32(0, layout::MAGIC);
        mem.store_u32(4, layout::VERSION);
        // Every CPU's "last switch" starts now: a thread running since
        // before the program was attached counts from here.
        let now = monotonic_ns();
        for cpu in 0..layout::CPUS {
            mem.store_u64(cpu_offset(cpu) + layout::NS, now);
        }
        let link = object
            .progs_mut()
            .find(|p| p.name() == "on_switch")
            .ok_or_else(|| Error::Unavailable {
                step: "finding the program",
                reason: "the BPF object has no program `on_switch`".into(),
            })?
            .attach()
            .map_err(unavailable("attaching to sched_switch"))?;
        let clock = VirtualClock {
            mem,
            map,
            conversion: calibrate(),
            _link: link,
            _object: object,
        };
        Ok(clock)
    }

    /// The map, to be mapped (shared, [`weft_abi::vclock::MAP_SIZE`]
    /// bytes) into the processes whose threads read the clock.
    pub fn map_fd(&self) -> BorrowedFd<'_> {
        self.map.as_fd()
    }

    /// How TSC readings become `CLOCK_MONOTONIC` nanoseconds.
    pub fn conversion(&self) -> Conversion {
        self.conversion
    }

    /// The clock as a process that mapped it at `base` sees it.
    pub fn view(&self, base: u64) -> View {
        View {
            base,
            conversion: self.conversion,
        }
    }

    /// The clock as weft's own threads see it (weft's mapping).
    pub fn local_view(&self) -> View {
        self.view(self.mem.0.as_mut_ptr() as u64)
    }

    /// The thread entry of `tid`, claiming a free one if it has none;
    /// `None` if the table is full around its home.
    pub fn claim(&self, tid: u32) -> Option<u64> {
        let home = u64::from(layout::home(tid));
        (0..u64::from(layout::PROBES)).find_map(|i| {
            let slot = (home + i) & (layout::SLOTS - 1);
            let at = thread_offset(slot) + layout::TID;
            match self.mem.atomic_u32(at).compare_exchange(
                0,
                tid,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => Some(slot),
                Err(owner) if owner == tid => Some(slot),
                Err(_) => None,
            }
        })
    }

    /// The thread entry `tid` claimed, if any.
    pub fn find(&self, tid: u32) -> Option<u64> {
        let home = u64::from(layout::home(tid));
        for i in 0..u64::from(layout::PROBES) {
            let slot = (home + i) & (layout::SLOTS - 1);
            match self.mem.load_u32(thread_offset(slot) + layout::TID) {
                0 => return None,
                owner if owner == tid => return Some(slot),
                _ => {}
            }
        }
        None
    }

    /// The CPU time of the thread that owns entry `slot`, in nanoseconds
    /// from an arbitrary origin, read by another thread: the entry's time
    /// plus, if the thread runs now, the time since its CPU's last switch.
    /// A thread that has not been switched in since it claimed its entry
    /// reads as not running.
    pub fn read_other(&self, slot: u64) -> u64 {
        let at = thread_offset(slot);
        loop {
            let seq = self.mem.load_u32(at + layout::SEQ);
            let ns = self.mem.load_u64(at + layout::NS);
            let cpu = u64::from(self.mem.load_u32(at + layout::CPU));
            let running = if cpu == 0 || cpu > layout::CPUS {
                0
            } else {
                let last = self.mem.load_u64(cpu_offset(cpu - 1) + layout::NS);
                monotonic_ns().saturating_sub(last)
            };
            if seq.is_multiple_of(2) && seq == self.mem.load_u32(at + layout::SEQ) {
                return ns + running;
            }
            std::hint::spin_loop();
        }
    }

    /// The calling thread's CPU time in nanoseconds from an arbitrary
    /// origin, read as generated code reads it; `slot` must be the
    /// calling thread's entry (see [`claim`](Self::claim)).
    pub fn read_own(&self, slot: u64) -> u64 {
        let at = thread_offset(slot);
        loop {
            let seq = self.mem.load_u32(at + layout::SEQ);
            let ns = self.mem.load_u64(at + layout::NS);
            let mut aux = 0u32;
            // SAFETY: rdtscp has no memory effects; every x86-64 CPU Linux
            // runs weft on has it (the kernel's vDSO getcpu relies on it).
            let tsc = unsafe { std::arch::x86_64::__rdtscp(&mut aux) };
            let cpu = u64::from(aux) & (layout::CPUS - 1);
            let last = self.mem.load_u64(cpu_offset(cpu) + layout::NS);
            if seq == self.mem.load_u32(at + layout::SEQ) {
                return ns.wrapping_add(self.conversion.ns(tsc)).wrapping_sub(last);
            }
        }
    }
}

fn thread_offset(slot: u64) -> u64 {
    (layout::FIRST_THREAD + slot) * layout::ENTRY_SIZE
}

fn cpu_offset(cpu: u64) -> u64 {
    (layout::FIRST_CPU + cpu) * layout::ENTRY_SIZE
}

/// The mapped map.
struct Mem(MmapRaw);

impl Mem {
    fn atomic_u32(&self, offset: u64) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= layout::MAP_SIZE);
        // SAFETY: the offset is aligned and inside the mapping, which lives
        // as long as `self`; the kernel and other processes write it
        // concurrently, so it is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.0.as_mut_ptr().add(offset as usize).cast()) }
    }

    fn atomic_u64(&self, offset: u64) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= layout::MAP_SIZE);
        // SAFETY: as in `atomic_u32`, for an 8-byte aligned offset.
        unsafe { AtomicU64::from_ptr(self.0.as_mut_ptr().add(offset as usize).cast()) }
    }

    fn load_u32(&self, offset: u64) -> u32 {
        self.atomic_u32(offset).load(Ordering::Acquire)
    }

    fn load_u64(&self, offset: u64) -> u64 {
        self.atomic_u64(offset).load(Ordering::Acquire)
    }

    fn store_u32(&self, offset: u64, value: u32) {
        self.atomic_u32(offset).store(value, Ordering::Release)
    }

    fn store_u64(&self, offset: u64, value: u64) {
        self.atomic_u64(offset).store(value, Ordering::Release)
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's CPU time as the kernel accounts it
/// (`CLOCK_THREAD_CPUTIME_ID`, a system call): what the clock agrees with,
/// for checks.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn tsc() -> u64 {
    // SAFETY: rdtsc has no memory effects.
    unsafe { std::arch::x86_64::_rdtsc() }
}

/// A (TSC, ns) pair taken as close together as the machine allows: the
/// TSC read between two clock readings, from the tightest of a few tries.
fn paired() -> (u64, u64) {
    (0..16)
        .map(|_| {
            let a = monotonic_ns();
            let t = tsc();
            let b = monotonic_ns();
            (b - a, t, a + (b - a) / 2)
        })
        .min()
        .map(|(_, t, ns)| (t, ns))
        .unwrap_or_default()
}

/// The TSC's rate against `CLOCK_MONOTONIC`, measured over about 20 ms
/// and used again for 10 s: weft loads a clock for each process of a
/// workload as it starts, and measuring each time made every `exec` 20 ms
/// slower (a build runs hundreds). Ten seconds keep the drift of a rate
/// measured over 20 ms within what a fresh measurement would have.
fn calibrate() -> Conversion {
    const REUSE: std::time::Duration = std::time::Duration::from_secs(10);
    static LAST: std::sync::Mutex<Option<(std::time::Instant, Conversion)>> =
        std::sync::Mutex::new(None);
    let mut last = LAST
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((at, conversion)) = *last {
        if at.elapsed() < REUSE {
            return conversion;
        }
    }
    let conversion = measure_rate();
    *last = Some((std::time::Instant::now(), conversion));
    conversion
}

/// The TSC's rate against `CLOCK_MONOTONIC`: the run's measurement
/// (`rate.rs`) the first time, afterwards measured anew over about 20 ms.
fn measure_rate() -> Conversion {
    const SHIFT: u32 = 32;
    static FIRST_USED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !FIRST_USED.swap(true, Ordering::SeqCst) {
        let (tsc_base, ns_base) = paired();
        // ns per tick << SHIFT.
        let mult = ((1u64 << SHIFT) as f64 / rate::ticks_per_ns()) as u64;
        return Conversion {
            tsc_base,
            ns_base,
            mult,
            shift: SHIFT,
        };
    }
    let (t0, n0) = paired();
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (t1, n1) = paired();
    let mult = ((u128::from(n1 - n0) << SHIFT) / u128::from((t1 - t0).max(1))) as u64;
    Conversion {
        tsc_base: t0,
        ns_base: n0,
        mult,
        shift: SHIFT,
    }
}

pub mod rate;
#[cfg(test)]
mod tests;
