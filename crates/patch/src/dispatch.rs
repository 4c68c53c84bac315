//! Syscall User Dispatch: the system calls of code weft has not rewritten,
//! caught in the process and recorded without a stop.
//!
//! With dispatch on (`PR_SET_SYSCALL_USER_DISPATCH`, set by weft through
//! ptrace), the kernel runs a thread's system call only if its `syscall`
//! instruction lies in one range of addresses, the code area of the
//! cluster holding the handler generated here; any other it sends back to
//! the thread as SIGSYS (`si_code` `SYS_USER_DISPATCH`) without running
//! it. The handler takes the call's number and arguments from the signal
//! frame and makes the call through the *dispatch function*: the one
//! function of a small module weft maps into the process
//! ([`module_image`]), named `syscall` so that the system-call instrument
//! probes it as it does glibc's `syscall()` (the number kept at the entry,
//! the bytes the kernel wrote recorded per number at the return). The
//! call is recorded there, and the handler puts its result in the frame.
//! The address the call was made from goes along in `rcx` (which a
//! `syscall` instruction never reads), for the record.
//!
//! What the handler does not record or changes:
//!
//! * `rt_sigreturn` is made on the frame the program's handler returns
//!   from (the stack pointer the call had), which ends weft's frame too;
//! * a call made from one of the ranges of [`sync::UNRECORDED_RANGES`]
//!   (weft's other clusters, the vDSO) is made as it is, not recorded;
//! * the program's `rt_sigaction` for SIGSYS is answered from the table
//!   at [`sync::DISPATCH_TABLE`] and never reaches the kernel, which keeps
//!   weft's handler (and for SIGTRAP from the trap table, as the C
//!   library's `sigaction` hook answers it; neither call is recorded); a SIGSYS that is not a dispatch (seccomp, `kill`)
//!   goes to the action kept there (`crate::trap::chain_to_program`),
//!   with SIGSYS left unblocked while the program's handler runs (its
//!   calls are dispatched too);
//! * SIGSYS is taken out of every signal mask a call would install
//!   (`rt_sigprocmask`, `rt_sigaction`'s, `rt_sigsuspend`, `ppoll`,
//!   `pselect6`, `epoll_pwait`, `epoll_pwait2`): the kernel kills a thread
//!   whose dispatched call finds SIGSYS blocked;
//! * a process made with `fork` (or `clone` without `CLONE_VM`) here
//!   turns dispatch on in the child, which the kernel does not give its
//!   parent's setting. A thread or a process sharing its parent's memory
//!   (`CLONE_VM`, `vfork`) cannot be made from a signal handler: the
//!   thread turns dispatch off and makes the call again itself, so it
//!   and its child are no longer recorded. weft rewrites the C library's
//!   `clone`, `clone3`, `fork` and `vfork` sites, whose probes turn
//!   dispatch on in the child (`Primitive::EnableDispatch`), so this
//!   happens only for such calls in code weft could not rewrite.

use crate::region::{sync, trap_table as tt};
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_abi::sigaction::SIZE as ACTION_SIZE;
use weft_abi::syscall;

/// The register (DWARF number) that holds the signal frame's `ucontext_t`
/// while the handler makes the call: rbx, which the dispatch function's
/// probes keep. The unwinder finds the program's registers there
/// (`crate::unwind::Rule::Dispatched`).
pub const CONTEXT_REGISTER: u8 = 3;

/// `si_code` of a SIGSYS the kernel sent for Syscall User Dispatch.
pub const SYS_USER_DISPATCH: i32 = 2;
/// SIGSYS.
pub const SIGSYS: i32 = 31;
/// `prctl` option `PR_SET_SYSCALL_USER_DISPATCH`.
pub const PR_SET_SYSCALL_USER_DISPATCH: u32 = 59;
/// `PR_SYS_DISPATCH_ON`.
pub const PR_SYS_DISPATCH_ON: u32 = 1;
/// `prctl`'s number.
const PRCTL: u32 = 157;
/// `clone`'s flag for a child sharing its parent's memory.
const CLONE_VM: i32 = 0x100;
/// Calls that make a thread or a process.
const CLONE: u32 = 56;
const FORK: u32 = 57;
const VFORK: u32 = 58;
const CLONE3: u32 = 435;
/// Calls that install a signal mask, and the argument holding it.
const RT_SIGSUSPEND: u32 = 130;
const PSELECT6: u32 = 270;
const PPOLL: u32 = 271;
const EPOLL_PWAIT: u32 = 281;
const EPOLL_PWAIT2: u32 = 441;
const SIG_UNBLOCK: i32 = 1;

