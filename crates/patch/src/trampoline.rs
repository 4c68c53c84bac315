//! Trampolines: snippets, displaced instructions, jump back.
//!
//! Layout at the trampoline's address:
//!
//! ```text
//! [8-byte return-address slots, one per displaced call]
//! entry:  for each displaced instruction, in order:
//!           (lea rsp,[rsp-128]; save flags; push live clobbered registers)  only if needed
//!           the snippets of the points at this instruction
//!           (pop registers; restore flags; lea rsp,[rsp+128])
//!           the instruction, relocated
//!         jmp <end of window>                                   unless the last one never falls through
//! ```
//!
//! The flags are saved with `lahf`/`seto` and restored with `sahf`
//! (`weft_code::save_status_flags`), not `pushfq`/`popfq`.
//!
//! A site holds one or more points: the point its splice was chosen for,
//! and any later point that falls inside its window (which, having no
//! branch target inside, is only ever executed through the trampoline).
//! The stack is only touched when a snippet clobbers something live, and
//! then only below the 128-byte red zone, which leaf functions may use.

use crate::relocate::{encode_block, relocated_form};
use crate::splice::SpliceChoice;
use crate::{Result, Snippet, RED_ZONE};
use iced_x86::{Code, FlowControl, Instruction, MemoryOperand, Mnemonic, Register};
use weft_code::{FunctionCode, RegSet, STATUS_FLAGS};

/// Instrumentation to run just before one instruction.
#[derive(Debug, Clone)]
pub struct PointSnippet {
    /// The instruction's (original) address.
    pub point: u64,
    /// What to run.
    pub snippet: Snippet,
    /// Registers and flags that may be live before the instruction.
    pub live: RegSet,
    /// Whether branches to the instruction from inside a relocated function
    /// also run the snippet (true for instruction points; false for an
    /// entry probe, which counts calls, not loop iterations).
    pub on_branch_in: bool,
    /// What the snippet does in place of the code at its point (then it
    /// is the last snippet there).
    pub replaces: Replaces,
}

/// What a snippet does in place of the code at its point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Replaces {
    /// Nothing: the instruction runs after the snippet.
    #[default]
    Nothing,
    /// The `syscall` instruction at the point: the snippet makes the call
    /// (`weft_plan::Primitive::MakeCall`), and the instruction is left out.
    Syscall,
    /// The function from its entry on: the snippet calls the function's
    /// code, relocated elsewhere (`weft_plan::Primitive::CallFunction`),
    /// and the trampoline returns to the function's caller after it.
    Function,
}

/// Generated trampoline code for one site.
#[derive(Debug, Clone)]
pub struct Trampoline {
    /// Address of the first byte (the literal slots, if any).
    pub addr: u64,
    /// Where the splice jumps to.
    pub entry: u64,
    /// The bytes to place at `addr`.
    pub bytes: Vec<u8>,
    /// Whether the flags or registers are saved around some snippet.
    pub saves_state: bool,
    /// Each `syscall` relocated here, and the address after the original
    /// (see [`crate::unwind`]); `rsp` there is the point's.
    pub relocated_syscalls: Vec<(u64, u64)>,
}

