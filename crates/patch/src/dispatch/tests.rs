//! The handler run in this process: the test thread's calls dispatched to
//! it (the dispatch function here a plain `syscall; ret` inside the range
//! whose calls run), checked against the kernel's own answers.

use super::*;

/// Executable memory holding the handler and a dispatch function, a sync
/// page, and this thread's dispatch on for as long as it lives.
struct Dispatched {
    code: *mut u8,
    sync: Vec<u64>,
}

const CODE_LEN: usize = 1 << 16;

impl Dispatched {
    fn on() -> Dispatched {
        // SAFETY: an anonymous private RWX mapping; checked for failure.
        let code = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CODE_LEN,
                libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(code, libc::MAP_FAILED);
        let code = code.cast::<u8>();
        let mut sync = vec![0u64; 4096 / 8];
        let sync_at = sync.as_mut_ptr() as u64;
        let function = code as u64;
        // No trap table here: SIGTRAP's calls read and write a spare part of
        // the sync page.
        let handler = handler_code(function + 64, sync_at, function, sync_at + 3072).unwrap();
        // SAFETY: the mapping is writable and CODE_LEN long, more than the
        // function's 3 bytes at 0 and the handler's at 64.
        unsafe {
            std::ptr::copy_nonoverlapping([0x0f, 0x05, 0xc3].as_ptr(), code, 3);
            std::ptr::copy_nonoverlapping(
                handler.bytes.as_ptr(),
                code.add(64),
                handler.bytes.len(),
            );
        }
        sync[(sync::DISPATCH_START / 8) as usize] = code as u64;
        sync[(sync::DISPATCH_LEN / 8) as usize] = CODE_LEN as u64;
        let action =
            crate::trap::kernel_sigaction(handler.handler, HANDLER_FLAGS, handler.restorer, 0);
        // SAFETY: a kernel sigaction of 32 bytes for SIGSYS; the old one is
        // not asked for.
        let set = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                SIGSYS,
                action.as_ptr(),
                std::ptr::null_mut::<u8>(),
                8,
            )
        };
        assert_eq!(set, 0);
        // SAFETY: prctl with integer arguments; the selector is null.
        let on = unsafe {
            libc::prctl(
                PR_SET_SYSCALL_USER_DISPATCH as i32,
                PR_SYS_DISPATCH_ON as u64,
                code as u64,
                CODE_LEN as u64,
                0u64,
            )
        };
        assert_eq!(on, 0, "{}", std::io::Error::last_os_error());
        Dispatched { code, sync }
    }
}

impl Drop for Dispatched {
    fn drop(&mut self) {
        // Made from the range (the dispatch function's `syscall`), so
        // the kernel runs it: dispatch off.
        let f: extern "C" fn() = {
            let mut a = CodeAssembler::new(64).unwrap();
            a.mov(eax, 157u32).unwrap();
            a.mov(edi, PR_SET_SYSCALL_USER_DISPATCH).unwrap();
            a.xor(esi, esi).unwrap();
            a.xor(edx, edx).unwrap();
            a.xor(r10d, r10d).unwrap();
            a.xor(r8d, r8d).unwrap();
            a.syscall().unwrap();
            a.ret().unwrap();
            let at = self.code as u64 + (CODE_LEN as u64 - 256);
            let bytes = a.assemble(at).unwrap();
            // SAFETY: the last 256 bytes of the mapping are unused, and
            // the code is a complete function of no argument.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len());
                std::mem::transmute::<u64, extern "C" fn()>(at)
            }
        };
        f();
    }
}

/// A `syscall` instruction outside the range, made here.
fn raw(nr: i64, a1: i64, a2: i64, a3: i64, a4: i64) -> i64 {
    let ret: i64;
    // SAFETY: the caller passes a call that changes nothing this test
    // relies on; rcx and r11 are the ones `syscall` clobbers.
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") nr => ret, in("rdi") a1, in("rsi") a2,
            in("rdx") a3, in("r10") a4, lateout("rcx") _, lateout("r11") _);
    }
    ret
}