pub use weft_abi::dispatch::{FUNCTION_NAME, MODULE_NAME};
/// Link-time address of the dispatch function in [`module_image`].
pub const FUNCTION: u64 = 0x200;
/// Bytes of the module: one page.
pub const MODULE_SIZE: u64 = 4096;

/// The dispatch function: a `syscall` between two 5-byte `nop`s, room
/// for the `jmp`s that splice the call (ending at its end, as a C
/// library's `mov eax, N; syscall` is spliced) and its return, then `ret`.
const FUNCTION_CODE: [u8; 13] = [
    0x0f, 0x1f, 0x44, 0x00, 0x00, 0x0f, 0x05, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0xc3,
];
/// The dispatch function's instruction after its `syscall`, from its
/// start: where the splice's trampoline jumps back to after the call.
const AFTER_FUNCTION_SYSCALL: i32 = 7;
const _: () = assert!(
    FUNCTION_CODE[AFTER_FUNCTION_SYSCALL as usize - 2] == 0x0f
        && FUNCTION_CODE[AFTER_FUNCTION_SYSCALL as usize - 1] == 0x05
);

/// `ucontext_t` offsets of the saved registers, as displacements.
mod uc {
    use weft_abi::sigaction::ucontext as u;
    pub const R8: i32 = u::R8 as i32;
    pub const R9: i32 = u::R9 as i32;
    pub const R10: i32 = u::R10 as i32;
    pub const RDI: i32 = u::RDI as i32;
    pub const RSI: i32 = u::RSI as i32;
    pub const RDX: i32 = u::RDX as i32;
    pub const RAX: i32 = u::RAX as i32;
    pub const RSP: i32 = u::RSP as i32;
    pub const RBP: i32 = u::RBP as i32;
    pub const RBX: i32 = u::RBX as i32;
    pub const R12: i32 = u::R12 as i32;
    pub const R13: i32 = u::R13 as i32;
    pub const R14: i32 = u::R14 as i32;
    pub const R15: i32 = u::R15 as i32;
    pub const RIP: i32 = u::RIP as i32;
    pub const SIGMASK: i32 = u::SIGMASK as i32;
}

