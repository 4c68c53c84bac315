//! The shared region on weft's side: a memfd (or, when the target may not
//! open weft's fds, a file in /dev/shm) mapped read-write into weft.
//!
//! All unsafe code of this crate is here: the local mapping and the
//! accesses to it. Counters are read with atomic loads because target
//! threads increment them concurrently with `lock inc`.

use crate::{Error, Result};
use memmap2::{MmapOptions, MmapRaw};
use rustix::fs::{memfd_create, MemfdFlags};
use rustix::thread::futex;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// A shared file mapped into weft.
///
/// The mapping is held as a raw one ([`MmapRaw`]): the target writes it from
/// another process regardless of Rust's aliasing rules, so no reference to
/// its bytes is ever handed out; weft touches it only through atomics
/// (counters, sync words) or byte copies of regions no other weft thread
/// writes concurrently.
#[derive(Debug)]
pub struct SharedMemory {
    map: MmapRaw,
    /// Kept open so that [`target_path`](Self::target_path) stays valid.
    file: File,
    /// A path the target can open to map the same file.
    target_path: String,
    /// A /dev/shm file to unlink when done, if that fallback was used.
    unlink: Option<std::path::PathBuf>,
}

impl SharedMemory {
    /// The file's inode number, as `/proc/PID/maps` shows its mappings.
    pub fn inode(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map_or(0, |m| m.ino())
    }

    /// Creates a memfd of `size` bytes (sparse) and maps it.
    pub fn create(size: usize) -> Result<SharedMemory> {
        let fd = memfd_create(c"weft", MemfdFlags::CLOEXEC).map_err(|e| Error::Io {
            what: "memfd_create".into(),
            source: e.into(),
        })?;
        let target_path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
        SharedMemory::map(File::from(fd), size, target_path, None)
    }

