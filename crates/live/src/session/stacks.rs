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

/// Whether the stack word `words[i]` (`words` from [`stack_of`], from the
/// stack pointer up) is one a thread will jump to: a return address (the
/// bytes before it end in a `call`), or the pc saved in a signal frame
/// (the frame's return address, 22 words below, leads to a sigreturn
/// stub). A word too near the stack pointer to tell counts as one.
pub(super) fn leads_back(tracee: &Tracee, words: &[u64], i: usize) -> bool {
    let w = words[i];
    let Ok(before) = tracee.memory().read_vec(RemoteAddr(w.wrapping_sub(7)), 7) else {
        return true;
    };
    if ends_in_call(&before) {
        return true;
    }
    // rt_sigframe: pretcode, then ucontext (flags, link, 24-byte stack),
    // whose sigcontext holds r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx,
    // rsp, then rip: 176 bytes after pretcode.
    const SAVED_RIP: usize = 176 / 8;
    let Some(pretcode) = i.checked_sub(SAVED_RIP).map(|k| words[k]) else {
        return true;
    };
    const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05];
    tracee
        .memory()
        .read_vec(RemoteAddr(pretcode), SIGRETURN.len())
        .is_ok_and(|b| b == SIGRETURN)
}

/// Whether the 7 bytes before an address can end in a `call`: `call rel32`
/// (`e8`), or `call r/m64` (`ff /2`) of any length up to 7 bytes. It errs
/// towards yes: bytes that happen to look like a call count as one.
fn ends_in_call(before: &[u8]) -> bool {
    let n = before.len();
    if n >= 5 && before[n - 5] == 0xe8 {
        return true;
    }
    // `ff` then a ModRM whose reg field is 2, the call ending at the address.
    (2..=n.min(7)).any(|len| before[n - len] == 0xff && (before[n - len + 1] >> 3) & 7 == 2)
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

#[cfg(test)]
mod tests {
    use super::ends_in_call;

    #[test]
    fn calls_are_recognised_before_a_return_address() {
        // call rel32; call rax; call [rip+disp32]; call [rbx+8]; call r11.
        assert!(ends_in_call(&[0x90, 0x90, 0xe8, 1, 2, 3, 4]));
        assert!(ends_in_call(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xd0]));
        assert!(ends_in_call(&[0x90, 0xff, 0x15, 1, 2, 3, 4]));
        assert!(ends_in_call(&[0x90, 0x90, 0x90, 0x90, 0xff, 0x53, 0x08]));
        assert!(ends_in_call(&[0x90, 0x90, 0x90, 0x90, 0x41, 0xff, 0xd3]));
        // A jmp rax, a mov, or plain code: no call ends there.
        assert!(!ends_in_call(&[0x90, 0x90, 0x90, 0x90, 0x90, 0xff, 0xe0]));
        assert!(!ends_in_call(&[0x48, 0x89, 0xc7, 0x48, 0x89, 0xd6, 0xc3]));
    }
}