/// The dispatch module: a shared object of one page, linked at 0, whose
/// `.symtab` names the dispatch function at [`FUNCTION`]. weft maps it
/// into the process and reads it as it reads any module.
pub fn module_image() -> Vec<u8> {
    const EHDR: usize = 64;
    const PHDR: usize = 56;
    const SHDR: usize = 64;
    const SYM: usize = 24;
    let mut b = vec![0u8; MODULE_SIZE as usize];
    let put = |b: &mut Vec<u8>, at: usize, bytes: &[u8]| {
        b[at..at + bytes.len()].copy_from_slice(bytes);
    };
    let text = FUNCTION as usize;
    put(&mut b, text, &FUNCTION_CODE);
    // .strtab and .shstrtab, then .symtab, then the section headers.
    let strtab_at = text + 0x40;
    let strtab = format!("\0{FUNCTION_NAME}\0");
    put(&mut b, strtab_at, strtab.as_bytes());
    let shstrtab_at = strtab_at + 0x20;
    let shstrtab = b"\0.text\0.symtab\0.strtab\0.shstrtab\0";
    put(&mut b, shstrtab_at, shstrtab);
    let symtab_at = shstrtab_at + 0x40;
    let mut sym = [0u8; SYM];
    sym[0..4].copy_from_slice(&1u32.to_le_bytes()); // st_name
    sym[4] = 0x12; // STB_GLOBAL, STT_FUNC
    sym[6..8].copy_from_slice(&1u16.to_le_bytes()); // st_shndx: .text
    sym[8..16].copy_from_slice(&FUNCTION.to_le_bytes());
    sym[16..24].copy_from_slice(&(FUNCTION_CODE.len() as u64).to_le_bytes());
    put(&mut b, symtab_at + SYM, &sym); // entry 0 stays null
    let shdrs_at = symtab_at + 2 * SYM;
    let section = |name: u32, kind: u32, flags: u64, at: usize, size: usize, link: u32| {
        let mut s = [0u8; SHDR];
        s[0..4].copy_from_slice(&name.to_le_bytes());
        s[4..8].copy_from_slice(&kind.to_le_bytes());
        s[8..16].copy_from_slice(&flags.to_le_bytes());
        s[16..24].copy_from_slice(&(at as u64).to_le_bytes()); // sh_addr
        s[24..32].copy_from_slice(&(at as u64).to_le_bytes()); // sh_offset
        s[32..40].copy_from_slice(&(size as u64).to_le_bytes());
        s[40..44].copy_from_slice(&link.to_le_bytes());
        s
    };
    const PROGBITS: u32 = 1;
    const SYMTAB: u32 = 2;
    const STRTAB: u32 = 3;
    let mut symtab = section(7, SYMTAB, 0, symtab_at, 2 * SYM, 3);
    symtab[44..48].copy_from_slice(&1u32.to_le_bytes()); // sh_info: first global
    symtab[56..64].copy_from_slice(&(SYM as u64).to_le_bytes()); // sh_entsize
    let headers = [
        [0u8; SHDR],
        section(1, PROGBITS, 0x6, text, FUNCTION_CODE.len(), 0), // ALLOC|EXECINSTR
        symtab,
        section(15, STRTAB, 0, strtab_at, strtab.len(), 0),
        section(23, STRTAB, 0, shstrtab_at, shstrtab.len(), 0),
    ];
    for (i, h) in headers.iter().enumerate() {
        put(&mut b, shdrs_at + i * SHDR, h);
    }
    // The ELF header.
    put(&mut b, 0, b"\x7fELF\x02\x01\x01");
    put(&mut b, 16, &3u16.to_le_bytes()); // ET_DYN
    put(&mut b, 18, &62u16.to_le_bytes()); // EM_X86_64
    put(&mut b, 20, &1u32.to_le_bytes());
    put(&mut b, 32, &(EHDR as u64).to_le_bytes()); // e_phoff
    put(&mut b, 40, &(shdrs_at as u64).to_le_bytes()); // e_shoff
    put(&mut b, 52, &(EHDR as u16).to_le_bytes());
    put(&mut b, 54, &(PHDR as u16).to_le_bytes());
    put(&mut b, 56, &1u16.to_le_bytes()); // e_phnum
    put(&mut b, 58, &(SHDR as u16).to_le_bytes());
    put(&mut b, 60, &(headers.len() as u16).to_le_bytes());
    put(&mut b, 62, &4u16.to_le_bytes()); // e_shstrndx
                                          // One PT_LOAD, readable and executable, of the whole page.
    let mut ph = [0u8; PHDR];
    ph[0..4].copy_from_slice(&1u32.to_le_bytes());
    ph[4..8].copy_from_slice(&5u32.to_le_bytes()); // PF_R | PF_X
    ph[32..40].copy_from_slice(&MODULE_SIZE.to_le_bytes()); // p_filesz
    ph[40..48].copy_from_slice(&MODULE_SIZE.to_le_bytes()); // p_memsz
    ph[48..56].copy_from_slice(&MODULE_SIZE.to_le_bytes()); // p_align
    put(&mut b, EHDR, &ph);
    b
}

/// The generated handler and its `sa_restorer`.
pub use crate::trap::HandlerCode;

