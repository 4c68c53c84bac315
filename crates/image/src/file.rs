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

    /// The bytes are the file's, whatever the cache held of it.
    #[test]
    fn reads_the_whole_file_leaving_the_cache_as_found() {
        // In the crate's directory, on a disk: a tmpfs (`/tmp` on some
        // machines) keeps its pages whatever is advised.
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!(".file-test-{}", std::process::id()));
        let bytes: Vec<u8> = (0..(3 * STRETCH + 1234))
            .map(|k| (k * 7 % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        leave_page_cache_as_found();
        assert_eq!(read(&path).unwrap(), bytes, "held by the cache");
        let file = std::fs::File::open(&path).unwrap();
        rustix::fs::fdatasync(&file).unwrap();
        fadvise(&file, 0, None, Advice::DontNeed).unwrap();
        assert_eq!(read(&path).unwrap(), bytes, "out of the cache");
        // What the read brought in, it dropped: a read that does not
        // wait for the disk finds nothing (where the file system can say).
        // Nearly nothing: the kernel keeps a page someone holds a
        // reference to at that moment (the machine's DAMON scanner, under
        // load, kept the first page once), so 1 page in 16 may stay.
        let mut page = [0u8; 4096];
        let (mut cached, mut pages) = (0, 0);
        for at in (0..bytes.len() as u64).step_by(page.len()) {
            let got = preadv2(
                &file,
                &mut [IoSliceMut::new(&mut page)],
                at,
                ReadWriteFlags::NOWAIT,
            );
            match got {
                Err(Errno::AGAIN) => {}
                Err(Errno::OPNOTSUPP) => break,
                Ok(_) => cached += 1,
                Err(e) => panic!("page at {at}: {e}"),
            }
            pages += 1;
        }
        assert!(
            cached * 16 <= pages,
            "{cached} of {pages} pages still cached"
        );
        assert_eq!(
            read(Path::new("/nonexistent/weft")).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
        std::fs::remove_file(&path).unwrap();
    }
}