    /// Creates a file in /dev/shm owned by `uid:gid` (for a target running
    /// as another user, which may not open weft's `/proc/PID/fd`).
    pub fn create_in_dev_shm(size: usize, uid: u32, gid: u32) -> Result<SharedMemory> {
        use std::os::unix::fs::OpenOptionsExt;
        let path =
            std::path::PathBuf::from(format!("/dev/shm/weft-{}-{}", std::process::id(), nanos()));
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::Io {
                what: format!("creating {}", path.display()),
                source: e,
            })?;
        std::os::unix::fs::fchown(&file, Some(uid), Some(gid)).map_err(|e| Error::Io {
            what: format!("chown {}", path.display()),
            source: e,
        })?;
        let target_path = path.to_string_lossy().into_owned();
        SharedMemory::map(file, size, target_path, Some(path))
    }

    fn map(
        file: File,
        size: usize,
        target_path: String,
        unlink: Option<std::path::PathBuf>,
    ) -> Result<SharedMemory> {
        file.set_len(size as u64).map_err(|e| Error::Io {
            what: "sizing the shared region".into(),
            source: e,
        })?;
        // Read-write and shared (MAP_SHARED), over the whole file.
        let map = MmapOptions::new()
            .len(size)
            .map_raw(&file)
            .map_err(|e| Error::Io {
                what: "mapping the shared region".into(),
                source: e,
            })?;
        Ok(SharedMemory {
            map,
            file,
            target_path,
            unlink,
        })
    }

    /// `offset` as an index, checked to be aligned to and in range for a `size`-byte word.
    ///
    /// # Panics
    /// If it is not (a bug in the caller's layout).
    fn checked_offset(&self, offset: u64, size: usize) -> usize {
        let off = offset as usize;
        assert!(
            off.is_multiple_of(size) && off + size <= self.map.len(),
            "misaligned or out-of-range word at {off:#x}"
        );
        off
    }

    /// The u64 word at `offset`, as an atomic.
    fn atomic_u64(&self, offset: u64) -> &AtomicU64 {
        let off = self.checked_offset(offset, 8);
        // SAFETY: aligned and in range of our mapping, which lives as long
        // as `self`; every access to these words (ours and the target's
        // `lock` instructions) is atomic, so there is no data race.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    /// The u32 word at `offset`, as an atomic.
    pub(crate) fn atomic_u32(&self, offset: u64) -> &AtomicU32 {
        let off = self.checked_offset(offset, 4);
        // SAFETY: as in atomic_u64.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(off).cast()) }
    }

    /// The path the target opens.
    pub fn target_path(&self) -> &str {
        &self.target_path
    }

    /// Size in bytes.
    pub fn size(&self) -> usize {
        self.map.len()
    }

    /// Removes the /dev/shm name (the mappings stay valid).
    pub fn unlink_name(&mut self) {
        if let Some(p) = self.unlink.take() {
            let _ = std::fs::remove_file(p);
        }
    }

    /// Copies `data` to `offset`.
    ///
    /// # Panics
    /// If the range is outside the region (a bug in the caller's layout).
    pub fn write(&self, offset: u64, data: &[u8]) {
        weft_process::failpoint::step();
        let off = offset as usize;
        assert!(
            off.checked_add(data.len())
                .is_some_and(|end| end <= self.map.len()),
            "shared write out of range"
        );
        // Copies of code (tens of MB for a large program) go through the
        // file: a write into pages not yet there allocates them without
        // the fault and the zeroing of the whole page that a store through
        // the mapping costs (a `cc1` under `--paths all`: half the page
        // faults, a third less system time). The mapping sees the same
        // pages.
        if data.len() >= 256 {
            use std::os::unix::fs::FileExt;
            if self.file.write_all_at(data, offset).is_ok() {
                return;
            }
        }
        // SAFETY: the range was checked to lie inside our live mapping; the
        // target may read these bytes concurrently, which is why trampolines
        // are written before any splice points at them.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.map.as_mut_ptr().add(off), data.len())
        };
    }

    /// Sets `len` bytes at `offset` to 0.
    ///
    /// # Panics
    /// If the range is outside the region (a bug in the caller's layout).
    pub fn zero(&self, offset: u64, len: usize) {
        weft_process::failpoint::step();
        let off = offset as usize;
        assert!(
            off.checked_add(len)
                .is_some_and(|end| end <= self.map.len()),
            "shared write out of range"
        );
        // SAFETY: the range was checked to lie inside our live mapping; as
        // in `write`, the target only reads these bytes once told to.
        unsafe { std::ptr::write_bytes(self.map.as_mut_ptr().add(off), 0, len) };
    }

    /// Reads `len` bytes at `offset`.
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        let off = offset as usize;
        assert!(
            off.checked_add(len)
                .is_some_and(|end| end <= self.map.len()),
            "shared read out of range"
        );
        let mut v = vec![0u8; len];
        // SAFETY: the range lies inside our live mapping.
        unsafe { std::ptr::copy_nonoverlapping(self.map.as_ptr().add(off), v.as_mut_ptr(), len) };
        v
    }

    /// Appends the `len` bytes at `offset` to `out`.
    pub fn read_into(&self, offset: u64, len: usize, out: &mut Vec<u8>) {
        let off = offset as usize;
        assert!(
            off.checked_add(len)
                .is_some_and(|end| end <= self.map.len()),
            "shared read out of range"
        );
        out.reserve(len);
        let at = out.len();
        // SAFETY: the range lies inside our live mapping, and `out` has
        // room for `len` more bytes, which the copy initialises before the
        // length takes them in.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.map.as_ptr().add(off),
                out.as_mut_ptr().add(at),
                len,
            );
            out.set_len(at + len);
        }
    }

    /// Atomically loads the u64 at `offset` (8-byte aligned).
    pub fn load_u64(&self, offset: u64) -> u64 {
        self.atomic_u64(offset).load(Ordering::Relaxed)
    }

    /// Atomically stores the u64 at `offset`.
    pub fn store_u64(&self, offset: u64, value: u64) {
        weft_process::failpoint::step();
        self.atomic_u64(offset).store(value, Ordering::Relaxed)
    }
}

impl SharedMemory {
    /// A new, empty file of the same size and kind (a memfd, or a /dev/shm
    /// file owned by `uid:gid` when this one is such a file), mapped.
    pub fn create_like(&self, uid: u32, gid: u32) -> Result<SharedMemory> {
        if self.target_path.starts_with("/dev/shm/") {
            SharedMemory::create_in_dev_shm(self.size(), uid, gid)
        } else {
            SharedMemory::create(self.size())
        }
    }

