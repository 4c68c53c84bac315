//! The SIGSEGV handler that runs in the traced process when a witness
//! store reaches the end of its thread's buffer (the guard page) or the
//! thread has no buffer yet (its cursor is 0).
//!
//! It recognises a store by its code: the reservation of its bytes in the
//! TCB's cursor right before it (`xadd`, or `add` in a restartable
//! sequence; no other code touches that word)
//! and its own encoding
//! (`[66] [REX.B] C6|C7 /0` with a plain `[reg]` operand, or a register's value
//! `REX.W 89 /r` with `[reg+1]`); it finds the cursor register in the
//! signal frame. It marks the full buffer's
//! descriptor (length, TSC) FULL, claims a FREE buffer with `lock
//! cmpxchg`, fills in its descriptor (tid, pid, sequence number, TSC), and
//! points the register at it, the TCB's cursor as far past it as the
//! reservation went; returning re-executes the store there (a signal
//! delivered first writes after the reserved place). With
//! no free buffer it sleeps on the pool's `FREED` futex word, 50 ms at a
//! time; after 2 s (then every thread stops waiting, until weft, if
//! alive, drains again), once weft has said it is gone, or once weft's
//! process is gone (killed), the thread writes
//! into its old buffer again (or the discard buffer), and the bytes
//! dropped are counted in `LOST`.
//!
//! Any other fault goes to the action the program has: its handler is
//! called with the same arguments, or the default action is restored and
//! the faulting instruction runs again (and kills the process as it would
//! have). The program's action is kept in the process's own page of the
//! pool ([`Pool::program_action`]): the one weft's replaced, then any the
//! program set since through the C library's `sigaction`, which weft's
//! hook answers for SIGSEGV without changing the kernel's action
//! (`weft_patch::sigaction_hook`).

use crate::pool::{self, Pool};
use crate::rebuild::CURSOR;
use iced_x86::code_asm::*;
use iced_x86::{BlockEncoderOptions, IcedError};

/// `ucontext_t.uc_mcontext.gregs` (x86-64).
const GREGS: i32 = 40;
/// `gregs[REG_RIP]`.
const GREG_RIP: i32 = GREGS + 16 * 8;
/// Waits of 50 ms before a thread gives up on a free buffer (2 s).
const TRIES: u32 = 40;
const SYS_RT_SIGACTION: u32 = 13;
const SYS_RT_SIGRETURN: u32 = 15;
const SYS_GETPID: u32 = 39;
const SYS_GETTID: u32 = 186;
const SYS_FUTEX: u32 = 202;
const SYS_TGKILL: u32 = 234;
const SYS_KILL: u32 = 62;
const ESRCH: i32 = 3;
/// `siginfo_t.si_code`.
const SI_CODE: i32 = 8;
const SIGSEGV: u32 = 11;
const SA_RESETHAND: u32 = 0x8000_0000;

/// The handler's code and entry points.
#[derive(Debug, Clone)]
pub struct HandlerCode {
    /// Bytes to place at the address given.
    pub bytes: Vec<u8>,
    /// `sa_handler`.
    pub handler: u64,
    /// `sa_restorer` (`rt_sigreturn`).
    pub restorer: u64,
    /// A routine that claims a free buffer for the calling thread without
    /// a fault (for a new thread, which starts with every signal blocked):
    /// returns its address in `rax`, waiting for one as the handler does
    /// (the discard buffer's if none comes); clobbers rax, rcx, rdx, rsi,
    /// rdi, r8-r11 and the flags.
    pub claim: u64,
}

impl HandlerCode {
    /// The kernel `struct sigaction` installing the handler: `SA_SIGINFO`,
    /// on the alternate stack if the thread has one, not deferring itself
    /// (it never faults), with its restorer; every other signal blocked
    /// while it runs, so that no handler of the program (traced code,
    /// perhaps with SIGSEGV blocked) runs while a thread waits for a buffer.
    pub fn kernel_action(&self) -> [u8; 32] {
        const SA_SIGINFO: u64 = 0x4;
        const SA_ONSTACK: u64 = 0x0800_0000;
        const SA_RESTORER: u64 = 0x0400_0000;
        const SA_NODEFER: u64 = 0x4000_0000;
        let flags = SA_SIGINFO | SA_ONSTACK | SA_RESTORER | SA_NODEFER;
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.handler.to_le_bytes());
        b[8..16].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.restorer.to_le_bytes());
        // Bit n-1 for signal n; SIGSEGV and SIGBUS stay deliverable (the
        // kernel cannot hold a fault back), SIGKILL and SIGSTOP always are.
        let keep = [11u64, 7, 9, 19].iter().fold(0u64, |m, s| m | 1 << (s - 1));
        b[24..32].copy_from_slice(&(!keep).to_le_bytes());
        b
    }
}

