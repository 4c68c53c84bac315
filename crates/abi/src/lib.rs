//! The x86-64 Linux ABI numbers weft relies on, in one place.
//!
//! weft makes system calls inside a target (through ptrace, or from code it
//! generates and maps into the target), builds kernel `struct sigaction`s
//! in target memory and reads the auxiliary vector. The numbers for all of
//! that are the kernel's x86-64 ABI, not the host C library's, so they are
//! written here once, with no dependency, instead of being taken from
//! `libc` in one place and spelled as literals in another.
//!
//! Types follow how the numbers are used: system call numbers are `u32`
//! (what `mov eax, imm32` loads), signals and flags that the C API types as
//! `int` are `i32`, and fields the kernel types as `unsigned long` are `u64`.
//! The unit tests check every value against `libc`.

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("weft supports x86-64 Linux only");

/// System call numbers (`arch/x86/entry/syscalls/syscall_64.tbl`).
pub mod syscall {
    /// The result recorded for a call its thread left (a signal handler
    /// jumped out of it) when the result is not known: no result a call
    /// returns (they are below 2^63 or errors above -4096).
    pub const LEFT_RESULT_UNKNOWN: u64 = 1 << 63;
    /// `process_vm_readv`.
    pub const PROCESS_VM_READV: u32 = 310;
    /// `read`.
    pub const READ: u32 = 0;
    /// `write`.
    pub const WRITE: u32 = 1;
    /// `close`.
    pub const CLOSE: u32 = 3;
    /// `mmap`.
    pub const MMAP: u32 = 9;
    /// `mprotect`.
    pub const MPROTECT: u32 = 10;
    /// `munmap`.
    pub const MUNMAP: u32 = 11;
    /// `rt_sigaction`.
    pub const RT_SIGACTION: u32 = 13;
    /// `rt_sigprocmask`.
    pub const RT_SIGPROCMASK: u32 = 14;
    /// `rt_sigreturn`.
    pub const RT_SIGRETURN: u32 = 15;
    /// `sched_yield`.
    pub const SCHED_YIELD: u32 = 24;
    /// `getpid`.
    pub const GETPID: u32 = 39;
    /// `gettid`.
    pub const GETTID: u32 = 186;
    /// `restart_syscall`: resumes a call interrupted with ERESTART_RESTARTBLOCK.
    pub const RESTART_SYSCALL: u32 = 219;
    /// `futex`.
    pub const FUTEX: u32 = 202;
    /// `clock_gettime`.
    pub const CLOCK_GETTIME: u32 = 228;
    /// `tgkill`.
    pub const TGKILL: u32 = 234;
    /// `openat`.
    pub const OPENAT: u32 = 257;
    /// `pidfd_open`.
    pub const PIDFD_OPEN: u32 = 434;
    /// `pidfd_getfd`.
    pub const PIDFD_GETFD: u32 = 438;
}

/// The dispatch module weft maps into a process whose system calls go
/// to its SIGSYS handler (Syscall User Dispatch, `weft_patch::dispatch`).
pub mod dispatch {
    /// The module's name (its events' module).
    pub const MODULE_NAME: &str = "weft-dispatch";
    /// The name of its one function, where the calls are made: glibc's
    /// `syscall()`'s, whose probes keep the number at the entry.
    pub const FUNCTION_NAME: &str = "syscall";
    /// The name of the entry value holding the address the call was made
    /// from (after its `syscall` instruction).
    pub const SITE_VALUE: &str = "site";
    /// The register (encoding order: `r14`) holding the call's number
    /// across the handler's call of the dispatch function, for its return.
    pub const NUMBER_REGISTER: u8 = 14;
    /// Bytes the SIGSYS handler takes on the stack below its signal frame
    /// before it calls the dispatch function: the call's arguments and
    /// copies of what they point to.
    pub const HANDLER_FRAME: u64 = 128;

