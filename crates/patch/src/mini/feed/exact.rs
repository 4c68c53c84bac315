//! A forked child with its recorded pid (`weft_abi::feed::EXACT_CHILD`):
//! the program's `fork` (or `clone` made as `fork`) is made as `clone3`
//! with `set_tid` naming the recorded id, so that what the kernel says of
//! the child (a signal's sender, `/proc/PID`) is what the rerun answers
//! for it. Where the kernel refuses that id (another process has it, or
//! weft may not choose ids: not root), the call is made again as the
//! program asked, and the child gets the id the kernel picks.

use super::{RAX_OFFSET, SYSCALL_ARG_OFFSET};
use crate::mini::Gen;
use iced_x86::code_asm::*;
use weft_abi::feed as f;

/// `clone3`'s number, `clone`'s, and the signal a forked child's end
/// sends its parent.
const CLONE3: i32 = 435;
const CLONE: i32 = 56;
const SIGCHLD: u32 = 17;

/// `struct clone_args`' fields (u64 each, by their offsets).
const FLAGS: i32 = 0;
const PIDFD: i32 = 8;
const CHILD_TID: i32 = 16;
const PARENT_TID: i32 = 24;
const EXIT_SIGNAL: i32 = 32;
const TLS: i32 = 56;
const SET_TID: i32 = 64;
const SET_TID_SIZE: i32 = 72;

/// Where the program's `rdi`, `rsi` and number are kept.
const GIVEN_RDI: i32 = f::CALL_GIVEN_ARGS as i32;
const GIVEN_RSI: i32 = GIVEN_RDI + 8;
const GIVEN_NR: i32 = GIVEN_RDI + 16;

impl Gen {
    /// Before the instruction, once the call is the recorded one (r8: the
    /// feed, r9: the call, rsi: its flags; keeps rcx, rsi, r8, r9, r11):
    /// the call becomes `clone3` with the recorded id for its child.
    pub(super) fn exact_child_before(&mut self) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut not_exact = a.create_label();
        let mut filled = a.create_label();
        a.test(rsi, f::EXACT_CHILD as i32)?;
        a.jz(not_exact)?;
        // rdi := the call's clone_args, zeroed by weft.
        a.mov(rdi, qword_ptr(r9 + f::CALL_DATA as i32))?;
        a.add(rdi, r8)?;
        for (off, from) in [
            (GIVEN_RDI, SYSCALL_ARG_OFFSET[0]),
            (GIVEN_RSI, SYSCALL_ARG_OFFSET[1]),
            (GIVEN_NR, RAX_OFFSET),
        ] {
            a.mov(rax, qword_ptr(rsp + from))?;
            a.mov(qword_ptr(r9 + off), rax)?;
        }
        // `fork`: no flags, SIGCHLD at the end. `clone(flags, 0, ptid,
        // ctid, tls)`: its flags, its exit signal in their low byte.
        a.mov(qword_ptr(rdi + EXIT_SIGNAL), SIGCHLD as i32)?;
        a.cmp(qword_ptr(rsp + RAX_OFFSET), CLONE)?;
        a.jne(filled)?;
        a.mov(rax, qword_ptr(rsp + SYSCALL_ARG_OFFSET[0]))?;
        a.mov(rdx, rax)?;
        a.and(rdx, -0x100)?;
        a.mov(qword_ptr(rdi + FLAGS), rdx)?;
        a.movzx(eax, al)?;
        a.mov(qword_ptr(rdi + EXIT_SIGNAL), rax)?;
        // `CLONE_PIDFD` and `CLONE_PARENT_SETTID` both write through
        // `clone`'s third argument; each field counts with its flag only.
        a.mov(rax, qword_ptr(rsp + SYSCALL_ARG_OFFSET[2]))?;
        a.mov(qword_ptr(rdi + PIDFD), rax)?;
        a.mov(qword_ptr(rdi + PARENT_TID), rax)?;
        a.mov(rax, qword_ptr(rsp + SYSCALL_ARG_OFFSET[3]))?;
        a.mov(qword_ptr(rdi + CHILD_TID), rax)?;
        a.mov(rax, qword_ptr(rsp + SYSCALL_ARG_OFFSET[4]))?;
        a.mov(qword_ptr(rdi + TLS), rax)?;
        a.set_label(&mut filled)?;
        // `set_tid`: one pid_t, the recorded result's low half.
        a.lea(rax, qword_ptr(r9 + f::CALL_RESULT as i32))?;
        a.mov(qword_ptr(rdi + SET_TID), rax)?;
        a.mov(qword_ptr(rdi + SET_TID_SIZE), 1)?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), CLONE3)?;
        a.mov(qword_ptr(rsp + SYSCALL_ARG_OFFSET[0]), rdi)?;
        a.mov(
            qword_ptr(rsp + SYSCALL_ARG_OFFSET[1]),
            f::CLONE_ARGS_SIZE as i32,
        )?;
        a.set_label(&mut not_exact)?;
        a.nop()
    }

    /// After the instruction, first (r8: the feed, r11: the block; the
    /// call under way at `current`): a `clone3` the kernel refused the id
    /// for is made again as the program asked, and the program's `rdi`
    /// and `rsi` are given back. The child of a call made again returns
    /// here too, from that call, on its copy of the stack.
    pub(super) fn exact_child_after(&mut self, current: i32) -> std::result::Result<(), IcedError> {
        let a = &mut self.a;
        let mut plain = a.create_label();
        let mut made = a.create_label();
        a.mov(r9, qword_ptr(r11 + current))?;
        a.test(r9, r9)?;
        a.jz(plain)?;
        a.test(qword_ptr(r9 + f::CALL_FLAGS as i32), f::EXACT_CHILD as i32)?;
        a.jz(plain)?;
        a.cmp(qword_ptr(rsp + RAX_OFFSET), 0)?;
        a.jge(made)?;
        super::after::call_again(a, |a, pushed| {
            a.mov(rdi, qword_ptr(r9 + GIVEN_RDI))?;
            a.mov(rsi, qword_ptr(r9 + GIVEN_RSI))?;
            a.mov(rdx, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[2]))?;
            a.mov(r10, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[3]))?;
            a.mov(r8, qword_ptr(rsp + pushed + SYSCALL_ARG_OFFSET[4]))?;
            a.mov(rax, qword_ptr(r9 + GIVEN_NR))
        })?;
        a.mov(qword_ptr(rsp + RAX_OFFSET), rax)?;
        a.set_label(&mut made)?;
        for (off, to) in [
            (GIVEN_RDI, SYSCALL_ARG_OFFSET[0]),
            (GIVEN_RSI, SYSCALL_ARG_OFFSET[1]),
        ] {
            a.mov(rax, qword_ptr(r9 + off))?;
            a.mov(qword_ptr(rsp + to), rax)?;
        }
        a.set_label(&mut plain)?;
        a.nop()
    }
}
