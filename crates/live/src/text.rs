//! Batched access to the target's code during an episode: the code is
//! read in windows of a few pages around what is asked for (each page
//! once), splices are applied to the cached pages, and each run of changed
//! pages is written back with a single write. A site costs no system call
//! of its own; libc's 3700 entries cost a few hundred writes, and a new
//! image's few sites a few reads rather than all its code.

use crate::Result;
use std::collections::{BTreeMap, BTreeSet};
use weft_process::{MapEntry, ProcessMemory, RemoteAddr};

const PAGE: u64 = weft_abi::mman::PAGE_SIZE;

/// Pages read at once around a page that is not cached yet (clipped to
/// its mapping).
const WINDOW: u64 = 16 * PAGE;

/// Bytes to write over code: a splice, or the original bytes back.
#[derive(Debug, Clone)]
pub(crate) struct Splice {
    /// Where they go.
    pub(crate) addr: u64,
    /// What goes there.
    pub(crate) bytes: Vec<u8>,
    /// One of a springboard and the short jump that leads to it.
    pub(crate) paired: bool,
}

/// Cached pages of the executable mappings, with pending changes.
pub(crate) struct TextBatch {
    mappings: Vec<MapEntry>,
    /// Page address to the page's bytes, pending changes included.
    cached: BTreeMap<u64, Vec<u8>>,
    dirty: BTreeSet<u64>,
}

impl TextBatch {
    /// A batch over the executable mappings of `pid`.
    pub(crate) fn new(pid: i32) -> Result<TextBatch> {
        let mappings = weft_process::maps::read(pid)?
            .into_iter()
            .filter(|m| m.exec)
            .collect();
        Ok(TextBatch {
            mappings,
            cached: BTreeMap::new(),
            dirty: BTreeSet::new(),
        })
    }

    /// The pages holding `[addr, addr + len)`, read where not cached yet,
    /// if one executable mapping holds the range.
    fn pages(&mut self, mem: &impl ProcessMemory, addr: u64, len: usize) -> Result<Option<()>> {
        let end = addr + len as u64;
        let Some(m) = self
            .mappings
            .iter()
            .find(|m| addr >= m.start.0 && end <= m.end.0)
        else {
            return Ok(None);
        };
        let (lo, hi) = (m.start.0, m.end.0);
        let mut page = addr & !(PAGE - 1);
        while page < end {
            if !self.cached.contains_key(&page) {
                let from = (page & !(WINDOW - 1)).max(lo);
                let to = (from + WINDOW).min(hi).max(page + PAGE);
                let bytes = mem.read_vec(RemoteAddr(from), (to - from) as usize)?;
                for (k, chunk) in bytes.chunks(PAGE as usize).enumerate() {
                    // A cached page may hold changes not written yet.
                    self.cached
                        .entry(from + k as u64 * PAGE)
                        .or_insert_with(|| chunk.to_vec());
                }
            }
            page += PAGE;
        }
        Ok(Some(()))
    }

    /// The current bytes at `addr`, pending changes included.
    pub(crate) fn read(
        &mut self,
        mem: &impl ProcessMemory,
        addr: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        if self.pages(mem, addr, len)?.is_none() {
            return Ok(mem.read_vec(RemoteAddr(addr), len)?);
        }
        let mut out = Vec::with_capacity(len);
        let mut at = addr;
        while at < addr + len as u64 {
            let page = at & !(PAGE - 1);
            let stop = (page + PAGE).min(addr + len as u64);
            out.extend_from_slice(
                &self.cached[&page][(at - page) as usize..(stop - page) as usize],
            );
            at = stop;
        }
        Ok(out)
    }

