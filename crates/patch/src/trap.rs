//! The in-process SIGTRAP handler that redirects weft's `int3` splices.
//!
//! When a point cannot take a `jmp`, its first byte becomes `int3`. The
//! kernel delivers SIGTRAP to the thread that hit it; weft's handler (code
//! generated here, no libc) binary-searches the trap table for the trapping
//! address and rewrites the saved `rip` in the signal frame to the point's
//! trampoline, then returns through `rt_sigreturn`. No ptrace stop occurs.
//! Only a SIGTRAP the kernel sent for an `int3` (`si_code` SI_KERNEL) at
//! an address in the table is weft's, and one a re-execution's hardware
//! breakpoint sent (`TRAP_PERF`, marked: `mini::feed::raise`). Every
//! other SIGTRAP (one the program
//! raised, a single step, someone else's `int3`) goes to the disposition
//! the program had: its handler, ignored, or the default action, restored
//! and the signal sent again so the program dies exactly as it would have.
//! A table entry whose trampoline is 0 is a splice weft removed: a thread
//! that trapped on it before the removal re-executes the restored
//! instruction.
//!
//! Known hazard (documented in docs/splicing.md): a thread that blocks
//! SIGTRAP and hits an `int3` is killed by the kernel, because synchronous
//! traps are forced; weft checks threads' masks before choosing `int3`.

use crate::region::trap_table as tt;
use crate::{Error, Result};
use iced_x86::code_asm::*;
use weft_abi::sigaction::{
    self as sa, SA_NODEFER, SA_ONSTACK, SA_RESETHAND, SA_RESTORER, SA_SIGINFO, SIG_BLOCK, SIG_IGN,
    UCONTEXT_RIP,
};
use weft_abi::{siginfo, signal::SIGTRAP, syscall};

/// The `int3` instruction.
pub const INT3: u8 = 0xcc;

/// The handler's flags: three arguments, on the alternate stack if the
/// thread has one, returning through our restorer, and not blocking SIGTRAP
/// while it runs (so a program's own handler it chains to can trap too).
pub const HANDLER_FLAGS: u64 = SA_SIGINFO | SA_ONSTACK | SA_RESTORER | SA_NODEFER;
/// `SA_RESTORER` alone, for the SIG_DFL action.
pub const RESTORER_FLAG: u64 = SA_RESTORER;

/// The generated handler and its `sa_restorer`.
#[derive(Debug, Clone)]
pub struct HandlerCode {
    /// Bytes to place at the handler's address.
    pub bytes: Vec<u8>,
    /// Entry of the handler (`sa_handler`).
    pub handler: u64,
    /// Entry of the restorer (`sa_restorer`: `rt_sigreturn`).
    pub restorer: u64,
}

/// Generates the handler at `at`, searching the trap table at `table`,
/// whose buffers hold `capacity` entries each.
pub fn handler_code(at: u64, table: u64, capacity: u64) -> Result<HandlerCode> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut found = a.create_label();
    let mut after_int3 = a.create_label();
    let mut stale = a.create_label();
    let mut not_found = a.create_label();
    let mut removed = a.create_label();
    let mut restorer = a.create_label();
    let mut table_lit = a.create_label();
    let r = UCONTEXT_RIP as i32;
    (|| -> std::result::Result<(), IcedError> {
        // rdi = signal, rsi = siginfo, rdx = ucontext
        // A hardware breakpoint a rerun armed (`TRAP_PERF`, its data
        // marked) raises a recorded signal delivery.
        let mut int3 = a.create_label();
        a.cmp(dword_ptr(rsi + siginfo::CODE as i32), siginfo::TRAP_PERF)?;
        a.jne(int3)?;
        crate::mini::feed::raise::breakpoint_hit(&mut a, not_found)?;
        a.set_label(&mut int3)?;
        // Otherwise only an int3 (si_code SI_KERNEL) can be weft's: a
        // SIGTRAP the program raised, a single step or a hardware
        // breakpoint of its own goes to the program's own disposition.
        a.cmp(dword_ptr(rsi + siginfo::CODE as i32), siginfo::SI_KERNEL)?;
        a.jne(not_found)?;
        a.mov(rax, qword_ptr(rdx + r))?;
        a.dec(rax)?; // the int3's own address
        search(&mut a, table_lit, capacity, found, after_int3)?;
        a.set_label(&mut after_int3)?;
        // Not an int3 of weft's before the pc. A thread weft backed up onto
        // its int3 (see `rewind_trapped_threads` in weft_live) may still get
        // the signal it was stopped with, if weft died then: the pc is the
        // site itself, and running on re-executes what is there.
        a.mov(rax, qword_ptr(rdx + r))?;
        search(&mut a, table_lit, capacity, stale, not_found)?;
        a.set_label(&mut stale)?;
        a.ret()?;
        a.set_label(&mut found)?;
        a.mov(rcx, qword_ptr(r8 + r11 + (tt::ENTRIES + 8) as i32))?;
        a.test(rcx, rcx)?;
        a.jz(removed)?;
        a.mov(qword_ptr(rdx + r), rcx)?; // on to the trampoline
        a.ret()?;
        a.set_label(&mut removed)?;
        // A splice weft removed after this thread trapped on it: the
        // original byte is back, so re-execute it. If an int3 is there
        // again, it is someone else's (a debugger's): theirs to handle.
        a.cmp(byte_ptr(rax), INT3 as i32)?;
        a.je(not_found)?;
        a.mov(qword_ptr(rdx + r), rax)?;
        a.ret()?;
        a.set_label(&mut not_found)?;
        chain_to_program(&mut a, table_lit, SIGTRAP, false)?;
        a.set_label(&mut restorer)?;
        a.mov(eax, syscall::RT_SIGRETURN)?;
        a.syscall()?;
        a.int3()?;
        a.set_label(&mut table_lit)?;
        a.dq(&[table])?;
        Ok(())
    })()
    .map_err(enc)?;
    assemble_handler(a, at, &restorer)
}

