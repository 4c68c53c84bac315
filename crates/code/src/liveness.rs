//! Register and flags liveness: which registers and status flags may still
//! be read before being written, at each instruction of a function.
//!
//! A classic backward data-flow problem over the CFG, with the System V
//! x86-64 ABI at the function's edges, as far as optimised code keeps it:
//! a call reads the argument registers and clobbers the flags; a return
//! reads the return and callee-saved registers; a tail call does both.
//!
//! GCC's interprocedural register allocation (`-fipa-ra`, on at -O2)
//! lets a caller keep a value in a caller-saved register across a call
//! when it knows the callee leaves that register alone. So a call is not
//! taken to clobber the caller-saved registers (a value the function keeps
//! in one across a call stays live), and a return or tail call also reads
//! every caller-saved register the function's own instructions never
//! write (its caller may hold a value there). A jump into another part of
//! the same function (a `.cold` part, [`FunctionCode::set_other_parts`])
//! reads every register. Results are conservative: "live" means "may be
//! live".

use crate::cfg::{BlockEnd, FunctionCode};
use crate::regs::{RegSet, STATUS_FLAGS};
use iced_x86::{Code, FlowControl, Instruction, InstructionInfoFactory, OpAccess, Register};

const fn gprs(regs: &[u32]) -> RegSet {
    let mut s = 0;
    let mut i = 0;
    while i < regs.len() {
        s |= 1 << regs[i];
        i += 1;
    }
    RegSet(s)
}
// Indices: rax0 rcx1 rdx2 rbx3 rsp4 rbp5 rsi6 rdi7 r8..r15 = 8..15
const ARGS: RegSet = gprs(&[7, 6, 2, 1, 8, 9, 0, 4]); // rdi rsi rdx rcx r8 r9, al (varargs), rsp
const CALLER_SAVED: RegSet = gprs(&[0, 1, 2, 6, 7, 8, 9, 10, 11]);
const CALLEE_SAVED: RegSet = gprs(&[3, 4, 5, 12, 13, 14, 15]);
const RETURN_VALUE: RegSet = gprs(&[0, 2]);
const SYSCALL_USES: RegSet = gprs(&[0, 7, 6, 2, 10, 8, 9, 4]);
const SYSCALL_DEFS: RegSet = gprs(&[0, 1, 11]);

/// Liveness results for one function.
#[derive(Debug, Clone)]
pub struct Liveness {
    /// Live on entry to each block.
    live_in: Vec<RegSet>,
    /// Live on exit from each block.
    live_out: Vec<RegSet>,
    /// (uses, defs) per instruction.
    effects: Vec<(RegSet, RegSet)>,
    starts: Vec<u64>,
    blocks: Vec<(usize, usize)>,
}

impl Liveness {
    pub(crate) fn compute(f: &FunctionCode) -> Liveness {
        let insns = f.instructions();
        let mut factory = InstructionInfoFactory::new();
        let mut effects: Vec<(RegSet, RegSet)> =
            insns.iter().map(|i| effects(i, f, &mut factory)).collect();
        // What a caller may find unchanged after this function returns.
        let written = effects
            .iter()
            .fold(RegSet::EMPTY, |all, &(_, defs)| all | defs);
        let kept = CALLER_SAVED - written;
        for (i, e) in insns.iter().zip(effects.iter_mut()) {
            if leaves(i, f) {
                e.0 = e.0 | kept;
            }
        }
        let blocks = f.blocks();
        let n = blocks.len();
        let mut live_in = vec![RegSet::EMPTY; n];
        let mut live_out = vec![RegSet::EMPTY; n];
        let mut changed = true;
        while changed {
            changed = false;
            for b in (0..n).rev() {
                let block = &blocks[b];
                let mut out = match block.kind {
                    BlockEnd::End => RegSet::ALL,
                    _ => RegSet::EMPTY,
                };
                for &s in &block.succs {
                    out = out | live_in[s];
                }
                let mut live = out;
                for k in (block.first..block.last).rev() {
                    let (uses, defs) = effects[k];
                    live = (live - defs) | uses;
                }
                if live != live_in[b] || out != live_out[b] {
                    live_in[b] = live;
                    live_out[b] = out;
                    changed = true;
                }
            }
        }
        Liveness {
            live_in,
            live_out,
            effects,
            starts: insns.iter().map(|i| i.ip()).collect(),
            blocks: blocks.iter().map(|b| (b.first, b.last)).collect(),
        }
    }

