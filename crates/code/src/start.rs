//! The C library's entry code (`_start`): where it hands `main` to
//! `__libc_start_main`, for programs whose symbols were stripped.

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, OpKind, Register};

/// The address of `main` as the entry code at `at` (its bytes `code`)
/// passes it: the last value put into `rdi` before its first call or
/// jump (`lea rdi, [rip+main]` in a position-independent program,
/// `mov rdi, main` in another). `None` when the code does not have that
/// shape (not glibc's or musl's `_start`, or `main` loaded from memory).
pub fn main_from_start(at: u64, code: &[u8]) -> Option<u64> {
    let mut decoder = Decoder::with_ip(64, code, at, DecoderOptions::NONE);
    let mut main = None;
    while decoder.can_decode() {
        let insn = decoder.decode();
        if insn.is_invalid() {
            return None;
        }
        if insn.flow_control() != FlowControl::Next {
            return main;
        }
        if insn.op0_kind() == OpKind::Register
            && matches!(insn.op0_register(), Register::RDI | Register::EDI)
        {
            main = match insn.code() {
                Code::Lea_r64_m if insn.is_ip_rel_memory_operand() => {
                    Some(insn.ip_rel_memory_address())
                }
                Code::Mov_rm64_imm32 => Some(insn.immediate32to64() as u64),
                Code::Mov_r32_imm32 => Some(u64::from(insn.immediate32())),
                _ => None,
            };
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// glibc 2.36's `_start` from a static-pie (`lea rdi, [rip+main]`)
    /// and from a static no-PIE program (`mov rdi, main`).
    #[test]
    fn main_is_found_in_glibcs_start() {
        let pie = [
            0xf3, 0x0f, 0x1e, 0xfa, // endbr64
            0x31, 0xed, // xor ebp, ebp
            0x49, 0x89, 0xd1, // mov r9, rdx
            0x5e, // pop rsi
            0x48, 0x89, 0xe2, // mov rdx, rsp
            0x48, 0x83, 0xe4, 0xf0, // and rsp, -16
            0x50, // push rax
            0x54, // push rsp
            0x45, 0x31, 0xc0, // xor r8d, r8d
            0x31, 0xc9, // xor ecx, ecx
            0x48, 0x8d, 0x3d, 0x10, 0x00, 0x00, 0x00, // lea rdi, [rip+0x10]
            0xe8, 0x00, 0x01, 0x00, 0x00, // call __libc_start_main
            0xf4, // hlt
        ];
        assert_eq!(main_from_start(0x1000, &pie), Some(0x1000 + 31 + 0x10));
        let mut nopie = pie;
        nopie[24..31].copy_from_slice(&[0x48, 0xc7, 0xc7, 0x56, 0x34, 0x40, 0x00]);
        assert_eq!(main_from_start(0x401000, &nopie), Some(0x403456));
        // rdi written again by something else: no main.
        let mut clobbered = pie;
        clobbered[19..22].copy_from_slice(&[0x48, 0x89, 0xc7]); // mov rdi, rax
        clobbered[24..31].copy_from_slice(&[0x90; 7]);
        assert_eq!(main_from_start(0x1000, &clobbered), None);
        assert_eq!(main_from_start(0x1000, &[0xc3]), None);
    }
}
