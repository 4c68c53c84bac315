//! File addresses: the link-time virtual addresses an ELF file itself gives
//! (segment headers, symbols, `.eh_frame`, USDT notes, event descriptors),
//! before any load bias.
//!
//! This module owns [`FileAddr`] and nothing else. An address in a running
//! process is another type (`weft_process::RemoteAddr`), which this crate
//! cannot name: it knows files, not processes. The only way from one to the
//! other is a module's load bias (`weft_live::Module::runtime` and
//! `Module::file_addr`), so passing one where the other is expected does not
//! compile. Sizes and file offsets stay plain `u64`: they are lengths, not
//! addresses.

use std::fmt;
use std::ops::{Add, Sub};

/// A link-time virtual address in an ELF file (`p_vaddr`, `st_value`, ...),
/// as opposed to an address in a process.
///
/// It prints as `0x1234` with `{}`; `{:x}` and its flags (`{:#018x}`) print
/// the number as a `u64` would.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FileAddr(pub u64);

impl FileAddr {
    /// The raw value, for arithmetic on numbers or for encoding.
    pub fn get(self) -> u64 {
        self.0
    }

    /// `self - rhs`, or `None` if that would go below zero.
    pub fn checked_sub(self, rhs: u64) -> Option<FileAddr> {
        self.0.checked_sub(rhs).map(FileAddr)
    }
}

/// An address `rhs` bytes further on (overflow checked like `u64 + u64`).
impl Add<u64> for FileAddr {
    type Output = FileAddr;
    fn add(self, rhs: u64) -> FileAddr {
        FileAddr(self.0 + rhs)
    }
}

/// The distance in bytes from `rhs` up to `self` (overflow checked like
/// `u64 - u64`).
impl Sub<FileAddr> for FileAddr {
    type Output = u64;
    fn sub(self, rhs: FileAddr) -> u64 {
        self.0 - rhs.0
    }
}

impl fmt::Debug for FileAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FileAddr({:#x})", self.0)
    }
}

impl fmt::Display for FileAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::LowerHex for FileAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_printing() {
        let a = FileAddr(0x1000);
        assert_eq!(a + 0x20, FileAddr(0x1020));
        assert_eq!((a + 0x20) - a, 0x20);
        assert_eq!(a.checked_sub(0x1001), None);
        assert_eq!(a.checked_sub(0x10), Some(FileAddr(0xff0)));
        assert_eq!(format!("{a}"), "0x1000");
        assert_eq!(format!("{a:x} {a:#x} {a:#010x}"), "1000 0x1000 0x00001000");
        assert_eq!(format!("{a:?}"), "FileAddr(0x1000)");
        assert!(FileAddr(1) < FileAddr(2));
    }
}