    /// What may be live just before the instruction at `addr` executes.
    pub fn live_before(&self, addr: u64) -> Option<RegSet> {
        let k = self.starts.binary_search(&addr).ok()?;
        let b = self
            .blocks
            .iter()
            .position(|&(first, last)| k >= first && k < last)?;
        let (first, last) = self.blocks[b];
        let mut live = self.live_out[b];
        for j in (k..last).rev() {
            let (uses, defs) = self.effects[j];
            live = (live - defs) | uses;
        }
        debug_assert!(k > first || live == self.live_in[b]);
        Some(live)
    }

    /// What may be live just after the instruction at `addr` (before the next one).
    pub fn live_after(&self, addr: u64) -> Option<RegSet> {
        let k = self.starts.binary_search(&addr).ok()?;
        let b = self
            .blocks
            .iter()
            .position(|&(first, last)| k >= first && k < last)?;
        let (_, last) = self.blocks[b];
        let mut live = self.live_out[b];
        for j in (k + 1..last).rev() {
            let (uses, defs) = self.effects[j];
            live = (live - defs) | uses;
        }
        Some(live)
    }
}

/// Whether all of `flags` are dead just before the instruction at `point`,
/// decided by scanning forward in straight-line code: true when they are
/// all written before any is read, or a call or return comes first (the
/// ABI gives flags no meaning across either). `None` when the scan reaches
/// a branch first; then only [`Liveness`] can tell.
pub fn flags_dead_by_scan(f: &FunctionCode, point: u64, flags: RegSet) -> Option<bool> {
    let k = f.index_of(point)?;
    let mut pending = flags;
    for i in &f.instructions()[k..] {
        if i.code() == Code::Syscall {
            continue; // the flags pass through the kernel (see `effects`)
        }
        let read = RegSet::from_rflags(i.rflags_read());
        if !(read & pending).is_empty() {
            return Some(false);
        }
        let written = RegSet::from_rflags(
            i.rflags_written() | i.rflags_cleared() | i.rflags_set() | i.rflags_undefined(),
        );
        pending = pending - written;
        if pending.is_empty() {
            return Some(true);
        }
        match i.flow_control() {
            FlowControl::Next => {}
            FlowControl::Call | FlowControl::IndirectCall | FlowControl::Return => {
                return Some(true)
            }
            _ => return None,
        }
    }
    None
}

/// Whether `i` leaves the function for its caller: a return or a tail call.
fn leaves(i: &Instruction, f: &FunctionCode) -> bool {
    match i.flow_control() {
        FlowControl::Return => true,
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
            let t = i.near_branch_target();
            let inside = t >= f.start() && t < f.end();
            !inside && !f.is_other_part(t)
        }
        FlowControl::IndirectBranch => !f.jump_tables().iter().any(|t| t.jump == i.ip()),
        _ => false,
    }
}

