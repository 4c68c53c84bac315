//! Snippets: the instrumentation code a trampoline runs before the point.

use iced_x86::{Code, Instruction, MemoryOperand, Register};
use weft_code::{RegSet, FLAG_AF, FLAG_OF, FLAG_PF, FLAG_SF, FLAG_ZF};

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
