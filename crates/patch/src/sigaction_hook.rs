//! The `sigaction` hook: code spliced at the C library's `sigaction`
//! (glibc's `__libc_sigaction`, which `sigaction`, `signal`, `sigset` and
//! glibc's own callers all reach) while one of weft's signal handlers is
//! installed: the SIGTRAP handler of splices, and the SIGSEGV handler that
//! hands witness buffers over (`weft_paths`). A call for a signal weft
//! keeps never reaches the kernel: the hook keeps the program's action in
//! weft's memory ([`Kept::action`]), where weft's handler chains to it,
//! and answers the old action from there, so the program sees exactly the
//! actions it set and weft's handler stays in front. Every other signal
//! goes on to the real function; if its new action would block one of the
//! signals weft must always receive (a fault cannot wait: the kernel kills
//! a thread that faults with SIGSEGV blocked), the real function gets a
//! copy of the action without them.
//!
//! The emulation follows glibc and the kernel: the new action's handler,
//! its flags sign-extended from glibc's `int` with `SA_RESTORER` added,
//! glibc's `__restore_rt` as restorer, and the first 64 signals of its
//! mask without SIGKILL and SIGSTOP; the old action written back handler,
//! mask (first 8 bytes only), flags and restorer, read before the new one
//! is stored (`act` and `oact` may be the same). It returns 0. When weft
//! takes its SIGTRAP handler out, it installs the program's latest action.
//!
//! Only the process named by [`Kept::process`] is emulated. A child that
//! shares weft's memory with it (a `vfork` child, or a forked child for
//! memory weft shares) has actions of its own: its calls go on to the
//! kernel, so a child that sets SIGTRAP (a shell's subshell resetting its
//! traps) never changes the action kept for its parent.

use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_abi::sigaction::{self as ka, libc_layout as la, SA_RESTORER};
use weft_abi::signal::{SIGKILL, SIGSTOP};

/// A signal whose action the hook keeps in weft's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// The signal.
    pub signal: i32,
    /// Where the program's kernel `struct sigaction` for it is kept.
    pub action: u64,
    /// Where the pid (u64) of the process whose action it is lies.
    pub process: u64,
}