    /// The signal frame's `ucontext_t` of a call made at the dispatch
    /// function, from the stack pointer at its `syscall`: above the return
    /// address the handler's call pushed, the handler's own bytes, and the
    /// frame's first word (the return address into its restorer).
    pub fn ucontext_at(rsp: u64) -> u64 {
        rsp + 8 + HANDLER_FRAME + 8
    }
}
pub mod delivery;
pub mod feed;
pub mod schedule;
pub mod vclock;

/// Signal numbers (`arch/x86/include/uapi/asm/signal.h`).
pub mod signal {
    /// `SIGINT`.
    pub const SIGINT: i32 = 2;
    /// `SIGTRAP`: an `int3` or a single step.
    pub const SIGTRAP: i32 = 5;
    /// `SIGKILL`.
    pub const SIGKILL: i32 = 9;
    /// `SIGSEGV`: a bad memory access (and weft's witness buffers' guard pages).
    pub const SIGSEGV: i32 = 11;
    /// `SIGUSR2`.
    pub const SIGUSR2: i32 = 12;
    /// `SIGPIPE`.
    pub const SIGPIPE: i32 = 13;
    /// `SIGTERM`.
    pub const SIGTERM: i32 = 15;
    /// `SIGCONT`.
    pub const SIGCONT: i32 = 18;
    /// `SIGSTOP`.
    pub const SIGSTOP: i32 = 19;
}

/// The kernel's `struct sigaction` as `rt_sigaction` reads and writes it
/// (not glibc's, which orders the fields differently), its flags, and the
/// signal frame a handler receives.
pub mod sigaction {
    /// Size of the kernel `struct sigaction`.
    pub const SIZE: u64 = 32;
    /// Offset of `sa_handler` (u64; [`SIG_DFL`] or [`SIG_IGN`] or an address).
    pub const HANDLER: u64 = 0;
    /// Offset of `sa_flags` (u64).
    pub const FLAGS: u64 = 8;
    /// Offset of `sa_restorer` (u64), used with [`SA_RESTORER`].
    pub const RESTORER: u64 = 16;
    /// Offset of `sa_mask` (u64).
    pub const MASK: u64 = 24;
    /// The `sigsetsize` argument of `rt_sigaction`: bytes of `sa_mask`.
    pub const SIGSET_SIZE: u64 = 8;
    /// `sa_handler` for the default action.
    pub const SIG_DFL: u64 = 0;
    /// `sa_handler` for ignoring the signal.
    pub const SIG_IGN: u64 = 1;
    /// `SA_SIGINFO`: three-argument handler.
    pub const SA_SIGINFO: u64 = 0x4;
    /// `SA_ONSTACK`: run on the alternate signal stack if there is one.
    pub const SA_ONSTACK: u64 = 0x0800_0000;
    /// `SA_RESTART`: restart interrupted system calls.
    pub const SA_RESTART: u64 = 0x1000_0000;
    /// `SA_NODEFER`: do not block the signal while its handler runs.
    pub const SA_NODEFER: u64 = 0x4000_0000;
    /// `SA_RESTORER`: `sa_restorer` holds the code that calls `rt_sigreturn`.
    pub const SA_RESTORER: u64 = 0x0400_0000;
    /// `SA_RESETHAND`: the action goes back to the default as the handler
    /// is entered (bit 31: glibc's `int sa_flags` holds it negative).
    pub const SA_RESETHAND: u64 = 0x8000_0000;
    /// `how` of `rt_sigprocmask`: add to the blocked set.
    pub const SIG_BLOCK: u64 = 0;
    /// glibc's `struct sigaction` (what `sigaction(3)` takes): its size and
    /// field offsets; its `sa_mask` is 128 bytes, of which the kernel uses
    /// the first [`SIGSET_SIZE`].
    pub mod libc_layout {
        /// Size.
        pub const SIZE: u64 = 152;
        /// `sa_handler` / `sa_sigaction` (u64).
        pub const HANDLER: u64 = 0;
        /// `sa_mask` (128 bytes).
        pub const MASK: u64 = 8;
        /// `sa_flags` (i32).
        pub const FLAGS: u64 = 136;
        /// `sa_restorer` (u64).
        pub const RESTORER: u64 = 144;
    }
    /// Offset of `uc_mcontext.gregs[REG_RIP]` in the `ucontext_t` a
    /// `SA_SIGINFO` handler receives as its third argument.
    pub const UCONTEXT_RIP: u64 = 168;
    /// Offsets in that `ucontext_t` of the general registers saved in
    /// `uc_mcontext.gregs`, and of `uc_sigmask` (the mask `rt_sigreturn`
    /// installs).
    pub mod ucontext {
        /// `gregs[REG_R8]`.
        pub const R8: u64 = 40;
        /// `gregs[REG_R9]`.
        pub const R9: u64 = 48;
        /// `gregs[REG_R10]`.
        pub const R10: u64 = 56;
        /// `gregs[REG_R12]`.
        pub const R12: u64 = 72;
        /// `gregs[REG_R13]`.
        pub const R13: u64 = 80;
        /// `gregs[REG_R14]`.
        pub const R14: u64 = 88;
        /// `gregs[REG_R15]`.
        pub const R15: u64 = 96;
        /// `gregs[REG_RDI]`.
        pub const RDI: u64 = 104;
        /// `gregs[REG_RSI]`.
        pub const RSI: u64 = 112;
        /// `gregs[REG_RBP]`.
        pub const RBP: u64 = 120;
        /// `gregs[REG_RBX]`.
        pub const RBX: u64 = 128;
        /// `gregs[REG_RDX]`.
        pub const RDX: u64 = 136;
        /// `gregs[REG_RAX]`.
        pub const RAX: u64 = 144;
        /// `gregs[REG_RSP]`.
        pub const RSP: u64 = 160;
        /// `gregs[REG_RIP]`.
        pub const RIP: u64 = super::UCONTEXT_RIP;
        /// `gregs[REG_EFL]`: the flags.
        pub const EFL: u64 = 176;
        /// The resume flag in [`EFL`]: the instruction at `rip` runs once
        /// without stopping at a breakpoint there.
        pub const RESUME_FLAG: u64 = 1 << 16;
        /// `uc_mcontext`'s eight reserved words (the kernel's
        /// `sigcontext.reserved1`), which the kernel neither writes when it
        /// builds a signal frame nor reads in `rt_sigreturn`.
        pub const RESERVED: u64 = 232;
        /// `uc_sigmask`.
        pub const SIGMASK: u64 = 296;
    }
}