    /// Copies the bytes `range` of `from` to the same offsets here, only
    /// where `from` holds data: its holes (never written) are neither
    /// read nor written, so the copy takes no memory for them.
    pub fn copy_data_from(&self, from: &SharedMemory, range: std::ops::Range<u64>) -> Result<()> {
        use rustix::fs::{seek, SeekFrom};
        let end = range.end.min(from.size() as u64).min(self.size() as u64);
        let mut at = range.start;
        while at < end {
            // The next data at or after `at`, and the hole that ends it.
            let data = match seek(&from.file, SeekFrom::Data(at)) {
                Ok(d) => d,
                Err(rustix::io::Errno::NXIO) => return Ok(()),
                Err(e) => {
                    return Err(Error::Io {
                        what: "finding the shared region's data (SEEK_DATA)".into(),
                        source: e.into(),
                    })
                }
            };
            if data >= end {
                return Ok(());
            }
            let hole = seek(&from.file, SeekFrom::Hole(data)).map_err(|e| Error::Io {
                what: "finding the shared region's data (SEEK_HOLE)".into(),
                source: e.into(),
            })?;
            let stop = hole.min(end);
            // SAFETY: both ranges lie in their mappings (`end` is clamped
            // to both sizes), which live as long as `self` and `from`; the
            // two mappings are different files, so they do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    from.map.as_ptr().add(data as usize),
                    self.map.as_mut_ptr().add(data as usize),
                    (stop - data) as usize,
                );
            }
            at = stop;
        }
        Ok(())
    }

    /// Waits until the u32 at `offset` differs from `expected` or `timeout`
    /// passes (a shared futex: the target's threads wake it through their
    /// own mapping of the same file).
    pub fn futex_wait(&self, offset: u64, expected: u32, timeout: std::time::Duration) {
        let ts = futex::Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        // Not FUTEX_PRIVATE_FLAG: the word is shared with another process.
        // A timeout, a wake-up, a changed value and EINTR all just return.
        let _ = futex::wait(
            self.atomic_u32(offset),
            futex::Flags::empty(),
            expected,
            Some(&ts),
        );
    }

    /// Wakes every waiter on the u32 at `offset`.
    pub fn futex_wake(&self, offset: u64) {
        let _ = futex::wake(
            self.atomic_u32(offset),
            futex::Flags::empty(),
            i32::MAX as u32,
        );
    }

    /// Atomically loads the u32 at `offset`.
    pub fn load_u32(&self, offset: u64) -> u32 {
        self.atomic_u32(offset).load(Ordering::SeqCst)
    }

    /// Atomically stores the u32 at `offset`.
    pub fn store_u32(&self, offset: u64, value: u32) {
        self.atomic_u32(offset).store(value, Ordering::SeqCst)
    }

    /// Atomically replaces the u32 at `offset` by `new` if it is
    /// `current`; whether it was.
    pub fn compare_exchange_u32(&self, offset: u64, current: u32, new: u32) -> bool {
        self.atomic_u32(offset)
            .compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// Atomically adds to the u32 at `offset`.
    pub fn add_u32(&self, offset: u64, value: u32) {
        self.atomic_u32(offset).fetch_add(value, Ordering::SeqCst);
    }
}

/// A futex word to wait on with others ([`wait_any`]): its value while
/// there is nothing new, and whether another process shares it.
#[derive(Debug, Clone, Copy)]
pub struct Waited<'a> {
    pub word: &'a AtomicU32,
    pub unchanged: u32,
    pub shared: bool,
}

/// Waits up to `timeout` until one of `words` no longer holds its
/// unchanged value (or is woken), with one `futex_waitv` (Linux 5.16); a
/// word that has changed already returns at once. Waits on no more than
/// the kernel's 128 words: those past them are left to the timeout (put
/// the most urgent first). Without `futex_waitv`, waits on the first.
pub fn wait_any(words: &[Waited<'_>], timeout: std::time::Duration) {
    if words.is_empty() {
        std::thread::sleep(timeout);
        return;
    }
    let waiters: Vec<futex::Wait> = words
        .iter()
        .take(128)
        .map(|w| {
            let mut wait = futex::Wait::new();
            wait.val = u64::from(w.unchanged);
            wait.uaddr = futex::WaitPtr::new(w.word.as_ptr().cast());
            wait.flags = match w.shared {
                true => futex::WaitFlags::SIZE_U32,
                false => futex::WaitFlags::SIZE_U32 | futex::WaitFlags::PRIVATE,
            };
            wait
        })
        .collect();
    // futex_waitv's timeout is an instant of the monotonic clock.
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let end = std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32) + timeout;
    let until = futex::Timespec {
        tv_sec: end.as_secs() as _,
        tv_nsec: end.subsec_nanos() as _,
    };
    // A timeout, a wake-up, a changed value and EINTR all just return.
    let waited = futex::waitv(
        &waiters,
        futex::WaitvFlags::empty(),
        Some(&until),
        rustix::time::ClockId::Monotonic,
    );
    use rustix::io::Errno;
    if let Err(e) = waited {
        if ![Errno::AGAIN, Errno::TIMEDOUT, Errno::INTR].contains(&e) {
            // No futex_waitv (before Linux 5.16, or a seccomp filter):
            // the first word alone, rather than no wait at all.
            let first = &words[0];
            let flags = match first.shared {
                true => futex::Flags::empty(),
                false => futex::Flags::PRIVATE,
            };
            let ts = futex::Timespec {
                tv_sec: timeout.as_secs() as _,
                tv_nsec: timeout.subsec_nanos() as _,
            };
            let _ = futex::wait(first.word, flags, first.unchanged, Some(&ts));
        }
    }
}

