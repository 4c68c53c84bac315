//! The code a copy adds: witness stores, and the dispatch that replaces
//! a `switch`'s indirect jump.

use super::{enc, Builder, Case, Refusal, CURSOR, CURSOR_REGS};
use crate::record::Record;
use iced_x86::code_asm::{registers::gpr64, *};
use iced_x86::{Code, Instruction, MemoryOperand, OpKind, Register};
use weft_code::{RegSet, FLAG_OF, STATUS_FLAGS};

const SYS_RT_SIGPROCMASK: u32 = 14;
const SYS_GETPID: u32 = 39;
const SIGSEGV: u32 = 11;
/// `how` of `rt_sigprocmask`: take out of the blocked set.
const SIG_UNBLOCK: u32 = 1;

impl Builder {
    /// The store of `record` where `live` may be live, appended.
    pub(super) fn store(&mut self, record: Record, live: RegSet) -> Result<(), Refusal> {
        if self.silent {
            // Nothing to store; a pending address still needs an instruction.
            if let Some(fake) = self.pending_fake.take() {
                let mut nop = Instruction::with(Code::Nopd);
                nop.set_ip(fake);
                self.out.push(nop);
            }
            return Ok(());
        }
        let mut seq = self.store_sequence(record, live)?;
        if let Some(fake) = self.pending_fake.take() {
            seq[0].set_ip(fake);
        }
        self.out.extend(seq);
        Ok(())
    }

    /// Calls the claim routine at `claim` (see `handler.rs`) and makes the
    /// buffer it returns the thread's cursor, keeping every register and
    /// the flags; takes the pending address if any.
    pub(super) fn claim_buffer(&mut self, claim: u64) -> Result<(), Refusal> {
        let literal = self.literal(claim);
        let saved = [rax, rcx, rdx, rsi, rdi, r8, r9, r10, r11];
        let mut before = CodeAssembler::new(64).map_err(enc)?;
        let mut after = CodeAssembler::new(64).map_err(enc)?;
        (|| -> Result<(), iced_x86::IcedError> {
            before.lea(rsp, qword_ptr(rsp - RED_ZONE))?;
            for &r in &saved {
                before.push(r)?;
            }
            before.pushfq()?;
            after.mov(qword_ptr(CURSOR).fs(), rax)?;
            after.popfq()?;
            for &r in saved.iter().rev() {
                after.pop(r)?;
            }
            after.lea(rsp, qword_ptr(rsp + RED_ZONE))
        })()
        .map_err(enc)?;
        // The routine's address is a literal of the copy, read RIP-relative.
        let call = Instruction::with1(
            Code::Call_rm64,
            MemoryOperand::with_base_displ(Register::RIP, literal as i64),
        )
        .map_err(enc)?;
        let mut seq = before.take_instructions();
        seq.push(call);
        seq.extend(after.take_instructions());
        for i in seq.iter_mut() {
            i.set_ip(0);
        }
        seq[0].set_ip(self.pending_fake.take().unwrap_or(0));
        self.out.extend(seq);
        Ok(())
    }

    /// After `_Fork`'s system call: in the child (`rax` 0), keeps the
    /// parent's cursor at `forked`, clears the cursor and writes the
    /// child's pid at `process`, keeping every register and the flags.
    pub(super) fn clear_cursor_in_child(
        &mut self,
        process: u64,
        forked: u64,
    ) -> Result<(), Refusal> {
        let mut child = CodeAssembler::new(64).map_err(enc)?;
        let mut body = CodeAssembler::new(64).map_err(enc)?;
        (|| -> Result<(), iced_x86::IcedError> {
            child.test(rax, rax)?;
            body.push(rcx)?;
            body.push(r11)?;
            // The parent's cursor, for the child's first buffer to say
            // where the parent's stream stood. (This runs after each of
            // the child's system calls in `_Fork` that returns 0: the
            // later ones find the cursor cleared and keep what is there.)
            body.mov(rcx, qword_ptr(CURSOR).fs())?;
            body.mov(r11, forked)?;
            body.test(rcx, rcx)?;
            body.cmovz(rcx, qword_ptr(r11))?;
            body.mov(qword_ptr(r11), rcx)?;
            body.mov(qword_ptr(CURSOR).fs(), 0)?;
            body.mov(eax, SYS_GETPID)?;
            body.syscall()?;
            body.mov(rcx, process)?;
            body.mov(qword_ptr(rcx), rax)?;
            body.pop(r11)?;
            body.pop(rcx)?;
            body.xor(eax, eax)
        })()
        .map_err(enc)?;
        self.guarded(vec![(child, Code::Jne_rel32_64)], body)
    }