/// (uses, defs) of one instruction in its function.
fn effects(
    i: &Instruction,
    f: &FunctionCode,
    factory: &mut InstructionInfoFactory,
) -> (RegSet, RegSet) {
    let (mut uses, mut defs) = operand_effects(i, factory);
    match i.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => {
            uses = uses | ARGS;
            defs = (defs | RegSet(STATUS_FLAGS)) - RegSet::of(Register::RSP);
        }
        FlowControl::Return => {
            uses = uses | RETURN_VALUE | CALLEE_SAVED;
        }
        // A jump out of the function, taken always or on a condition, is
        // a tail call; or it goes on in another part of the function,
        // which may read anything.
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
            let t = i.near_branch_target();
            if f.is_other_part(t) {
                uses = RegSet::ALL;
            } else if !(t >= f.start() && t < f.end()) {
                uses = uses | ARGS | CALLEE_SAVED;
            }
        }
        // A tail call through a pointer reads what a direct one does.
        FlowControl::IndirectBranch if f.is_indirect_tail_call(i.ip()) => {
            uses = uses | ARGS | CALLEE_SAVED;
        }
        // A jump through no table we know, through one with cases in
        // another part of the function, or that may leave it (a computed
        // `goto`, or what weft takes for one: a tail call through a
        // pointer in a function that keeps its own code addresses in
        // data, as cc1's `variably_modified_type_p` does), may be
        // followed by anything: the arguments of a tail call too.
        FlowControl::IndirectBranch
            if !f
                .jump_tables()
                .iter()
                .any(|t| t.jump == i.ip() && t.outside.is_empty() && !t.elsewhere) =>
        {
            uses = RegSet::ALL;
        }
        _ => {}
    }
    // `rdssp` leaves its register alone where the thread has no shadow
    // stack (then it is a no-op): what was there before flows on. glibc's
    // unwinder zeroes `rax`, reads the shadow stack pointer into it and
    // tests it; taking `rax` for dead there let a store change the test
    // (`_Unwind_RaiseException` then ran `incssp` and died of SIGILL).
    if matches!(i.code(), Code::Rdsspd_r32 | Code::Rdsspq_r64) {
        uses = uses | RegSet::of(i.op0_register().full_register());
    }
    if i.code() == Code::Syscall {
        // The kernel hands the flags back as they were (`sysret` and
        // `iret` restore them from what `syscall` saved): neither read
        // nor written, they stay live across it only if live after it.
        let flags = RegSet(STATUS_FLAGS);
        uses = (uses - flags) | SYSCALL_USES;
        defs = (defs - flags) | SYSCALL_DEFS;
    }
    (uses, defs)
}

/// Register and flag reads and writes of the instruction's own operands.
fn operand_effects(i: &Instruction, factory: &mut InstructionInfoFactory) -> (RegSet, RegSet) {
    let info = factory.info(i);
    let mut uses = RegSet::from_rflags(i.rflags_read());
    let mut defs = RegSet::from_rflags(
        i.rflags_written() | i.rflags_cleared() | i.rflags_set() | i.rflags_undefined(),
    );
    // Zeroing idioms read nothing.
    let zeroing = matches!(
        i.code(),
        Code::Xor_r32_rm32 | Code::Xor_r64_rm64 | Code::Sub_r32_rm32 | Code::Sub_r64_rm64
    ) && i.op1_kind() == iced_x86::OpKind::Register
        && i.op0_register() == i.op1_register();
    for used in info.used_registers() {
        let reg = used.register();
        let set = RegSet::of(reg);
        if set.is_empty() {
            continue;
        }
        match used.access() {
            OpAccess::Read | OpAccess::CondRead if !zeroing => uses = uses | set,
            OpAccess::Write => {
                // Writing a 32- or 64-bit register replaces the whole 64-bit register.
                if reg.size() >= 4 {
                    defs = defs | set;
                } else {
                    uses = uses | set;
                }
            }
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => uses = uses | set,
            OpAccess::CondWrite => uses = uses | set,
            _ => {}
        }
    }
    (uses, defs)
}

#[cfg(test)]
mod tests {
    use crate::regs::*;
    use crate::{FunctionCode, NoData};
    use iced_x86::Register;

    #[test]
    fn a_tail_call_through_a_pointer_reads_no_flags() {
        // mov rax, rdi; cmp esi, 1; jmp rax
        let code = [0x48, 0x89, 0xf8, 0x83, 0xfe, 0x01, 0xff, 0xe0];
        let mut f = FunctionCode::analyze(0x100, &code, &crate::NoData);
        // Unresolved, the jump may go anywhere: everything is live.
        assert!(f
            .liveness()
            .live_before(0x106)
            .unwrap()
            .flags_live(STATUS_FLAGS));
        f.mark_indirect_tail_calls();
        let live = f.liveness().live_before(0x106).unwrap();
        assert!(!live.flags_live(STATUS_FLAGS), "{live}");
        assert!(
            live.contains(Register::RAX) && live.contains(Register::RDI),
            "{live}"
        );
    }

