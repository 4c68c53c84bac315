//! Reading the files weft analyses (ELF images and their debug symbols),
//! and leaving the page cache as weft found it when asked to.
//!
//! A run that predicts a program's time from a cold page cache
//! (`--drop-caches` with a `--memory-max`) holds the program in a control
//! group whose memory limit counts the page cache the program brings in.
//! weft reads the program's images to instrument them, and a page that
//! weft's reading brought into the cache is charged to weft's group: the
//! program then finds its code there, outside its own limit, and never
//! waits for the disk for it, where the program alone would (and would
//! read it again and again under a tight limit). With
//! [`leave_page_cache_as_found`], [`read`] drops again each page its
//! reading brought in, and leaves the pages the cache held before.

use rustix::fs::{fadvise, Advice};
use rustix::io::{preadv2, Errno, ReadWriteFlags};
use std::io::IoSliceMut;
use std::num::NonZeroU64;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

static AS_FOUND: AtomicBool = AtomicBool::new(false);

/// From now on, [`read`] leaves the page cache as it found it.
pub fn leave_page_cache_as_found() {
    AS_FOUND.store(true, Ordering::Relaxed);
}

/// Bytes read at a time: the pages the cache did not hold in one such
/// stretch are dropped together.
const STRETCH: usize = 64 << 10;

/// The whole file at `path`, as `std::fs::read` reads it; see the module
/// documentation for what it does to the page cache.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    if !AS_FOUND.load(Ordering::Relaxed) {
        return std::fs::read(path);
    }
    let file = std::fs::File::open(path)?;
    let len = usize::try_from(file.metadata()?.len()).map_err(std::io::Error::other)?;
    // No read-ahead: a read brings in the pages it asks for and no more,
    // so that what it did not bring in reads as held before.
    let _ = fadvise(&file, 0, None, Advice::Random);
    let mut data = vec![0u8; len];
    let mut at = 0;
    while at < len {
        let end = (at + STRETCH).min(len);
        // The pages the cache holds, without waiting for the disk: the
        // read stops at the first it does not hold.
        let held = loop {
            let mut slice = [IoSliceMut::new(&mut data[at..end])];
            match preadv2(&file, &mut slice, at as u64, ReadWriteFlags::NOWAIT) {
                Ok(n) => break n,
                Err(Errno::AGAIN) => break 0,
                Err(Errno::INTR) => continue,
                // A file system that cannot say: read it as usual.
                Err(Errno::OPNOTSUPP) => return std::fs::read(path),
                Err(e) => return Err(e.into()),
            }
        };
        let from = at + held;
        let mut pos = from;
        while pos < end {
            match rustix::io::pread(&file, &mut data[pos..end], pos as u64) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => pos += n,
                Err(Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(brought) = NonZeroU64::new((end - from) as u64) {
            let _ = fadvise(&file, from as u64, Some(brought), Advice::DontNeed);
        }
        at = end;
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages of `file` the cache holds now, and the pages it has, as
    /// `mincore(2)` tells: a probe by reading would start read-ahead and
    /// bring in the pages it asks about.
    fn cached_pages(file: &std::fs::File, len: u64) -> (usize, usize) {
        // SAFETY: the map is only handed to mincore, which reads no byte
        // of it, and dropped before the test changes the file.
        let map = unsafe { memmap2::Mmap::map(file) }.unwrap();
        let pages = (len as usize).div_ceil(4096);
        let mut held = vec![0u8; pages];
        // SAFETY: the map is `len` bytes from a page boundary, and `held`
        // has a byte for each of its pages.
        let rc = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), held.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        (held.iter().filter(|&&b| b & 1 != 0).count(), pages)
    }

    /// A file of `bytes` written out to its disk and advised out of the
    /// cache, in the first of the test's candidate directories whose file
    /// system drops pages when advised to; the last candidate's file when
    /// none does (a tmpfs keeps its pages whatever is advised: they are the
    /// file).
    fn file_out_of_the_cache(bytes: &[u8]) -> (std::path::PathBuf, bool) {
        let name = format!(".weft-file-test-{}", std::process::id());
        let mut candidates = vec![std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))];
        candidates.extend(std::env::var_os("HOME").map(std::path::PathBuf::from));
        candidates.push("/var/tmp".into());
        let mut last = None;
        for dir in candidates {
            let path = dir.join(&name);
            if std::fs::write(&path, bytes).is_err() {
                continue;
            }
            let file = std::fs::File::open(&path).unwrap();
            rustix::fs::fdatasync(&file).unwrap();
            fadvise(&file, 0, None, Advice::DontNeed).unwrap();
            let (cached, pages) = cached_pages(&file, bytes.len() as u64);
            if cached * 16 <= pages {
                if let Some(other) = last.replace(path.clone()) {
                    let _ = std::fs::remove_file(other);
                }
                return (path, true);
            }
            if let Some(other) = last.replace(path) {
                let _ = std::fs::remove_file(other);
            }
        }
        (last.expect("no candidate directory is writable"), false)
    }

    /// The bytes are the file's, whatever the cache held of it, and the
    /// cache holds afterwards what it held before.
    #[test]
    fn reads_the_whole_file_leaving_the_cache_as_found() {
        let bytes: Vec<u8> = (0..(3 * STRETCH + 1234))
            .map(|k| (k * 7 % 251) as u8)
            .collect();
        let (path, drops) = file_out_of_the_cache(&bytes);
        let _remove = Removed(path.clone());
        if !drops {
            eprintln!(
                "note: no candidate file system drops pages when advised to \
                 (the last was {}): the read is checked to leave every page cached",
                path.display()
            );
        }
        let file = std::fs::File::open(&path).unwrap();
        let len = bytes.len() as u64;
        let (found, pages) = cached_pages(&file, len);
        leave_page_cache_as_found();
        assert_eq!(read(&path).unwrap(), bytes, "out of the cache");
        // What the read brought in, it dropped: nearly nothing more is
        // cached than before. Nearly: the kernel keeps a page someone holds
        // a reference to at that moment (the machine's DAMON scanner, under
        // load, kept the first page once), so 1 page in 16 may stay.
        let (cached, _) = cached_pages(&file, len);
        assert!(
            (cached - found.min(cached)) * 16 <= pages,
            "{cached} of {pages} pages cached after the read, {found} before"
        );
        // Pages the cache held before, it still holds.
        std::fs::read(&path).unwrap();
        let (held, _) = cached_pages(&file, len);
        assert_eq!(read(&path).unwrap(), bytes, "held by the cache");
        let (after, _) = cached_pages(&file, len);
        assert!(
            after >= held,
            "{held} of {pages} pages cached before, {after} after"
        );
        assert_eq!(
            read(Path::new("/nonexistent/weft")).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    /// A file removed when the test ends, failed or not.
    struct Removed(std::path::PathBuf);

    impl Drop for Removed {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}