impl Drop for SharedMemory {
    fn drop(&mut self) {
        // The mapping and the file go with the fields.
        self.unlink_name();
    }
}

fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_round_trip_and_second_view() {
        let shm = SharedMemory::create(1 << 20).unwrap();
        shm.write(4096, b"hello");
        assert_eq!(shm.read(4096, 5), b"hello");
        shm.store_u64(8, 41);
        assert_eq!(shm.load_u64(8), 41);
        // The path given to targets opens the same memory.
        let other = std::fs::read(shm.target_path()).unwrap();
        assert_eq!(&other[4096..4101], b"hello");
        // Zeroing clears exactly its range.
        shm.zero(4097, 3);
        assert_eq!(shm.read(4096, 5), b"h\0\0\0o");
    }

    #[test]
    fn a_large_write_through_the_file_is_seen_through_the_mappings() {
        let shm = SharedMemory::create(1 << 20).unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + 3) as u8).collect();
        // Across page boundaries, into pages never touched before.
        shm.write(4000, &data);
        assert_eq!(shm.read(4000, data.len()), data);
        assert_eq!(shm.read(3990, 10), [0; 10]);
        assert_eq!(shm.read(14_000, 10), [0; 10]);
        let other = std::fs::read(shm.target_path()).unwrap();
        assert_eq!(&other[4000..14_000], &data[..]);
        // A small write after it, through the mapping, lands in the same pages.
        shm.write(4001, b"xy");
        assert_eq!(shm.read(4000, 4), [data[0], b'x', b'y', data[3]]);
    }

    #[test]
    fn a_copy_takes_the_data_and_leaves_the_holes() {
        use std::os::unix::fs::MetadataExt;
        let size = 64 << 20;
        let from = SharedMemory::create(size).unwrap();
        from.write(100, b"head");
        from.write(40 << 20, b"far");
        from.write((size - 3) as u64, b"end");
        let to = from.create_like(0, 0).unwrap();
        to.copy_data_from(&from, 0..(40 << 20) + 2).unwrap();
        // Two pages' worth of memory, not 40 MiB of zeros.
        let blocks = std::fs::metadata(to.target_path()).unwrap().blocks();
        assert!(blocks * 512 <= 64 << 10, "{blocks} blocks");
        assert_eq!(to.read(100, 4), b"head");
        // Cut at the range's end.
        assert_eq!(to.read(40 << 20, 3), b"fa\0");
        assert_eq!(to.read((size - 3) as u64, 3), b"\0\0\0");
    }

    #[test]
    fn futex_wakes_across_mappings() {
        let shm = std::sync::Arc::new(SharedMemory::create(1 << 16).unwrap());
        let waiter = {
            let shm = shm.clone();
            std::thread::spawn(move || {
                let start = std::time::Instant::now();
                while shm.load_u32(64) == 0 && start.elapsed() < std::time::Duration::from_secs(10)
                {
                    shm.futex_wait(64, 0, std::time::Duration::from_secs(5));
                }
                shm.load_u32(64)
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(20));
        shm.store_u32(64, 7);
        shm.futex_wake(64);
        assert_eq!(waiter.join().unwrap(), 7);
    }

    #[test]
    fn wait_any_wakes_for_any_word_and_returns_at_once_for_a_changed_one() {
        use std::time::{Duration, Instant};
        let shm = std::sync::Arc::new(SharedMemory::create(1 << 16).unwrap());
        let private = std::sync::Arc::new(AtomicU32::new(3));
        let waited = |shm: &SharedMemory, private: &AtomicU32, unchanged: u32| {
            let words = [
                Waited {
                    word: shm.atomic_u32(64),
                    unchanged,
                    shared: true,
                },
                Waited {
                    word: private,
                    unchanged: 3,
                    shared: false,
                },
            ];
            let start = Instant::now();
            wait_any(&words, Duration::from_secs(10));
            start.elapsed()
        };
        // A word that is not as expected: no wait.
        assert!(waited(&shm, &private, 1) < Duration::from_secs(5));
        // Woken through the second (private) word.
        let bumper = {
            let private = private.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                private.store(4, Ordering::SeqCst);
                let _ = futex::wake(&private, futex::Flags::PRIVATE, u32::MAX);
            })
        };
        let took = waited(&shm, &private, 0);
        bumper.join().unwrap();
        assert!(
            took >= Duration::from_millis(40) && took < Duration::from_secs(5),
            "{took:?}"
        );
        // Nothing changes: the timeout.
        let start = Instant::now();
        wait_any(
            &[Waited {
                word: shm.atomic_u32(64),
                unchanged: 0,
                shared: true,
            }],
            Duration::from_millis(30),
        );
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}