    /// After `rt_sigprocmask(how, set, old)`: if it succeeded and `set`
    /// blocked SIGSEGV (`how` not `SIG_UNBLOCK`), unblocks SIGSEGV with a
    /// second call; keeps every register and the flags.
    pub(super) fn unblock_faults(&mut self) -> Result<(), Refusal> {
        let segv = SIGSEGV - 1;
        let mut ok = CodeAssembler::new(64).map_err(enc)?;
        let mut blocks = CodeAssembler::new(64).map_err(enc)?;
        let mut has_set = CodeAssembler::new(64).map_err(enc)?;
        let mut holds_segv = CodeAssembler::new(64).map_err(enc)?;
        let mut body = CodeAssembler::new(64).map_err(enc)?;
        (|| -> Result<(), iced_x86::IcedError> {
            ok.test(rax, rax)?;
            blocks.cmp(edi, SIG_UNBLOCK)?;
            has_set.test(rsi, rsi)?;
            holds_segv.test(byte_ptr(rsi + (segv / 8) as i32), 1 << (segv % 8))?;
            for r in [rax, rcx, rdx, rsi, rdi, r10, r11] {
                body.push(r)?;
            }
            body.push(1i32 << segv)?;
            body.mov(eax, SYS_RT_SIGPROCMASK)?;
            body.mov(edi, SIG_UNBLOCK)?;
            body.mov(rsi, rsp)?;
            body.xor(edx, edx)?;
            body.mov(r10d, 8)?;
            body.syscall()?;
            body.pop(rax)?;
            for r in [r11, r10, rdi, rsi, rdx, rcx, rax] {
                body.pop(r)?;
            }
            Ok(())
        })()
        .map_err(enc)?;
        let conditions = vec![
            (ok, Code::Jne_rel32_64),
            (blocks, Code::Je_rel32_64),
            (has_set, Code::Je_rel32_64),
            (holds_segv, Code::Je_rel32_64),
        ];
        self.guarded(conditions, body)
    }

    /// Appends `body`, run only if no condition's jump (each its code
    /// followed by a jump of the code given) is taken, with the red zone
    /// and the flags kept around it.
    fn guarded(
        &mut self,
        conditions: Vec<(CodeAssembler, Code)>,
        mut body: CodeAssembler,
    ) -> Result<(), Refusal> {
        let done = self.fake();
        let mut head = CodeAssembler::new(64).map_err(enc)?;
        let mut tail = CodeAssembler::new(64).map_err(enc)?;
        (|| -> Result<(), iced_x86::IcedError> {
            head.lea(rsp, qword_ptr(rsp - RED_ZONE))?;
            head.pushfq()?;
            tail.popfq()?;
            tail.lea(rsp, qword_ptr(rsp + RED_ZONE))
        })()
        .map_err(enc)?;
        let mut seq = head.take_instructions();
        for (mut c, jump) in conditions {
            seq.extend(c.take_instructions());
            seq.push(Instruction::with_branch(jump, done).map_err(enc)?);
        }
        seq.extend(body.take_instructions());
        let mut tail = tail.take_instructions();
        for i in seq.iter_mut().chain(tail.iter_mut()) {
            i.set_ip(0);
        }
        tail[0].set_ip(done);
        self.out.extend(seq);
        self.out.extend(tail);
        Ok(())
    }