    #[test]
    fn the_flags_pass_through_a_syscall() {
        // 0: b8 27 00 00 00     mov eax, 39
        // 5: 0f 05              syscall
        // 7: 48 3d 01 f0 ff ff  cmp rax, -4095
        // d: c3                 ret
        let wrapper = [
            0xb8, 0x27, 0, 0, 0, 0x0f, 0x05, 0x48, 0x3d, 0x01, 0xf0, 0xff, 0xff, 0xc3,
        ];
        let f = FunctionCode::analyze(0, &wrapper, &NoData);
        let live = f.liveness().live_before(5).unwrap();
        assert!(!live.flags_live(STATUS_FLAGS), "{live}");
        assert_eq!(
            super::flags_dead_by_scan(&f, 5, RegSet(STATUS_FLAGS)),
            Some(true)
        );
        // 0: 39 f7  cmp edi, esi
        // 2: 0f 05  syscall
        // 4: 0f 9c c0  setl al
        // 7: c3     ret
        let kept = [0x39, 0xf7, 0x0f, 0x05, 0x0f, 0x9c, 0xc0, 0xc3];
        let f = FunctionCode::analyze(0, &kept, &NoData);
        let live = f.liveness().live_before(2).unwrap();
        assert!(live.flags_live(FLAG_SF | FLAG_OF), "{live}");
        assert_eq!(
            super::flags_dead_by_scan(&f, 2, RegSet(STATUS_FLAGS)),
            Some(false)
        );
    }

    #[test]
    fn flags_live_before_jcc() {
        // 0: 39 f7     cmp edi,esi
        // 2: 7c 03     jl 7
        // 4: 89 f8     mov eax,edi
        // 6: c3        ret
        // 7: 89 f0     mov eax,esi
        // 9: c3        ret
        let code = [0x39, 0xf7, 0x7c, 0x03, 0x89, 0xf8, 0xc3, 0x89, 0xf0, 0xc3];
        let f = FunctionCode::analyze(0, &code, &NoData);
        let l = f.liveness();
        let at_jl = l.live_before(2).unwrap();
        assert!(at_jl.flags_live(FLAG_SF | FLAG_OF), "{at_jl}");
        assert!(at_jl.contains(Register::RDI) && at_jl.contains(Register::RSI));
        let at_cmp = l.live_before(0).unwrap();
        assert!(!at_cmp.flags_live(STATUS_FLAGS), "{at_cmp}");
        let at_ret = l.live_before(6).unwrap();
        assert!(at_ret.contains(Register::RAX));
        // The function never writes rsi or rcx: a caller compiled with
        // -fipa-ra may keep values there across the call.
        assert!(at_ret.contains(Register::RSI) && at_ret.contains(Register::RCX));
        // After `mov eax, edi` rax is written, so it is dead before it.
        let at_mov = l.live_before(4).unwrap();
        assert!(!at_mov.contains(Register::RAX) && at_mov.contains(Register::RCX));
    }

    #[test]
    fn values_kept_across_a_call_stay_live() {
        // A loop of GCC -O2 with -fipa-ra, its counter in rcx across the call:
        // 0: 48 89 cf        mov rdi,rcx
        // 3: 48 83 c1 01     add rcx,1
        // 7: e8 00 00 00 00  call 0xc
        // c: 48 39 cb        cmp rbx,rcx
        // f: 75 ef           jne 0
        // 11: c3             ret
        let code = [
            0x48, 0x89, 0xcf, 0x48, 0x83, 0xc1, 0x01, 0xe8, 0x00, 0x00, 0x00, 0x00, 0x48, 0x39,
            0xcb, 0x75, 0xef, 0xc3,
        ];
        let f = FunctionCode::analyze(0, &code, &NoData);
        let l = f.liveness();
        assert!(l.live_before(7).unwrap().contains(Register::RCX));
        assert!(l.live_after(7).unwrap().contains(Register::RCX));
    }

