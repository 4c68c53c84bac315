//! Trampolines: snippet, displaced instructions, jump back.
//!
//! Layout at the trampoline's address:
//!
//! ```text
//! [8-byte return-address slots, one per displaced call]
//! entry:  relocated instructions before the point
//!         (lea rsp,[rsp-128]; pushfq; push live clobbered registers)   only if needed
//!         snippet
//!         (pop registers; popfq; lea rsp,[rsp+128])
//!         relocated instructions from the point on
//!         jmp <end of window>                                          unless the last one never falls through
//! ```
//!
//! The stack is only touched when the snippet clobbers something live, and
//! then only below the 128-byte red zone, which leaf functions may be using.

use crate::relocate::{encode_at, relocate_one};
use crate::splice::SpliceChoice;
use crate::{Result, Snippet, RED_ZONE};
use iced_x86::{Code, FlowControl, Instruction, MemoryOperand, Register};
use weft_code::{RegSet, STATUS_FLAGS};

/// Generated trampoline code for one point.
#[derive(Debug, Clone)]
pub struct Trampoline {
    /// Address of the first byte (the literal slots, if any).
    pub addr: u64,
    /// Where the splice jumps to.
    pub entry: u64,
    /// The bytes to place at `addr`.
    pub bytes: Vec<u8>,
    /// Whether the flags or registers are saved around the snippet.
    pub saves_state: bool,
}

impl Trampoline {
    /// Builds the trampoline for `choice` at address `at`. `live` is what
    /// may be live just before the point.
    pub fn build(
        at: u64,
        choice: &SpliceChoice,
        snippet: &Snippet,
        live: RegSet,
    ) -> Result<Trampoline> {
        let calls: Vec<&Instruction> = choice
            .displaced
            .iter()
            .filter(|i| {
                matches!(
                    i.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall
                )
            })
            .collect();
        let mut bytes: Vec<u8> = Vec::new();
        let mut slots = Vec::new();
        for c in &calls {
            slots.push((c.ip(), at + bytes.len() as u64));
            bytes.extend_from_slice(&c.next_ip().to_le_bytes());
        }
        let entry = at + bytes.len() as u64;
        let slot_for =
            |i: &Instruction| slots.iter().find(|(ip, _)| *ip == i.ip()).map(|(_, s)| *s);
        let (before, from_point): (Vec<&Instruction>, Vec<&Instruction>) =
            choice.displaced.iter().partition(|i| i.ip() < choice.point);
        for i in before {
            let here = at + bytes.len() as u64;
            bytes.extend(relocate_one(i, here, slot_for(i))?);
        }
        let clobbered_live = snippet.clobbers & live;
        let save_flags = clobbered_live.flags_live(STATUS_FLAGS);
        let save_regs: Vec<Register> = (0..16u32)
            .filter(|r| clobbered_live.0 & (1 << r) != 0)
            .map(gpr64)
            .collect();
        let saves_state = save_flags || !save_regs.is_empty();
        let mut body: Vec<Instruction> = Vec::new();
        if saves_state {
            body.push(Instruction::with2(
                Code::Lea_r64_m,
                Register::RSP,
                MemoryOperand::with_base_displ(Register::RSP, -RED_ZONE),
            )?);
            if save_flags {
                body.push(Instruction::with(Code::Pushfq));
            }
            for &r in &save_regs {
                body.push(Instruction::with1(Code::Push_r64, r)?);
            }
        }
        body.extend(snippet.instructions.iter().copied());
        if saves_state {
            for &r in save_regs.iter().rev() {
                body.push(Instruction::with1(Code::Pop_r64, r)?);
            }
            if save_flags {
                body.push(Instruction::with(Code::Popfq));
            }
            body.push(Instruction::with2(
                Code::Lea_r64_m,
                Register::RSP,
                MemoryOperand::with_base_displ(Register::RSP, RED_ZONE),
            )?);
        }
        let here = at + bytes.len() as u64;
        bytes.extend(encode_at(&body, here)?);
        let mut falls_through = true;
        for i in from_point {
            let here = at + bytes.len() as u64;
            bytes.extend(relocate_one(i, here, slot_for(i))?);
            falls_through = !matches!(
                i.flow_control(),
                FlowControl::Return
                    | FlowControl::UnconditionalBranch
                    | FlowControl::IndirectBranch
            );
        }
        if falls_through {
            let here = at + bytes.len() as u64;
            let back = Instruction::with_branch(Code::Jmp_rel32_64, choice.end_of_code())?;
            bytes.extend(encode_at(&[back], here)?);
        }
        Ok(Trampoline {
            addr: at,
            entry,
            bytes,
            saves_state,
        })
    }
}