/// `siginfo_t`: where its code lies and the codes weft tells apart
/// (`include/uapi/asm-generic/siginfo.h`).
pub mod siginfo {
    /// Offset of `si_code` (i32).
    pub const CODE: u64 = 8;
    /// `SI_KERNEL`: a SIGTRAP the kernel sent for an `int3`.
    pub const SI_KERNEL: i32 = 0x80;
    /// `TRAP_BRKPT`: a breakpoint, also a single step's report past `syscall`.
    pub const TRAP_BRKPT: i32 = 1;
    /// `TRAP_TRACE`: a single step.
    pub const TRAP_TRACE: i32 = 2;
    /// `TRAP_PERF`: a perf event opened with `sigtrap` fired (a hardware
    /// breakpoint, [`super::perf`]).
    pub const TRAP_PERF: i32 = 6;
    /// Offset of `si_perf_data` (u64): the event's `sig_data`.
    pub const PERF_DATA: u64 = 24;
}

/// A hardware execution breakpoint on the calling thread that sends it
/// SIGTRAP when hit (`perf_event_open`, `include/uapi/linux/perf_event.h`):
/// the `struct perf_event_attr` fields weft fills, in the layout of
/// `PERF_ATTR_SIZE_VER7`.
pub mod perf {
    /// `perf_event_open`.
    pub const PERF_EVENT_OPEN: u32 = 298;
    /// Bytes of the attribute (`PERF_ATTR_SIZE_VER7`, the first with
    /// `sig_data`).
    pub const ATTR_SIZE: u32 = 128;
    /// Offset of `type` (u32).
    pub const TYPE: u64 = 0;
    /// Offset of `size` (u32).
    pub const SIZE: u64 = 4;
    /// Offset of `sample_period` (u64).
    pub const SAMPLE_PERIOD: u64 = 16;
    /// Offset of the flag bits (u64).
    pub const FLAGS: u64 = 40;
    /// Offset of `bp_type` (u32).
    pub const BP_TYPE: u64 = 52;
    /// Offset of `bp_addr` (u64).
    pub const BP_ADDR: u64 = 56;
    /// Offset of `bp_len` (u64).
    pub const BP_LEN: u64 = 64;
    /// Offset of `sig_data` (u64): what the SIGTRAP's `si_perf_data` says.
    pub const SIG_DATA: u64 = 120;
    /// `PERF_TYPE_BREAKPOINT`.
    pub const TYPE_BREAKPOINT: u32 = 5;
    /// `HW_BREAKPOINT_X`: on execution of the instruction at `bp_addr`,
    /// before it runs.
    pub const BREAKPOINT_X: u32 = 4;
    /// Flag bits: `exclude_kernel`, `exclude_hv`, `remove_on_exec` and
    /// `sigtrap` (which the kernel takes only with `remove_on_exec`).
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    /// `exclude_hv`.
    pub const EXCLUDE_HV: u64 = 1 << 6;
    /// `remove_on_exec`.
    pub const REMOVE_ON_EXEC: u64 = 1 << 36;
    /// `sigtrap`: SIGTRAP to the thread at each hit, `si_code`
    /// `TRAP_PERF`.
    pub const SIGTRAP: u64 = 1 << 37;
    /// `PERF_FLAG_FD_CLOEXEC`.
    pub const FLAG_FD_CLOEXEC: u64 = 8;
}

