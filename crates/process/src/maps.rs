//! `/proc/PID/maps`: the target's mappings, parsed.

use crate::{proc_path, Error, RemoteAddr, Result};
use std::path::PathBuf;

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapEntry {
    /// First byte.
    pub start: RemoteAddr,
    /// One past the last byte.
    pub end: RemoteAddr,
    /// `r` permission.
    pub read: bool,
    /// `w` permission.
    pub write: bool,
    /// `x` permission.
    pub exec: bool,
    /// `p` (private) or `s` (shared).
    pub shared: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Inode, 0 for anonymous mappings.
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[vdso]`), empty if anonymous.
    pub path: String,
}

impl MapEntry {
    /// The backing file, if this mapping is of a regular file that still exists.
    pub fn file(&self) -> Option<PathBuf> {
        if self.inode != 0 && self.path.starts_with('/') && !self.path.ends_with(" (deleted)") {
            Some(PathBuf::from(&self.path))
        } else {
            None
        }
    }

    /// Size in bytes.
    pub fn len(&self) -> u64 {
        self.end - self.start
    }

    /// Whether the mapping is empty (never, for a kernel-reported one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Parses the text of a maps file.
pub fn parse(text: &str) -> Vec<MapEntry> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<MapEntry> {
    let mut fields = line.splitn(6, char::is_whitespace);
    let range = fields.next()?;
    let perms = fields.next()?.as_bytes();
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let _dev = fields.next()?;
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start().to_string();
    let (start, end) = range.split_once('-')?;
    if perms.len() < 4 {
        return None;
    }
    Some(MapEntry {
        start: RemoteAddr(u64::from_str_radix(start, 16).ok()?),
        end: RemoteAddr(u64::from_str_radix(end, 16).ok()?),
        read: perms[0] == b'r',
        write: perms[1] == b'w',
        exec: perms[2] == b'x',
        shared: perms[3] == b's',
        offset,
        inode,
        path,
    })
}

/// Reads and parses `/proc/PID/maps`.
pub fn read(pid: i32) -> Result<Vec<MapEntry>> {
    let text =
        std::fs::read_to_string(proc_path(pid, "maps")).map_err(|e| Error::from_proc_io(pid, e))?;
    Ok(parse(&text))
}

/// Where weft maps what needs no particular place in a target (its feed,
/// the CPU clock, return stacks): 16 TiB, below where Linux loads a PIE
/// executable (about 85 TiB up) and far below the libraries and the
/// program's own `mmap`s (top-down from under the stack), so that weft's
/// mappings do not move the program's.
pub const FAR_BASE: u64 = 0x1000_0000_0000;

/// Bytes below a module that weft's patch memory leaves free: where the
/// program's own `mmap`s go, top-down under the libraries, so that they
/// land where they would without weft (and where they did in a recorded
/// run, whatever weft mapped then).
pub const LEFT_CLEAR: u64 = 1 << 30;

/// The lowest free, page-aligned range of `size` bytes at or above
/// `from` (with a guard gap on each side).
pub fn free_range_from(maps: &[MapEntry], from: u64, size: u64) -> Option<u64> {
    const PAGE: u64 = weft_abi::mman::PAGE_SIZE;
    const GUARD: u64 = 16 * PAGE;
    let mut occupied: Vec<(u64, u64)> = maps.iter().map(|m| (m.start.0, m.end.0)).collect();
    occupied.sort_unstable();
    let mut start = (from + PAGE - 1) & !(PAGE - 1);
    for (s, e) in occupied {
        if e + GUARD <= start {
            continue;
        }
        if s >= start.checked_add(size)?.checked_add(GUARD)? {
            return Some(start);
        }
        start = start.max((e + GUARD + PAGE - 1) & !(PAGE - 1));
    }
    (start.checked_add(size)? <= 0x7fff_ffff_f000).then_some(start)
}

/// A free, page-aligned range of `size` bytes within `reach` of every
/// byte of `[lo, hi)` that ends [`LEFT_CLEAR`] or more below `lo`, as
/// high as that allows; else [`free_range_near`]'s.
pub fn free_range_below(maps: &[MapEntry], lo: u64, hi: u64, size: u64, reach: u64) -> Option<u64> {
    const PAGE: u64 = weft_abi::mman::PAGE_SIZE;
    const GUARD: u64 = 16 * PAGE;
    let min_start = hi.saturating_sub(reach).max(0x10000);
    let end_max = lo.saturating_sub(LEFT_CLEAR);
    let mut occupied: Vec<(u64, u64)> = maps.iter().map(|m| (m.start.0, m.end.0)).collect();
    occupied.sort_unstable();
    let mut best = None;
    let mut prev_end = 0x10000u64;
    for (s, e) in occupied
        .into_iter()
        .chain(std::iter::once((u64::MAX, u64::MAX)))
    {
        let gap_lo = ((prev_end + GUARD + PAGE - 1) & !(PAGE - 1)).max(min_start);
        let gap_hi = s.saturating_sub(GUARD).min(end_max) & !(PAGE - 1);
        if gap_hi >= gap_lo && gap_hi - gap_lo >= size {
            best = Some(gap_hi - size);
        }
        prev_end = prev_end.max(e);
        if s >= end_max {
            break;
        }
    }
    best.or_else(|| free_range_near(maps, lo, hi, size, reach))
}

/// Room kept free above a module for the heap, which the kernel starts
/// right after the program (with address space layout randomization off,
/// as `weft syscalls record` runs it): a heap of up to this much grows in
/// place with `brk` rather than falling back to `mmap`.
pub const HEAP_ROOM: u64 = 256 << 20;

/// Finds a free, page-aligned range of `size` bytes whose every byte lies
/// within `reach` bytes of every byte of `[lo, hi)`, preferring the closest
/// that leaves [`HEAP_ROOM`] above the module free.
/// Used to place patch memory that `jmp rel32` and RIP-relative operands reach.
pub fn free_range_near(maps: &[MapEntry], lo: u64, hi: u64, size: u64, reach: u64) -> Option<u64> {
    const PAGE: u64 = weft_abi::mman::PAGE_SIZE;
    const GUARD: u64 = 16 * PAGE;
    let min_start = hi.saturating_sub(reach).max(0x10000);
    let max_end = lo.saturating_add(reach).min(0x7fff_ffff_f000);
    let mut occupied: Vec<(u64, u64)> = maps.iter().map(|m| (m.start.0, m.end.0)).collect();
    occupied.sort_unstable();
    let mut best: Option<(u64, (bool, u64))> = None;
    let mut consider = |gap_lo: u64, gap_hi: u64| {
        let gap_lo = (gap_lo + GUARD + PAGE - 1) & !(PAGE - 1);
        let gap_hi = gap_hi.saturating_sub(GUARD) & !(PAGE - 1);
        let lo_ok = gap_lo.max(min_start);
        let hi_ok = gap_hi.min(max_end);
        if hi_ok < lo_ok || hi_ok - lo_ok < size {
            return;
        }
        // Closest placement to the module inside this gap, past the
        // heap's room where the gap allows.
        let mut candidate = if hi_ok <= lo { hi_ok - size } else { lo_ok };
        if candidate >= hi && candidate < hi + HEAP_ROOM && hi_ok - size >= hi + HEAP_ROOM {
            candidate = (hi + HEAP_ROOM).next_multiple_of(PAGE).max(candidate);
        }
        let distance = if candidate >= hi {
            candidate - hi
        } else {
            lo.saturating_sub(candidate + size)
        };
        let in_heap_room = candidate >= hi && candidate < hi + HEAP_ROOM;
        let rank = (in_heap_room, distance);
        if best.is_none_or(|(_, r)| rank < r) {
            best = Some((candidate, rank));
        }
    };
    let mut prev_end = 0x10000u64;
    for &(s, e) in &occupied {
        if s > prev_end {
            consider(prev_end, s);
        }
        prev_end = prev_end.max(e);
    }
    consider(prev_end, 0x7fff_ffff_f000);
    best.map(|(a, _)| a)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
55d0c0a00000-55d0c0a01000 r--p 00000000 fe:01 1234                       /usr/bin/cat
55d0c0a01000-55d0c0a05000 r-xp 00001000 fe:01 1234                       /usr/bin/cat
7f1e2a000000-7f1e2a022000 r--p 00000000 fe:01 99                         /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd1c5e0000-7ffd1c601000 rw-p 00000000 00:00 0                          [stack]
7f1e2a100000-7f1e2a101000 rw-s 00000000 00:01 5                          /memfd:weft (deleted)
";

    #[test]
    fn parses_lines() {
        let maps = parse(SAMPLE);
        assert_eq!(maps.len(), 5);
        assert_eq!(maps[1].start, RemoteAddr(0x55d0c0a01000));
        assert!(maps[1].exec && !maps[1].write);
        assert_eq!(maps[1].offset, 0x1000);
        assert_eq!(
            maps[2].file().unwrap(),
            PathBuf::from("/usr/lib/x86_64-linux-gnu/libc.so.6")
        );
        assert_eq!(maps[3].path, "[stack]");
        assert!(maps[3].file().is_none());
        assert!(maps[4].shared && maps[4].file().is_none());
    }

    #[test]
    fn free_range_is_near_and_free() {
        let maps = parse(SAMPLE);
        let lo = 0x55d0c0a00000;
        let hi = 0x55d0c0a05000;
        let size = 0x200000;
        let at = free_range_near(&maps, lo, hi, size, 1 << 31).unwrap();
        assert!(at + size <= lo || at >= hi);
        assert!(at.abs_diff(lo) < 1 << 31 && (at + size).abs_diff(hi) < 1 << 31);
        for m in &maps {
            assert!(at + size <= m.start.0 || at >= m.end.0, "overlaps {m:?}");
        }
    }

    #[test]
    fn patch_memory_leaves_the_space_under_a_library_to_the_program() {
        let maps = parse(SAMPLE);
        let (lo, hi, size) = (0x7f1e2a000000, 0x7f1e2a022000, 0x200000);
        let at = free_range_below(&maps, lo, hi, size, 1 << 31).unwrap();
        assert!(at + size <= lo - LEFT_CLEAR, "{at:#x}");
        assert!(
            lo - (at + size) < LEFT_CLEAR + 0x100000,
            "as high as it can: {at:#x}"
        );
        for m in &maps {
            assert!(at + size <= m.start.0 || at >= m.end.0, "overlaps {m:?}");
        }
        // No such room within reach: the nearest place instead.
        let near = free_range_below(&maps, lo, hi, size, LEFT_CLEAR / 2).unwrap();
        assert_eq!(
            Some(near),
            free_range_near(&maps, lo, hi, size, LEFT_CLEAR / 2)
        );
    }

    /// A static program at 0x400000 has no room below it: its patch memory
    /// goes above, past the room its heap grows into (`brk` failed there
    /// once weft had mapped its region right after the program).
    #[test]
    fn patch_memory_above_a_program_leaves_its_heap_room() {
        let maps = parse(
            "\
00400000-004a2000 r-xp 00000000 fe:01 7 /t/static
004a2000-004ae000 rw-p 000a2000 fe:01 7 /t/static
7ffd1c5e0000-7ffd1c601000 rw-p 00000000 00:00 0 [stack]
",
        );
        let (lo, hi, size) = (0x400000, 0x4ae000, 0x4000_0000);
        let at = free_range_below(&maps, lo, hi, size, 1 << 31).unwrap();
        assert!(at >= hi + HEAP_ROOM, "{at:#x}");
        assert!(at + size - lo < 1 << 31, "within reach: {at:#x}");
        // Without the room within reach, the nearest place.
        let near = free_range_near(&maps, lo, hi, size, size + 0x200000).unwrap();
        assert!(near >= hi && near < hi + HEAP_ROOM, "{near:#x}");
    }

    #[test]
    fn far_ranges_start_at_the_first_free_place() {
        let maps = parse(SAMPLE);
        assert_eq!(free_range_from(&maps, FAR_BASE, 0x10000), Some(FAR_BASE));
        // Past the executable, with a guard gap.
        let at = free_range_from(&maps, 0x55d0c0a00000, 0x10000).unwrap();
        assert!(at >= 0x55d0c0a05000 + 0x10000, "{at:#x}");
    }
}