    /// Changes bytes at `addr` (written at `flush`; immediately if the
    /// address is outside the executable mappings).
    pub(crate) fn write(&mut self, mem: &impl ProcessMemory, addr: u64, data: &[u8]) -> Result<()> {
        if self.pages(mem, addr, data.len())?.is_none() {
            return Ok(mem.write(RemoteAddr(addr), data)?);
        }
        let mut at = addr;
        let mut rest = data;
        while !rest.is_empty() {
            let page = at & !(PAGE - 1);
            let n = ((page + PAGE - at) as usize).min(rest.len());
            let bytes = self.cached.get_mut(&page).expect("read by pages()");
            bytes[(at - page) as usize..(at - page) as usize + n].copy_from_slice(&rest[..n]);
            self.dirty.insert(page);
            rest = &rest[n..];
            at += n as u64;
        }
        Ok(())
    }

    /// Writes splices so that the target is whole whenever weft might
    /// die. The kernel copies a write to another process page by page,
    /// and a page whole, so a splice within one page is written as is. A
    /// splice across a page boundary, or one of a springboard pair (`paired`:
    /// the springboard must be whole before the short jump that leads to
    /// it, and out of use before it goes), goes in the order of the
    /// kernel's `text_poke_bp`: an `int3` over its first byte, then its
    /// other bytes, then its first byte, each pass flushed. Every state in
    /// between is whole: a thread meets the old instruction, the new one,
    /// or an `int3` that weft's trap table (which must already list each
    /// address) sends where the splice leads. Pending writes go out with
    /// the first flush.
    pub(crate) fn poke_in_phases(
        &mut self,
        mem: &impl ProcessMemory,
        splices: &[Splice],
    ) -> Result<()> {
        const INT3: u8 = 0xcc;
        let phased = |s: &&Splice| {
            let last = s.addr + s.bytes.len() as u64 - 1;
            s.paired || s.addr / PAGE != last / PAGE
        };
        for s in splices {
            if phased(&s) {
                self.write(mem, s.addr, &[INT3])?;
            } else {
                self.write(mem, s.addr, &s.bytes)?;
            }
        }
        self.flush(mem)?;
        let slow: Vec<&Splice> = splices.iter().filter(phased).collect();
        if slow.is_empty() {
            return Ok(());
        }
        for s in slow.iter().filter(|s| s.bytes.len() > 1) {
            self.write(mem, s.addr + 1, &s.bytes[1..])?;
        }
        self.flush(mem)?;
        for s in &slow {
            self.write(mem, s.addr, &s.bytes[..1])?;
        }
        self.flush(mem)
    }