    /// `jmp to` (an address outside the copy).
    pub(super) fn jump_to(&mut self, to: u64) -> Result<(), Refusal> {
        let mut j = Instruction::with_branch(Code::Jmp_rel32_64, to).map_err(enc)?;
        j.set_ip(self.pending_fake.take().unwrap_or(0));
        self.out.push(j);
        Ok(())
    }

    /// Makes `out[first]` carry the block's address `start` (the address
    /// branches to the block go to), taking it from the instruction that
    /// had it.
    pub(super) fn label_block(&mut self, first: usize, start: u64) {
        if first >= self.out.len() || self.out[first].ip() == start {
            return;
        }
        if let Some(i) = self.out[first..].iter_mut().find(|i| i.ip() == start) {
            i.set_ip(0);
        }
        self.out[first].set_ip(start);
    }

    /// A stub at the copy's end: the store of `record`, then a jump to
    /// `target`. Returns the stub's (fake) address.
    pub(super) fn stub(
        &mut self,
        record: Record,
        live: RegSet,
        target: u64,
    ) -> Result<u64, Refusal> {
        if self.silent {
            return Ok(target);
        }
        let mut seq = self.store_sequence(record, live)?;
        let fake = self.fake();
        seq[0].set_ip(fake);
        seq.push(Instruction::with_branch(Code::Jmp_rel32_64, target).map_err(enc)?);
        self.stubs.push(seq);
        Ok(fake)
    }

    pub(super) fn store_sequence(
        &mut self,
        record: Record,
        live: RegSet,
    ) -> Result<Vec<Instruction>, Refusal> {
        // Live flags wait in `rax` while the store runs: `lahf` puts SF,
        // ZF, AF, PF and CF in `ah`, `seto al` the overflow flag if it is
        // live, and `add al, 0x7f; sahf` puts them back. (`pushfq` and
        // `popfq` did this at tens of cycles a store.)
        let flags = live.flags_live(STATUS_FLAGS);
        let overflow = flags && live.flags_live(FLAG_OF);
        let holds_flags = |r: Register| flags && r == Register::RAX;
        let dead = CURSOR_REGS
            .iter()
            .copied()
            .find(|&r| !live.contains(r) && !holds_flags(r));
        let (reg, save) = match dead {
            Some(r) => (r, false),
            None if flags => (Register::RCX, true),
            None => (Register::RAX, true),
        };
        let save_rax = flags && live.contains(Register::RAX);
        let below = save || save_rax;
        self.saves_state |= below;
        // Built as instructions, not assembled: a large program has
        // hundreds of thousands of stores.
        let with = |i: Result<Instruction, iced_x86::IcedError>| i.map_err(enc);
        let mut seq = Vec::with_capacity(12);
        if below {
            seq.push(lea_rsp(-RED_ZONE)?);
        }
        if save_rax {
            seq.push(with(Instruction::with1(Code::Push_r64, Register::RAX))?);
        }
        if save {
            seq.push(with(Instruction::with1(Code::Push_r64, reg))?);
        }
        if flags {
            seq.push(Instruction::with(Code::Lahf));
        }
        if overflow {
            seq.push(with(Instruction::with1(Code::Seto_rm8, Register::AL))?);
        }
        // `mov r32, len; xadd fs:[CURSOR], r` (see `reserve`).
        let low = with(Instruction::with2(
            Code::Mov_r32_imm32,
            reg32(reg),
            record.len(),
        ))?;
        let cursor = MemoryOperand::new(
            Register::None,
            Register::None,
            1,
            CURSOR as i64,
            8,
            false,
            Register::FS,
        );
        seq.push(low);
        seq.push(with(Instruction::with2(Code::Xadd_rm64_r64, cursor, reg))?);
        let at = MemoryOperand::with_base(reg);
        seq.push(match record.store_width() {
            1 => with(Instruction::with2(Code::Mov_rm8_imm8, at, record.value()))?,
            2 => with(Instruction::with2(Code::Mov_rm16_imm16, at, record.value()))?,
            _ => with(Instruction::with2(Code::Mov_rm32_imm32, at, record.value()))?,
        });
        if overflow {
            // 1 + 0x7f overflows, 0 + 0x7f does not; `sahf` then sets the
            // other flags and leaves OF.
            seq.push(with(Instruction::with2(
                Code::Add_rm8_imm8,
                Register::AL,
                0x7f_u32,
            ))?);
        }
        if flags {
            seq.push(Instruction::with(Code::Sahf));
        }
        if save {
            seq.push(with(Instruction::with1(Code::Pop_r64, reg))?);
        }
        if save_rax {
            seq.push(with(Instruction::with1(Code::Pop_r64, Register::RAX))?);
        }
        if below {
            seq.push(lea_rsp(RED_ZONE)?);
        }
        for i in seq.iter_mut() {
            i.set_ip(0);
        }
        self.restartable(seq)
    }
}

