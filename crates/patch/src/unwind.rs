//! Unwind information for the `syscall` instructions of weft's code.
//!
//! A thread blocked in a captured system call waits inside weft's code: a
//! mini-trampoline that makes the call (`Primitive::MakeCall`), or a
//! trampoline that runs the relocated instruction. A signal handler that
//! walks the stack from there (`backtrace()`, the unwinding of
//! `pthread_cancel`, a C++ exception) finds no unwind information for that
//! address, and stops: C++ destructors and cleanups of the cancelled
//! thread do not run, a backtrace ends in weft's memory.
//!
//! So each such instruction gets a frame description entry (`.eh_frame`
//! format) that makes weft's frame invisible: the caller's `rsp` (the
//! CFA) is the point's, a fixed distance above `rsp` at the instruction,
//! and its return address is the instruction after the original
//! `syscall`. The entry's CIE says it is a signal frame (augmentation
//! `S`), so the unwinder looks the original instruction up as exactly as
//! it would have looked up the interrupted original `syscall` itself. The
//! other registers keep their values (weft's code has not touched the
//! callee-saved ones there).
//!
//! The entries lie in a table at the end of each cluster's code area
//! ([`TABLE_BYTES`], read-only for the target): a count, then entries in
//! the order their code was placed. The C unwinder (libgcc's
//! `_Unwind_Find_FDE`, which `backtrace()`, C++ exceptions and thread
//! cancellation all go through) is hooked at its entry by
//! [`find_fde_hook`]: an address inside a code area that the sync page's
//! [`crate::region::sync::UNWIND_AREAS`] lists is looked up in that area's
//! table, any other goes on to libgcc's own lookup.

use crate::{Error, Result};
use iced_x86::code_asm::*;

/// Bytes at the end of each code area that hold its unwind table.
pub const TABLE_BYTES: u64 = 1 << 20;
/// The table's header: the number of entries (u64) at its first byte.
pub const TABLE_HEADER: u64 = 64;
/// Bytes of one entry: start and end of the instruction's range, then
/// its CIE and FDE.
pub const ENTRY_BYTES: u64 = 128;
/// Entries a table holds.
pub const TABLE_CAPACITY: u64 = (TABLE_BYTES - TABLE_HEADER) / ENTRY_BYTES;
/// Where in an entry its FDE begins (after the range and the CIE).
const FDE_AT: usize = 16 + CIE_BYTES;
const CIE_BYTES: usize = 24;
const FDE_BYTES: usize = ENTRY_BYTES as usize - FDE_AT;

/// DWARF register numbers (x86-64 psABI).
const DW_RBX: u8 = 3;
const DW_RBP: u8 = 6;
const DW_RSP: u8 = 7;
const DW_RETURN_ADDRESS: u8 = 16;
/// Call frame instructions and expression operations.
const DW_CFA_DEF_CFA: u8 = 0x0c;
const DW_CFA_DEF_CFA_EXPRESSION: u8 = 0x0f;
const DW_CFA_EXPRESSION: u8 = 0x10;
const DW_CFA_VAL_EXPRESSION: u8 = 0x16;
const DW_OP_CONST8U: u8 = 0x0e;
const DW_OP_DEREF: u8 = 0x06;
const DW_OP_BREG0: u8 = 0x70;
const DW_OP_LIT0: u8 = 0x30;
const DW_OP_MINUS: u8 = 0x1c;
/// Bytes of a `syscall` instruction.
pub const SYSCALL_LEN: u64 = 2;

/// One instruction of weft's code where a thread may wait or be
/// interrupted, as the unwinder must see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The instruction's address.
    pub start: u64,
    /// How many bytes from `start` the entry covers.
    pub len: u64,
    /// Where the program's registers are.
    pub rule: Rule,
    /// Whether the thread stands on the `syscall` instruction itself: the
    /// kernel moved it back there to restart the call once a signal
    /// handler returns, and would have moved the program back onto its own
    /// `syscall` too. Otherwise it stands after it (the call returned, or
    /// was interrupted with `EINTR`).
    pub on_the_call: bool,
}