/// Clock ids (`include/uapi/linux/time.h`).
pub mod clock {
    /// `CLOCK_REALTIME`.
    pub const REALTIME: i32 = 0;
    /// `CLOCK_MONOTONIC`.
    pub const MONOTONIC: i32 = 1;
}

/// `mmap` protections and flags (`include/uapi/asm-generic/mman*.h`).
pub mod mman {
    /// The page size: the unit of mappings and protections.
    pub const PAGE_SIZE: u64 = 4096;
    /// `PROT_NONE`: no access.
    pub const PROT_NONE: i32 = 0;
    /// `PROT_READ`.
    pub const PROT_READ: i32 = 0x1;
    /// `PROT_WRITE`.
    pub const PROT_WRITE: i32 = 0x2;
    /// `PROT_EXEC`.
    pub const PROT_EXEC: i32 = 0x4;
    /// `MAP_SHARED`.
    pub const MAP_SHARED: i32 = 0x01;
    /// `MAP_PRIVATE`.
    pub const MAP_PRIVATE: i32 = 0x02;
    /// `MAP_FIXED`.
    pub const MAP_FIXED: i32 = 0x10;
    /// `MAP_ANONYMOUS`.
    pub const MAP_ANONYMOUS: i32 = 0x20;
    /// `MAP_FIXED_NOREPLACE`: map at the hint or fail, never replacing a mapping.
    pub const MAP_FIXED_NOREPLACE: i32 = 0x10_0000;
}

/// `open` flags and `*at` directory handles (`include/uapi/asm-generic/fcntl.h`).
pub mod fcntl {
    /// `O_RDONLY`.
    pub const O_RDONLY: i32 = 0;
    /// `O_RDWR`.
    pub const O_RDWR: i32 = 0o2;
    /// `O_CLOEXEC`.
    pub const O_CLOEXEC: i32 = 0o2_000_000;
    /// `AT_FDCWD`: resolve relative paths from the working directory.
    pub const AT_FDCWD: i32 = -100;
}