/// The 32-bit register of a 64-bit one.
fn reg32(reg: Register) -> Register {
    reg.full_register32()
}

impl Builder {
    /// Appends the store of register `g`'s value (`--data`): its 8 bytes
    /// at the cursor's byte 1, then the tag at byte 0, so that only the
    /// first store can reach the guard page (the fault handler knows its
    /// form: `mov [r+1], reg` right after the cursor's load), and a
    /// buffer holds no tag without its value. Registers and flags are
    /// kept; `rsp` is stored as it was before the sequence.
    pub(super) fn store_value(&mut self, g: u8, live: RegSet) -> Result<(), Refusal> {
        if self.silent {
            return self.store(Record::Value(0), live);
        }
        let value = gpr64_of(g);
        let dead = CURSOR_REGS
            .iter()
            .copied()
            .find(|&r| !live.contains(r) && asm_reg(r) != value);
        let (reg, save) = match dead {
            Some(r) => (r, false),
            None if g == 0 => (Register::RCX, true),
            None => (Register::RAX, true),
        };
        self.saves_state |= save;
        let r = asm_reg(reg);
        // The reservation changes the flags: they are kept if live, or if
        // rsp, stored below what the program had, must be corrected.
        let flags = live.flags_live(STATUS_FLAGS) || (value == gpr64::rsp && save);
        let below = if save || flags { RED_ZONE } else { 0 }
            + if save { 8 } else { 0 }
            + if flags { 8 } else { 0 };
        let mut a = CodeAssembler::new(64).map_err(enc)?;
        keeping(&mut a, save.then_some(r), flags, |a| {
            reserve(a, r, 9)?;
            a.mov(qword_ptr(r + 1), value)?;
            if value == gpr64::rsp && below != 0 {
                a.add(qword_ptr(r + 1), below)?;
            }
            a.mov(byte_ptr(r), crate::record::VALUE as u32)
        })
        .map_err(enc)?;
        let mut seq = a.take_instructions();
        for i in seq.iter_mut() {
            i.set_ip(0);
        }
        let mut seq = self.restartable(seq)?;
        if let Some(fake) = self.pending_fake.take() {
            seq[0].set_ip(fake);
        }
        self.out.extend(seq);
        Ok(())
    }
}

/// Appends `body` with register `saved` (if any) and the flags (if
/// `flags`) kept around it, on the stack below the red zone, where a leaf
/// function may keep data.
fn keeping(
    a: &mut CodeAssembler,
    saved: Option<AsmRegister64>,
    flags: bool,
    body: impl FnOnce(&mut CodeAssembler) -> Result<(), iced_x86::IcedError>,
) -> Result<(), iced_x86::IcedError> {
    let below = saved.is_some() || flags;
    if below {
        a.lea(rsp, qword_ptr(rsp - RED_ZONE))?;
    }
    if let Some(r) = saved {
        a.push(r)?;
    }
    if flags {
        a.pushfq()?;
    }
    body(a)?;
    if flags {
        a.popfq()?;
    }
    if let Some(r) = saved {
        a.pop(r)?;
    }
    if below {
        a.lea(rsp, qword_ptr(rsp + RED_ZONE))?;
    }
    Ok(())
}