/// The generated SIGSYS handler: its code, entries and restorer, and its
/// direct entry (`direct`), which a rewritten site's program calls to
/// hand it a call (`weft_plan::Primitive::ThroughHandler`).
#[derive(Debug, Clone)]
pub struct Handler {
    /// The code, the handler's entry and its restorer.
    pub code: HandlerCode,
    /// Where the direct entry starts.
    pub direct: u64,
}

/// Generates the SIGSYS handler at `at`: `sync` is the address of the
/// sync page it reads, `function` the dispatch function's runtime address,
/// `trap_table` the trap table's, whose `OLD_ACTION` keeps the program's
/// SIGTRAP action while weft's SIGTRAP handler is installed (the
/// program's `rt_sigaction` for SIGTRAP is answered from there, as the C
/// library's `sigaction` hook answers it: `crate::sigaction_hook`).
pub fn handler_code(at: u64, sync: u64, function: u64, trap_table: u64) -> Result<Handler> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut l = Labels::new(&mut a);
    (|| -> std::result::Result<(), IcedError> {
        a.set_label(&mut l.entry)?;
        // rdi = signal, rsi = siginfo, rdx = ucontext. Every register is
        // the handler's: rt_sigreturn puts back the thread's from the frame.
        // rbp: where a call made at the dispatch function marked its
        // thread's block as returned (`Primitive::MarkReturned`), cleared
        // at the restorer; 0 until then.
        a.xor(ebp, ebp)?;
        a.cmp(
            dword_ptr(rsi + weft_abi::siginfo::CODE as i32),
            SYS_USER_DISPATCH,
        )?;
        a.jne(l.foreign)?;
        // r15: 1 once an `rt_sigaction` gave the kernel the program's own
        // action back, to put the delivery stub in front again after it.
        a.xor(r15d, r15d)?;
        const _: () = assert!(CONTEXT_REGISTER == 3);
        a.mov(rbx, rdx)?; // the frame
        a.mov(r12, qword_ptr(rbx + uc::RIP))?; // after the call's `syscall`
        a.mov(r13, qword_ptr(l.sync_lit))?;
        // The number, in the register the dispatch function's return
        // reads it from (`weft_abi::dispatch::NUMBER_REGISTER`).
        const _: () = assert!(weft_abi::dispatch::NUMBER_REGISTER == 14);
        a.mov(r14, qword_ptr(rbx + uc::RAX))?;
        a.cmp(r14, syscall::RT_SIGRETURN as i32)?;
        a.je(l.sigreturn)?;
        unrecorded_ranges(&mut a, &mut l)?;
        // The arguments at [rsp], then room for the copies the masks need.
        a.sub(rsp, FRAME)?;
        for (k, r) in [uc::RDI, uc::RSI, uc::RDX, uc::R10, uc::R8, uc::R9]
            .into_iter()
            .enumerate()
        {
            a.mov(rax, qword_ptr(rbx + r))?;
            a.mov(qword_ptr(rsp + 8 * k as i32), rax)?;
        }
        by_number(&mut a, &mut l)?;
        a.set_label(&mut l.call)?;
        // The site, among the last ones seen.
        a.mov(eax, 1)?;
        a.lock()
            .xadd(qword_ptr(r13 + sync::DISPATCH_SEEN_HEAD as i32), rax)?;
        a.and(eax, (sync::DISPATCH_SEEN_COUNT - 1) as u32)?;
        a.mov(qword_ptr(r13 + rax * 8 + sync::DISPATCH_SEEN as i32), r12)?;
        a.mov(rdi, qword_ptr(rsp))?;
        a.mov(rsi, qword_ptr(rsp + 8))?;
        a.mov(rdx, qword_ptr(rsp + 16))?;
        a.mov(r10, qword_ptr(rsp + 24))?;
        a.mov(r8, qword_ptr(rsp + 32))?;
        a.mov(r9, qword_ptr(rsp + 40))?;
        a.mov(rax, r14)?;
        a.mov(rcx, r12)?; // the site, for the record
        a.call(qword_ptr(l.function_lit))?;
        a.mov(qword_ptr(rbx + uc::RAX), rax)?;
        a.test(r15, r15)?;
        a.jnz(l.rewrap)?;
        a.test(rax, rax)?;
        a.jnz(l.done)?;
        // The frame's mask is the one rt_sigreturn installs: a mask the
        // call changed goes there.
        let mut not_mask = a.create_label();
        a.cmp(r14, syscall::RT_SIGPROCMASK as i32)?;
        a.jne(not_mask)?;
        a.cmp(qword_ptr(rsp + 8), 0)?;
        a.je(l.done)?;
        a.xor(edi, edi)?; // SIG_BLOCK nothing
        a.xor(esi, esi)?;
        a.lea(rdx, qword_ptr(rbx + uc::SIGMASK))?;
        a.mov(r10d, weft_abi::sigaction::SIGSET_SIZE as u32)?;
        a.mov(eax, syscall::RT_SIGPROCMASK)?;
        a.syscall()?;
        a.jmp(l.done)?;
        a.set_label(&mut not_mask)?;
        // A process made here runs this too: its own dispatch on.
        for nr in [FORK, CLONE, CLONE3] {
            a.cmp(r14, nr as i32)?;
            a.je(l.child)?;
        }
        a.jmp(l.done)?;
        a.set_label(&mut l.child)?;
        a.mov(edi, PR_SET_SYSCALL_USER_DISPATCH)?;
        a.mov(esi, PR_SYS_DISPATCH_ON)?;
        a.mov(rdx, qword_ptr(r13 + sync::DISPATCH_START as i32))?;
        a.mov(r10, qword_ptr(r13 + sync::DISPATCH_LEN as i32))?;
        a.xor(r8d, r8d)?;
        a.mov(eax, PRCTL)?;
        a.syscall()?;
        a.set_label(&mut l.done)?;
        a.add(rsp, FRAME)?;
        a.ret()?;
        special_calls(&mut a, &mut l)?;
        signals::after_action(&mut a, &mut l)?;
        signals::stub(&mut a, &mut l)?;
        direct::entry(&mut a, &mut l)?;
        a.set_label(&mut l.foreign)?;
        crate::trap::chain_to_program(&mut a, l.table_lit, SIGSYS, true)?;
        a.set_label(&mut l.restorer)?;
        signals::clear_marked_return(&mut a)?;
        a.set_label(&mut l.restorer_tail)?;
        a.mov(eax, syscall::RT_SIGRETURN)?;
        a.syscall()?;
        a.int3()?;
        a.set_label(&mut l.sync_lit)?;
        a.dq(&[sync])?;
        a.set_label(&mut l.table_lit)?;
        a.dq(&[sync + sync::DISPATCH_TABLE])?;
        a.set_label(&mut l.function_lit)?;
        a.dq(&[function])?;
        a.set_label(&mut l.trap_table_lit)?;
        a.dq(&[trap_table])?;
        Ok(())
    })()
    .map_err(enc)?;
    let (code, direct) = crate::trap::assemble_handler_with(a, at, &l.restorer, &l.direct)?;
    Ok(Handler { code, direct })
}