/// A signal handler assembled at `at`, its restorer at label `restorer`.
pub(crate) fn assemble_handler(
    a: CodeAssembler,
    at: u64,
    restorer: &CodeLabel,
) -> Result<HandlerCode> {
    Ok(assemble_handler_with(a, at, restorer, restorer)?.0)
}

/// [`assemble_handler`], with the address of one more label.
pub(crate) fn assemble_handler_with(
    mut a: CodeAssembler,
    at: u64,
    restorer: &CodeLabel,
    other: &CodeLabel,
) -> Result<(HandlerCode, u64)> {
    let enc = Error::Encode;
    let result = a
        .assemble_options(
            at,
            iced_x86::BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
        )
        .map_err(enc)?;
    let restorer_at = result.label_ip(restorer).map_err(enc)?;
    let other_at = result.label_ip(other).map_err(enc)?;
    let code = HandlerCode {
        bytes: result.inner.code_buffer,
        handler: at,
        restorer: restorer_at,
    };
    Ok((code, other_at))
}

/// Hands a signal that is not weft's to the disposition the program
/// had, kept in the table whose address is at `table_lit` (its
/// `OLD_ACTION` and a `DEFAULT_ACTION`, at the trap table's offsets):
/// its handler, run as the kernel would have run it; nothing, if
/// ignored; or the default action, restored and the signal sent again so
/// the program ends exactly as it would have. Entered with the handler's
/// three arguments in rdi, rsi, rdx. With `never_block`, the signal stays
/// unblocked while the program's handler runs, whatever its mask says
/// (SIGSYS, which the kernel must be able to send for the handler's own
/// system calls).
pub(crate) fn chain_to_program(
    a: &mut CodeAssembler,
    table_lit: CodeLabel,
    signal: i32,
    never_block: bool,
) -> std::result::Result<(), IcedError> {
    let mut ignore = a.create_label();
    let mut default = a.create_label();
    let mut nodefer = a.create_label();
    let mut keep = a.create_label();
    a.mov(r8, qword_ptr(table_lit))?; // the table again, not a buffer
    a.mov(r9, qword_ptr(r8 + tt::OLD_HANDLER as i32))?;
    a.cmp(r9, SIG_IGN as i32)?;
    a.je(ignore)?;
    a.test(r9, r9)?;
    a.jz(default)?;
    // The program's own handler, with the same arguments, run as the
    // kernel would have run it: its mask blocked, SIGTRAP too unless
    // SA_NODEFER, and its action reset to the default first with
    // SA_RESETHAND. (The signal frame's saved mask is restored on
    // return, so nothing here outlives the handler.)
    a.mov(rax, qword_ptr(r8 + (tt::OLD_ACTION + sa::MASK) as i32))?;
    a.mov(rcx, qword_ptr(r8 + (tt::OLD_ACTION + sa::FLAGS) as i32))?;
    a.bt(rcx, SA_NODEFER.trailing_zeros())?;
    a.jc(nodefer)?;
    a.bts(rax, (signal - 1) as u32)?;
    a.set_label(&mut nodefer)?;
    if never_block {
        a.btr(rax, (signal - 1) as u32)?;
    }
    a.bt(rcx, SA_RESETHAND.trailing_zeros())?;
    a.jnc(keep)?;
    a.mov(qword_ptr(r8 + tt::OLD_HANDLER as i32), 0)?;
    a.set_label(&mut keep)?;
    a.push(rdi)?;
    a.push(rsi)?;
    a.push(rdx)?;
    a.push(rax)?; // the set to block, for rt_sigprocmask to read
    a.mov(edi, SIG_BLOCK as u32)?;
    a.mov(rsi, rsp)?;
    a.xor(edx, edx)?;
    a.mov(r10d, sa::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGPROCMASK)?;
    a.syscall()?;
    a.pop(rax)?;
    a.pop(rdx)?;
    a.pop(rsi)?;
    a.pop(rdi)?;
    a.jmp(r9)?;
    a.set_label(&mut ignore)?;
    a.ret()?;
    a.set_label(&mut default)?;
    // The default action: restore it and send the signal again, so the
    // program dies of this SIGTRAP exactly as it would have (it is
    // delivered as this handler returns; SA_NODEFER leaves it unblocked).
    a.mov(edi, signal as u32)?;
    a.lea(rsi, qword_ptr(r8 + tt::DEFAULT_ACTION as i32))?;
    a.xor(edx, edx)?;
    a.mov(r10d, sa::SIGSET_SIZE as u32)?;
    a.mov(eax, syscall::RT_SIGACTION)?;
    a.syscall()?;
    a.mov(eax, syscall::GETPID)?;
    a.syscall()?;
    a.mov(r9, rax)?;
    a.mov(eax, syscall::GETTID)?;
    a.syscall()?;
    a.mov(rdi, r9)?;
    a.mov(rsi, rax)?;
    a.mov(edx, signal as u32)?;
    a.mov(eax, syscall::TGKILL)?;
    a.syscall()?;
    a.ret()?;
    Ok(())
}

