//! The number a `syscall` instruction's call has, when the code before it
//! sets `eax` to a constant (as the C library's wrappers do).

use crate::FunctionCode;
use iced_x86::{Code, FlowControl, InstructionInfoFactory, OpAccess, Register};

impl FunctionCode {
    /// The system call number in `rax` at the `syscall` instruction at
    /// `at`: the constant the last instruction writing `rax` before it put
    /// there (`mov eax, N`, `mov rax, N`, `xor eax, eax`), looking back
    /// within its straight-line code (no branch, and no instruction a
    /// branch reaches, in between). `None` when the number comes from
    /// elsewhere (glibc's `syscall()` takes it as an argument).
    pub fn syscall_number(&self, at: u64) -> Option<u64> {
        let insns = self.instructions();
        let k = self.index_of(at)?;
        if insns[k].code() != Code::Syscall {
            return None;
        }
        let targets = self.internal_targets();
        let mut info = InstructionInfoFactory::new();
        for j in (0..k).rev() {
            // Another way in after this instruction: rax may come from there.
            if targets.contains(&insns[j + 1].ip()) {
                return None;
            }
            let i = &insns[j];
            if i.flow_control() != FlowControl::Next {
                return None;
            }
            let writes_rax = info.info(i).used_registers().iter().any(|u| {
                u.register().full_register() == Register::RAX
                    && !matches!(u.access(), OpAccess::Read | OpAccess::CondRead)
            });
            if writes_rax {
                return match i.code() {
                    Code::Mov_r32_imm32 => Some(u64::from(i.immediate32())),
                    Code::Mov_rm64_imm32 => Some(i.immediate32to64() as u64),
                    Code::Mov_r64_imm64 => Some(i.immediate64()),
                    Code::Xor_r32_rm32 | Code::Xor_rm32_r32
                        if i.op0_register() == i.op1_register() =>
                    {
                        Some(0)
                    }
                    _ => None,
                };
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use crate::{FunctionCode, NoData};

    #[test]
    fn the_number_is_the_constant_put_in_eax_before_the_call() {
        // mov eax, 0x101; mov rdi, rsi; syscall; xor eax, eax; syscall;
        // mov rax, rdi; syscall; ret
        let bytes = [
            0xb8, 0x01, 0x01, 0x00, 0x00, // mov eax, 257
            0x48, 0x89, 0xf7, // mov rdi, rsi
            0x0f, 0x05, // syscall
            0x31, 0xc0, // xor eax, eax
            0x0f, 0x05, // syscall
            0x48, 0x89, 0xf8, // mov rax, rdi
            0x0f, 0x05, // syscall
            0xc3,
        ];
        let f = FunctionCode::analyze(0x1000, &bytes, &NoData);
        assert_eq!(f.syscall_number(0x1008), Some(257));
        assert_eq!(f.syscall_number(0x100c), Some(0));
        assert_eq!(f.syscall_number(0x1011), None, "the number is an argument");
        assert_eq!(f.syscall_number(0x1000), None, "not a syscall");
    }

    #[test]
    fn a_branch_in_between_hides_the_number() {
        // mov eax, 1; test edi, edi; je +2; mov eax, 2 ; (target:) syscall; ret
        let bytes = [
            0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1
            0x85, 0xff, // test edi, edi
            0x74, 0x05, // je to the syscall
            0xb8, 0x02, 0x00, 0x00, 0x00, // mov eax, 2
            0x0f, 0x05, // syscall (a branch target)
            0xc3,
        ];
        let f = FunctionCode::analyze(0x1000, &bytes, &NoData);
        assert_eq!(f.syscall_number(0x100e), None);
    }
}
