//! The clocks trampolines use: the TSC, read here too, with its rate
//! measured against CLOCK_MONOTONIC; and, for event timestamps where the
//! TSC is unusable, CLOCK_MONOTONIC itself through the target's vDSO.

use std::time::{Duration, Instant};

/// Reads the time-stamp counter.
pub fn tsc() -> u64 {
    // SAFETY: rdtsc exists on every x86-64 processor and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Whether the TSC is invariant (CPUID 0x8000_0007, EDX bit 8): it ticks at a
/// constant rate in every power state and on every core, so timestamps from
/// different threads compare.
pub fn tsc_is_invariant() -> bool {
    use core::arch::x86_64::__cpuid;
    // Leaf 0x8000_0000 gives the highest extended leaf, checked first.
    let max_extended = __cpuid(0x8000_0000).eax;
    max_extended >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

/// CLOCK_MONOTONIC in nanoseconds (the clock a target's vDSO gives).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_REALTIME in nanoseconds since the Unix epoch (wall-clock time).
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a pointer to a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `clock` read at the same moment as CLOCK_REALTIME: `(clock value,
/// realtime ns)`. The clock is read on either side of the realtime clock
/// and the midpoint taken, so the pair is off by at most half the time
/// between the two readings (the closest of a few tries is kept).
pub fn paired_with_realtime(clock: impl Fn() -> u64) -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..5 {
        let before = clock();
        let real = realtime_ns();
        let after = clock();
        let gap = after.saturating_sub(before);
        if gap < best.0 {
            best = (gap, before + gap / 2, real);
        }
    }
    (best.1, best.2)
}

/// The address of `clock_gettime` in process `pid`'s vDSO, which reads
/// the clock without a system call where the kernel's clock source allows.
pub fn vdso_clock_gettime(pid: i32) -> crate::Result<u64> {
    use weft_process::ProcessMemory;
    let missing = || crate::Error::NoVdsoClock { pid };
    let base = weft_process::Auxv::read(pid)?.vdso;
    let maps = weft_process::maps::read(pid)?;
    let vdso = maps
        .iter()
        .find(|m| m.start.0 == base && base != 0)
        .ok_or_else(missing)?;
    let bytes = weft_process::ProcMemory::open(pid)?
        .read_vec(vdso.start, (vdso.end.0 - vdso.start.0) as usize)?;
    let image = weft_image::Image::from_bytes(std::path::Path::new("[vdso]"), bytes)?;
    let addr = image
        .symbol_address("__vdso_clock_gettime")
        .or_else(|| image.symbol_address("clock_gettime"))
        .ok_or_else(missing)?;
    // The vDSO is linked at address 0: its load bias is where it is mapped.
    Ok(base + addr.get())
}

/// TSC ticks per nanosecond, measured once per weft run across its
/// start-up (`weft_vclock::rate`: call [`start_measuring_ticks`] first
/// thing).
pub fn ticks_per_ns() -> f64 {
    weft_vclock::rate::ticks_per_ns()
}

/// Takes the first half of [`ticks_per_ns`]'s measurement now.
pub fn start_measuring_ticks() {
    weft_vclock::rate::start();
}

/// TSC ticks per nanosecond, measured over `over`.
pub fn calibrate(over: Duration) -> f64 {
    let origin = Instant::now();
    let (t0, c0) = paired(origin);
    std::thread::sleep(over);
    let (t1, c1) = paired(origin);
    (c1 - c0) as f64 / (t1 - t0).max(1.0)
}

/// A TSC reading and the nanoseconds since `origin` at the same moment:
/// of a few tries, the one whose clock reads around it are closest, so
/// that a preemption between the reads (which, on a loaded machine, can
/// last milliseconds and skew a 20 ms calibration by percents) is not
/// taken.
fn paired(origin: Instant) -> (f64, u64) {
    let mut best = (f64::MAX, 0.0, 0);
    for _ in 0..16 {
        let before = origin.elapsed();
        let c = tsc();
        let after = origin.elapsed();
        let gap = (after - before).as_nanos() as f64;
        if gap < best.0 {
            let middle = (before.as_nanos() + after.as_nanos()) as f64 / 2.0;
            best = (gap, middle, c);
        }
    }
    (best.1, best.2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realtime_pairs_with_the_clock() {
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let before = monotonic_ns();
        let (mono, real) = paired_with_realtime(monotonic_ns);
        let after = monotonic_ns();
        assert!(before <= mono && mono <= after);
        // The wall clock, as std reads it, within a second.
        assert!(real.abs_diff(system) < 1_000_000_000, "{real} vs {system}");
        // The pair holds: realtime - monotonic is what the kernel says now.
        let (mono2, real2) = (monotonic_ns(), realtime_ns());
        let drift = (real2 as i128 - mono2 as i128) - (real as i128 - mono as i128);
        assert!(drift.abs() < 1_000_000, "{drift} ns");
    }

    #[test]
    fn tsc_invariance_matches_the_kernel() {
        // The kernel reports the same CPUID bit as the `nonstop_tsc` flag.
        let flags = weft_process::cpu_flags();
        if flags.is_empty() {
            return;
        }
        assert_eq!(tsc_is_invariant(), flags.iter().any(|f| f == "nonstop_tsc"));
    }

    #[test]
    fn the_vdso_clock_is_this_process_clock_gettime() {
        let addr = vdso_clock_gettime(std::process::id() as i32).unwrap();
        #[allow(non_camel_case_types)]
        type clock_fn = extern "C" fn(libc::clockid_t, *mut libc::timespec) -> libc::c_int;
        // SAFETY: the address is the vDSO's clock_gettime in this very
        // process, whose C signature is clock_fn.
        let f: clock_fn = unsafe { std::mem::transmute(addr as usize) };
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let before = monotonic_ns();
        assert_eq!(f(libc::CLOCK_MONOTONIC, &mut ts), 0);
        let read = ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
        assert!(before <= read && read <= monotonic_ns());
    }

    #[test]
    fn tsc_advances_at_a_plausible_rate() {
        let per_ns = calibrate(Duration::from_millis(20));
        assert!(per_ns > 0.1 && per_ns < 10.0, "{per_ns} ticks per ns");
    }

    #[test]
    fn the_runs_measurement_is_the_one_every_caller_gets() {
        start_measuring_ticks();
        let first = ticks_per_ns();
        assert!(first > 0.1 && first < 10.0, "{first} ticks per ns");
        assert_eq!(ticks_per_ns().to_bits(), first.to_bits());
        let again = calibrate(Duration::from_millis(20));
        assert!((again - first).abs() / first < 0.05, "{first} then {again}");
    }
}