impl Trampoline {
    /// Builds the trampoline for the window of `choice` at address `at`,
    /// with each snippet placed before its instruction.
    pub fn build(at: u64, choice: &SpliceChoice, snippets: &[PointSnippet]) -> Result<Trampoline> {
        let mut bytes: Vec<u8> = Vec::new();
        let mut slots = Vec::new();
        for c in choice.displaced.iter().filter(|i| {
            matches!(
                i.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            )
        }) {
            slots.push((c.ip(), at + bytes.len() as u64));
            bytes.extend_from_slice(&c.next_ip().to_le_bytes());
        }
        let entry = at + bytes.len() as u64;
        let slot_for =
            |i: &Instruction| slots.iter().find(|(ip, _)| *ip == i.ip()).map(|(_, s)| *s);
        let mut saves_state = false;
        let mut falls_through = true;
        let mut made = false;
        let mut block: Vec<Instruction> = Vec::new();
        for i in &choice.displaced {
            for ps in snippets_at(snippets, i)? {
                let body = wrap_snippet(&ps.snippet, ps.live)?;
                saves_state |= body.len() > ps.snippet.instructions.len();
                block.extend(body);
            }
            match replaced(snippets, i) {
                Replaces::Nothing => block.extend(relocated_form(i, slot_for(i))?),
                Replaces::Syscall => made = true,
                Replaces::Function => {
                    if i.ip() != choice.point || snippets.iter().any(|ps| ps.point != i.ip()) {
                        return Err(crate::Error::NotRelocatable {
                            addr: i.ip(),
                            why: "a function called by a probe is called from its entry, with no other probe",
                        });
                    }
                    block.push(clear_returned()?);
                    block.push(Instruction::with(Code::Retnq));
                    falls_through = false;
                    break;
                }
            }
            if made && never_falls_through(i) {
                // The relocated jump out ends the block: cleared before it.
                let last = block.len() - relocated_form(i, slot_for(i))?.len();
                block.insert(last, clear_returned()?);
                made = false;
            }
            falls_through = !never_falls_through(i);
        }
        if falls_through {
            if made {
                block.push(clear_returned()?);
            }
            block.push(Instruction::with_branch(
                Code::Jmp_rel32_64,
                choice.end_of_code(),
            )?);
        }
        for i in block.iter_mut() {
            i.set_ip(0);
        }
        let code = encode_block(&block, entry)?;
        // Snippets make no system call: the k-th `syscall` here is the
        // k-th one relocated.
        let originals = choice
            .displaced
            .iter()
            .filter(|i| i.mnemonic() == Mnemonic::Syscall)
            .filter(|i| replaced(snippets, i) == Replaces::Nothing)
            .map(|i| i.next_ip());
        let relocated_syscalls = syscalls_in(&code, entry).zip(originals).collect();
        bytes.extend(code);
        Ok(Trampoline {
            addr: at,
            entry,
            bytes,
            saves_state,
            relocated_syscalls,
        })
    }

    /// A trampoline holding a relocated copy of the whole function from
    /// `choice.point` on, with the snippets inlined before their
    /// instructions: for an entry point that the function's own branches
    /// also reach (a loop head), so that only calls run the entry snippet.
    /// Branches inside the copy go to the copy; calls return into the copy;
    /// the original stays intact beyond the splice for anything else that
    /// jumps into it.
    pub fn build_relocated_function(
        at: u64,
        func: &FunctionCode,
        choice: &SpliceChoice,
        snippets: &[PointSnippet],
    ) -> Result<Trampoline> {
        let k = func
            .index_of(choice.point)
            .ok_or(crate::Error::NotRelocatable {
                addr: choice.point,
                why: "not an instruction",
            })?;
        let body = &func.instructions()[k..];
        if let Some(i) = body.iter().find(|i| {
            crate::relocate::can_relocate(i).is_some()
                && !matches!(
                    i.flow_control(),
                    FlowControl::Call | FlowControl::IndirectCall
                )
        }) {
            return Err(crate::Error::NotRelocatable {
                addr: i.ip(),
                why: "cannot move this function",
            });
        }
        let mut block: Vec<Instruction> = Vec::new();
        let mut saves_state = false;
        for i in body {
            let mut relocated = *i;
            let made = match replaced(snippets, i) {
                Replaces::Nothing => false,
                Replaces::Syscall => true,
                Replaces::Function => {
                    return Err(crate::Error::NotRelocatable {
                        addr: i.ip(),
                        why: "a function called by a probe is not copied whole",
                    })
                }
            };
            for ps in snippets_at(snippets, i)? {
                let mut wrapped = wrap_snippet(&ps.snippet, ps.live)?;
                saves_state |= wrapped.len() > ps.snippet.instructions.len();
                // The block encoder sends a branch to the instruction with
                // the branch's target address: the snippet's first
                // instruction takes that address when branches should run it.
                for w in wrapped.iter_mut() {
                    w.set_ip(0);
                }
                if ps.on_branch_in || made {
                    wrapped[0].set_ip(i.ip());
                    relocated.set_ip(0);
                }
                block.extend(wrapped);
            }
            if made {
                block.push(clear_returned()?);
            } else {
                block.push(relocated);
            }
        }
        if let Some(last) = body.last() {
            if !never_falls_through(last) {
                block.push(Instruction::with_branch(
                    Code::Jmp_rel32_64,
                    last.next_ip(),
                )?);
            }
        }
        let r = iced_x86::BlockEncoder::encode(
            64,
            iced_x86::InstructionBlock::new(&block, at),
            iced_x86::BlockEncoderOptions::NONE,
        )?;
        Ok(Trampoline {
            addr: at,
            entry: at,
            bytes: r.code_buffer,
            saves_state,
            relocated_syscalls: Vec::new(),
        })
    }
}

