//! What refuses a function a copy before anything is built: an entry
//! too short for its jump or jumped into, too many witnesses, a `switch`
//! or indirect jump the copy cannot dispatch, an instruction that cannot
//! move.

use super::{is_call, Refusal};
use crate::record::MAX_WITNESS;
use crate::witness::Plan;
use iced_x86::{Instruction, Register};
use weft_code::{BlockEnd, FunctionCode};

/// Why `code` cannot be laid out again with the stores of `plan`, if it
/// cannot, whatever its id and address: what [`rebuild`] refuses before
/// it builds anything (`entered_from_outside` and `entry_room` as in
/// [`Layout`]).
pub fn check(
    code: &FunctionCode,
    plan: &Plan,
    entered_from_outside: &[u64],
    entry_room: u64,
) -> Result<(), Refusal> {
    if entry_room.max(code.end() - code.start()) < 5 {
        return Err(Refusal::TooShort);
    }
    let covered = |a: u64| {
        entered_from_outside
            .iter()
            .find(|&&t| t > a && t < a + 5)
            .copied()
    };
    if let Some(t) = covered(code.start()) {
        return Err(Refusal::EnteredInside(t));
    }
    let most = plan.witness.iter().flatten().copied().max().unwrap_or(0);
    if most > MAX_WITNESS {
        return Err(Refusal::TooManyWitnesses(most));
    }
    for b in code.blocks() {
        let tail = &code.instructions()[b.last - 1];
        match b.kind {
            BlockEnd::Switch if !switch_form_supported(tail) => {
                return Err(Refusal::JumpTable(tail.ip()))
            }
            BlockEnd::IndirectJump => return Err(Refusal::IndirectJump(tail.ip())),
            _ => {}
        }
    }
    for i in code.instructions() {
        if is_call(i) {
            continue;
        }
        if let Some(why) = weft_patch_free_can_move(i) {
            return Err(Refusal::NotRelocatable(i.ip(), why));
        }
    }
    Ok(())
}

/// Whether a `switch`'s indirect jump has a form the copy can dispatch:
/// `jmp reg`, or `jmp [mem]` not addressed through `rsp`.
fn switch_form_supported(jmp: &Instruction) -> bool {
    match jmp.op0_kind() {
        iced_x86::OpKind::Register => jmp.op0_register() != Register::RSP,
        iced_x86::OpKind::Memory => {
            jmp.memory_base().full_register() != Register::RSP
                && jmp.memory_index().full_register() != Register::RSP
        }
        _ => false,
    }
}

/// Why `i` cannot be moved: a read of its own bytes, or undecodable.
fn weft_patch_free_can_move(i: &Instruction) -> Option<&'static str> {
    if i.is_invalid() {
        return Some("undecodable");
    }
    if i.is_ip_rel_memory_operand()
        && i.ip_rel_memory_address() >= i.ip()
        && i.ip_rel_memory_address() < i.next_ip()
    {
        return Some("reads its own bytes");
    }
    None
}