/// Stack the handler takes for the arguments (six words at `[rsp]`) and
/// the copies of what they point to ([`COPY`] on).
const FRAME: i32 = weft_abi::dispatch::HANDLER_FRAME as i32;
/// Where the copies go.
const COPY: i32 = 48;

/// The handler's labels.
struct Labels {
    /// The handler's first instruction, where the kernel enters it.
    entry: CodeLabel,
    /// The direct entry ([`direct`]).
    direct: CodeLabel,
    call: CodeLabel,
    child: CodeLabel,
    done: CodeLabel,
    plain: CodeLabel,
    native: CodeLabel,
    sigreturn: CodeLabel,
    sigaction: CodeLabel,
    rewrap: CodeLabel,
    stub: CodeLabel,
    foreign: CodeLabel,
    restorer: CodeLabel,
    /// The restorer's `rt_sigreturn`, right after it cleared the word a
    /// call made at the dispatch function set.
    restorer_tail: CodeLabel,
    sync_lit: CodeLabel,
    table_lit: CodeLabel,
    function_lit: CodeLabel,
    trap_table_lit: CodeLabel,
}

impl Labels {
    fn new(a: &mut CodeAssembler) -> Labels {
        Labels {
            entry: a.create_label(),
            direct: a.create_label(),
            call: a.create_label(),
            child: a.create_label(),
            done: a.create_label(),
            plain: a.create_label(),
            native: a.create_label(),
            sigreturn: a.create_label(),
            sigaction: a.create_label(),
            rewrap: a.create_label(),
            stub: a.create_label(),
            foreign: a.create_label(),
            restorer: a.create_label(),
            restorer_tail: a.create_label(),
            sync_lit: a.create_label(),
            table_lit: a.create_label(),
            function_lit: a.create_label(),
            trap_table_lit: a.create_label(),
        }
    }
}

