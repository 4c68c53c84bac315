//! Batched access to the target's code during an episode: each executable
//! mapping is read once, splices are applied to the cached pages, and each
//! run of changed pages is written back with a single write. A site costs
//! no system call of its own; libc's 3700 entries cost a few hundred writes.

use crate::Result;
use std::collections::BTreeSet;
use weft_process::{MapEntry, ProcessMemory, RemoteAddr};

const PAGE: u64 = weft_abi::mman::PAGE_SIZE;

/// Cached executable mappings with pending changes.
pub(crate) struct TextBatch {
    mappings: Vec<MapEntry>,
    cached: Vec<(u64, Vec<u8>)>,
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
            cached: Vec::new(),
            dirty: BTreeSet::new(),
        })
    }

    /// Index of the cached mapping holding `[addr, addr + len)`, reading it on first use.
    fn chunk(&mut self, mem: &impl ProcessMemory, addr: u64, len: usize) -> Result<Option<usize>> {
        let end = addr + len as u64;
        if let Some(i) = self
            .cached
            .iter()
            .position(|(s, b)| addr >= *s && end <= s + b.len() as u64)
        {
            return Ok(Some(i));
        }
        let Some(m) = self
            .mappings
            .iter()
            .find(|m| addr >= m.start.0 && end <= m.end.0)
        else {
            return Ok(None);
        };
        let bytes = mem.read_vec(m.start, m.len() as usize)?;
        self.cached.push((m.start.0, bytes));
        Ok(Some(self.cached.len() - 1))
    }

    /// The current bytes at `addr`, pending changes included.
    pub(crate) fn read(
        &mut self,
        mem: &impl ProcessMemory,
        addr: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        match self.chunk(mem, addr, len)? {
            Some(i) => {
                let (s, b) = &self.cached[i];
                let off = (addr - s) as usize;
                Ok(b[off..off + len].to_vec())
            }
            None => Ok(mem.read_vec(RemoteAddr(addr), len)?),
        }
    }

    /// Changes bytes at `addr` (written at `flush`; immediately if the
    /// address is outside the executable mappings).
    pub(crate) fn write(&mut self, mem: &impl ProcessMemory, addr: u64, data: &[u8]) -> Result<()> {
        match self.chunk(mem, addr, data.len())? {
            Some(i) => {
                let (s, b) = &mut self.cached[i];
                let off = (addr - *s) as usize;
                b[off..off + data.len()].copy_from_slice(data);
                let first = addr & !(PAGE - 1);
                let last = (addr + data.len() as u64 - 1) & !(PAGE - 1);
                self.dirty.extend((first..=last).step_by(PAGE as usize));
                Ok(())
            }
            None => Ok(mem.write(RemoteAddr(addr), data)?),
        }
    }

    /// Writes every run of changed pages back, one write per run.
    pub(crate) fn flush(&mut self, mem: &impl ProcessMemory) -> Result<()> {
        let pages: Vec<u64> = std::mem::take(&mut self.dirty).into_iter().collect();
        let mut k = 0;
        while k < pages.len() {
            let start = pages[k];
            let mut end = start + PAGE;
            k += 1;
            while k < pages.len() && pages[k] == end {
                end += PAGE;
                k += 1;
            }
            // A run never crosses mappings: split it where the cache does.
            let mut at = start;
            while at < end {
                let Some(i) = self
                    .cached
                    .iter()
                    .position(|(s, b)| at >= *s && at < s + b.len() as u64)
                else {
                    break;
                };
                let (s, b) = &self.cached[i];
                let stop = end.min(s + b.len() as u64);
                mem.write(RemoteAddr(at), &b[(at - s) as usize..(stop - s) as usize])?;
                at = stop;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_process::LocalMemory;

    #[test]
    fn writes_reach_memory_only_on_flush_and_in_page_runs() {
        let base = 0x10000u64;
        let mem = LocalMemory::new(base, vec![0x90; 3 * PAGE as usize]);
        let mut batch = TextBatch {
            mappings: weft_process::maps::parse(&format!(
                "{:x}-{:x} r-xp 00000000 00:00 1 /x\n",
                base,
                base + 3 * PAGE
            )),
            cached: vec![],
            dirty: BTreeSet::new(),
        };
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
}
