//! The call stub: the code a remote system call runs in the target, built
//! so that the thread finds its way back by itself if weft dies during the
//! call. It is `syscall` followed by code that puts back every register
//! the thread had (flags, the sixteen general registers) from immediates
//! and jumps to the pc it had. weft normally reads the result at the
//! syscall-exit stop and restores the registers itself, so the tail runs
//! only when weft is no longer there to do it.

use crate::sys::Registers;
use crate::RemoteAddr;

/// Where remote system calls run: [`LEN`] bytes of executable memory in the
/// target that none of the program's code executes, such as the slack after
/// a module's last code in its last page. weft writes a stub there through
/// `/proc/PID/mem` for each call and puts the bytes back afterwards.
#[derive(Debug, Clone, Copy)]
pub struct CallArea {
    /// Its address in the target.
    pub addr: RemoteAddr,
    /// What the program has there (the module file's bytes), put back after
    /// each call. Taken from the file, not from memory, so that a stub a
    /// killed weft left there is cleaned up by the next call.
    pub original: [u8; LEN],
}

/// Bytes of a stub.
pub const LEN: usize = 2 + 10 + 10 + 1 + 1 + 15 * 10 + 10 + 6 + 8;

/// Bytes below the stack pointer the stub may write (one word, for the
/// flags), past the 128-byte red zone the interrupted code may be using.
const BELOW_RED_ZONE: u64 = 256;

/// `mov r64, imm64` for register number `r` (encoding order).
fn mov_imm(out: &mut Vec<u8>, r: u8, imm: u64) {
    out.push(0x48 | (r >> 3)); // REX.W, REX.B for r8-r15
    out.push(0xb8 + (r & 7));
    out.extend_from_slice(&imm.to_le_bytes());
}

/// The stub that makes a system call and then resumes the thread as `regs`
/// describe it (already set up for a restart where one is due).
pub fn bytes(regs: &Registers) -> Vec<u8> {
    const RAX: u8 = 0;
    const RSP: u8 = 4;
    let mut b = Vec::with_capacity(LEN);
    b.extend_from_slice(&[0x0f, 0x05]); // syscall
                                        // Flags through the stack, below the red zone; mov changes no flag.
    mov_imm(&mut b, RSP, regs.rsp.wrapping_sub(BELOW_RED_ZONE));
    mov_imm(&mut b, RAX, regs.eflags);
    b.push(0x50); // push rax
    b.push(0x9d); // popfq
    let general = [
        (0, regs.rax),
        (1, regs.rcx),
        (2, regs.rdx),
        (3, regs.rbx),
        (5, regs.rbp),
        (6, regs.rsi),
        (7, regs.rdi),
        (8, regs.r8),
        (9, regs.r9),
        (10, regs.r10),
        (11, regs.r11),
        (12, regs.r12),
        (13, regs.r13),
        (14, regs.r14),
        (15, regs.r15),
    ];
    for (r, v) in general {
        mov_imm(&mut b, r, v);
    }
    mov_imm(&mut b, RSP, regs.rsp);
    b.extend_from_slice(&[0xff, 0x25, 0, 0, 0, 0]); // jmp [rip + 0]
    b.extend_from_slice(&regs.rip.to_le_bytes());
    debug_assert_eq!(b.len(), LEN);
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        // SAFETY: user_regs_struct is plain integers; all zeroes is valid.
        let mut r: Registers = unsafe { std::mem::zeroed() };
        (r.rip, r.rsp, r.r15, r.eflags) = (0x1122_3344_5566, 0x7ff0_0000_1000, 0xabcd, 0x246);
        let b = bytes(&r);
        assert_eq!(b.len(), LEN);
        assert_eq!(&b[..2], &[0x0f, 0x05]);
        assert_eq!(&b[2..4], &[0x48, 0xbc]); // mov rsp, imm64
        assert_eq!(
            u64::from_le_bytes(b[4..12].try_into().unwrap()),
            0x7ff0_0000_1000 - 256
        );
        assert_eq!(u64::from_le_bytes(b[14..22].try_into().unwrap()), 0x246);
        // r15 is the last general register: REX.WB, b8+7.
        let r15 = 2 + 10 + 10 + 2 + 14 * 10;
        assert_eq!(&b[r15..r15 + 2], &[0x49, 0xbf]);
        assert_eq!(
            u64::from_le_bytes(b[r15 + 2..r15 + 10].try_into().unwrap()),
            0xabcd
        );
        assert_eq!(&b[LEN - 14..LEN - 8], &[0xff, 0x25, 0, 0, 0, 0]);
        assert_eq!(
            u64::from_le_bytes(b[LEN - 8..].try_into().unwrap()),
            0x1122_3344_5566
        );
    }
}