/// Hook code at `at` keeping the actions of `kept`, with glibc's signal
/// return trampoline at `restore_rt`; other signals jump to
/// `continuation` (a trampoline running the displaced instructions), with
/// the signals of `unmasked` (bit n-1 for signal n) taken out of their
/// new action's mask.
pub fn hook_code(
    at: u64,
    kept: &[Kept],
    unmasked: u64,
    restore_rt: u64,
    continuation: u64,
) -> Result<Vec<u8>> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut other = a.create_label();
    let mut plain = a.create_label();
    let mut emulate = a.create_label();
    let mut no_new = a.create_label();
    let mut no_old = a.create_label();
    let mut done = a.create_label();
    let mut restore_lit = a.create_label();
    let mut continuation_lit = a.create_label();
    let mut keeps: Vec<(CodeLabel, CodeLabel, CodeLabel)> = Vec::new();
    for _ in kept {
        keeps.push((a.create_label(), a.create_label(), a.create_label()));
    }
    let unblockable = !((1u64 << (SIGKILL - 1)) | (1u64 << (SIGSTOP - 1)) | unmasked);
    // A copy of glibc's `struct sigaction`, keeping the stack 16-byte
    // aligned for the call (8 mod 16 at entry, the return address pushed).
    let copy = la::SIZE.next_multiple_of(16) as i32 + 8;
    (|| -> std::result::Result<(), IcedError> {
        // edi = signal, rsi = act, rdx = oact (glibc layout); only
        // caller-saved registers are used, as in any function.
        for (k, (entry, _, _)) in kept.iter().zip(keeps.iter()) {
            a.cmp(edi, k.signal)?;
            a.je(*entry)?;
        }
        a.jmp(other)?;
        for (entry, process_lit, action_lit) in keeps.iter_mut() {
            a.set_label(entry)?;
            // getpid: rax, rcx and r11 are the system call's; the arguments stay.
            a.mov(eax, weft_abi::syscall::GETPID)?;
            a.syscall()?;
            a.mov(r8, qword_ptr(*process_lit))?;
            a.cmp(eax, dword_ptr(r8))?;
            a.jne(plain)?;
            a.mov(r8, qword_ptr(*action_lit))?;
            a.jmp(emulate)?;
        }
        // r8 = the kept action.
        a.set_label(&mut emulate)?;
        a.test(rsi, rsi)?;
        a.jz(no_new)?;
        a.mov(r9, qword_ptr(rsi + la::HANDLER as i32))?;
        a.movsxd(r10, dword_ptr(rsi + la::FLAGS as i32))?;
        a.or(r10, SA_RESTORER as i32)?;
        a.mov(r11, qword_ptr(rsi + la::MASK as i32))?;
        a.mov(rax, unblockable)?;
        a.and(r11, rax)?;
        a.set_label(&mut no_new)?;
        a.test(rdx, rdx)?;
        a.jz(no_old)?;
        a.mov(rax, qword_ptr(r8 + ka::HANDLER as i32))?;
        a.mov(qword_ptr(rdx + la::HANDLER as i32), rax)?;
        a.mov(rax, qword_ptr(r8 + ka::MASK as i32))?;
        a.mov(qword_ptr(rdx + la::MASK as i32), rax)?;
        a.mov(eax, dword_ptr(r8 + ka::FLAGS as i32))?;
        a.mov(dword_ptr(rdx + la::FLAGS as i32), eax)?;
        a.mov(rax, qword_ptr(r8 + ka::RESTORER as i32))?;
        a.mov(qword_ptr(rdx + la::RESTORER as i32), rax)?;
        a.set_label(&mut no_old)?;
        a.test(rsi, rsi)?;
        a.jz(done)?;
        // The handler last: weft's handler reads it first.
        a.mov(qword_ptr(r8 + ka::MASK as i32), r11)?;
        a.mov(qword_ptr(r8 + ka::FLAGS as i32), r10)?;
        a.mov(rax, qword_ptr(restore_lit))?;
        a.mov(qword_ptr(r8 + ka::RESTORER as i32), rax)?;
        a.mov(qword_ptr(r8 + ka::HANDLER as i32), r9)?;
        a.set_label(&mut done)?;
        a.xor(eax, eax)?;
        a.ret()?;
        // Another signal: a new action whose mask holds a signal of
        // `unmasked` goes on as a copy without it.
        a.set_label(&mut other)?;
        if unmasked != 0 {
            a.test(rsi, rsi)?;
            a.jz(plain)?;
            a.mov(rax, unmasked)?;
            a.test(qword_ptr(rsi + la::MASK as i32), rax)?;
            a.jz(plain)?;
            a.sub(rsp, copy)?;
            for k in 0..(la::SIZE / 8) as i32 {
                a.mov(rax, qword_ptr(rsi + 8 * k))?;
                a.mov(qword_ptr(rsp + 8 * k), rax)?;
            }
            a.mov(rax, !unmasked)?;
            a.and(qword_ptr(rsp + la::MASK as i32), rax)?;
            a.mov(rsi, rsp)?;
            a.call(qword_ptr(continuation_lit))?;
            a.add(rsp, copy)?;
            a.ret()?;
        }
        a.set_label(&mut plain)?;
        a.jmp(qword_ptr(continuation_lit))?;
        for (k, (_, process_lit, action_lit)) in kept.iter().zip(keeps.iter_mut()) {
            a.set_label(process_lit)?;
            a.dq(&[k.process])?;
            a.set_label(action_lit)?;
            a.dq(&[k.action])?;
        }
        a.set_label(&mut restore_lit)?;
        a.dq(&[restore_rt])?;
        a.set_label(&mut continuation_lit)?;
        a.dq(&[continuation])?;
        Ok(())
    })()
    .map_err(enc)?;
    a.assemble(at).map_err(enc)
}