    #[test]
    fn a_jump_into_another_part_keeps_every_register() {
        // A hot part handing a value in r10 to its .cold part (python3.11):
        // 0: 4c 8b 57 08     mov r10,[rdi+8]
        // 4: e9 f7 0f 00 00  jmp 0x1000
        let code = [0x4c, 0x8b, 0x57, 0x08, 0xe9, 0xf7, 0x0f, 0x00, 0x00];
        let mut f = FunctionCode::analyze(0, &code, &NoData);
        let r10 = Register::R10;
        let tail_call = f.liveness().live_before(4).unwrap();
        assert!(
            !tail_call.contains(r10),
            "a tail call reads no r10: {tail_call}"
        );
        f.set_other_parts([0x1000].into_iter().collect());
        let part = f.liveness().live_before(4).unwrap();
        assert!(part.contains(r10), "the other part may read r10: {part}");
        assert!(part.contains(Register::RAX), "{part}");
    }

    #[test]
    fn flag_scan_agrees_with_liveness() {
        // cmp edi,esi; jl 7; mov eax,edi; ret; mov eax,esi; ret
        let code = [0x39, 0xf7, 0x7c, 0x03, 0x89, 0xf8, 0xc3, 0x89, 0xf0, 0xc3];
        let f = FunctionCode::analyze(0, &code, &NoData);
        let flags = RegSet(STATUS_FLAGS);
        assert_eq!(
            super::flags_dead_by_scan(&f, 0, flags),
            Some(true),
            "cmp writes them all"
        );
        assert_eq!(
            super::flags_dead_by_scan(&f, 2, flags),
            Some(false),
            "jl reads SF and OF"
        );
        assert_eq!(
            super::flags_dead_by_scan(&f, 4, flags),
            Some(true),
            "ret comes first"
        );
        for ip in [0, 2, 4, 7] {
            let full = f.liveness().live_before(ip).unwrap();
            if super::flags_dead_by_scan(&f, ip, flags) == Some(true) {
                assert!(!full.flags_live(STATUS_FLAGS), "at {ip}");
            }
        }
    }

    #[test]
    fn a_jump_that_may_leave_keeps_a_tail_calls_arguments_live() {
        // 0: mov rsi, r12 ; 3: jmp [rip+0] ; 9: xor edi, edi ;
        // 11: xor edx, edx ; 13: xor ecx, ecx ; 15: mov eax, esi ; 17: ret
        // The function keeps the address 9 in data, so the jump may be a
        // computed `goto` to it, or a tail call with rdi, rsi and rdx
        // (cc1's `variably_modified_type_p`, whose copy lost an argument
        // to a dispatch that took it for a free register). The function
        // writes rdi, rdx and rcx, so no caller can count on them.
        let code = [
            0x4c, 0x89, 0xe6, 0xff, 0x25, 0x00, 0x00, 0x00, 0x00, 0x31, 0xff, 0x31, 0xd2, 0x31,
            0xc9, 0x89, 0xf0, 0xc3,
        ];
        let mut f = FunctionCode::analyze(0, &code, &NoData);
        f.add_computed_targets(&[9]);
        assert!(f.jump_tables().iter().any(|t| t.jump == 3 && t.elsewhere));
        let live = f.liveness().live_before(3).unwrap();
        for r in [Register::RDI, Register::RSI, Register::RDX, Register::RCX] {
            assert!(live.contains(r), "{r:?} in {live}");
        }
    }

    #[test]
    fn rdssp_keeps_its_register_live() {
        // 31 c0 xor eax,eax ; f3 48 0f 1e c8 rdsspq rax ; 48 85 c0 test rax,rax ; c3 ret
        let code = [
            0x31, 0xc0, 0xf3, 0x48, 0x0f, 0x1e, 0xc8, 0x48, 0x85, 0xc0, 0xc3,
        ];
        let f = FunctionCode::analyze(0, &code, &NoData);
        assert!(f.liveness().live_before(2).unwrap().contains(Register::RAX));
    }

    #[test]
    fn zeroing_idiom_reads_nothing() {
        // 31 c0 xor eax,eax ; c3 ret
        let f = FunctionCode::analyze(0, &[0x31, 0xc0, 0xc3], &NoData);
        let live = f.liveness().live_before(0).unwrap();
        assert!(!live.contains(Register::RAX));
    }
}
