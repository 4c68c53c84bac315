//! weft's own ABI, not the kernel's: the records of a paths trace's
//! schedule stream, which weft's BPF program (`crates/schedule/src/bpf/
//! schedule.bpf.c`, which repeats these numbers) writes and `weft regen
//! --interleave` reads.
//!
//! A record is [`SIZE`] bytes, little-endian:
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | `ns` u64 | `CLOCK_MONOTONIC` |
//! | 8 | `pid` u32 | the thread group |
//! | 12 | `tid` u32 | the thread |
//! | 16 | `kind` u16 | [`Kind`] |
//! | 18 | `cpu` u16 | |
//! | 20 | `nr` u32 | the system call's number (entry and exit) |
//! | 24 | `seq` u64 | the handover number of the buffer the thread's cursor points into, [`NO_BUFFER`] if none |
//! | 32 | `offset` u64 | bytes the thread had written into that buffer |
//!
//! `seq` and `offset` say where the thread's witness stream was at that
//! moment (read from its TCB's cursor and its buffer's descriptor); a
//! switch-in has none (the thread has not run since its switch-out).

/// Bytes of a record.
pub const SIZE: usize = 40;
/// `seq` of a thread with no buffer (its cursor is 0 or not in the pool).
pub const NO_BUFFER: u64 = u64::MAX;

/// What a record notes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The thread stopped running (`sched_switch`, as the previous task).
    SwitchOut,
    /// The thread starts running (`sched_switch`, as the next task).
    SwitchIn,
    /// The thread entered a system call.
    SyscallEntry,
    /// The thread returns from a system call.
    SyscallExit,
}

impl Kind {
    /// The number the BPF program writes.
    pub fn code(self) -> u16 {
        match self {
            Kind::SwitchOut => 1,
            Kind::SwitchIn => 2,
            Kind::SyscallEntry => 3,
            Kind::SyscallExit => 4,
        }
    }

    fn from_code(code: u16) -> Option<Kind> {
        [
            Kind::SwitchOut,
            Kind::SwitchIn,
            Kind::SyscallEntry,
            Kind::SyscallExit,
        ]
        .into_iter()
        .find(|k| k.code() == code)
    }
}

/// One record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// `CLOCK_MONOTONIC` nanoseconds.
    pub ns: u64,
    /// Thread group.
    pub pid: u32,
    /// Thread.
    pub tid: u32,
    /// What happened.
    pub kind: Kind,
    /// The CPU.
    pub cpu: u16,
    /// The system call's number (entry and exit), else 0.
    pub nr: u32,
    /// The buffer's handover number, or [`NO_BUFFER`].
    pub seq: u64,
    /// Bytes written into it.
    pub offset: u64,
}

impl Event {
    /// Reads a record; `None` if it is short or its kind unknown.
    pub fn parse(b: &[u8]) -> Option<Event> {
        let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
        let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
        let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
        Some(Event {
            ns: u64_at(0)?,
            pid: u32_at(8)?,
            tid: u32_at(12)?,
            kind: Kind::from_code(u16_at(16)?)?,
            cpu: u16_at(18)?,
            nr: u32_at(20)?,
            seq: u64_at(24)?,
            offset: u64_at(32)?,
        })
    }

    /// The record's bytes.
    pub fn to_bytes(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[0..8].copy_from_slice(&self.ns.to_le_bytes());
        b[8..12].copy_from_slice(&self.pid.to_le_bytes());
        b[12..16].copy_from_slice(&self.tid.to_le_bytes());
        b[16..18].copy_from_slice(&self.kind.code().to_le_bytes());
        b[18..20].copy_from_slice(&self.cpu.to_le_bytes());
        b[20..24].copy_from_slice(&self.nr.to_le_bytes());
        b[24..32].copy_from_slice(&self.seq.to_le_bytes());
        b[32..40].copy_from_slice(&self.offset.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_what_was_written() {
        let e = Event {
            ns: 123_456_789,
            pid: 77,
            tid: 78,
            kind: Kind::SyscallExit,
            cpu: 1,
            nr: 0,
            seq: (3 << 40) | 5,
            offset: 4095,
        };
        assert_eq!(Event::parse(&e.to_bytes()), Some(e));
        assert_eq!(Event::parse(&e.to_bytes()[..39]), None);
        let mut b = e.to_bytes();
        b[16] = 9;
        assert_eq!(Event::parse(&b), None, "an unknown kind");
    }
}
