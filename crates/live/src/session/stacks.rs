//! The stopped threads as the applier needs them: the words on their
//! stacks (return addresses and saved pcs among them), and where the C
//! library keeps each thread's id.

use super::*;

/// Every 8-byte word between thread `tid`'s stack pointer and the end of
/// its stack mapping, at most `limit` bytes: its return addresses, and the
/// pcs saved in its signal frames, are among them.
pub(super) fn stack_of(
    tracee: &Tracee,
    maps: &[weft_process::maps::MapEntry],
    tid: i32,
    limit: u64,
) -> Result<Vec<u64>> {
    let rsp = tracee.registers(tid)?.rsp;
    let Some(stack) = maps.iter().find(|m| rsp >= m.start.0 && rsp < m.end.0) else {
        return Ok(Vec::new());
    };
    let len = (stack.end.0 - rsp).min(limit) as usize;
    Ok(match tracee.memory().read_vec(RemoteAddr(rsp), len) {
        Ok(bytes) => bytes
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
            .collect(),
        Err(_) => Vec::new(),
    })
}

/// [`stack_of`] every thread, sorted and without duplicates.
pub(super) fn stack_words(tracee: &Tracee, pid: i32, limit: u64) -> Result<Vec<u64>> {
    let maps = weft_process::maps::read(pid)?;
    let mut words = Vec::new();
    for tid in tracee.threads() {
        words.extend(stack_of(tracee, &maps, tid, limit)?);
    }
    words.sort_unstable();
    words.dedup();
    Ok(words)
}

/// The pcs of the stopped threads.
pub(super) fn thread_pcs(tracee: &Tracee) -> Result<Vec<u64>> {
    Ok(tracee
        .thread_pcs()?
        .into_iter()
        .map(|(_, pc)| pc.0)
        .collect())
}

impl Session {
    /// The offset from the thread pointer at which every thread of the
    /// stopped process finds its own id (glibc's `struct pthread::tid`), or
    /// 0 when there is none: the first such offset past the thread
    /// pointer's own words (the TCB's self pointers).
    pub(super) fn find_tid_offset(&self, tracee: &Tracee) -> u32 {
        const FROM: usize = 0x10;
        const TO: usize = 0x400;
        let mut common: Option<Vec<usize>> = None;
        for tid in tracee.threads() {
            let Ok(regs) = tracee.registers(tid) else {
                return 0;
            };
            let Ok(bytes) = tracee.memory().read_vec(RemoteAddr(regs.fs_base), TO) else {
                return 0;
            };
            let here: Vec<usize> = (FROM..TO)
                .step_by(4)
                .filter(|&o| bytes[o..o + 4] == tid.to_le_bytes())
                .collect();
            common = Some(match common {
                None => here,
                Some(c) => c.into_iter().filter(|o| here.contains(o)).collect(),
            });
        }
        common
            .and_then(|c| c.first().copied())
            .map_or(0, |o| o as u32)
    }
}
