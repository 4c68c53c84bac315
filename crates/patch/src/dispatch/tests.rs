//! The handler run in this process: the test thread's calls dispatched to
//! it (the dispatch function here a plain `syscall; ret` inside the range
//! whose calls run), checked against the kernel's own answers.

use super::*;
use weft_abi::delivery;

/// Executable memory holding the handler and a dispatch function, a sync
/// page, and this thread's dispatch on for as long as it lives. The
/// dispatch function keeps the registers of the last call it made in
/// `last` (rax, rdi, rsi, rdx, r10, r8, r9, rcx). One at a time: the
/// SIGSYS action is the process's.
struct Dispatched {
    code: *mut u8,
    sync: Vec<u64>,
    last: Box<[u64; 8]>,
    /// The handler's direct entry.
    direct: u64,
    _one: std::sync::MutexGuard<'static, ()>,
}

/// Held while a test has the SIGSYS handler installed.
static INSTALLED: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Where the handler starts in the mapping, after the dispatch function.
const HANDLER_AT: u64 = 256;

const CODE_LEN: usize = 1 << 16;

impl Dispatched {
    fn on() -> Dispatched {
        Dispatched::new(true)
    }

    /// The handler installed, dispatch off: a settled process, whose
    /// rewritten sites hand it calls through its direct entry.
    fn settled() -> Dispatched {
        Dispatched::new(false)
    }