/// Generates the handler at `at` for the pool mapped at `pool_at` in the
/// process.
pub fn handler_code(at: u64, pool_at: u64, layout: Pool) -> Result<HandlerCode, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut not_ours = a.create_label();
    let mut no_rex = a.create_label();
    let mut no_operand_size = a.create_label();
    let mut opcode_ok = a.create_label();
    let mut fresh = a.create_label();
    let mut claim_again = a.create_label();
    let mut scan = a.create_label();
    let mut got = a.create_label();
    let mut give_up = a.create_label();
    let mut use_discard = a.create_label();
    let mut default = a.create_label();
    let mut was_discard = a.create_label();
    let mut restorer = a.create_label();
    let mut gregs_of = a.create_label();
    let mut wait = a.create_label();
    let mut hand_over = a.create_label();
    let mut after_load = a.create_label();
    let mut by_add = a.create_label();
    let mut reraise = a.create_label();
    let mut claim = a.create_label();
    let mut claim_scan = a.create_label();
    let mut claim_got = a.create_label();
    let mut claim_retry = a.create_label();
    let mut claim_discard = a.create_label();
    let mut run_program_handler = a.create_label();
    let mut not_value = a.create_label();
    let mut register_known = a.create_label();
    let mut overtaken = a.create_label();
    let mut reserve_again = a.create_label();
    let descs = pool_at + pool::DESCS;
    let first_buffer = pool_at + layout.header_size();
    let stride = layout.stride();
    let n = layout.buffers;
    // rdi = signal, rsi = siginfo, rdx = ucontext. Until the fault is
    // known to be a store of weft's, rdi, rsi and rdx stay as they came.
    // Only a fault the kernel raised (si_code > 0) can be a store's; one
    // sent with kill or tgkill goes to the program's action.
    a.cmp(dword_ptr(rsi + SI_CODE), 0)?;
    a.jle(not_ours)?;
    a.mov(r8, qword_ptr(rdx + GREG_RIP))?;
    // A witness store comes right after the reservation of its bytes:
    // `xadd fs:[0x40], r` (64 REX.W 0F C1 /r 25 40000000), or in a
    // restartable sequence `add qword fs:[0x40], len` (64 48 83 04 25
    // 40000000 ib). No other code touches that word of glibc's TCB.
    a.cmp(dword_ptr(r8 - 4), CURSOR as i32)?;
    a.jne(by_add)?;
    a.cmp(byte_ptr(r8 - 5), 0x25)?;
    a.jne(not_ours)?;
    a.cmp(word_ptr(r8 - 8), 0xC10F)?;
    a.jne(not_ours)?;
    a.cmp(byte_ptr(r8 - 10), 0x64)?;
    a.jne(not_ours)?;
    a.jmp(after_load)?;
    a.set_label(&mut by_add)?;
    a.cmp(dword_ptr(r8 - 5), CURSOR as i32)?;
    a.jne(not_ours)?;
    a.cmp(dword_ptr(r8 - 9), 0x2504_8348)?;
    a.jne(not_ours)?;
    a.cmp(byte_ptr(r8 - 10), 0x64)?;
    a.jne(not_ours)?;
    a.set_label(&mut after_load)?;
    a.xor(r9d, r9d)?;
    a.movzx(eax, byte_ptr(r8))?;
    // A register's value (`--data`): `REX.W 89 /r` with `[r+1]`.
    a.mov(ecx, eax)?;
    a.and(ecx, 0xF8)?;
    a.cmp(ecx, 0x48)?;
    a.jne(not_value)?;
    a.cmp(byte_ptr(r8 + 1), 0x89)?;
    a.jne(not_ours)?;
    a.cmp(byte_ptr(r8 + 3), 1)?; // disp8 1
    a.jne(not_ours)?;
    a.movzx(ecx, byte_ptr(r8 + 2))?;
    a.mov(r10d, ecx)?;
    a.and(r10d, 0xC0)?;
    a.cmp(r10d, 0x40)?; // mod 01: `[rm+disp8]`
    a.jne(not_ours)?;
    a.and(ecx, 7)?;
    a.cmp(ecx, 4)?; // SIB
    a.je(not_ours)?;
    a.mov(r11d, 9)?; // the record's length: tag and value
    a.test(al, 1)?; // REX.B
    a.jz(register_known)?;
    a.add(ecx, 8)?;
    a.jmp(register_known)?;
    a.set_label(&mut not_value)?;
    // A two-byte record's store: `66 [REX.B] C7 /0 iw`.
    a.xor(r12d, r12d)?;
    a.cmp(al, 0x66)?;
    a.jne(no_operand_size)?;
    a.mov(r12d, 1)?;
    a.add(r8, 1)?;
    a.movzx(eax, byte_ptr(r8))?;
    a.set_label(&mut no_operand_size)?;
    a.cmp(al, 0x41)?;
    a.jne(no_rex)?;
    a.mov(r9d, 8)?;
    a.add(r8, 1)?;
    a.movzx(eax, byte_ptr(r8))?;
    a.set_label(&mut no_rex)?;
    a.cmp(al, 0xC6)?;
    a.je(opcode_ok)?;
    a.cmp(al, 0xC7)?;
    a.jne(not_ours)?;
    a.set_label(&mut opcode_ok)?;
    // The record's length: a byte's store is a one-byte record (a value's
    // tag comes after its value, which would have faulted first), a
    // word's a two-byte one, a dword's a four-byte one.
    a.mov(r11d, 1)?;
    a.mov(r10d, 4)?;
    a.cmp(al, 0xC7)?;
    a.cmove(r11d, r10d)?;
    a.mov(r10d, 2)?;
    a.test(r12d, r12d)?;
    a.cmovnz(r11d, r10d)?;
    a.movzx(ecx, byte_ptr(r8 + 1))?;
    a.test(cl, 0xF8)?; // mod 00, reg /0: `[rm]`
    a.jnz(not_ours)?;
    a.and(ecx, 7)?;
    a.cmp(ecx, 4)?; // SIB
    a.je(not_ours)?;
    a.cmp(ecx, 5)?; // RIP-relative
    a.je(not_ours)?;
    a.add(ecx, r9d)?;
    a.set_label(&mut register_known)?;
    a.lea(rax, ptr(gregs_of))?;
    a.movzx(ecx, byte_ptr(rax + rcx))?;
    // Committed: r13 = the register's slot in the frame, r14 = the pool,
    // rbx = the full buffer's descriptor (0 if none). The frame restores
    // every register on return, so any may be used.
    a.lea(r13, qword_ptr(rdx + rcx * 8 + GREGS))?;
    a.mov(r14, pool_at)?;
    // The reservation moved the cursor by the record's length, unless a
    // signal came between it and the store and its handler's records
    // moved it on: into the next buffer, when one of them faulted first
    // and took the buffer over (this reservation included).
    a.mov(rax, qword_ptr(CURSOR).fs())?;
    a.sub(rax, qword_ptr(r13))?;
    a.cmp(rax, r11)?;
    a.jne(overtaken)?;
    a.mov(rax, qword_ptr(r13))?;
    a.mov(rcx, first_buffer)?;
    a.sub(rax, rcx)?;
    a.jb(fresh)?;
    a.xor(edx, edx)?;
    a.mov(rcx, stride)?;
    a.div(rcx)?; // rax = buffer, rdx = bytes used
    a.cmp(rax, n as i32)?;
    a.je(was_discard)?;
    a.ja(fresh)?;
    a.mov(rbx, rax)?;
    a.shl(rbx, 6)?;
    a.mov(rcx, descs)?;
    a.add(rbx, rcx)?;
    a.mov(qword_ptr(rbx + pool::LEN), rdx)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rbx + pool::TSC_END), rax)?;
    a.mov(dword_ptr(rbx + pool::STATE), pool::FULL)?;
    a.mov(r12d, TRIES)?;
    a.jmp(claim_again)?;
    a.set_label(&mut was_discard)?;
    a.lock().add(qword_ptr(r14 + pool::LOST), rdx)?;
    a.set_label(&mut fresh)?;
    a.xor(ebx, ebx)?;
    a.mov(r12d, TRIES)?;
    a.set_label(&mut claim_again)?;
    a.mov(ebp, dword_ptr(r14 + pool::FREED))?;
    a.mov(rdi, descs)?;
    a.xor(r15d, r15d)?;
    a.set_label(&mut scan)?;
    a.xor(eax, eax)?;
    a.mov(esi, pool::OWNED)?;
    a.lock().cmpxchg(dword_ptr(rdi + pool::STATE), esi)?;
    a.je(got)?;
    a.add(rdi, pool::DESC as i32)?;
    a.add(r15d, 1)?;
    a.cmp(r15d, n as u32)?;
    a.jb(scan)?;
    a.cmp(dword_ptr(r14 + pool::GONE), 0)?;
    a.jne(give_up)?;
    a.sub(r12d, 1)?;
    a.jz(give_up)?;
    // weft killed: no buffer will come (kill(owner, 0) says ESRCH).
    a.mov(edi, dword_ptr(r14 + pool::OWNER))?;
    a.test(edi, edi)?;
    a.jz(wait)?;
    a.mov(eax, SYS_KILL)?;
    a.xor(esi, esi)?;
    a.syscall()?;
    a.cmp(rax, -ESRCH)?;
    a.jne(wait)?;
    a.mov(dword_ptr(r14 + pool::GONE), 1)?;
    a.jmp(give_up)?;
    a.set_label(&mut wait)?;
    a.mov(eax, SYS_FUTEX)?;
    a.lea(rdi, qword_ptr(r14 + pool::FREED))?;
    a.xor(esi, esi)?; // FUTEX_WAIT, shared
    a.mov(edx, ebp)?;
    a.lea(r10, qword_ptr(r14 + pool::WAIT))?;
    a.xor(r8d, r8d)?;
    a.xor(r9d, r9d)?;
    a.syscall()?;
    a.jmp(claim_again)?;

    a.set_label(&mut got)?;
    // rdi = the new buffer's descriptor, r15 = its index.
    a.mov(rbp, rdi)?;
    a.mov(eax, SYS_GETTID)?;
    a.syscall()?;
    a.mov(dword_ptr(rbp + pool::TID), eax)?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(dword_ptr(rbp + pool::PID), eax)?;
    a.mov(eax, 1)?;
    a.lock().xadd(qword_ptr(r14 + pool::SEQ), rax)?;
    a.mov(qword_ptr(rbp + pool::DESC_SEQ), rax)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(rbp + pool::TSC_START), rax)?;
    a.mov(qword_ptr(rbp + pool::LEN), 0)?;
    // A forked child's first buffer says where its parent's stream stood:
    // the buffer (by its sequence number) and the place in it.
    let mut not_forked = a.create_label();
    a.mov(qword_ptr(rbp + pool::PARENT_AT), 0)?;
    a.mov(r8, pool_at + layout.forked_cursor())?;
    a.mov(rax, qword_ptr(r8))?;
    a.test(rax, rax)?;
    a.jz(not_forked)?;
    a.mov(qword_ptr(r8), 0)?;
    a.mov(rcx, first_buffer)?;
    a.sub(rax, rcx)?;
    a.jb(not_forked)?;
    a.xor(edx, edx)?;
    a.mov(rcx, stride)?;
    a.div(rcx)?; // rax = the parent's buffer, rdx = where in it
    a.cmp(rax, n as i32)?;
    a.jae(not_forked)?;
    a.shl(rax, 6)?;
    a.mov(rcx, descs)?;
    a.mov(rax, qword_ptr(rax + rcx + pool::DESC_SEQ))?;
    a.mov(qword_ptr(rbp + pool::PARENT_SEQ), rax)?;
    a.add(rdx, 1)?;
    a.mov(qword_ptr(rbp + pool::PARENT_AT), rdx)?;
    a.set_label(&mut not_forked)?;
    a.mov(rax, stride)?;
    a.imul_2(rax, r15)?;
    a.mov(rcx, first_buffer)?;
    a.add(rax, rcx)?;
    a.jmp(hand_over)?;

    a.set_label(&mut give_up)?;
    // No buffer came: weft is gone or stuck. Say so to every thread (they
    // stop waiting) until weft, if alive, clears it at its next drain.
    a.mov(dword_ptr(r14 + pool::GONE), 1)?;
    // Take the full buffer back unless weft is reading it: its bytes are
    // lost, and it is zeroed for the thread to write on.
    a.test(rbx, rbx)?;
    a.jz(use_discard)?;
    a.mov(eax, pool::FULL)?;
    a.mov(ecx, pool::OWNED)?;
    a.lock().cmpxchg(dword_ptr(rbx + pool::STATE), ecx)?;
    a.jne(use_discard)?;
    a.mov(rcx, qword_ptr(rbx + pool::LEN))?;
    a.lock().add(qword_ptr(r14 + pool::LOST), rcx)?;
    a.mov(rax, rbx)?;
    a.mov(rdx, descs)?;
    a.sub(rax, rdx)?;
    a.shr(rax, 6)?;
    a.mov(rdx, stride)?;
    a.imul_2(rax, rdx)?;
    a.mov(rdx, first_buffer)?;
    a.add(rax, rdx)?;
    a.mov(r8, rax)?;
    a.mov(rdi, rax)?;
    a.xor(eax, eax)?;
    a.rep().stosb()?;
    a.mov(qword_ptr(rbx + pool::LEN), 0)?;
    a.mov(rax, r8)?;
    a.jmp(hand_over)?;
    a.set_label(&mut use_discard)?;
    a.mov(rax, first_buffer + n * stride)?;
    // rax = where the record goes now. The store's reservation moved the
    // TCB's cursor `n` bytes past the register's place: it moves as far
    // past the new one, and the store runs again there. A signal that came
    // meanwhile, delivered before it, writes its handler's records after
    // the reserved place, as it would have.
    a.set_label(&mut hand_over)?;
    a.mov(rcx, qword_ptr(CURSOR).fs())?;
    a.sub(rcx, qword_ptr(r13))?;
    a.mov(qword_ptr(r13), rax)?;
    a.add(rcx, rax)?;
    a.mov(qword_ptr(CURSOR).fs(), rcx)?;
    a.ret()?;

    // A handler's records overtook this one (see above): its place is
    // in a buffer handed over already, and a record at the end of that
    // buffer, which it straddled, ends there. The record goes where the
    // cursor is now, after the handler's records, as if the signal had
    // come just before the reservation.
    a.set_label(&mut overtaken)?;
    a.mov(rax, qword_ptr(r13))?;
    a.mov(rcx, first_buffer)?;
    a.sub(rax, rcx)?;
    a.jb(reserve_again)?;
    a.xor(edx, edx)?;
    a.mov(rcx, stride)?;
    a.div(rcx)?; // rax = buffer, rdx = the record's place in it
    a.cmp(rax, n as i32)?;
    a.jae(reserve_again)?;
    a.mov(rcx, layout.buffer_size)?;
    a.cmp(rdx, rcx)?;
    a.jae(reserve_again)?;
    a.shl(rax, 6)?;
    a.mov(rcx, descs)?;
    a.add(rax, rcx)?;
    a.cmp(dword_ptr(rax + pool::STATE), pool::FULL as i32)?;
    a.jne(reserve_again)?;
    a.cmp(qword_ptr(rax + pool::LEN), rdx)?;
    a.jbe(reserve_again)?;
    a.mov(qword_ptr(rax + pool::LEN), rdx)?;
    a.set_label(&mut reserve_again)?;
    a.mov(rax, qword_ptr(CURSOR).fs())?;
    a.mov(qword_ptr(r13), rax)?;
    a.add(qword_ptr(CURSOR).fs(), r11)?;
    a.ret()?;

    a.set_label(&mut not_ours)?;
    a.mov(r8, pool_at + layout.program_action())?;
    a.mov(rax, qword_ptr(r8))?;
    a.cmp(rax, 1)?; // SIG_IGN: a fault cannot be ignored
    a.jbe(default)?;
    // SA_RESETHAND: the program's handler runs once, then the default.
    a.test(dword_ptr(r8 + 8), SA_RESETHAND as i32)?;
    a.jz(run_program_handler)?;
    a.mov(qword_ptr(r8), 0)?;
    a.set_label(&mut run_program_handler)?;
    a.jmp(rax)?;
    a.set_label(&mut default)?;
    a.mov(r12d, dword_ptr(rsi + SI_CODE))?;
    a.mov(eax, SYS_RT_SIGACTION)?;
    a.mov(edi, SIGSEGV)?;
    a.mov(rsi, r8)?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8)?;
    a.syscall()?;
    // A fault runs again on return and takes the default action; a signal
    // that was sent is sent again.
    a.test(r12d, r12d)?;
    a.jle(reraise)?;
    a.ret()?;
    a.set_label(&mut reraise)?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(r13d, eax)?;
    a.mov(eax, SYS_GETTID)?;
    a.syscall()?;
    a.mov(esi, eax)?;
    a.mov(edi, r13d)?;
    a.mov(edx, SIGSEGV)?;
    a.mov(eax, SYS_TGKILL)?;
    a.syscall()?;
    a.ret()?;

    // The claim routine: the same claim as above, with no wait.
    a.set_label(&mut claim)?;
    a.mov(r8, pool_at)?;
    a.push(TRIES as i32)?;
    a.set_label(&mut claim_retry)?;
    a.mov(r11d, dword_ptr(r8 + pool::FREED))?;
    a.mov(rdi, descs)?;
    a.xor(r9d, r9d)?;
    a.set_label(&mut claim_scan)?;
    a.xor(eax, eax)?;
    a.mov(esi, pool::OWNED)?;
    a.lock().cmpxchg(dword_ptr(rdi + pool::STATE), esi)?;
    a.je(claim_got)?;
    a.add(rdi, pool::DESC as i32)?;
    a.add(r9d, 1)?;
    a.cmp(r9d, n as u32)?;
    a.jb(claim_scan)?;
    // None free: wait for weft to free one, as the handler does (the
    // thread cannot fault yet: its signals are blocked), then the discard
    // buffer (its records are lost, and counted).
    a.cmp(dword_ptr(r8 + pool::GONE), 0)?;
    a.jne(claim_discard)?;
    a.sub(qword_ptr(rsp), 1)?;
    a.jz(claim_discard)?;
    a.mov(eax, SYS_FUTEX)?;
    a.lea(rdi, qword_ptr(r8 + pool::FREED))?;
    a.xor(esi, esi)?; // FUTEX_WAIT, shared
    a.mov(edx, r11d)?;
    a.lea(r10, qword_ptr(r8 + pool::WAIT))?;
    a.push(r8)?;
    a.xor(r8d, r8d)?;
    a.xor(r9d, r9d)?;
    a.syscall()?;
    a.pop(r8)?;
    a.jmp(claim_retry)?;
    a.set_label(&mut claim_discard)?;
    a.pop(rax)?;
    a.mov(rax, first_buffer + n * stride)?;
    a.ret()?;
    a.set_label(&mut claim_got)?;
    a.pop(rax)?;
    a.mov(r10, rdi)?;
    a.mov(eax, SYS_GETTID)?;
    a.syscall()?;
    a.mov(dword_ptr(r10 + pool::TID), eax)?;
    a.mov(eax, SYS_GETPID)?;
    a.syscall()?;
    a.mov(dword_ptr(r10 + pool::PID), eax)?;
    a.mov(eax, 1)?;
    a.lock().xadd(qword_ptr(r8 + pool::SEQ), rax)?;
    a.mov(qword_ptr(r10 + pool::DESC_SEQ), rax)?;
    a.rdtsc()?;
    a.shl(rdx, 32)?;
    a.or(rax, rdx)?;
    a.mov(qword_ptr(r10 + pool::TSC_START), rax)?;
    a.mov(qword_ptr(r10 + pool::LEN), 0)?;
    a.mov(qword_ptr(r10 + pool::PARENT_AT), 0)?;
    a.mov(rax, stride)?;
    a.imul_2(rax, r9)?;
    a.mov(rcx, first_buffer)?;
    a.add(rax, rcx)?;
    a.ret()?;

    a.set_label(&mut restorer)?;
    a.mov(eax, SYS_RT_SIGRETURN)?;
    a.syscall()?;
    // Index of each register (x86 encoding order) in `gregs`.
    a.set_label(&mut gregs_of)?;
    a.db(&[13, 14, 12, 11, 15, 10, 9, 8, 0, 1, 2, 3, 4, 5, 6, 7])?;
    let r = a.assemble_options(at, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let restorer = r.label_ip(&restorer)?;
    let claim = r.label_ip(&claim)?;
    Ok(HandlerCode {
        bytes: r.inner.code_buffer,
        handler: at,
        restorer,
        claim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handler_assembles_with_its_restorer_inside() {
        let layout = Pool::new(8, 4096);
        let h = handler_code(0x7000_0000, 0x6000_0000, layout).unwrap();
        assert_eq!(h.handler, 0x7000_0000);
        assert!(h.restorer > h.handler && h.restorer < h.handler + h.bytes.len() as u64);
        let at = (h.restorer - h.handler) as usize;
        // mov eax, 15; syscall
        assert_eq!(&h.bytes[at..at + 7], &[0xb8, 15, 0, 0, 0, 0x0f, 0x05]);
    }
}