/// Binary-searches the trap table's buffer in use for the site in rax:
/// jumps to `found` with r8 + r11 at its entry (less `ENTRIES`), else to
/// `missing`. Clobbers r8-r11 and rcx.
fn search(
    a: &mut CodeAssembler,
    table_lit: CodeLabel,
    capacity: u64,
    found: CodeLabel,
    missing: CodeLabel,
) -> std::result::Result<(), IcedError> {
    let mut first_buffer = a.create_label();
    let mut step = a.create_label();
    let mut below = a.create_label();
    a.mov(r8, qword_ptr(table_lit))?;
    // The buffer in use, and its count, from one load of CURRENT.
    a.mov(rcx, qword_ptr(r8 + tt::CURRENT as i32))?;
    a.bt(rcx, tt::BUFFER_BIT)?;
    a.jnc(first_buffer)?;
    a.mov(r9, tt::buffer(1, capacity) - tt::ENTRIES)?;
    a.add(r8, r9)?; // r8 + ENTRIES: the second buffer
    a.set_label(&mut first_buffer)?;
    a.mov(ecx, ecx)?; // hi: the count (low 32 bits)
    a.xor(r9d, r9d)?; // lo
    a.set_label(&mut step)?;
    a.cmp(r9, rcx)?;
    a.jae(missing)?;
    a.lea(r10, qword_ptr(r9 + rcx))?;
    a.shr(r10, 1)?;
    a.mov(r11, r10)?;
    a.shl(r11, 4)?;
    a.cmp(rax, qword_ptr(r8 + r11 + tt::ENTRIES as i32))?;
    a.je(found)?;
    a.jb(below)?;
    a.lea(r9, qword_ptr(r10 + 1))?;
    a.jmp(step)?;
    a.set_label(&mut below)?;
    a.mov(rcx, r10)?;
    a.jmp(step)
}

/// A kernel `struct sigaction` (x86-64): handler, flags, restorer, mask.
pub fn kernel_sigaction(
    handler: u64,
    flags: u64,
    restorer: u64,
    mask: u64,
) -> [u8; sa::SIZE as usize] {
    let mut b = [0u8; sa::SIZE as usize];
    for (at, v) in [
        (sa::HANDLER, handler),
        (sa::FLAGS, flags),
        (sa::RESTORER, restorer),
        (sa::MASK, mask),
    ] {
        b[at as usize..at as usize + 8].copy_from_slice(&v.to_le_bytes());
    }
    b
}

/// The trap table's entries, sorted by site, as bytes.
pub fn table_entries(mut entries: Vec<(u64, u64)>) -> Vec<u8> {
    entries.sort_unstable();
    entries
        .iter()
        .flat_map(|(s, t)| s.to_le_bytes().into_iter().chain(t.to_le_bytes()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_assembles_and_ends_with_table_literal() {
        let h = handler_code(0x7000_0000, 0x7100_0000, 16).unwrap();
        assert_eq!(h.handler, 0x7000_0000);
        assert!(h.restorer > h.handler && h.restorer < h.handler + h.bytes.len() as u64);
        let lit = &h.bytes[h.bytes.len() - 8..];
        assert_eq!(u64::from_le_bytes(lit.try_into().unwrap()), 0x7100_0000);
        let off = (h.restorer - h.handler) as usize;
        assert_eq!(&h.bytes[off..off + 7], &[0xb8, 15, 0, 0, 0, 0x0f, 0x05]);
    }

    #[test]
    fn entries_sorted() {
        let b = table_entries(vec![(30, 3), (10, 1), (20, 2)]);
        let sites: Vec<u64> = b
            .chunks(16)
            .map(|c| u64::from_le_bytes(c[..8].try_into().unwrap()))
            .collect();
        assert_eq!(sites, vec![10, 20, 30]);
    }
}