    /// Writes every run of changed pages back, one write per run.
    pub(crate) fn flush(&mut self, mem: &impl ProcessMemory) -> Result<()> {
        let pages: Vec<u64> = std::mem::take(&mut self.dirty).into_iter().collect();
        let mut k = 0;
        while k < pages.len() {
            // A run never crosses mappings.
            let mapping_end = self
                .mappings
                .iter()
                .find(|m| pages[k] >= m.start.0 && pages[k] < m.end.0)
                .map_or(pages[k] + PAGE, |m| m.end.0);
            let start = pages[k];
            let mut run = self.cached[&start].clone();
            let mut end = start + PAGE;
            k += 1;
            while k < pages.len() && pages[k] == end && end < mapping_end {
                run.extend_from_slice(&self.cached[&end]);
                end += PAGE;
                k += 1;
            }
            mem.write(RemoteAddr(start), &run)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_process::LocalMemory;

    /// A batch over one executable mapping of `pages` pages at `base`.
    fn batch_over(base: u64, pages: u64) -> TextBatch {
        TextBatch {
            mappings: weft_process::maps::parse(&format!(
                "{:x}-{:x} r-xp 00000000 00:00 1 /x\n",
                base,
                base + pages * PAGE
            )),
            cached: BTreeMap::new(),
            dirty: BTreeSet::new(),
        }
    }

    #[test]
    fn writes_reach_memory_only_on_flush_and_in_page_runs() {
        let base = 0x10000u64;
        let mem = LocalMemory::new(base, vec![0x90; 3 * PAGE as usize]);
        let mut batch = batch_over(base, 3);
        batch.write(&mem, base + 10, &[0xe9, 1, 2, 3, 4]).unwrap();
        batch.write(&mem, base + 2 * PAGE + 5, &[0xcc]).unwrap();
        assert_eq!(batch.read(&mem, base + 10, 2).unwrap(), vec![0xe9, 1]);
        assert_eq!(mem.contents()[10], 0x90, "not written before flush");
        batch.flush(&mem).unwrap();
        let c = mem.contents();
        assert_eq!(&c[10..15], &[0xe9, 1, 2, 3, 4]);
        assert_eq!(c[2 * PAGE as usize + 5], 0xcc);
        assert_eq!(c[PAGE as usize], 0x90);
    }

    #[test]
    fn a_range_across_windows_reads_and_writes_whole() {
        let base = 0x13000u64;
        let pages = WINDOW / PAGE * 2 + 3;
        let old: Vec<u8> = (0..pages * PAGE).map(|i| (i % 251) as u8).collect();
        let mem = LocalMemory::new(base, old.clone());
        let mut batch = batch_over(base, pages);
        // The mapping starts off a window's alignment; the range crosses
        // the first window's end.
        let at = (base & !(WINDOW - 1)) + WINDOW - 3;
        let o = (at - base) as usize;
        assert_eq!(batch.read(&mem, at, 8).unwrap(), &old[o..o + 8]);
        batch.write(&mem, at, &[1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(
            batch.read(&mem, at - 1, 8).unwrap(),
            [old[o - 1], 1, 2, 3, 4, 5, 6, old[o + 6]]
        );
        // A page read later keeps the pending change.
        let last = base + (pages - 1) * PAGE;
        assert_eq!(
            batch.read(&mem, last, 4).unwrap(),
            &old[(last - base) as usize..][..4]
        );
        batch.flush(&mem).unwrap();
        let mut want = old;
        want[o..o + 6].copy_from_slice(&[1, 2, 3, 4, 5, 6]);
        assert_eq!(mem.contents(), want);
    }

    /// Memory that keeps a copy of itself after every write.
    struct Recording {
        mem: LocalMemory,
        states: std::cell::RefCell<Vec<Vec<u8>>>,
    }

    impl ProcessMemory for Recording {
        fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> weft_process::Result<()> {
            self.mem.read(addr, buf)
        }
        fn write(&self, addr: RemoteAddr, data: &[u8]) -> weft_process::Result<()> {
            self.mem.write(addr, data)?;
            self.states.borrow_mut().push(self.mem.contents());
            Ok(())
        }
    }

    #[test]
    fn phased_splices_are_whole_after_every_write() {
        let base = 0x10000u64;
        let old = vec![0x90u8; 3 * PAGE as usize];
        let mem = Recording {
            mem: LocalMemory::new(base, old.clone()),
            states: Default::default(),
        };
        let mut batch = batch_over(base, 3);
        // One jmp across the first page boundary, one inside the last page,
        // one single int3.
        let splice = |addr, bytes: Vec<u8>, paired| Splice {
            addr,
            bytes,
            paired,
        };
        let splices = vec![
            splice(base + PAGE - 2, vec![0xe9, 1, 2, 3, 4], false),
            splice(base + 2 * PAGE + 8, vec![0xe9, 5, 6, 7, 8], false),
            splice(base + 2 * PAGE + 100, vec![0xeb, 0x10], true),
            splice(base + 40, vec![0xcc], false),
        ];
        batch.poke_in_phases(&mem, &splices).unwrap();
        let states = mem.states.borrow();
        assert!(states.len() >= 3);
        for (k, state) in states.iter().enumerate() {
            for Splice {
                addr, bytes: new, ..
            } in &splices
            {
                let at = (addr - base) as usize;
                let now = &state[at..at + new.len()];
                let whole = now == &old[at..at + new.len()] || now == &new[..] || now[0] == 0xcc;
                assert!(whole, "after write {k}: {now:x?} at {addr:#x}");
            }
        }
        let last = states.last().unwrap();
        for Splice {
            addr, bytes: new, ..
        } in &splices
        {
            let at = (addr - base) as usize;
            assert_eq!(&last[at..at + new.len()], &new[..]);
        }
    }
}
