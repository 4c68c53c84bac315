//! Where a copy writes 5-byte jumps into the original besides its entry:
//! the return addresses of its calls (so that calls can push the original
//! ones) and the places code outside jumps back in.

use super::is_call;
use iced_x86::{Code, Instruction, Register};
use weft_code::FunctionCode;

/// The return addresses of calls that can hold a 5-byte jump: inside the
/// function, at least five bytes before its end, and overlapping neither
/// the entry's jump nor another chosen return address's. Calls that never
/// return (the last instruction of the function) are left out. (A return
/// address code outside also jumps to writes a resume record: see
/// [`Layout::resumes`].)
fn spliceable_returns(code: &FunctionCode, covered: &dyn Fn(u64) -> Option<u64>) -> Vec<u64> {
    let mut taken_until = code.start() + 5;
    let mut chosen = Vec::new();
    for i in code.instructions() {
        if !is_call(i) || !call_form_movable(i) {
            continue;
        }
        let ret = i.next_ip();
        if ret >= taken_until
            && ret + 5 <= code.end()
            && code.index_of(ret).is_some()
            && covered(ret).is_none()
        {
            chosen.push(ret);
            taken_until = ret + 5;
        }
    }
    chosen
}

/// Where a copy puts 5-byte jumps into itself besides the entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Splices {
    /// Return addresses of calls (see [`spliceable_returns`]).
    pub returns: Vec<u64>,
    /// Places code outside jumps in (see [`splices`]).
    pub reentries: Vec<u64>,
}

/// The return addresses and re-entries a copy splices. A jump must not
/// cover an address code can reach in the original: one reached from
/// outside always; one the function's own branches reach only while some
/// original code may run, that is, unless every place code outside
/// enters by (`entered_from_outside`: other functions' branches, other
/// parts coming back, landing pads, return addresses on stacks) gets a
/// jump into the copy itself. Deterministic in the code, so every process
/// running it gets the same.
pub fn splices(
    code: &FunctionCode,
    entered_from_outside: &[u64],
    branch_targets: &[u64],
) -> Splices {
    let tight = splices_avoiding(code, entered_from_outside, entered_from_outside);
    let sealed = entered_from_outside
        .iter()
        .all(|a| tight.reentries.contains(a) || tight.returns.contains(a) || *a == code.start());
    if sealed {
        return tight;
    }
    let mut all = branch_targets.to_vec();
    all.extend_from_slice(entered_from_outside);
    splices_avoiding(code, entered_from_outside, &all)
}

/// [`Splices`] whose jumps cover none of `avoid`: re-entries at block
/// starts at least five bytes past the entry and before the end, covering
/// no call's return address and no return address the copy splices.
fn splices_avoiding(code: &FunctionCode, entered_from_outside: &[u64], avoid: &[u64]) -> Splices {
    let inside = |a: u64, t: u64| t > a && t < a + 5;
    let covered = |a: u64| avoid.iter().find(|&&t| inside(a, t)).copied();
    let returns = spliceable_returns(code, &covered);
    let mut taken: Vec<u64> = returns.clone();
    taken.push(code.start());
    let calls_return: Vec<u64> = code
        .instructions()
        .iter()
        .filter(|i| is_call(i))
        .map(|i| i.next_ip())
        .collect();
    let mut chosen = Vec::new();
    let mut outside = entered_from_outside.to_vec();
    outside.sort_unstable();
    outside.dedup();
    for a in outside {
        let fits = a >= code.start() + 5
            && a + 5 <= code.end()
            && code.blocks().iter().any(|b| b.start == a)
            && covered(a).is_none()
            && !calls_return.iter().any(|&r| inside(a, r))
            && !taken.iter().any(|&t| t < a + 5 && a < t + 5);
        if fits {
            chosen.push(a);
            taken.push(a);
        }
    }
    Splices {
        returns,
        reentries: chosen,
    }
}

/// Whether a call can become `push [literal]; jmp target`: a direct call,
/// or an indirect one whose operand does not depend on `rsp`.
pub(super) fn call_form_movable(i: &Instruction) -> bool {
    match i.code() {
        Code::Call_rel32_64 => true,
        Code::Call_rm64 => {
            let mem = (0..i.op_count()).any(|k| i.op_kind(k) == iced_x86::OpKind::Memory);
            !(mem
                && (i.memory_base().full_register() == Register::RSP
                    || i.memory_index().full_register() == Register::RSP))
        }
        _ => false,
    }
}
