//! Call stacks from `.eh_frame`, the call frame information (DWARF CFI)
//! every x86-64 ELF file carries for its unwinders: the caller of a
//! frame, from the frame's registers and the stack words it saved.

use crate::{FileAddr, Image};
use gimli::{CfaRule, Register, RegisterRule, UnwindSection};

/// DWARF's number of the return address column on x86-64.
const RETURN_ADDRESS: u16 = 16;
/// DWARF's number of `rsp`.
const RSP: usize = 7;
/// The callee-saved registers an unwind carries from frame to frame
/// (DWARF numbers): `rbx`, `rbp`, `r12`..`r15`.
const CALLEE_SAVED: [usize; 6] = [3, 6, 12, 13, 14, 15];

/// A frame's registers, in runtime addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// Where the frame's code is: the thread's instruction for the first
    /// frame, a return address for the others.
    pub pc: u64,
    /// The registers by DWARF number (`rax`=0, `rdx`, `rcx`, `rbx`,
    /// `rsi`, `rdi`, `rbp`, `rsp`=7, `r8`..`r15`), none where unknown.
    pub regs: [Option<u64>; 16],
}

impl Frame {
    /// The first frame: `pc`, `rsp`, and `rbx`, `rbp`, `r12`..`r15` in
    /// that order.
    pub fn new(pc: u64, rsp: u64, callee_saved: [u64; 6]) -> Frame {
        let mut regs = [None; 16];
        regs[RSP] = Some(rsp);
        for (&r, v) in CALLEE_SAVED.iter().zip(callee_saved) {
            regs[r] = Some(v);
        }
        Frame { pc, regs }
    }
}

impl Image {
    /// The caller of `frame`, whose code is in this image loaded with
    /// load bias `bias`; `read` gives the 8-byte word at a stack address.
    /// `first`: `frame.pc` is the thread's instruction (else a return
    /// address, looked up one byte back, in the call). None where the
    /// CFI has no row for the pc, uses a rule this does not follow
    /// (DWARF expressions: PLT entries), leaves the return address
    /// undefined (the outermost frame) or a word cannot be read.
    pub fn caller(
        &self,
        frame: &Frame,
        bias: u64,
        first: bool,
        read: &mut dyn FnMut(u64) -> Option<u64>,
    ) -> Option<Frame> {
        let file = object::File::parse(&*self.data).ok()?;
        let (eh_frame, bases) = crate::elf::eh_frame(&file)?;
        let at = FileAddr(frame.pc.checked_sub(bias)?.checked_sub(u64::from(!first))?);
        let mut context = gimli::UnwindContext::new();
        let row = eh_frame
            .unwind_info_for_address(
                &bases,
                &mut context,
                at.get(),
                gimli::EhFrame::cie_from_offset,
            )
            .ok()?;
        let cfa = match row.cfa() {
            CfaRule::RegisterAndOffset { register, offset } => frame
                .regs
                .get(register.0 as usize)
                .copied()
                .flatten()?
                .wrapping_add_signed(*offset),
            CfaRule::Expression(_) => return None,
        };
        let mut value = |rule: RegisterRule<usize>, now: Option<u64>| match rule {
            RegisterRule::Undefined | RegisterRule::SameValue => now,
            RegisterRule::Offset(o) => read(cfa.wrapping_add_signed(o)),
            RegisterRule::ValOffset(o) => Some(cfa.wrapping_add_signed(o)),
            RegisterRule::Register(r) => frame.regs.get(r.0 as usize).copied().flatten(),
            _ => None,
        };
        let pc = match row.register(Register(RETURN_ADDRESS)) {
            RegisterRule::Undefined => return None,
            rule => value(rule, None)?,
        };
        let mut regs = [None; 16];
        regs[RSP] = Some(cfa);
        for r in CALLEE_SAVED {
            regs[r] = value(row.register(Register(r as u16)), frame.regs[r]);
        }
        Some(Frame { pc, regs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test's own stack, unwound from a function that keeps the
    /// callee-saved registers it had: each caller is a function of this
    /// very binary, up to the test harness.
    #[test]
    fn a_stack_unwinds_through_its_callers() {
        #[inline(never)]
        fn innermost() -> (u64, u64, u64) {
            let (pc, rsp, rbp): (u64, u64, u64);
            // SAFETY: reads rip, rsp and rbp into registers; touches no
            // memory.
            unsafe {
                std::arch::asm!(
                    "lea {pc}, [rip]",
                    "mov {rsp}, rsp",
                    "mov {rbp}, rbp",
                    pc = out(reg) pc,
                    rsp = out(reg) rsp,
                    rbp = out(reg) rbp,
                );
            }
            (pc, rsp, rbp)
        }
        #[inline(never)]
        fn middle() -> Vec<String> {
            let (pc, rsp, rbp) = innermost();
            let exe = std::env::current_exe().unwrap();
            let image = Image::open(&exe).unwrap();
            let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
            // The executable's first mapping, at file offset 0.
            let start = maps
                .lines()
                .find(|l| l.ends_with(exe.to_str().unwrap()))
                .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
                .unwrap();
            let bias = image.load_bias(start, 0).unwrap();
            // SAFETY: the addresses read are this thread's own stack
            // words, between its stack pointer and the callers' frames,
            // which stay alive while this function runs.
            let mut read = |at: u64| Some(unsafe { *(at as *const u64) });
            let mut frame = Frame::new(pc, rsp, [0, rbp, 0, 0, 0, 0]);
            let mut names = Vec::new();
            for k in 0..8 {
                let f = image.function_at(FileAddr(frame.pc - bias));
                names.push(f.map_or("?".to_string(), |f| f.display_name().to_string()));
                match image.caller(&frame, bias, k == 0, &mut read) {
                    Some(up) => frame = up,
                    None => break,
                }
            }
            names
        }
        let names = middle();
        let at = |what: &str| names.iter().position(|n| n.ends_with(what));
        let (inner, mid, test) = (
            at("::innermost"),
            at("::middle"),
            at("tests::a_stack_unwinds_through_its_callers"),
        );
        assert!(inner.is_some() && inner < mid && mid < test, "{names:?}");
    }
}
