//! Remote addresses: an address in the target, never a Rust pointer.

use std::fmt;
use std::ops::{Add, Sub};

/// An address in the target process's address space.
///
/// It prints as `0x1234` with `{}` and `{:?}`; `{:x}` and its flags
/// (`{:#018x}`) print the number as a `u64` would.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RemoteAddr(pub u64);

impl RemoteAddr {
    /// The raw value.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl Add<u64> for RemoteAddr {
    type Output = RemoteAddr;
    fn add(self, rhs: u64) -> RemoteAddr {
        RemoteAddr(self.0.wrapping_add(rhs))
    }
}

impl Sub<RemoteAddr> for RemoteAddr {
    type Output = u64;
    fn sub(self, rhs: RemoteAddr) -> u64 {
        self.0.wrapping_sub(rhs.0)
    }
}

impl fmt::Debug for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::Display for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

impl fmt::LowerHex for RemoteAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::LowerHex::fmt(&self.0, f)
    }
}