/// Reserves `len` bytes of the thread's buffer into `r` in one
/// instruction: `mov r, len; xadd fs:[CURSOR], r` (`r` = the record's
/// place, the TCB's cursor past it). A signal that comes before the record
/// is written finds the cursor past it already: its handler's records go
/// after it, never over it. The flags change.
fn reserve(a: &mut CodeAssembler, r: AsmRegister64, len: u32) -> Result<(), iced_x86::IcedError> {
    // `mov r32, imm32` (zero-extending): 5 or 6 bytes, not `movabs`'s 10.
    a.mov(low32(r), len)?;
    a.xadd(qword_ptr(CURSOR).fs(), r)
}

/// The low 32 bits of a 64-bit register.
fn low32(r: AsmRegister64) -> AsmRegister32 {
    use iced_x86::code_asm::registers::gpr32::*;
    const GPR32: [AsmRegister32; 16] = [
        eax, ecx, edx, ebx, esp, ebp, esi, edi, r8d, r9d, r10d, r11d, r12d, r13d, r14d, r15d,
    ];
    GPR64.iter().position(|&x| x == r).map_or(eax, |k| GPR32[k])
}

/// The 64-bit registers, numbered as x86 encodes them.
const GPR64: [AsmRegister64; 16] = {
    use gpr64::*;
    [
        rax, rcx, rdx, rbx, rsp, rbp, rsi, rdi, r8, r9, r10, r11, r12, r13, r14, r15,
    ]
};

/// The 64-bit register numbered `g` as x86 encodes it.
fn gpr64_of(g: u8) -> AsmRegister64 {
    GPR64[g as usize & 15]
}

/// Bytes below `rsp` that leaf functions may use (the System V red zone).
const RED_ZONE: i32 = 128;

fn asm_reg(reg: Register) -> AsmRegister64 {
    match reg {
        Register::RAX => gpr64::rax,
        Register::RCX => gpr64::rcx,
        Register::RDX => gpr64::rdx,
        Register::RBX => gpr64::rbx,
        Register::RSI => gpr64::rsi,
        Register::RDI => gpr64::rdi,
        Register::R8 => gpr64::r8,
        Register::R9 => gpr64::r9,
        Register::R10 => gpr64::r10,
        Register::R11 => gpr64::r11,
        Register::R14 => gpr64::r14,
        _ => gpr64::r15,
    }
}

