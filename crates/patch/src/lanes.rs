//! Counter lanes (see [`crate::region::COUNTER_LANES`]): the code that
//! finds the lane of the CPU a thread runs on, so that threads on
//! different CPUs add to different cache lines. A thread that migrates
//! between finding its lane and adding still adds atomically (`lock`), so
//! a count is exact whatever the lane; the lane only spares the cache line
//! its trip between cores.

use iced_x86::{Code, Instruction, MemoryOperand, Register};

/// Where generated code learns the CPU it runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuSource {
    /// The rseq area the C library registers for every thread: its
    /// `cpu_id` (u32), which the kernel keeps current, at
    /// `fs:[offset + 4]` (glibc's `__rseq_offset`).
    Rseq {
        /// `__rseq_offset`: from the thread pointer to the rseq area.
        offset: i32,
    },
    /// `rdpid`: the kernel keeps the CPU number in `IA32_TSC_AUX`.
    Rdpid,
    /// Neither: every thread adds to the first lane.
    None,
}

/// The lanes as generated code sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lanes {
    /// Where the CPU number comes from.
    pub source: CpuSource,
    /// Number of lanes (a power of two).
    pub count: u64,
    /// Bytes from one lane to the next (a power of two).
    pub stride: u64,
}

impl Lanes {
    /// Whether threads are spread over lanes at all.
    pub fn spread(&self) -> bool {
        self.source != CpuSource::None && self.count > 1
    }

    /// Instructions that leave in `reg32` (a 32-bit register) the number
    /// of the CPU the thread runs on (with `rdpid`, the NUMA node above
    /// bit 12 too), or `None` without a source.
    pub fn cpu_into(&self, reg32: Register) -> Option<Instruction> {
        let ok = "a valid instruction";
        match self.source {
            CpuSource::Rseq { offset } => {
                let cpu_id = MemoryOperand::new(
                    Register::None,
                    Register::None,
                    1,
                    i64::from(offset) + 4,
                    4,
                    false,
                    Register::FS,
                );
                Some(Instruction::with2(Code::Mov_r32_rm32, reg32, cpu_id).expect(ok))
            }
            CpuSource::Rdpid => {
                Some(Instruction::with1(Code::Rdpid_r64, reg32.full_register()).expect(ok))
            }
            CpuSource::None => None,
        }
    }

    /// Instructions that leave in `reg` (a 64-bit register) the byte offset
    /// of the running CPU's lane. They clobber the status flags.
    pub fn offset_into(&self, reg: Register) -> Vec<Instruction> {
        let reg32 = reg.full_register32();
        let ok = "a valid instruction";
        let Some(cpu) = self.cpu_into(reg32) else {
            return vec![Instruction::with2(Code::Xor_r32_rm32, reg32, reg32).expect(ok)];
        };
        let mut out = vec![cpu];
        out.push(
            Instruction::with2(Code::And_rm32_imm8, reg32, (self.count - 1) as i32).expect(ok),
        );
        out.push(
            Instruction::with2(Code::Shl_rm32_imm8, reg32, self.stride.trailing_zeros()).expect(ok),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Formatter, IntelFormatter};

    fn text(instructions: &[Instruction]) -> Vec<String> {
        let mut f = IntelFormatter::new();
        instructions
            .iter()
            .map(|i| {
                let mut s = String::new();
                f.format(i, &mut s);
                s
            })
            .collect()
    }

    #[test]
    fn the_lane_offset_comes_from_rseq_rdpid_or_nowhere() {
        let lanes = |source| Lanes {
            source,
            count: 16,
            stride: 1 << 19,
        };
        assert_eq!(
            text(&lanes(CpuSource::Rseq { offset: 0x9a0 }).offset_into(Register::RAX)),
            ["mov eax,fs:[9A4h]", "and eax,0Fh", "shl eax,13h"]
        );
        assert_eq!(
            text(&lanes(CpuSource::Rdpid).offset_into(Register::RDX)),
            ["rdpid rdx", "and edx,0Fh", "shl edx,13h"]
        );
        assert_eq!(
            text(&lanes(CpuSource::None).offset_into(Register::RAX)),
            ["xor eax,eax"]
        );
        assert!(!lanes(CpuSource::None).spread());
    }
}
