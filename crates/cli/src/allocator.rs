//! weft's own memory allocator: mimalloc, set for speed while weft lays
//! out and traces, and for a small footprint while it regenerates.
//!
//! Laying out a large program makes and drops millions of small
//! allocations across threads. The C library's allocator spent about a
//! quarter of the setup's time on them, and returned large blocks to the
//! kernel only to fault them in again (`perf` on `make -j2` under
//! `--paths all`, session 38: 36 to 52 s with it, 23 to 25 s with
//! mimalloc). mimalloc keeps freed memory for a second and commits its
//! arenas eagerly: `weft regen` of a gzip trace held 67 MB where the C
//! library's allocator held 34 MB, and regeneration's memory budget is the
//! point of it. [`lean`] gives freed memory back at once there (45 MB).

use std::ffi::{c_int, c_long};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The options of the mimalloc the `libmimalloc-sys` crate builds (its v3
// sources, `mimalloc.h`'s `mi_option_e`); the crate's own constants are
// those of v2. A test checks the numbers against their default values.
/// `mi_option_arena_eager_commit` (default 2: on where the system
/// overcommits).
const ARENA_EAGER_COMMIT: c_int = 4;
/// `mi_option_purge_delay` (default 1000 ms; 0 gives freed memory back at
/// once).
const PURGE_DELAY: c_int = 15;

extern "C" {
    fn mi_option_set(option: c_int, value: c_long);
    #[cfg(test)]
    fn mi_option_get(option: c_int) -> c_long;
}

/// From now on, gives freed memory back to the system at once and
/// commits memory only as it is used: the resident size of the C
/// library's allocator, at some cost in speed.
pub fn lean() {
    // SAFETY: `mi_option_set` stores an integer into mimalloc's option
    // table (an atomic store); any value is valid for these two options,
    // and it may be called at any time, from any thread.
    unsafe {
        mi_option_set(PURGE_DELAY, 0);
        mi_option_set(ARENA_EAGER_COMMIT, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_option_numbers_name_the_options_meant() {
        // SAFETY: `mi_option_get` reads an option (initialising it from
        // the environment the first time); any option number below
        // mimalloc's last is valid.
        let (eager, delay) = unsafe {
            (
                mi_option_get(ARENA_EAGER_COMMIT),
                mi_option_get(PURGE_DELAY),
            )
        };
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none()
            && std::env::var_os("MIMALLOC_ARENA_EAGER_COMMIT").is_none()
        {
            assert_eq!(
                (eager, delay),
                (2, 1000),
                "mimalloc's defaults for eager commit and purge delay"
            );
        }
        lean();
        // SAFETY: as above.
        let (eager, delay) = unsafe {
            (
                mi_option_get(ARENA_EAGER_COMMIT),
                mi_option_get(PURGE_DELAY),
            )
        };
        assert_eq!((eager, delay), (0, 0));
    }
}