impl Builder {
    /// Replaces a `switch`'s indirect jump (`jmp reg`, or `jmp [table+i*8]`)
    /// by a binary search over its targets (the original addresses, kept
    /// as literals) leading to stubs that write the taken edge's witness
    /// and jump to the target's copy. A target outside the table goes to
    /// the original jump (and runs untraced), writing `elsewhere`'s witness
    /// first if given (the way out of a computed `goto`). `cases` are the
    /// targets, the witness of the edge to each and what is live there;
    /// `live` what is live before the jump. A case's stub restores the
    /// flags only if they are live at its target (else it drops their
    /// saved copy), and its store keeps what
    /// is live there.
    pub(super) fn switch(
        &mut self,
        jmp: &Instruction,
        cases: &[Case],
        live: RegSet,
        elsewhere: Option<u32>,
    ) -> Result<(), Refusal> {
        let flags = live.flags_live(STATUS_FLAGS);
        let memory = jmp.op0_kind() == OpKind::Memory;
        let (reg, push_scratch) = if memory {
            match CURSOR_REGS.iter().copied().find(|&r| !live.contains(r)) {
                Some(r) => (r, false),
                None => (Register::RAX, true),
            }
        } else {
            (jmp.op0_register(), false)
        };
        let below = flags || push_scratch;
        self.saves_state |= below;
        let mut pre = Vec::new();
        if below {
            pre.push(lea_rsp(-RED_ZONE)?);
        }
        if push_scratch {
            pre.push(Instruction::with1(Code::Push_r64, Register::RAX).map_err(enc)?);
        }
        if flags {
            pre.extend(weft_code::save_status_flags());
        }
        if memory {
            let mem = MemoryOperand::new(
                jmp.memory_base(),
                jmp.memory_index(),
                jmp.memory_index_scale(),
                jmp.memory_displacement64() as i64,
                jmp.memory_displ_size(),
                false,
                jmp.segment_prefix(),
            );
            pre.push(Instruction::with2(Code::Mov_r64_rm64, reg, mem).map_err(enc)?);
        }
        // What undoes `pre`, for a target where the flags are live or not.
        let restore = |flags_live: bool| -> Result<Vec<Instruction>, Refusal> {
            let mut seq = Vec::new();
            if flags {
                if flags_live {
                    seq.extend(weft_code::restore_status_flags());
                } else {
                    seq.push(lea_rsp(8)?);
                }
            }
            if push_scratch {
                seq.push(Instruction::with1(Code::Pop_r64, Register::RAX).map_err(enc)?);
            }
            if below {
                seq.push(lea_rsp(RED_ZONE)?);
            }
            Ok(seq)
        };
        let mut sorted: Vec<Case> = cases.to_vec();
        sorted.sort_unstable_by_key(|c| c.target);
        let mut arms = Vec::with_capacity(sorted.len());
        for case in &sorted {
            let literal = self.literal(case.target);
            let label = self.fake();
            let mut stub = restore(case.live.flags_live(STATUS_FLAGS))?;
            if let (Some(w), false) = (case.witness, self.silent) {
                stub.extend(self.store_sequence(Record::Witness(w), case.live)?);
            }
            stub.push(Instruction::with_branch(Code::Jmp_rel32_64, case.target).map_err(enc)?);
            stub[0].set_ip(label);
            self.stubs.push(stub);
            arms.push((literal, label));
        }
        let fallback = self.fake();
        let mut tail = restore(true)?;
        // A target the table does not hold: the witness of the way out, if
        // the jump may leave the function (a computed `goto`).
        if let (Some(w), false) = (elsewhere, self.silent) {
            tail.extend(self.store_sequence(Record::Witness(w), live)?);
        }
        let mut original = *jmp;
        original.set_ip(0);
        tail.push(original);
        tail[0].set_ip(fallback);
        self.stubs.push(tail);
        for i in pre.iter_mut() {
            i.set_ip(0);
        }
        self.out.extend(pre);
        let mut chain = Vec::new();
        self.search(&mut chain, reg, &arms, fallback)?;
        self.out.extend(chain);
        Ok(())
    }

    /// Compares `reg` with the arms' literals (sorted by value) in a binary
    /// search; equal goes to the arm's label, none to `fallback`.
    fn search(
        &mut self,
        seq: &mut Vec<Instruction>,
        reg: Register,
        arms: &[(u64, u64)],
        fallback: u64,
    ) -> Result<(), Refusal> {
        let cmp = |literal: u64| {
            Instruction::with2(
                Code::Cmp_r64_rm64,
                reg,
                MemoryOperand::with_base_displ(Register::RIP, literal as i64),
            )
            .map_err(enc)
        };
        let branch = |code: Code, to: u64| Instruction::with_branch(code, to).map_err(enc);
        if arms.len() <= 3 {
            for &(literal, label) in arms {
                seq.push(cmp(literal)?);
                seq.push(branch(Code::Je_rel32_64, label)?);
            }
            seq.push(branch(Code::Jmp_rel32_64, fallback)?);
            return Ok(());
        }
        let mid = arms.len() / 2;
        let (literal, label) = arms[mid];
        let left = self.fake();
        seq.push(cmp(literal)?);
        seq.push(branch(Code::Je_rel32_64, label)?);
        seq.push(branch(Code::Jb_rel32_64, left)?);
        self.search(seq, reg, &arms[mid + 1..], fallback)?;
        let first_left = seq.len();
        self.search(seq, reg, &arms[..mid], fallback)?;
        seq[first_left].set_ip(left);
        Ok(())
    }
}

/// `lea rsp, [rsp + by]`: moves the stack pointer without touching flags.
fn lea_rsp(by: i32) -> Result<Instruction, Refusal> {
    Instruction::with2(
        Code::Lea_r64_m,
        Register::RSP,
        MemoryOperand::with_base_displ(Register::RSP, by as i64),
    )
    .map_err(enc)
}