/// Where the unwinder finds the registers of the program's frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// At a point of the program: its `rsp` is `cfa_offset` above `rsp`
    /// here, its other registers are as they are here, and it goes on at
    /// `returns_to` (the address after its own `syscall`).
    Point { cfa_offset: u64, returns_to: u64 },
    /// In the SIGSYS handler's call (`crate::dispatch`): the program's
    /// registers are in the signal frame's `ucontext_t`, whose address is
    /// in [`crate::dispatch::CONTEXT_REGISTER`].
    Dispatched,
}

impl Frame {
    /// The frames at the `syscall` instruction `start` (2 bytes long): on
    /// it, and after it.
    pub fn at_syscall(start: u64, rule: Rule) -> [Frame; 2] {
        [(start, true), (start + 2, false)].map(|(start, on_the_call)| Frame {
            start,
            len: 1,
            rule,
            on_the_call,
        })
    }
}

/// The bytes of `frame`'s table entry.
pub fn entry(frame: &Frame) -> [u8; ENTRY_BYTES as usize] {
    let mut e = [0u8; ENTRY_BYTES as usize];
    e[0..8].copy_from_slice(&frame.start.to_le_bytes());
    e[8..16].copy_from_slice(&(frame.start + frame.len).to_le_bytes());
    // CIE: length, id 0, version 1, "zRS", code alignment 1, data
    // alignment -8, return address column 16, one byte of augmentation
    // data (FDE addresses absolute), no initial instructions, padding.
    let mut cie = Vec::with_capacity(CIE_BYTES);
    cie.extend_from_slice(&(CIE_BYTES as u32 - 4).to_le_bytes());
    cie.extend_from_slice(&0u32.to_le_bytes());
    cie.extend_from_slice(&[1, b'z', b'R', b'S', 0, 1, 0x78, DW_RETURN_ADDRESS, 1, 0x00]);
    cie.resize(CIE_BYTES, 0); // DW_CFA_nop
    e[16..16 + CIE_BYTES].copy_from_slice(&cie);
    // FDE: length, distance back to the CIE, range, no augmentation data,
    // the rules, padding.
    let mut fde = Vec::with_capacity(FDE_BYTES);
    fde.extend_from_slice(&(FDE_BYTES as u32 - 4).to_le_bytes());
    fde.extend_from_slice(&((FDE_AT - 16 + 4) as u32).to_le_bytes());
    fde.extend_from_slice(&frame.start.to_le_bytes());
    fde.extend_from_slice(&frame.len.to_le_bytes());
    fde.push(0);
    match frame.rule {
        Rule::Point {
            cfa_offset,
            returns_to,
        } => {
            // CFA = rsp + offset; the program stands on its `syscall` or
            // after it.
            let resumes_at = match frame.on_the_call {
                true => returns_to - SYSCALL_LEN,
                false => returns_to,
            };
            fde.extend_from_slice(&[DW_CFA_DEF_CFA, DW_RSP]);
            uleb128(&mut fde, cfa_offset);
            fde.extend_from_slice(&[DW_CFA_VAL_EXPRESSION, DW_RETURN_ADDRESS, 9, DW_OP_CONST8U]);
            fde.extend_from_slice(&resumes_at.to_le_bytes());
        }
        Rule::Dispatched => {
            use weft_abi::sigaction::ucontext as uc;
            let context = DW_OP_BREG0 + crate::dispatch::CONTEXT_REGISTER;
            // CFA = the saved rsp; each register saved in the context.
            fde.extend_from_slice(&[DW_CFA_DEF_CFA_EXPRESSION, 4, context]);
            sleb128_2(&mut fde, uc::RSP);
            fde.push(DW_OP_DEREF);
            // The frame's rip is after the program's `syscall`.
            if frame.on_the_call {
                fde.extend_from_slice(&[DW_CFA_VAL_EXPRESSION, DW_RETURN_ADDRESS, 6, context]);
                sleb128_2(&mut fde, uc::RIP);
                fde.extend_from_slice(&[DW_OP_DEREF, DW_OP_LIT0 + SYSCALL_LEN as u8, DW_OP_MINUS]);
            } else {
                fde.extend_from_slice(&[DW_CFA_EXPRESSION, DW_RETURN_ADDRESS, 3, context]);
                sleb128_2(&mut fde, uc::RIP);
            }
            for (reg, at) in [
                (DW_RBX, uc::RBX),
                (DW_RBP, uc::RBP),
                (12, uc::R12),
                (13, uc::R13),
                (14, uc::R14),
                (15, uc::R15),
            ] {
                fde.extend_from_slice(&[DW_CFA_EXPRESSION, reg, 3, context]);
                sleb128_2(&mut fde, at);
            }
        }
    }
    assert!(fde.len() <= FDE_BYTES, "the FDE fits its entry");
    fde.resize(FDE_BYTES, 0);
    e[FDE_AT..FDE_AT + FDE_BYTES].copy_from_slice(&fde);
    e
}