    fn new(dispatch: bool) -> Dispatched {
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
        let one = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        let code = code.cast::<u8>();
        let mut sync = vec![0u64; sync::SIZE as usize / 8];
        let sync_at = sync.as_mut_ptr() as u64;
        let mut last = Box::new([0u64; 8]);
        let function = code as u64;
        let function_bytes = {
            let mut a = CodeAssembler::new(64).unwrap();
            a.mov(r11, last.as_mut_ptr() as u64).unwrap();
            for (k, r) in [rax, rdi, rsi, rdx, r10, r8, r9, rcx]
                .into_iter()
                .enumerate()
            {
                a.mov(qword_ptr(r11 + 8 * k as i32), r).unwrap();
            }
            a.syscall().unwrap();
            a.ret().unwrap();
            a.assemble(function).unwrap()
        };
        assert!(function_bytes.len() < HANDLER_AT as usize);
        // No trap table here: SIGTRAP's calls read and write a spare part of
        // the sync page.
        let generated =
            handler_code(function + HANDLER_AT, sync_at, function, sync_at + 3072).unwrap();
        let handler = generated.code;
        // SAFETY: the mapping is writable and CODE_LEN long, more than the
        // function's bytes at 0 and the handler's at HANDLER_AT.
        unsafe {
            std::ptr::copy_nonoverlapping(function_bytes.as_ptr(), code, function_bytes.len());
            std::ptr::copy_nonoverlapping(
                handler.bytes.as_ptr(),
                code.add(HANDLER_AT as usize),
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
        sync[(sync::DISPATCH_DIRECT / 8) as usize] = generated.direct;
        if !dispatch {
            return Dispatched {
                code,
                sync,
                last,
                direct: generated.direct,
                _one: one,
            };
        }
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
        Dispatched {
            code,
            sync,
            last,
            direct: generated.direct,
            _one: one,
        }
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
    let now = blocked_now();
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

/// What the program's handler saw: deliveries, the last `si_code` and
/// `si_errno`.
static DELIVERED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
static LAST_CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
static LAST_ERRNO: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

extern "C" fn program_handler(_: i32, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    use std::sync::atomic::Ordering::SeqCst;
    // SAFETY: installed with SA_SIGINFO, so the kernel passes its siginfo.
    let info = unsafe { &*info };
    LAST_CODE.store(info.si_code, SeqCst);
    LAST_ERRNO.store(info.si_errno, SeqCst);
    DELIVERED.fetch_add(1, SeqCst);
}

impl Dispatched {
    /// The action the kernel holds for `signal`, asked from inside the
    /// range (not dispatched).
    fn kernel_action(&self, signal: i32) -> [u64; 4] {
        let at = self.code as u64 + (CODE_LEN as u64 - 512);
        let mut a = CodeAssembler::new(64).unwrap();
        a.mov(r10, rcx).unwrap();
        a.mov(eax, syscall::RT_SIGACTION).unwrap();
        a.syscall().unwrap();
        a.ret().unwrap();
        let bytes = a.assemble(at).unwrap();
        let mut action = [0u64; 4];
        // SAFETY: 512 bytes before the mapping's end are unused (Drop's
        // code is in the last 256); the code is a complete function
        // taking rt_sigaction's arguments, the old action into `action`.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len());
            let f = std::mem::transmute::<u64, extern "C" fn(i64, u64, *mut u64, u64) -> i64>(at);
            assert_eq!(f(signal as i64, 0, action.as_mut_ptr(), 8), 0);
        }
        action
    }

    fn set(&mut self, word: u64, value: u64) {
        self.sync[(word / 8) as usize] = value;
    }
}

/// `sigaction` through the C library (its `rt_sigaction` dispatched).
fn install(signal: i32, handler: usize) -> usize {
    // SAFETY: zeroed sigactions are valid; the handler is a function of
    // the SA_SIGINFO kind or SIG_DFL.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        let mut old: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(signal, &act, &mut old), 0);
        old.sa_sigaction
    }
}

/// `rt_tgsigqueueinfo` of `signal` to this thread, as a rerun's feed
/// raises it (`raised`), or as `tgkill` sends it.
fn send(signal: i32, raised: Option<i32>) {
    // SAFETY: plain calls to this thread; the siginfo is 128 bytes.
    unsafe {
        let (pid, tid) = (libc::getpid(), libc::gettid());
        match raised {
            None => assert_eq!(libc::syscall(libc::SYS_tgkill, pid, tid, signal), 0),
            Some(code) => {
                let mut info = [0u32; 32];
                info[0] = signal as u32;
                info[1] = delivery::RAISED;
                info[2] = delivery::SI_QUEUE as u32;
                info[delivery::CODE_KEPT as usize / 4] = code as u32;
                let sent = libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, signal, &info);
                assert_eq!(sent, 0, "{}", std::io::Error::last_os_error());
            }
        }
    }
}

#[test]
fn handlers_sit_behind_the_delivery_stub_which_records_or_drops_each_delivery() {
    use std::sync::atomic::Ordering::SeqCst;
    let signal = libc::SIGUSR2;
    let pid = std::process::id() as u64;
    let handler = program_handler as *const () as usize;
    let mut d = Dispatched::on();
    d.set(sync::SIGNAL_MODE, delivery::RECORD);
    d.set(sync::SIGNAL_OWNER, pid);
    assert_eq!(install(signal, handler), libc::SIG_DFL);
    // The kernel holds the stub, in the handler's code; the program sees
    // its own action.
    let code = d.code as u64..d.code as u64 + CODE_LEN as u64;
    let kernel = d.kernel_action(signal);
    assert!(code.contains(&kernel[0]), "{:#x}", kernel[0]);
    assert_ne!(kernel[1] & weft_abi::sigaction::SA_SIGINFO, 0);
    assert_eq!(install(signal, handler), handler);
    // A delivery is recorded as a call at the dispatch function, then
    // runs the program's handler.
    DELIVERED.store(0, SeqCst);
    send(signal, None);
    assert_eq!(DELIVERED.load(SeqCst), 1);
    assert_eq!(LAST_CODE.load(SeqCst), libc::SI_TKILL);
    let last = *d.last;
    assert_eq!(last[0], delivery::BASE + signal as u64);
    assert!(
        code.contains(&last[1]),
        "the interrupted rip: {:#x}",
        last[1]
    );
    assert_eq!(last[2], 0, "tgkill's result");
    assert_eq!(last[3], signal as u64 | delivery::AFTER_SYSCALL << 32);
    assert_eq!(last[4] as i32, libc::SI_TKILL);
    assert_eq!(last[5] as u32 as u64, pid, "si_pid");
    assert_eq!(last[7], last[1], "the site, for the record");
    // A rerun drops a signal the feed did not raise, and gives one it
    // raised its recorded code back.
    d.set(sync::SIGNAL_MODE, delivery::RERUN);
    // A rerun's action is installed in one call, restarting calls a
    // dropped signal interrupts; the program still sees its own.
    assert_eq!(install(signal, handler), handler);
    let kernel = d.kernel_action(signal);
    assert!(code.contains(&kernel[0]), "{:#x}", kernel[0]);
    assert_ne!(kernel[1] & weft_abi::sigaction::SA_RESTART, 0);
    send(signal, None);
    assert_eq!(DELIVERED.load(SeqCst), 1);
    send(signal, Some(77));
    assert_eq!(DELIVERED.load(SeqCst), 2);
    assert_eq!((LAST_CODE.load(SeqCst), LAST_ERRNO.load(SeqCst)), (77, 0));
    // Another process's actions (a vfork child's, sharing the memory)
    // go to the kernel as they are.
    d.set(sync::SIGNAL_MODE, delivery::RECORD);
    d.set(sync::SIGNAL_OWNER, 1);
    install(signal, handler);
    assert_eq!(d.kernel_action(signal)[0], handler as u64);
    // The default action, as the program sets it.
    d.set(sync::SIGNAL_OWNER, pid);
    assert_eq!(install(signal, libc::SIG_DFL), handler);
    assert_eq!(d.kernel_action(signal)[0], 0);
    let entry = (sync::SIGNAL_ACTIONS / 8) as usize + 4 * signal as usize;
    assert_eq!(d.sync[entry], 0);
}

impl Dispatched {
    /// Hands a call to the handler's direct entry, as a rewritten site's
    /// program does (`Primitive::ThroughHandler`), from the site whose
    /// `syscall` ends at `site`, and
    /// returns its result; checks that the registers a `syscall` keeps
    /// come back as they went in.
    fn through_direct(&self, site: u64, nr: i64, args: [i64; 4]) -> i64 {
        let at = self.code as u64 + (CODE_LEN as u64 - 1024);
        let mut a = CodeAssembler::new(64).unwrap();
        // (nr, a1, a2, a3, a4, site) in rdi, rsi, rdx, rcx, r8, r9; the
        // entry's address in [rip + entry]. Callee-saved registers set to
        // known values and checked after: a mismatch returns -4096.
        let mut entry = a.create_label();
        let mut bad = a.create_label();
        for r in [rbx, rbp, r12, r13, r14, r15] {
            a.push(r).unwrap();
        }
        a.mov(rax, rdi).unwrap();
        a.mov(rdi, rsi).unwrap();
        a.mov(rsi, rdx).unwrap();
        a.mov(rdx, rcx).unwrap();
        a.mov(r10, r8).unwrap();
        a.mov(rcx, r9).unwrap();
        a.xor(r8d, r8d).unwrap();
        a.xor(r9d, r9d).unwrap();
        a.mov(r11, rsp).unwrap();
        a.mov(rbx, 0x1111u64).unwrap();
        a.mov(rbp, 0x2222u64).unwrap();
        a.mov(r12, 0x3333u64).unwrap();
        a.mov(r13, 0x4444u64).unwrap();
        a.mov(r14, 0x5555u64).unwrap();
        a.mov(r15, rdi).unwrap();
        a.call(qword_ptr(entry)).unwrap();
        for (r, v) in [
            (rbx, 0x1111),
            (rbp, 0x2222),
            (r12, 0x3333),
            (r13, 0x4444),
            (r14, 0x5555),
        ] {
            a.cmp(r, v).unwrap();
            a.jne(bad).unwrap();
        }
        a.cmp(r15, rdi).unwrap();
        a.jne(bad).unwrap();
        let mut out = a.create_label();
        a.jmp(out).unwrap();
        a.set_label(&mut bad).unwrap();
        a.mov(rax, -4096i64).unwrap();
        a.set_label(&mut out).unwrap();
        for r in [r15, r14, r13, r12, rbp, rbx] {
            a.pop(r).unwrap();
        }
        a.ret().unwrap();
        a.set_label(&mut entry).unwrap();
        a.dq(&[self.direct]).unwrap();
        let bytes = a.assemble(at).unwrap();
        assert!(bytes.len() < 512);
        // SAFETY: the 512 bytes from 1024 before the mapping's end are
        // unused (`kernel_action`'s code is at 512 before it, Drop's at
        // 256); the code is a complete function of six integer arguments
        // that keeps the callee-saved registers.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len());
            let f =
                std::mem::transmute::<u64, extern "C" fn(i64, i64, i64, i64, i64, u64) -> i64>(at);
            f(nr, args[0], args[1], args[2], args[3], site)
        }
    }
}