/// `futex` operations (`include/uapi/linux/futex.h`).
pub mod futex {
    /// `FUTEX_WAIT` (shared: usable across processes).
    pub const WAIT: i32 = 0;
    /// `FUTEX_WAKE` (shared).
    pub const WAKE: i32 = 1;
}

/// Error numbers that generated code tests (system calls return `-errno`).
pub mod errno {
    /// `ETIMEDOUT`: a futex wait timed out.
    pub const ETIMEDOUT: i32 = 110;
}

/// Auxiliary vector entry types (`include/uapi/linux/auxvec.h`).
pub mod auxv {
    /// `AT_PHDR`: the program headers in memory.
    pub const AT_PHDR: u64 = 3;
    /// `AT_BASE`: the interpreter's load address.
    pub const AT_BASE: u64 = 7;
    /// `AT_ENTRY`: the program's entry point.
    pub const AT_ENTRY: u64 = 9;
    /// `AT_EXECFN`: the file name `execve` was given, as the kernel
    /// copied it onto the new program's stack.
    pub const AT_EXECFN: u64 = 31;
    /// `AT_SYSINFO_EHDR`: the vDSO's ELF header.
    pub const AT_SYSINFO_EHDR: u64 = 33;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_calls_match_libc() {
        use syscall::*;
        let pairs: [(u32, libc::c_long); 20] = [
            (READ, libc::SYS_read),
            (WRITE, libc::SYS_write),
            (CLOSE, libc::SYS_close),
            (MMAP, libc::SYS_mmap),
            (MPROTECT, libc::SYS_mprotect),
            (MUNMAP, libc::SYS_munmap),
            (RT_SIGACTION, libc::SYS_rt_sigaction),
            (RT_SIGPROCMASK, libc::SYS_rt_sigprocmask),
            (RT_SIGRETURN, libc::SYS_rt_sigreturn),
            (SCHED_YIELD, libc::SYS_sched_yield),
            (GETPID, libc::SYS_getpid),
            (PROCESS_VM_READV, libc::SYS_process_vm_readv),
            (GETTID, libc::SYS_gettid),
            (RESTART_SYSCALL, libc::SYS_restart_syscall),
            (FUTEX, libc::SYS_futex),
            (CLOCK_GETTIME, libc::SYS_clock_gettime),
            (TGKILL, libc::SYS_tgkill),
            (OPENAT, libc::SYS_openat),
            (PIDFD_OPEN, libc::SYS_pidfd_open),
            (PIDFD_GETFD, libc::SYS_pidfd_getfd),
        ];
        for (ours, theirs) in pairs {
            assert_eq!(i64::from(ours), theirs);
        }
    }

    #[test]
    fn signal_codes_match_libc() {
        use siginfo::*;
        assert_eq!(
            [SI_KERNEL, TRAP_BRKPT, TRAP_TRACE, TRAP_PERF],
            [
                libc::SI_KERNEL,
                libc::TRAP_BRKPT,
                libc::TRAP_TRACE,
                libc::TRAP_PERF
            ]
        );
        // SAFETY: siginfo_t is plain data; all zeroes is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        info.si_code = 0x1234;
        let bytes: &[u8] = bytes_of(&info);
        assert_eq!(
            i32::from_ne_bytes(bytes[CODE as usize..CODE as usize + 4].try_into().unwrap()),
            0x1234
        );
    }

