//! The `sigaction` hook: code spliced at the C library's `sigaction`
//! (glibc's `__libc_sigaction`, which `sigaction`, `signal`, `sigset` and
//! glibc's own callers all reach) while weft's SIGTRAP handler is
//! installed. A call for SIGTRAP never reaches the kernel: the hook keeps
//! the program's action in the trap table's `OLD_ACTION`, where weft's
//! handler chains to it, and answers the old action from there, so the
//! program sees exactly the actions it set and weft's handler stays in
//! front. Every other signal goes on to the real function.
//!
//! The emulation follows glibc and the kernel: the new action's handler,
//! its flags sign-extended from glibc's `int` with `SA_RESTORER` added,
//! glibc's `__restore_rt` as restorer, and the first 64 signals of its
//! mask without SIGKILL and SIGSTOP; the old action written back handler,
//! mask (first 8 bytes only), flags and restorer, read before the new one
//! is stored (`act` and `oact` may be the same). It returns 0. When weft
//! takes its handler out, it installs `OLD_ACTION`, the program's latest.
//!
//! Only the process weft attached to (the trap table's `PROCESS`) is
//! emulated. A child it forks (or spawns with `vfork`) shares weft's memory
//! but has actions of its own: its calls go on to the kernel, so a child
//! that sets SIGTRAP (a shell's subshell resetting its traps) never
//! changes the action kept for its parent.

use crate::region::trap_table as tt;
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_abi::sigaction::{self as ka, libc_layout as la, SA_RESTORER};
use weft_abi::signal::{SIGKILL, SIGSTOP, SIGTRAP};

/// Hook code at `at` for the trap table at `table`, with glibc's signal
/// return trampoline at `restore_rt`; other signals jump to
/// `continuation` (a trampoline running the displaced instructions).
pub fn hook_code(at: u64, table: u64, restore_rt: u64, continuation: u64) -> Result<Vec<u8>> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut other = a.create_label();
    let mut no_new = a.create_label();
    let mut no_old = a.create_label();
    let mut done = a.create_label();
    let mut table_lit = a.create_label();
    let mut restore_lit = a.create_label();
    let mut continuation_lit = a.create_label();
    let old = tt::OLD_ACTION as i32;
    let unblockable = !((1u64 << (SIGKILL - 1)) | (1u64 << (SIGSTOP - 1)));
    (|| -> std::result::Result<(), IcedError> {
        // edi = signal, rsi = act, rdx = oact (glibc layout); only
        // caller-saved registers are used, as in any function.
        a.cmp(edi, SIGTRAP)?;
        a.jne(other)?;
        a.mov(r8, qword_ptr(table_lit))?;
        // getpid: rax, rcx and r11 are the system call's; the arguments stay.
        a.mov(eax, weft_abi::syscall::GETPID)?;
        a.syscall()?;
        a.cmp(eax, dword_ptr(r8 + tt::PROCESS as i32))?;
        a.jne(other)?;
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
        a.mov(rax, qword_ptr(r8 + old + ka::HANDLER as i32))?;
        a.mov(qword_ptr(rdx + la::HANDLER as i32), rax)?;
        a.mov(rax, qword_ptr(r8 + old + ka::MASK as i32))?;
        a.mov(qword_ptr(rdx + la::MASK as i32), rax)?;
        a.mov(eax, dword_ptr(r8 + old + ka::FLAGS as i32))?;
        a.mov(dword_ptr(rdx + la::FLAGS as i32), eax)?;
        a.mov(rax, qword_ptr(r8 + old + ka::RESTORER as i32))?;
        a.mov(qword_ptr(rdx + la::RESTORER as i32), rax)?;
        a.set_label(&mut no_old)?;
        a.test(rsi, rsi)?;
        a.jz(done)?;
        // The handler last: weft's handler reads it first.
        a.mov(qword_ptr(r8 + old + ka::MASK as i32), r11)?;
        a.mov(qword_ptr(r8 + old + ka::FLAGS as i32), r10)?;
        a.mov(rax, qword_ptr(restore_lit))?;
        a.mov(qword_ptr(r8 + old + ka::RESTORER as i32), rax)?;
        a.mov(qword_ptr(r8 + old + ka::HANDLER as i32), r9)?;
        a.set_label(&mut done)?;
        a.xor(eax, eax)?;
        a.ret()?;
        a.set_label(&mut other)?;
        a.jmp(qword_ptr(continuation_lit))?;
        a.set_label(&mut table_lit)?;
        a.dq(&[table])?;
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
    let mut found = code
        .windows(RESTORE_RT.len())
        .enumerate()
        .filter(|(i, w)| *w == RESTORE_RT && (base + *i as u64).is_multiple_of(16))
        .map(|(i, _)| base + i as u64);
    let first = found.next()?;
    found.next().is_none().then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
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
    ) -> (libc::sigaction, [u64; 4], i32, u64) {
        call_as(std::process::id() as u64, sig, act, program)
    }

    /// [`call`] with `process` as the table's `PROCESS`.
    fn call_as(
        process: u64,
        sig: i32,
        act: Option<&libc::sigaction>,
        program: [u64; 4],
    ) -> (libc::sigaction, [u64; 4], i32, u64) {
        let mem = Exec::new(8192);
        let table = mem.at as u64 + 4096;
        let continuation = mem.at as u64 + 2048;
        // The continuation returns 77 (the real function would run).
        let code = hook_code(mem.at as u64, table, 0x5150, continuation).unwrap();
        // SAFETY: the mapping is 8 KiB, writable; the code and the little
        // continuation fit in the first 4 KiB, the table in the second.
        let (oact, after, ret) = unsafe {
            std::ptr::copy_nonoverlapping(code.as_ptr(), mem.at, code.len());
            let ret77 = [0xb8, 77, 0, 0, 0, 0xc3]; // mov $77, %eax; ret
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
            (oact, actions.read(), ret)
        };
        (oact, after, ret, 0x5150)
    }

    #[test]
    fn another_process_sharing_the_table_reaches_the_real_function() {
        let program = [0x1234, SA_SIGINFO | SA_RESTORER, 0x4321, 0];
        // SAFETY: a zeroed sigaction is a valid value (SIG_DFL, no flags).
        let act: libc::sigaction = unsafe { std::mem::zeroed() };
        let other = u64::from(std::process::id()) + 1;
        let (_, after, ret, _) = call_as(other, libc::SIGTRAP, Some(&act), program);
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
        let (oact, after, ret, _) = call(libc::SIGTRAP, None, program);
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
        let (oact, after, _, restore_rt) = call(libc::SIGTRAP, Some(&act), program);
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
    fn restore_rt_is_found_once_and_aligned() {
        let mut code = vec![0x90u8; 64];
        code[32..41].copy_from_slice(&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05]);
        assert_eq!(find_restore_rt(&code, 0x1000), Some(0x1020));
        assert_eq!(find_restore_rt(&code, 0x1001), None, "not aligned");
        code[0..9].copy_from_slice(&[0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05]);
        assert_eq!(find_restore_rt(&code, 0x1000), None, "two copies");
    }
}