/// A settled process's sites hand the calls that install masks and
/// actions to the handler's direct entry: recorded at the dispatch
/// function with their site, SIGSYS kept out of every mask, the mask a
/// call installs in force after it, handlers behind the delivery stub.
#[test]
fn the_direct_entry_does_for_a_rewritten_site_what_dispatch_does() {
    use std::sync::atomic::Ordering::SeqCst;
    let mut d = Dispatched::settled();
    // The address after a site's `syscall`.
    let site = raw as *const () as u64 + 0x42;
    // rt_sigprocmask(SIG_BLOCK, all): every signal but SIGSYS blocked after.
    let all = u64::MAX;
    let mut old = 0u64;
    let mut now;
    let block = [
        libc::SIG_BLOCK as i64,
        &all as *const u64 as i64,
        &mut old as *mut u64 as i64,
        8,
    ];
    assert_eq!(d.through_direct(site, libc::SYS_rt_sigprocmask, block), 0);
    let last = *d.last;
    assert_eq!(
        last[0],
        libc::SYS_rt_sigprocmask as u64,
        "made at the dispatch function"
    );
    assert_eq!(last[7], site, "with its site, for the record");
    now = blocked_now();
    assert_eq!(now & (1 << (SIGSYS - 1)), 0, "SIGSYS blocked: {now:#x}");
    assert_ne!(
        now & (1 << (libc::SIGUSR1 - 1)),
        0,
        "the call's mask in force after it"
    );
    let back = [libc::SIG_SETMASK as i64, &old as *const u64 as i64, 0, 8];
    assert_eq!(d.through_direct(site, libc::SYS_rt_sigprocmask, back), 0);
    now = blocked_now();
    assert_eq!(now, old);
    let head = d.sync[(sync::DISPATCH_SEEN_HEAD / 8) as usize];
    assert_eq!(d.sync[(sync::DISPATCH_SEEN / 8 + head - 1) as usize], site);
    // rt_sigaction: the handler behind the stub, the signal not left
    // blocked by the call's steps; a delivery recorded, then run.
    let signal = libc::SIGUSR2;
    d.set(sync::SIGNAL_MODE, delivery::RECORD);
    d.set(sync::SIGNAL_OWNER, std::process::id() as u64);
    let handler = program_handler as *const () as usize;
    // The C library's restorer, as its `sigaction` gives the kernel.
    install(libc::SIGURG, handler);
    let restorer = d.kernel_action(libc::SIGURG)[2];
    install(libc::SIGURG, libc::SIG_DFL);
    let flags = weft_abi::sigaction::SA_SIGINFO | weft_abi::sigaction::SA_RESTORER;
    let action = crate::trap::kernel_sigaction(handler as u64, flags, restorer, 0);
    let mut before = [0u8; 32];
    let act = [
        signal as i64,
        action.as_ptr() as i64,
        before.as_mut_ptr() as i64,
        8,
    ];
    assert_eq!(d.through_direct(site, libc::SYS_rt_sigaction, act), 0);
    let code = d.code as u64..d.code as u64 + CODE_LEN as u64;
    let kernel = d.kernel_action(signal);
    assert!(code.contains(&kernel[0]), "the stub: {:#x}", kernel[0]);
    now = blocked_now();
    assert_eq!(now & (1 << (signal - 1)), 0, "left blocked: {now:#x}");
    DELIVERED.store(0, SeqCst);
    send(signal, None);
    assert_eq!(DELIVERED.load(SeqCst), 1);
    assert_eq!(d.last[0], delivery::BASE + signal as u64);
    // SIGSYS's action stays the table's.
    let mine = crate::trap::kernel_sigaction(0x1234, 0, 0, 0);
    let sys = [SIGSYS as i64, mine.as_ptr() as i64, 0, 8];
    assert_eq!(d.through_direct(site, libc::SYS_rt_sigaction, sys), 0);
    assert_eq!(
        d.sync[(sync::DISPATCH_TABLE + tt::OLD_ACTION) as usize / 8],
        0x1234
    );
    // An ordinary call is made too.
    assert_eq!(
        d.through_direct(site, libc::SYS_getpid, [0; 4]),
        std::process::id() as i64
    );
    let default = crate::trap::kernel_sigaction(0, 0, 0, 0);
    let dfl = [signal as i64, default.as_ptr() as i64, 0, 8];
    assert_eq!(d.through_direct(site, libc::SYS_rt_sigaction, dfl), 0);
}

/// This thread's blocked signals, read back with `rt_sigprocmask` made
/// straight (no new set).
fn blocked_now() -> u64 {
    let mut now = 0u64;
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
    now
}