#[test]
fn dispatched_calls_return_the_kernels_answers_and_keep_sigsys_deliverable() {
    let pid = std::process::id() as i64;
    let dispatched = Dispatched::on();
    // Through the handler: the kernel's answer, an error as one.
    assert_eq!(raw(libc::SYS_getpid, 0, 0, 0, 0), pid);
    assert_eq!(raw(libc::SYS_close, -1, 0, 0, 0), -(libc::EBADF as i64));
    // Blocking every signal leaves SIGSYS deliverable.
    let all = u64::MAX;
    let mut old = 0u64;
    let mut now = 0u64;
    assert_eq!(
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK as i64,
            &all as *const u64 as i64,
            &mut old as *mut u64 as i64,
            8
        ),
        0
    );
    assert_eq!(
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_BLOCK as i64,
            0,
            &mut now as *mut u64 as i64,
            8
        ),
        0
    );
    assert_eq!(now & (1 << (SIGSYS - 1)), 0, "SIGSYS blocked: {now:#x}");
    assert_ne!(now & (1 << (libc::SIGUSR1 - 1)), 0);
    assert_eq!(
        raw(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as i64,
            &old as *const u64 as i64,
            0,
            8
        ),
        0
    );
    // The program's SIGSYS action is kept, not given to the kernel.
    let mine = crate::trap::kernel_sigaction(0x1234, 0, 0, 0);
    let mut before = [0u8; 32];
    let mut after = [0u8; 32];
    assert_eq!(
        raw(
            libc::SYS_rt_sigaction,
            SIGSYS as i64,
            mine.as_ptr() as i64,
            before.as_mut_ptr() as i64,
            8
        ),
        0
    );
    assert_eq!(before, [0u8; 32], "the default action, as the table starts");
    assert_eq!(
        raw(
            libc::SYS_rt_sigaction,
            SIGSYS as i64,
            0,
            after.as_mut_ptr() as i64,
            8
        ),
        0
    );
    assert_eq!(after, mine);
    let kept = (sync::DISPATCH_TABLE + tt::OLD_ACTION) as usize / 8;
    assert_eq!(dispatched.sync[kept], 0x1234);
    // So is its SIGTRAP action, in the trap table.
    let trap = crate::trap::kernel_sigaction(0x5678, 0, 0, 0);
    assert_eq!(
        raw(
            libc::SYS_rt_sigaction,
            libc::SIGTRAP as i64,
            trap.as_ptr() as i64,
            0,
            8
        ),
        0
    );
    assert_eq!(
        dispatched.sync[(3072 + tt::OLD_ACTION) as usize / 8],
        0x5678
    );
    // The sites of the calls it made are listed, the last one last.
    let head = dispatched.sync[(sync::DISPATCH_SEEN_HEAD / 8) as usize];
    assert_eq!(head, 5, "getpid, close, three rt_sigprocmask");
    let code = dispatched.code as u64..dispatched.code as u64 + CODE_LEN as u64;
    for k in 0..head {
        let site = dispatched.sync[(sync::DISPATCH_SEEN / 8 + k) as usize];
        assert!(
            site != 0 && !code.contains(&site),
            "{site:#x}: a site of this test's"
        );
    }
    // Still weft's handler: calls are still answered.
    assert_eq!(
        raw(libc::SYS_getppid, 0, 0, 0, 0),
        std::os::unix::process::parent_id() as i64
    );
    drop(dispatched);
    assert_eq!(raw(libc::SYS_getpid, 0, 0, 0, 0), pid);
}

/// The dispatch module reads as any module does: one function, named as
/// glibc's `syscall()`, whose `syscall` instruction is where the entry's
/// splice ends and the return's begins.
#[test]
fn the_dispatch_module_is_an_elf_file_with_its_one_function() {
    let image =
        weft_image::Image::from_bytes(std::path::Path::new(MODULE_NAME), module_image()).unwrap();
    let functions: Vec<_> = image.functions_with_syscall_bytes().collect();
    assert_eq!(functions.len(), 1);
    let f = functions[0];
    assert_eq!((f.name.as_str(), f.addr.get()), (FUNCTION_NAME, FUNCTION));
    let code = image.bytes_at(f.addr, f.size as usize).unwrap();
    assert_eq!(&code[5..7], &[0x0f, 0x05], "the syscall after a 5-byte nop");
    assert_eq!(code.last(), Some(&0xc3));
}