/// `v` (64 to 8191) as a two-byte signed LEB128.
fn sleb128_2(out: &mut Vec<u8>, v: u64) {
    debug_assert!((64..8192).contains(&v));
    out.extend_from_slice(&[(v & 0x7f) as u8 | 0x80, (v >> 7) as u8]);
}

fn uleb128(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The hook at the entry of libgcc's `_Unwind_Find_FDE(pc, bases)`, at
/// `at`: if `pc` lies in the code part (`code_bytes` long) of an area
/// listed at `areas` (up to `area_count` words, 0 ending the list), the
/// FDE of the table entry whose range holds it, with `bases` set (no
/// text or data base; the function starts at the entry's start), or NULL
/// if none does; any other `pc` goes on to `continuation`. It touches
/// only registers a call may clobber, and no stack.
pub fn find_fde_hook(
    at: u64,
    areas: u64,
    area_count: u32,
    code_bytes: u64,
    continuation: u64,
) -> Result<Vec<u8>> {
    let enc = Error::Encode;
    let mut a = CodeAssembler::new(64).map_err(enc)?;
    let mut next_area = a.create_label();
    let mut in_area = a.create_label();
    let mut scan = a.create_label();
    let mut skip = a.create_label();
    let mut found = a.create_label();
    let mut not_ours = a.create_label();
    (|| -> std::result::Result<(), IcedError> {
        a.mov(r8, areas)?;
        a.mov(ecx, area_count)?;
        a.set_label(&mut next_area)?;
        a.mov(rax, qword_ptr(r8))?;
        a.test(rax, rax)?;
        a.jz(not_ours)?;
        a.mov(rdx, rdi)?;
        a.sub(rdx, rax)?;
        a.mov(r9, code_bytes)?;
        a.cmp(rdx, r9)?;
        a.jb(in_area)?;
        a.add(r8, 8)?;
        a.dec(ecx)?;
        a.jnz(next_area)?;
        a.jmp(not_ours)?;

        // rax: the area; its table follows its code.
        a.set_label(&mut in_area)?;
        a.add(rax, r9)?;
        a.mov(rcx, qword_ptr(rax))?;
        a.lea(rdx, qword_ptr(rax + TABLE_HEADER as i32))?;
        a.set_label(&mut scan)?;
        a.test(rcx, rcx)?;
        a.jz(found)?; // rdx past the last entry: none
        a.cmp(rdi, qword_ptr(rdx))?;
        a.jb(skip)?;
        a.cmp(rdi, qword_ptr(rdx + 8))?;
        a.jb(found)?;
        a.set_label(&mut skip)?;
        a.add(rdx, ENTRY_BYTES as i32)?;
        a.dec(rcx)?;
        a.jmp(scan)?;

        // rcx 0: no entry holds pc (weft's code with no unwind information).
        a.set_label(&mut found)?;
        a.xor(eax, eax)?;
        a.test(rcx, rcx)?;
        let mut done = a.create_label();
        a.jz(done)?;
        a.mov(qword_ptr(rsi), 0)?;
        a.mov(qword_ptr(rsi + 8), 0)?;
        a.mov(rax, qword_ptr(rdx))?;
        a.mov(qword_ptr(rsi + 16), rax)?;
        a.lea(rax, qword_ptr(rdx + FDE_AT as i32))?;
        a.set_label(&mut done)?;
        a.ret()?;

        a.set_label(&mut not_ours)?;
        a.jmp(continuation)?;
        Ok(())
    })()
    .map_err(enc)?;
    a.assemble(at).map_err(enc)
}

#[cfg(test)]
mod tests;