/// Jumps to `plain` when the call was made from one of the unrecorded
/// ranges (r12: its address; r13: the sync page). Clobbers rcx, rdx.
fn unrecorded_ranges(a: &mut CodeAssembler, l: &mut Labels) -> std::result::Result<(), IcedError> {
    let mut next = a.create_label();
    let mut each = a.create_label();
    a.xor(ecx, ecx)?;
    a.set_label(&mut each)?;
    a.lea(rdx, qword_ptr(r13 + rcx))?;
    a.cmp(r12, qword_ptr(rdx + sync::UNRECORDED_RANGES as i32))?;
    a.jb(next)?;
    a.cmp(r12, qword_ptr(rdx + (sync::UNRECORDED_RANGES + 8) as i32))?;
    a.jb(l.plain)?;
    a.set_label(&mut next)?;
    a.add(rcx, 16)?;
    a.cmp(rcx, (16 * sync::UNRECORDED_RANGE_COUNT) as i32)?;
    a.jb(each)
}

/// The calls that need more than being made (r14: the number; the
/// arguments at [rsp]): masks without SIGSYS, SIGSYS's action kept, the
/// calls that make threads. Falls through to `call` or jumps there.
fn by_number(a: &mut CodeAssembler, l: &mut Labels) -> std::result::Result<(), IcedError> {
    let mut procmask = a.create_label();
    let mut pselect = a.create_label();
    let mut clone = a.create_label();
    let mut clone3 = a.create_label();
    // (number, where to go)
    a.cmp(r14, syscall::RT_SIGACTION as i32)?;
    a.je(l.sigaction)?;
    a.cmp(r14, syscall::RT_SIGPROCMASK as i32)?;
    a.je(procmask)?;
    a.cmp(r14, PSELECT6 as i32)?;
    a.je(pselect)?;
    a.cmp(r14, CLONE as i32)?;
    a.je(clone)?;
    a.cmp(r14, CLONE3 as i32)?;
    a.je(clone3)?;
    a.cmp(r14, VFORK as i32)?;
    a.je(l.native)?;
    for (nr, arg) in [
        (RT_SIGSUSPEND, 0),
        (PPOLL, 3),
        (EPOLL_PWAIT, 4),
        (EPOLL_PWAIT2, 4),
    ] {
        let mut other = a.create_label();
        a.cmp(r14, nr as i32)?;
        a.jne(other)?;
        without_sigsys(a, arg)?;
        a.jmp(l.call)?;
        a.set_label(&mut other)?;
    }
    a.jmp(l.call)?;
    // rt_sigprocmask(how, set, old, size): SIG_UNBLOCK blocks nothing.
    a.set_label(&mut procmask)?;
    a.cmp(qword_ptr(rsp), SIG_UNBLOCK)?;
    a.je(l.call)?;
    without_sigsys(a, 1)?;
    a.jmp(l.call)?;
    // pselect6's sixth argument points to { const sigset_t *, size }.
    a.set_label(&mut pselect)?;
    a.mov(rax, qword_ptr(rsp + 40))?;
    a.test(rax, rax)?;
    a.jz(l.call)?;
    a.mov(rdx, qword_ptr(rax + 8))?;
    a.mov(qword_ptr(rsp + COPY + 16), rdx)?;
    a.mov(rax, qword_ptr(rax))?;
    a.mov(qword_ptr(rsp + COPY + 8), rax)?;
    a.lea(rax, qword_ptr(rsp + COPY + 8))?;
    a.mov(qword_ptr(rsp + 40), rax)?;
    // The copied pointer is now the fake "argument" at COPY + 8.
    a.mov(rax, qword_ptr(rsp + COPY + 8))?;
    a.test(rax, rax)?;
    a.jz(l.call)?;
    a.mov(rax, qword_ptr(rax))?;
    a.btr(rax, (SIGSYS - 1) as u32)?;
    a.mov(qword_ptr(rsp + COPY), rax)?;
    a.lea(rax, qword_ptr(rsp + COPY))?;
    a.mov(qword_ptr(rsp + COPY + 8), rax)?;
    a.jmp(l.call)?;
    // clone(flags, ...) and clone3(&args, size), args' first word flags.
    a.set_label(&mut clone)?;
    a.test(dword_ptr(rsp), CLONE_VM)?;
    a.jnz(l.native)?;
    a.jmp(l.call)?;
    a.set_label(&mut clone3)?;
    a.mov(rax, qword_ptr(rsp))?;
    a.test(dword_ptr(rax), CLONE_VM)?;
    a.jnz(l.native)?;
    a.jmp(l.call)
}