    /// A breakpoint attribute laid out by [`perf`]'s offsets opens (the
    /// kernel checks the size, type and length); one whose `sigtrap` bit
    /// is set without `remove_on_exec` is refused, as the kernel refuses
    /// that pair: the two bits are where the kernel reads them.
    #[test]
    fn a_breakpoint_attribute_laid_out_by_these_offsets_opens() {
        use perf::*;
        fn open(flags: u64, at: u64) -> i64 {
            let mut attr = [0u8; ATTR_SIZE as usize];
            let mut put = |off: u64, bytes: &[u8]| {
                attr[off as usize..off as usize + bytes.len()].copy_from_slice(bytes)
            };
            put(TYPE, &TYPE_BREAKPOINT.to_le_bytes());
            put(SIZE, &ATTR_SIZE.to_le_bytes());
            put(SAMPLE_PERIOD, &1u64.to_le_bytes());
            put(FLAGS, &flags.to_le_bytes());
            put(BP_TYPE, &BREAKPOINT_X.to_le_bytes());
            put(BP_ADDR, &at.to_le_bytes());
            put(BP_LEN, &8u64.to_le_bytes());
            put(SIG_DATA, &7u64.to_le_bytes());
            // SAFETY: the attribute is ATTR_SIZE readable bytes that live
            // across the call; the other arguments are plain numbers.
            let fd = unsafe {
                libc::syscall(
                    libc::c_long::from(PERF_EVENT_OPEN),
                    attr.as_ptr(),
                    0,
                    -1,
                    -1,
                    FLAG_FD_CLOEXEC,
                )
            };
            if fd >= 0 {
                // SAFETY: fd is the descriptor just opened, owned here.
                unsafe { libc::close(fd as i32) };
                return fd;
            }
            -i64::from(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
        }
        assert_eq!(i64::from(PERF_EVENT_OPEN), libc::SYS_perf_event_open);
        let at = a_breakpoint_attribute_laid_out_by_these_offsets_opens as fn() as usize as u64;
        let base = EXCLUDE_KERNEL | EXCLUDE_HV;
        let opened = open(base | REMOVE_ON_EXEC | SIGTRAP, at);
        assert!(
            opened >= 0,
            "no breakpoint for this thread: -errno {opened}"
        );
        assert_eq!(open(base | SIGTRAP, at), -i64::from(libc::EINVAL));
    }

    /// The bytes of a plain C value.
    fn bytes_of<T>(v: &T) -> &[u8] {
        // SAFETY: v is a live, initialised value of size_of::<T>() bytes,
        // borrowed for the slice's lifetime; any byte is a valid u8.
        unsafe { std::slice::from_raw_parts((v as *const T).cast(), std::mem::size_of::<T>()) }
    }

    #[test]
    fn signals_and_flags_match_libc() {
        use signal::*;
        assert_eq!(
            [SIGINT, SIGTRAP, SIGKILL, SIGUSR2, SIGPIPE, SIGTERM, SIGCONT, SIGSTOP],
            [
                libc::SIGINT,
                libc::SIGTRAP,
                libc::SIGKILL,
                libc::SIGUSR2,
                libc::SIGPIPE,
                libc::SIGTERM,
                libc::SIGCONT,
                libc::SIGSTOP
            ]
        );
        use sigaction::*;
        assert_eq!(SA_SIGINFO, libc::SA_SIGINFO as u64);
        assert_eq!(SA_ONSTACK, libc::SA_ONSTACK as u64);
        assert_eq!(SA_RESTART, libc::SA_RESTART as u64);
        assert_eq!(SA_NODEFER, libc::SA_NODEFER as u64);
        assert_eq!(SIG_DFL, libc::SIG_DFL as u64);
        assert_eq!(SIG_IGN, libc::SIG_IGN as u64);
        assert_eq!(SA_RESETHAND, libc::SA_RESETHAND as u32 as u64);
        assert_eq!(SIG_BLOCK, libc::SIG_BLOCK as u64);
        assert_eq!(
            [
                libc_layout::SIZE,
                libc_layout::HANDLER,
                libc_layout::MASK,
                libc_layout::FLAGS,
                libc_layout::RESTORER
            ],
            [
                std::mem::size_of::<libc::sigaction>() as u64,
                std::mem::offset_of!(libc::sigaction, sa_sigaction) as u64,
                std::mem::offset_of!(libc::sigaction, sa_mask) as u64,
                std::mem::offset_of!(libc::sigaction, sa_flags) as u64,
                std::mem::offset_of!(libc::sigaction, sa_restorer) as u64
            ]
        );
        assert_eq!(
            UCONTEXT_RIP,
            (std::mem::offset_of!(libc::ucontext_t, uc_mcontext)
                + std::mem::offset_of!(libc::mcontext_t, gregs)
                + 8 * libc::REG_RIP as usize) as u64
        );
        let greg = |r: i32| {
            (std::mem::offset_of!(libc::ucontext_t, uc_mcontext)
                + std::mem::offset_of!(libc::mcontext_t, gregs)
                + 8 * r as usize) as u64
        };
        use ucontext as uc;
        assert_eq!(
            [
                uc::R8,
                uc::R9,
                uc::R10,
                uc::R12,
                uc::R13,
                uc::R14,
                uc::R15,
                uc::EFL
            ],
            [
                libc::REG_R8,
                libc::REG_R9,
                libc::REG_R10,
                libc::REG_R12,
                libc::REG_R13,
                libc::REG_R14,
                libc::REG_R15,
                libc::REG_EFL
            ]
            .map(greg)
        );
        assert_eq!(
            [
                uc::RDI,
                uc::RSI,
                uc::RBP,
                uc::RBX,
                uc::RDX,
                uc::RAX,
                uc::RSP,
                uc::RIP
            ],
            [
                libc::REG_RDI,
                libc::REG_RSI,
                libc::REG_RBP,
                libc::REG_RBX,
                libc::REG_RDX,
                libc::REG_RAX,
                libc::REG_RSP,
                libc::REG_RIP
            ]
            .map(greg)
        );
        assert_eq!(
            uc::SIGMASK,
            std::mem::offset_of!(libc::ucontext_t, uc_sigmask) as u64
        );
        // The reserved words: after the pointer to the floating-point
        // state, up to the mask.
        assert_eq!(
            uc::RESERVED,
            (std::mem::offset_of!(libc::ucontext_t, uc_mcontext)
                + std::mem::offset_of!(libc::mcontext_t, fpregs)
                + 8) as u64
        );
        assert_eq!(uc::RESERVED + 64, uc::SIGMASK);
        assert_eq!(clock::REALTIME, libc::CLOCK_REALTIME);
        assert_eq!(clock::MONOTONIC, libc::CLOCK_MONOTONIC);
        use mman::*;
        // SAFETY: sysconf only reads a configuration value.
        assert_eq!(PAGE_SIZE, unsafe { libc::sysconf(libc::_SC_PAGESIZE) }
            as u64);
        assert_eq!(
            [PROT_READ, PROT_WRITE, PROT_EXEC],
            [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
        );
        assert_eq!(
            [
                MAP_SHARED,
                MAP_PRIVATE,
                MAP_FIXED,
                MAP_ANONYMOUS,
                MAP_FIXED_NOREPLACE
            ],
            [
                libc::MAP_SHARED,
                libc::MAP_PRIVATE,
                libc::MAP_FIXED,
                libc::MAP_ANONYMOUS,
                libc::MAP_FIXED_NOREPLACE
            ]
        );
        use fcntl::*;
        assert_eq!(
            [O_RDONLY, O_RDWR, O_CLOEXEC, AT_FDCWD],
            [
                libc::O_RDONLY,
                libc::O_RDWR,
                libc::O_CLOEXEC,
                libc::AT_FDCWD
            ]
        );
        assert_eq!(
            [futex::WAIT, futex::WAKE],
            [libc::FUTEX_WAIT, libc::FUTEX_WAKE]
        );
        assert_eq!(errno::ETIMEDOUT, libc::ETIMEDOUT);
        use auxv::*;
        assert_eq!(
            [AT_PHDR, AT_BASE, AT_ENTRY, AT_EXECFN, AT_SYSINFO_EHDR],
            [
                libc::AT_PHDR,
                libc::AT_BASE,
                libc::AT_ENTRY,
                libc::AT_EXECFN,
                libc::AT_SYSINFO_EHDR
            ]
        );
    }
}