/// The addresses of the `syscall` instructions in `code` (instructions
/// only, from its first byte) placed at `ip`.
fn syscalls_in(code: &[u8], ip: u64) -> impl Iterator<Item = u64> + '_ {
    iced_x86::Decoder::with_ip(64, code, ip, iced_x86::DecoderOptions::NONE)
        .into_iter()
        .filter(|i| i.mnemonic() == Mnemonic::Syscall)
        .map(|i| i.ip())
}

/// The snippets at instruction `i`, in order, the one that replaces its
/// code (if any) last; an error if more than one would, or if one would
/// make the call of an instruction that is no `syscall`.
fn snippets_at<'s>(snippets: &'s [PointSnippet], i: &Instruction) -> Result<Vec<&'s PointSnippet>> {
    let mut at: Vec<&PointSnippet> = snippets.iter().filter(|ps| ps.point == i.ip()).collect();
    let replacing: Vec<Replaces> = at
        .iter()
        .map(|ps| ps.replaces)
        .filter(|&r| r != Replaces::Nothing)
        .collect();
    if replacing.len() > 1 || (replacing == [Replaces::Syscall] && i.code() != Code::Syscall) {
        return Err(crate::Error::NotRelocatable {
            addr: i.ip(),
            why: "code replaced by a probe needs one probe to replace it (a system call's at a `syscall`)",
        });
    }
    at.sort_by_key(|ps| ps.replaces != Replaces::Nothing);
    Ok(at)
}

/// What a snippet at instruction `i` does in its place (see
/// [`PointSnippet::replaces`]).
fn replaced(snippets: &[PointSnippet], i: &Instruction) -> Replaces {
    snippets
        .iter()
        .find(|ps| ps.point == i.ip() && ps.replaces != Replaces::Nothing)
        .map_or(Replaces::Nothing, |ps| ps.replaces)
}

fn never_falls_through(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch
    )
}

/// After a program that made its point's call (`Replaces`), which
/// returns with r11 at the thread's block: the block's `RETURNED` word
/// cleared, as the thread goes back to the program's code, the
/// instruction after this one (in a trampoline that jumps or returns
/// there) the delivery stub recognises as that (`crate::dispatch`).
pub(crate) fn clear_returned() -> Result<Instruction> {
    Ok(Instruction::with2(
        Code::Mov_rm64_imm32,
        MemoryOperand::with_base_displ(Register::R11, crate::region::threads::RETURNED as i64),
        0,
    )?)
}

