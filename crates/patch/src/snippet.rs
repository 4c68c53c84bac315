//! Snippets: the instrumentation code a trampoline runs before the point.

use iced_x86::{Code, Instruction, MemoryOperand, Register};
use weft_code::{step_rsp, RegSet, FLAG_AF, FLAG_OF, FLAG_PF, FLAG_SF, FLAG_ZF};

/// Instructions to run at a point, with what they clobber.
#[derive(Debug, Clone)]
pub struct Snippet {
    /// The instructions; RIP-relative operands hold absolute addresses.
    pub instructions: Vec<Instruction>,
    /// Registers and flags the instructions overwrite.
    pub clobbers: RegSet,
}

impl Snippet {
    /// `lock inc qword [counter]`: an exact, thread-safe call count that
    /// touches no register and no stack, only the flags OF SF ZF AF PF
    /// (`inc` leaves CF alone).
    pub fn count(counter: u64) -> Snippet {
        let mut inc = Instruction::with1(
            Code::Inc_rm64,
            MemoryOperand::with_base_displ(Register::RIP, counter as i64),
        )
        .expect("inc qword [rip+disp] is a valid instruction");
        inc.set_has_lock_prefix(true);
        Snippet {
            instructions: vec![inc],
            clobbers: RegSet(FLAG_OF | FLAG_SF | FLAG_ZF | FLAG_AF | FLAG_PF),
        }
    }

    /// `lock add qword [counter], k`: an unguarded constant `addCounter`
    /// inline, with no mini-trampoline. Clobbers the status flags.
    pub fn add(counter: u64, k: i32) -> Snippet {
        let mut add = Instruction::with2(
            Code::Add_rm64_imm32,
            MemoryOperand::with_base_displ(Register::RIP, counter as i64),
            k,
        )
        .expect("add qword [rip+disp], imm32 is a valid instruction");
        add.set_has_lock_prefix(true);
        Snippet {
            instructions: vec![add],
            clobbers: RegSet(weft_code::STATUS_FLAGS),
        }
    }

    /// `lock inc` of the running CPU's lane of a counter whose first lane's
    /// address is stored at `literal`: the lane offset into rax, plus the
    /// address, then the increment. Clobbers rax and the status flags.
    /// Without lanes to spread over, [`Snippet::count`] of the first lane.
    pub fn count_in_lane(counter: u64, literal: u64, lanes: &crate::lanes::Lanes) -> Snippet {
        if !lanes.spread() {
            return Snippet::count(counter);
        }
        let mut inc = Instruction::with1(Code::Inc_rm64, MemoryOperand::with_base(Register::RAX))
            .expect("inc qword [rax] is a valid instruction");
        inc.set_has_lock_prefix(true);
        Snippet::in_lane(literal, lanes, inc)
    }

    /// `lock add` of `k` to the running CPU's lane of a counter (see
    /// [`Snippet::count_in_lane`]).
    pub fn add_in_lane(counter: u64, literal: u64, k: i32, lanes: &crate::lanes::Lanes) -> Snippet {
        if !lanes.spread() {
            return Snippet::add(counter, k);
        }
        let mut add = Instruction::with2(
            Code::Add_rm64_imm32,
            MemoryOperand::with_base(Register::RAX),
            k,
        )
        .expect("add qword [rax], imm32 is a valid instruction");
        add.set_has_lock_prefix(true);
        Snippet::in_lane(literal, lanes, add)
    }

    fn in_lane(literal: u64, lanes: &crate::lanes::Lanes, op: Instruction) -> Snippet {
        let mut instructions = lanes.offset_into(Register::RAX);
        instructions.push(
            Instruction::with2(
                Code::Add_r64_rm64,
                Register::RAX,
                MemoryOperand::with_base_displ(Register::RIP, literal as i64),
            )
            .expect("add rax, qword [rip+disp] is a valid instruction"),
        );
        instructions.push(op);
        Snippet {
            instructions,
            clobbers: RegSet::of(Register::RAX) | RegSet(weft_code::STATUS_FLAGS),
        }
    }

    /// A call to a mini-trampoline at `mini`, below the red zone. The
    /// mini-trampoline saves the registers it touches but not the flags,
    /// which the base trampoline saves when liveness says they are live.
    pub fn call_mini(mini: u64) -> Snippet {
        let (step, call) = (step_rsp, call_rel32(mini));
        Snippet {
            instructions: vec![step(-crate::RED_ZONE), call, step(crate::RED_ZONE)],
            clobbers: RegSet(weft_code::STATUS_FLAGS),
        }
    }

    /// A call to a mini-trampoline with a frame of known size (red zone,
    /// flags, return address), so the mini-trampoline can compute the
    /// point's `rsp` (for USDT operands such as `112(%rsp)`). The flags'
    /// word is saved with `lahf` rather than `pushfq` (see
    /// `weft_code::save_status_flags`).
    pub fn call_mini_fixed_frame(mini: u64) -> Snippet {
        let (step, call) = (step_rsp, call_rel32(mini));
        let mut instructions = vec![step(-crate::RED_ZONE)];
        instructions.extend(weft_code::save_status_flags());
        instructions.push(call);
        instructions.extend(weft_code::restore_status_flags());
        instructions.push(step(crate::RED_ZONE));
        Snippet {
            instructions,
            clobbers: RegSet::EMPTY,
        }
    }

    /// [`Snippet::call_mini_fixed_frame`] where the flags are dead: the
    /// same frame, with the flags' word left unwritten. Clobbers the flags, so it
    /// may only stand where liveness says they are dead (it is never
    /// bracketed, which would move its frame).
    pub fn call_mini_fixed_frame_flags_dead(mini: u64) -> Snippet {
        let (step, call) = (step_rsp, call_rel32(mini));
        Snippet {
            instructions: vec![step(-crate::RED_ZONE - 8), call, step(crate::RED_ZONE + 8)],
            clobbers: RegSet::EMPTY,
        }
    }

    /// Several snippets run one after the other.
    pub fn concat(parts: &[Snippet]) -> Snippet {
        Snippet {
            instructions: parts
                .iter()
                .flat_map(|s| s.instructions.iter().copied())
                .collect(),
            clobbers: parts.iter().fold(RegSet::EMPTY, |c, s| c | s.clobbers),
        }
    }
}

/// `call target` (rel32).
fn call_rel32(target: u64) -> Instruction {
    Instruction::with_branch(Code::Call_rel32_64, target)
        .expect("call rel32 is a valid instruction")
}