impl SpliceChoice {
    /// Where execution continues after the displaced instructions: the end
    /// of the last displaced instruction (padding after it never runs).
    pub fn end_of_code(&self) -> u64 {
        self.displaced.last().map_or(self.end, |i| i.next_ip())
    }
}

fn gpr64(index: u32) -> Register {
    const R: [Register; 16] = [
        Register::RAX,
        Register::RCX,
        Register::RDX,
        Register::RBX,
        Register::RSP,
        Register::RBP,
        Register::RSI,
        Register::RDI,
        Register::R8,
        Register::R9,
        Register::R10,
        Register::R11,
        Register::R12,
        Register::R13,
        Register::R14,
        Register::R15,
    ];
    R[index as usize]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::splice::{choose_splice, SpliceContext};
    use weft_code::{decode_all, format_instruction, BranchTargets, FunctionCode, NoData, FLAG_ZF};

    fn text(bytes: &[u8], ip: u64) -> Vec<String> {
        decode_all(ip, bytes)
            .iter()
            .map(format_instruction)
            .collect()
    }

    #[test]
    fn counting_trampoline_golden() {
        // push rbp; mov rbp,rsp; mov eax,1; pop rbp; ret
        let code = [0x55, 0x48, 0x89, 0xe5, 0xb8, 1, 0, 0, 0, 0x5d, 0xc3];
        let f = FunctionCode::analyze(0x40_1000, &code, &NoData);
        let t = BranchTargets::new();
        let ctx = SpliceContext {
            func: &f,
            targets: &t,
            thread_pcs: &[],
            after_end: &[],
        };
        let c = choose_splice(&ctx, 0x40_1000).unwrap().unwrap();
        let tr =
            Trampoline::build(0x50_0000, &c, &Snippet::count(0x60_0000), RegSet::EMPTY).unwrap();
        assert_eq!(tr.entry, 0x50_0000);
        assert!(!tr.saves_state);
        assert_eq!(
            text(&tr.bytes, tr.addr),
            vec![
                "lock incq 0x600000", // RIP-relative, shown resolved
                "push    %rbp",
                "mov     %rsp,%rbp",
                "mov     $1,%eax",
                "jmp     0x0000000000401009",
            ]
        );
    }

    #[test]
    fn live_flags_are_saved_below_red_zone() {
        // cmp edi,esi (39 f7); point at: setl al (0f 9c c0); then ret
        let code = [0x39, 0xf7, 0x0f, 0x9c, 0xc0, 0xc3, 0xcc, 0xcc, 0xcc, 0xcc];
        let f = FunctionCode::analyze(0x1000, &code[..6], &NoData);
        let live = f.liveness().live_before(0x1002).unwrap();
        assert!(live.flags_live(weft_code::FLAG_SF | weft_code::FLAG_OF));
        let t = BranchTargets::new();
        let ctx = SpliceContext {
            func: &f,
            targets: &t,
            thread_pcs: &[],
            after_end: &code[6..],
        };
        let c = choose_splice(&ctx, 0x1002).unwrap().unwrap();
        let tr = Trampoline::build(0x2000, &c, &Snippet::count(0x3000), live).unwrap();
        assert!(tr.saves_state);
        let t = text(&tr.bytes, tr.addr);
        let lea = t
            .iter()
            .position(|s| s.starts_with("lea") && s.contains("-0x80(%rsp)"))
            .expect("red zone step");
        assert_eq!(t[lea + 1], "pushf");
        assert!(t.iter().any(|s| s == "popf"));
        assert!(RegSet(FLAG_ZF).flags_live(STATUS_FLAGS));
    }

    #[test]
    fn displaced_call_keeps_original_return_address() {
        // 0x1000: call 0x5000 (e8 fb 3f 00 00); 0x1005: ret
        let code = [0xe8, 0xfb, 0x3f, 0x00, 0x00, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let ctx = SpliceContext {
            func: &f,
            targets: &t,
            thread_pcs: &[],
            after_end: &[],
        };
        let c = choose_splice(&ctx, 0x1000).unwrap().unwrap();
        assert_eq!((c.start, c.end), (0x1000, 0x1005));
        let tr = Trampoline::build(0x8000, &c, &Snippet::count(0x9000), RegSet::EMPTY).unwrap();
        assert_eq!(
            u64::from_le_bytes(tr.bytes[..8].try_into().unwrap()),
            0x1005
        );
        assert_eq!(tr.entry, 0x8008);
        let insns = decode_all(tr.entry, &tr.bytes[8..]);
        assert_eq!(
            insns[1].ip_rel_memory_address(),
            0x8000,
            "push of the return-address slot"
        );
        assert_eq!(insns[2].near_branch_target(), 0x5000);
        assert_eq!(
            insns[3].near_branch_target(),
            0x1005,
            "jump back (reached only if the callee returned to the trampoline, which it does not)"
        );
    }
}