/// The snippet, bracketed by saving what it clobbers that is live (below the red zone).
fn wrap_snippet(snippet: &Snippet, live: RegSet) -> Result<Vec<Instruction>> {
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
            body.extend(weft_code::save_status_flags());
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
            body.extend(weft_code::restore_status_flags());
        }
        body.push(Instruction::with2(
            Code::Lea_r64_m,
            Register::RSP,
            MemoryOperand::with_base_displ(Register::RSP, RED_ZONE),
        )?);
    }
    Ok(body)
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

    /// The splice choice at `point` of `f`, with no other code, thread or padding around.
    fn choose_at(
        f: &FunctionCode,
        point: u64,
    ) -> Option<Result<crate::SpliceChoice, crate::Unsafe>> {
        let t = BranchTargets::new();
        choose_splice(
            &SpliceContext {
                func: f,
                targets: &t,
                thread_pcs: &[],
                after_end: &[],
            },
            point,
        )
    }

    fn one(point: u64, counter: u64, live: RegSet, on_branch_in: bool) -> PointSnippet {
        PointSnippet {
            point,
            snippet: Snippet::count(counter),
            live,
            on_branch_in,
            replaces: Replaces::Nothing,
        }
    }

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
        let c = choose_at(&f, 0x40_1000).unwrap().unwrap();
        let tr = Trampoline::build(
            0x50_0000,
            &c,
            &[one(0x40_1000, 0x60_0000, RegSet::EMPTY, false)],
        )
        .unwrap();
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

    /// A snippet that makes the call stands in for the `syscall`
    /// instruction, after the point's other snippets; one at another
    /// instruction, or two at one, cannot be built.
    #[test]
    fn a_snippet_that_makes_the_call_replaces_the_syscall() {
        // mov eax,39; syscall; cmp rax,-4096; ret
        let code = [
            0xb8, 39, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d, 0x00, 0xf0, 0xff, 0xff, 0xc3,
        ];
        let f = FunctionCode::analyze(0x40_1000, &code, &NoData);
        let c = choose_at(&f, 0x40_1005).unwrap().unwrap();
        let making = |point| PointSnippet {
            replaces: Replaces::Syscall,
            ..one(point, 0x60_0008, RegSet::EMPTY, true)
        };
        let other = one(0x40_1005, 0x60_0000, RegSet::EMPTY, true);
        let tr = Trampoline::build(0x50_0000, &c, &[making(0x40_1005), other.clone()]).unwrap();
        // (Code from the entry: iced counts `syscall` a call, which has a
        // return-address slot before it.)
        let code_of = |tr: &Trampoline| text(&tr.bytes[(tr.entry - tr.addr) as usize..], tr.entry);
        let t = code_of(&tr);
        assert!(!t.iter().any(|s| s.starts_with("syscall")), "{t:?}");
        let first = t.iter().position(|s| s == "lock incq 0x600000");
        let second = t.iter().position(|s| s == "lock incq 0x600008");
        assert!(first < second && first.is_some(), "the maker last: {t:?}");
        assert!(Trampoline::build(0x50_0000, &c, &[making(0x40_1005), making(0x40_1005)]).is_err());
        assert!(Trampoline::build(0x50_0000, &c, &[making(0x40_1000)]).is_err());
        let plain = Trampoline::build(0x50_0000, &c, &[other]).unwrap();
        assert!(code_of(&plain).iter().any(|s| s.starts_with("syscall")));
        // Where a thread waits in the relocated call, for its unwinder.
        assert!(tr.relocated_syscalls.is_empty());
        let [(at, returns_to)] = plain.relocated_syscalls[..] else {
            panic!("one relocated syscall: {:?}", plain.relocated_syscalls);
        };
        let off = (at - plain.addr) as usize;
        assert_eq!(plain.bytes[off..off + 2], [0x0f, 0x05]);
        assert_eq!(returns_to, 0x40_1007);
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
        let tr = Trampoline::build(0x2000, &c, &[one(0x1002, 0x3000, live, true)]).unwrap();
        assert!(tr.saves_state);
        let t = text(&tr.bytes, tr.addr);
        let lea = t
            .iter()
            .position(|s| s.starts_with("lea") && s.contains("-0x80(%rsp)"))
            .expect("red zone step");
        // The flags' word below it, by `lahf` and `seto`, and back by `sahf`.
        assert!(
            t[lea + 1].starts_with("lea") && t[lea + 1].contains("-8(%rsp)"),
            "{t:?}"
        );
        assert!(t.iter().any(|s| s == "lahf") && t.iter().any(|s| s == "sahf"));
        assert!(!t.iter().any(|s| s == "pushf" || s == "popf"));
        assert!(RegSet(FLAG_ZF).flags_live(STATUS_FLAGS));
    }

    #[test]
    fn loop_head_entry_relocates_whole_function() {
        // 0x1000: dec edi (ff cf); 0x1002: jne 0x1000 (75 fc); 0x1004: ret
        let code = [0xff, 0xcf, 0x75, 0xfc, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        assert!(f.internal_targets().contains(&0x1000));
        let c = choose_at(&f, 0x1000).unwrap().unwrap();
        let entry = one(0x1000, 0xa000, RegSet::EMPTY, false);
        let tr = Trampoline::build_relocated_function(0x9000, &f, &c, std::slice::from_ref(&entry))
            .unwrap();
        let insns = decode_all(0x9000, &tr.bytes);
        let text: Vec<String> = insns.iter().map(format_instruction).collect();
        assert_eq!(text[0], "lock incq 0xA000");
        assert_eq!(text[1], "dec     %edi");
        // The back-edge goes to the copied loop head, after the entry counter.
        assert_eq!(insns[2].near_branch_target(), insns[1].ip(), "{text:?}");
        assert_eq!(text[3], "ret");
        // An instruction point at the loop head is run by the back-edge too.
        let at_head = one(0x1000, 0xb000, RegSet::EMPTY, true);
        let tr = Trampoline::build_relocated_function(0x9000, &f, &c, &[entry, at_head]).unwrap();
        let insns = decode_all(0x9000, &tr.bytes);
        let text: Vec<String> = insns.iter().map(format_instruction).collect();
        assert_eq!(text[1], "lock incq 0xB000", "{text:?}");
        assert_eq!(insns[3].near_branch_target(), insns[1].ip(), "{text:?}");
    }

    #[test]
    fn displaced_call_keeps_original_return_address() {
        // 0x1000: call 0x5000 (e8 fb 3f 00 00); 0x1005: ret
        let code = [0xe8, 0xfb, 0x3f, 0x00, 0x00, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let c = choose_at(&f, 0x1000).unwrap().unwrap();
        assert_eq!((c.start, c.end), (0x1000, 0x1005));
        let tr =
            Trampoline::build(0x8000, &c, &[one(0x1000, 0x9000, RegSet::EMPTY, false)]).unwrap();
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