/// glibc's `__restore_rt` (`mov $15, %rax; syscall`: `rt_sigreturn`) in
/// `code`, a module's executable bytes starting at `base`: its address if
/// exactly one copy is there, 16-byte aligned as glibc places it.
pub fn find_restore_rt(code: &[u8], base: u64) -> Option<u64> {
    const RESTORE_RT: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05];
    // Only the 16-byte aligned offsets can hold it: a sixteenth of the
    // comparisons of every window (the C library's code is 1.5 MiB, looked
    // at in every process).
    let first_aligned = (16 - (base % 16) as usize) % 16;
    let mut found = (first_aligned..code.len())
        .step_by(16)
        .filter(|&i| code[i..].starts_with(&RESTORE_RT))
        .map(|i| base + i as u64);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::region::trap_table as tt;
    use weft_abi::sigaction::{SA_NODEFER, SA_RESETHAND, SA_SIGINFO};

    /// Executable memory holding `code` at its start.
    struct Exec {
        at: *mut u8,
        len: usize,
    }

    impl Exec {
        fn new(len: usize) -> Exec {
            // SAFETY: a fresh private anonymous mapping, owned by Exec and
            // unmapped in its Drop; nothing else refers to it.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            Exec { at: at.cast(), len }
        }
    }

    impl Drop for Exec {
        fn drop(&mut self) {
            // SAFETY: the mapping Exec::new made, no longer used.
            unsafe { libc::munmap(self.at.cast(), self.len) };
        }
    }

    type Sigaction = extern "C" fn(i32, *const libc::sigaction, *mut libc::sigaction) -> i32;

    /// Runs the hook on a table holding `program` (a kernel action) for
    /// this process and returns what it answered, the table's action
    /// after, and the value.
    fn call(
        sig: i32,
        act: Option<&libc::sigaction>,
        program: [u64; 4],
    ) -> (libc::sigaction, [u64; 4], i32, u64, u64) {
        call_as(std::process::id() as u64, sig, act, program)
    }

    /// [`call`] with `process` as the table's `PROCESS`.
    fn call_as(
        process: u64,
        sig: i32,
        act: Option<&libc::sigaction>,
        program: [u64; 4],
    ) -> (libc::sigaction, [u64; 4], i32, u64, u64) {
        let mem = Exec::new(8192);
        let table = mem.at as u64 + 4096;
        let continuation = mem.at as u64 + 2048;
        // The continuation returns 77 (the real function would run).
        let kept = Kept {
            signal: libc::SIGTRAP,
            action: table + tt::OLD_ACTION,
            process: table + tt::PROCESS,
        };
        let seen_mask = table + 2048;
        let code = hook_code(
            mem.at as u64,
            &[kept],
            1 << (libc::SIGSEGV - 1),
            0x5150,
            continuation,
        )
        .unwrap();
        // SAFETY: the mapping is 8 KiB, writable; the code and the little
        // continuation fit in the first 4 KiB, the table in the second.
        let (oact, after, ret, seen) = unsafe {
            std::ptr::copy_nonoverlapping(code.as_ptr(), mem.at, code.len());
            // test %rsi, %rsi; jz 1f; mov 8(%rsi), %rax; movabs %rax,
            // seen_mask; 1: mov $77, %eax; ret
            let mut ret77 = vec![
                0x48, 0x85, 0xf6, 0x74, 14, 0x48, 0x8b, 0x46, 0x08, 0x48, 0xa3,
            ];
            ret77.extend(seen_mask.to_le_bytes());
            ret77.extend([0xb8, 77, 0, 0, 0, 0xc3]);
            std::ptr::copy_nonoverlapping(ret77.as_ptr(), mem.at.add(2048), ret77.len());
            let actions = mem
                .at
                .add(4096 + tt::OLD_ACTION as usize)
                .cast::<[u64; 4]>();
            actions.write(program);
            mem.at
                .add(4096 + tt::PROCESS as usize)
                .cast::<u64>()
                .write(process);
            let hook: Sigaction = std::mem::transmute(mem.at);
            let mut oact: libc::sigaction = std::mem::zeroed();
            std::ptr::write_bytes(std::ptr::addr_of_mut!(oact.sa_mask).cast::<u8>(), 0xee, 128);
            let ret = hook(sig, act.map_or(std::ptr::null(), |a| a), &mut oact);
            let seen = mem.at.add(4096 + 2048).cast::<u64>().read();
            (oact, actions.read(), ret, seen)
        };
        (oact, after, ret, 0x5150, seen)
    }

    #[test]
    fn another_process_sharing_the_table_reaches_the_real_function() {
        let program = [0x1234, SA_SIGINFO | SA_RESTORER, 0x4321, 0];
        // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags).
        let act: libc::sigaction = unsafe { std::mem::zeroed() };
        let other = u64::from(std::process::id()) + 1;
        let (_, after, ret, _, _) = call_as(other, libc::SIGTRAP, Some(&act), program);
        assert_eq!(ret, 77, "a forked child's call goes on to the kernel");
        assert_eq!(after, program, "the parent's action is untouched");
    }

    #[test]
    fn sigtrap_actions_stay_in_the_table_and_others_go_on() {
        let program = [
            0x1234,
            SA_SIGINFO | SA_RESTORER,
            0x4321,
            0x0000_0000_0000_0100,
        ];
        // Other signals: the real function runs.
        assert_eq!(call(libc::SIGSEGV, None, program).2, 77);
        // A query answers the program's action, the table unchanged.
        let (oact, after, ret, _, _) = call(libc::SIGTRAP, None, program);
        assert_eq!(ret, 0);
        assert_eq!(after, program);
        assert_eq!(oact.sa_sigaction, 0x1234);
        assert_eq!(oact.sa_flags, (SA_SIGINFO | SA_RESTORER) as i32);
        assert_eq!(oact.sa_restorer.map(|f| f as usize), Some(0x4321));
        // SAFETY: sigset_t is 128 plain bytes on x86-64 glibc.
        let mask: [u8; 128] = unsafe { std::mem::transmute(oact.sa_mask) };
        assert_eq!(&mask[..8], &0x100u64.to_le_bytes());
        assert!(mask[8..].iter().all(|&b| b == 0xee), "only 8 bytes written");
        // A new action replaces the program's, as the kernel would keep it.
        // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags).
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = 0xabcd;
        act.sa_flags = (SA_RESETHAND | SA_NODEFER) as u32 as i32;
        // SAFETY: sigaddset on a valid set.
        unsafe {
            libc::sigaddset(&mut act.sa_mask, libc::SIGUSR1);
            libc::sigaddset(&mut act.sa_mask, libc::SIGKILL);
        }
        let (oact, after, _, restore_rt, _) = call(libc::SIGTRAP, Some(&act), program);
        assert_eq!(oact.sa_sigaction, 0x1234, "the old action answered first");
        assert_eq!(after[0], 0xabcd);
        assert_eq!(
            after[1],
            0xffff_ffff_8000_0000 | SA_NODEFER | SA_RESTORER,
            "glibc's int flags, sign-extended"
        );
        assert_eq!(after[2], restore_rt);
        assert_eq!(
            after[3],
            1 << (libc::SIGUSR1 - 1),
            "SIGKILL cannot be blocked"
        );
    }

    #[test]
    fn other_actions_never_block_a_signal_weft_must_receive() {
        let program = [0x1234, SA_SIGINFO | SA_RESTORER, 0x4321, 0];
        // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags).
        let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
        act.sa_sigaction = 0xabcd;
        // SAFETY: sigfillset on a valid set.
        unsafe { libc::sigfillset(&mut act.sa_mask) };
        let before = act.sa_mask;
        let (_, after, ret, _, seen) = call(libc::SIGINT, Some(&act), program);
        assert_eq!(ret, 77, "the real function runs");
        assert_eq!(after, program, "the kept action is untouched");
        // SAFETY: sigset_t is 128 plain bytes on x86-64 glibc.
        let (a, b): ([u8; 128], [u8; 128]) = unsafe {
            (
                std::mem::transmute::<libc::sigset_t, [u8; 128]>(act.sa_mask),
                std::mem::transmute::<libc::sigset_t, [u8; 128]>(before),
            )
        };
        let full = u64::from_le_bytes(b[..8].try_into().unwrap());
        assert_eq!(
            seen,
            full & !(1u64 << (libc::SIGSEGV - 1)),
            "a copy without SIGSEGV"
        );
        assert_eq!(a, b, "the program's own action is not written");
        // A mask without SIGSEGV goes on as it is.
        // SAFETY: sigemptyset on a valid set.
        unsafe { libc::sigemptyset(&mut act.sa_mask) };
        let (_, _, ret, _, seen) = call(libc::SIGINT, Some(&act), program);
        assert_eq!((ret, seen), (77, 0));
    }

    #[test]
    fn restore_rt_is_found_once_and_aligned() {
        let mut code = vec![0x90u8; 64];
        code[32..41].copy_from_slice(&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05]);
        assert_eq!(find_restore_rt(&code, 0x1000), Some(0x1020));
        assert_eq!(find_restore_rt(&code, 0x1001), None, "not aligned");
        code[0..9].copy_from_slice(&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05]);
        assert_eq!(find_restore_rt(&code, 0x1000), None, "two copies");
    }
}
