//! Target memory: one trait, a live implementation over `/proc/PID/mem` and a
//! local buffer for tests and offline work.

use crate::{Error, RemoteAddr, Result};
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Reads and writes another address space.
pub trait ProcessMemory {
    /// Fills `buf` from `addr`; fails unless every byte was read.
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<()>;
    /// Writes all of `data` at `addr`, ignoring page protections (code included).
    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<()>;

    /// Reads `len` bytes into a new vector.
    fn read_vec(&self, addr: RemoteAddr, len: usize) -> Result<Vec<u8>> {
        let mut v = vec![0; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// Reads a little-endian u64.
    fn read_u64(&self, addr: RemoteAddr) -> Result<u64> {
        let mut b = [0; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The NUL-terminated string at `addr`, read a page at a time (so
    /// that one at the end of a mapping is read), at most `max` bytes
    /// (lossy UTF-8); none at address 0, where it cannot be read, or
    /// without a NUL within `max` bytes.
    fn read_c_string(&self, addr: RemoteAddr, max: usize) -> Option<String> {
        const PAGE: u64 = weft_abi::mman::PAGE_SIZE;
        if addr.0 == 0 {
            return None;
        }
        let mut out = Vec::new();
        let mut at = addr.0;
        while out.len() < max {
            let len = ((PAGE - at % PAGE) as usize).min(max - out.len());
            let piece = self.read_vec(RemoteAddr(at), len).ok()?;
            if let Some(end) = piece.iter().position(|&b| b == 0) {
                out.extend_from_slice(&piece[..end]);
                return Some(String::from_utf8_lossy(&out).into_owned());
            }
            out.extend_from_slice(&piece);
            at += len as u64;
        }
        None
    }
}

/// Memory of a live process through `/proc/PID/mem`.
///
/// Writes use the kernel's FOLL_FORCE path, which lets the tracer write to
/// read-only text (see proc(5), `/proc/pid/mem`; since Linux 6.12 the
/// `proc_mem.force_override` parameter may restrict this to ptrace
/// tracers, which weft is whenever it writes).
#[derive(Debug)]
pub struct ProcMemory {
    pid: i32,
    file: File,
}

impl ProcMemory {
    /// Opens the memory of `pid` for reading and writing.
    pub fn open(pid: i32) -> Result<ProcMemory> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(crate::proc_path(pid, "mem"))
            .map_err(|e| Error::from_proc_io(pid, e))?;
        Ok(ProcMemory { pid, file })
    }

    fn fault(&self, addr: RemoteAddr, len: usize, source: std::io::Error) -> Error {
        if !crate::is_alive(self.pid) {
            return Error::ProcessGone(self.pid);
        }
        Error::Memory {
            pid: self.pid,
            addr: addr.0,
            len,
            source,
        }
    }
}

impl ProcessMemory for ProcMemory {
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<()> {
        self.file
            .read_exact_at(buf, addr.0)
            .map_err(|e| self.fault(addr, buf.len(), e))
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<()> {
        crate::failpoint::step();
        self.file
            .write_all_at(data, addr.0)
            .map_err(|e| self.fault(addr, data.len(), e))
    }
}

/// A byte buffer standing at a base address: an address space for tests.
#[derive(Debug, Clone)]
pub struct LocalMemory {
    base: u64,
    bytes: std::cell::RefCell<Vec<u8>>,
}

impl LocalMemory {
    /// A buffer holding `bytes` at `base`.
    pub fn new(base: u64, bytes: Vec<u8>) -> LocalMemory {
        LocalMemory {
            base,
            bytes: std::cell::RefCell::new(bytes),
        }
    }

    /// A copy of the contents.
    pub fn contents(&self) -> Vec<u8> {
        self.bytes.borrow().clone()
    }

    fn range(&self, addr: RemoteAddr, len: usize) -> Result<std::ops::Range<usize>> {
        let size = self.bytes.borrow().len() as u64;
        match addr.0.checked_sub(self.base) {
            Some(off) if off + len as u64 <= size => Ok(off as usize..off as usize + len),
            _ => Err(Error::Memory {
                pid: 0,
                addr: addr.0,
                len,
                source: nix::errno::Errno::EIO.into(),
            }),
        }
    }
}

impl ProcessMemory for LocalMemory {
    fn read(&self, addr: RemoteAddr, buf: &mut [u8]) -> Result<()> {
        let r = self.range(addr, buf.len())?;
        buf.copy_from_slice(&self.bytes.borrow()[r]);
        Ok(())
    }

    fn write(&self, addr: RemoteAddr, data: &[u8]) -> Result<()> {
        let r = self.range(addr, data.len())?;
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A string that ends right at the end of the memory (as `AT_EXECFN`'s
    /// at the top of the stack) is read a page at a time.
    #[test]
    fn a_string_at_the_end_of_memory_is_read() {
        let base = 0x10000 - 6;
        let mem = LocalMemory::new(base, b"ab\0cd\0".to_vec());
        assert_eq!(
            mem.read_c_string(RemoteAddr(base), 4096).as_deref(),
            Some("ab")
        );
        assert_eq!(
            mem.read_c_string(RemoteAddr(base + 3), 4096).as_deref(),
            Some("cd")
        );
        let unterminated = LocalMemory::new(base, b"abcdef".to_vec());
        assert_eq!(unterminated.read_c_string(RemoteAddr(base), 4096), None);
        assert_eq!(mem.read_c_string(RemoteAddr(0), 4096), None);
    }

    #[test]
    fn local_memory_bounds() {
        let m = LocalMemory::new(0x1000, vec![1, 2, 3, 4]);
        let mut b = [0; 2];
        m.read(RemoteAddr(0x1002), &mut b).unwrap();
        assert_eq!(b, [3, 4]);
        assert!(m.read(RemoteAddr(0x1003), &mut b).is_err());
        m.write(RemoteAddr(0x1000), &[9]).unwrap();
        assert_eq!(m.contents(), vec![9, 2, 3, 4]);
    }

    #[test]
    fn proc_memory_reads_own_bytes() {
        let value: u64 = 0x1122_3344_5566_7788;
        let mem = ProcMemory::open(std::process::id() as i32).unwrap();
        let addr = RemoteAddr(&value as *const u64 as u64);
        assert_eq!(mem.read_u64(addr).unwrap(), value);
    }
}