/// Replaces argument `k`, a pointer to a signal set (or null), by a copy
/// of the set without SIGSYS. Clobbers rax.
fn without_sigsys(a: &mut CodeAssembler, k: i32) -> std::result::Result<(), IcedError> {
    let mut null = a.create_label();
    a.mov(rax, qword_ptr(rsp + 8 * k))?;
    a.test(rax, rax)?;
    a.jz(null)?;
    a.mov(rax, qword_ptr(rax))?;
    a.btr(rax, (SIGSYS - 1) as u32)?;
    a.mov(qword_ptr(rsp + COPY), rax)?;
    a.lea(rax, qword_ptr(rsp + COPY))?;
    a.mov(qword_ptr(rsp + 8 * k), rax)?;
    a.set_label(&mut null)
}

/// The paths that do not go through the dispatch function.
fn special_calls(a: &mut CodeAssembler, l: &mut Labels) -> std::result::Result<(), IcedError> {
    let mut not_sigsys = a.create_label();
    let mut no_old = a.create_label();
    let mut no_new = a.create_label();
    // rt_sigaction(sig, act, oldact, size): SIGSYS's action is the
    // dispatch table's, SIGTRAP's the trap table's (r15: the table); any
    // other's mask loses SIGSYS.
    let mut kept_here = a.create_label();
    a.set_label(&mut l.sigaction)?;
    a.lea(r15, qword_ptr(r13 + sync::DISPATCH_TABLE as i32))?;
    a.cmp(qword_ptr(rsp), SIGSYS)?;
    a.je(kept_here)?;
    a.mov(r15, qword_ptr(l.trap_table_lit))?;
    a.cmp(qword_ptr(rsp), weft_abi::signal::SIGTRAP)?;
    a.jne(not_sigsys)?;
    a.set_label(&mut kept_here)?;
    let kept = tt::OLD_ACTION as i32;
    // The new action first into the copy (act and oldact may be one).
    a.mov(rax, qword_ptr(rsp + 8))?;
    a.test(rax, rax)?;
    a.jz(no_new)?;
    copy_action(a, (rax, 0), (rsp, COPY))?;
    a.set_label(&mut no_new)?;
    a.mov(rax, qword_ptr(rsp + 16))?;
    a.test(rax, rax)?;
    a.jz(no_old)?;
    copy_action(a, (r15, kept), (rax, 0))?;
    a.set_label(&mut no_old)?;
    let mut keep_none = a.create_label();
    a.cmp(qword_ptr(rsp + 8), 0)?;
    a.je(keep_none)?;
    copy_action(a, (rsp, COPY), (r15, kept))?;
    a.set_label(&mut keep_none)?;
    a.mov(qword_ptr(rbx + uc::RAX), 0)?;
    a.add(rsp, FRAME)?;
    a.ret()?;
    a.set_label(&mut not_sigsys)?;
    signals::before_action(a, l)?;
    let mut plain_action = a.create_label();
    a.mov(rax, qword_ptr(rsp + 8))?;
    a.test(rax, rax)?;
    a.jz(plain_action)?;
    copy_action(a, (rax, 0), (rsp, COPY))?;
    a.btr(
        qword_ptr(rsp + COPY + weft_abi::sigaction::MASK as i32),
        (SIGSYS - 1) as u32,
    )?;
    a.lea(rax, qword_ptr(rsp + COPY))?;
    a.mov(qword_ptr(rsp + 8), rax)?;
    a.set_label(&mut plain_action)?;
    a.jmp(l.call)?;
    // A thread or a process sharing this memory, at a site weft did not
    // rewrite: dispatch off for this thread, which makes the call again
    // itself (the frame's rax still holds the number).
    a.set_label(&mut l.native)?;
    a.mov(edi, PR_SET_SYSCALL_USER_DISPATCH)?;
    a.xor(esi, esi)?;
    a.xor(edx, edx)?;
    a.xor(r10d, r10d)?;
    a.xor(r8d, r8d)?;
    a.mov(eax, PRCTL)?;
    a.syscall()?;
    a.sub(qword_ptr(rbx + uc::RIP), 2)?;
    a.add(rsp, FRAME)?;
    a.ret()?;
    // Made as it is (weft's own code, the vDSO).
    a.set_label(&mut l.plain)?;
    a.mov(rdi, qword_ptr(rbx + uc::RDI))?;
    a.mov(rsi, qword_ptr(rbx + uc::RSI))?;
    a.mov(rdx, qword_ptr(rbx + uc::RDX))?;
    a.mov(r10, qword_ptr(rbx + uc::R10))?;
    a.mov(r8, qword_ptr(rbx + uc::R8))?;
    a.mov(r9, qword_ptr(rbx + uc::R9))?;
    a.mov(rax, r14)?;
    a.syscall()?;
    a.mov(qword_ptr(rbx + uc::RAX), rax)?;
    a.ret()?;
    // rt_sigreturn on the frame the program's handler returns from (its
    // `ucontext_t` at the stack pointer, its return address popped).
    a.set_label(&mut l.sigreturn)?;
    a.mov(rax, qword_ptr(rbx + uc::RSP))?;
    signals::put_returned_back(a)?;
    a.mov(rsp, qword_ptr(rbx + uc::RSP))?;
    a.mov(eax, syscall::RT_SIGRETURN)?;
    a.syscall()?;
    a.int3()
}

/// Copies a kernel `struct sigaction` from `[from.0 + from.1]` to
/// `[to.0 + to.1]`. Clobbers rdx.
fn copy_action(
    a: &mut CodeAssembler,
    from: (AsmRegister64, i32),
    to: (AsmRegister64, i32),
) -> std::result::Result<(), IcedError> {
    for w in 0..(ACTION_SIZE as i32 / 8) {
        a.mov(rdx, qword_ptr(from.0 + from.1 + 8 * w))?;
        a.mov(qword_ptr(to.0 + to.1 + 8 * w), rdx)?;
    }
    Ok(())
}

/// The handler's flags: three arguments, returning through its restorer,
/// SIGSYS not blocked while it runs (a handler of the program's that
/// interrupts it may make calls too), on the stack the thread is on.
pub const HANDLER_FLAGS: u64 = weft_abi::sigaction::SA_SIGINFO
    | weft_abi::sigaction::SA_RESTORER
    | weft_abi::sigaction::SA_NODEFER;

mod direct;
mod signals;
#[cfg(test)]
mod tests;
