//! Witness stores in restartable sequences: the reservation of a
//! record's bytes with plain moves, in a critical section the kernel
//! restarts when a signal or a preemption comes inside it (`rseq(2)`,
//! registered by glibc 2.35 and later for each thread it starts).

use super::{enc, Builder, Refusal, CURSOR};
use iced_x86::{Code, Instruction, MemoryOperand, Register};

/// A thread's registered restartable sequence (`struct rseq`, which
/// glibc registers for every thread it starts), where stores arm their
/// critical section: see [`Builder::restartable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rseq {
    /// Offset from the thread pointer (`fs:`) of the `rseq_cs` word of
    /// the thread's `struct rseq`: the same for every thread of a process
    /// (glibc keeps the area at one place of its thread descriptor).
    pub cs_offset: i32,
    /// The signature the kernel checks in the four bytes before an abort
    /// handler (glibc's `RSEQ_SIG`).
    pub signature: u32,
}

impl Builder {
    /// With a restartable sequence (`self.rseq`), each reservation of
    /// `seq` (`mov r32, len; xadd fs:[CURSOR], r`) becomes
    ///
    /// ```text
    ///     nop dword [rax + SIGNATURE]    ; its last 4 bytes: the signature
    /// abort:
    ///     lea r, [descriptor]
    /// start:
    ///     mov fs:[rseq_cs], r            ; arm
    ///     mov r, fs:[CURSOR]
    ///     add qword fs:[CURSOR], len
    /// commit:
    ///     (the store)
    /// ```
    ///
    /// `xadd` cannot take part in the processor's forwarding of a store to
    /// the next load (memory renaming): one after another, the stores of a
    /// loop waited some 2 ns each on the cursor's last one. Plain moves
    /// forward at once, but a signal between the load and the `add` whose
    /// handler writes records would have them overwritten. The kernel
    /// prevents that: a thread interrupted (by a signal or by being
    /// preempted) with its pc in `[start, commit)` and its `rseq_cs`
    /// pointing at the descriptor resumes at `abort`, which arms again and
    /// reserves afresh, after whatever the handler wrote. An interruption
    /// before the arm finds `rseq_cs` stale or cleared, and the arm comes
    /// after it; one at the store finds its bytes reserved, as with `xadd`.
    pub(super) fn restartable(
        &mut self,
        seq: Vec<Instruction>,
    ) -> Result<Vec<Instruction>, Refusal> {
        let Some(rseq) = self.rseq else {
            return Ok(seq);
        };
        let with = |i: Result<Instruction, iced_x86::IcedError>| i.map_err(enc);
        let mut out: Vec<Instruction> = Vec::with_capacity(seq.len() + 4);
        let mut k = 0;
        while k < seq.len() {
            let i = seq[k];
            let reservation = i.code() == Code::Xadd_rm64_r64
                && i.memory_segment() == Register::FS
                && i.memory_base() == Register::None
                && i.memory_displacement64() == CURSOR
                && out.last().map(Instruction::code) == Some(Code::Mov_r32_imm32)
                && k + 1 < seq.len();
            if !reservation {
                out.push(i);
                k += 1;
                continue;
            }
            let Some(mov) = out.pop() else {
                unreachable!("checked above")
            };
            let len = mov.immediate32();
            let reg = i.op1_register();
            let (descriptor, literal) = self.descriptor();
            let (abort, start, commit) = (self.fake(), self.fake(), self.fake());
            let mut nop = with(Instruction::with1(
                Code::Nop_rm32,
                MemoryOperand::with_base_displ(Register::RAX, rseq.signature as i32 as i64),
            ))?;
            nop.set_ip(mov.ip());
            let mut lea = with(Instruction::with2(
                Code::Lea_r64_m,
                reg,
                MemoryOperand::with_base_displ(Register::RIP, descriptor as i64),
            ))?;
            lea.set_ip(abort);
            let mut arm = with(Instruction::with2(
                Code::Mov_rm64_r64,
                fs_word(rseq.cs_offset as i64),
                reg,
            ))?;
            arm.set_ip(start);
            let load = with(Instruction::with2(
                Code::Mov_r64_rm64,
                reg,
                fs_word(CURSOR as i64),
            ))?;
            let add = with(Instruction::with2(
                Code::Add_rm64_imm8,
                fs_word(CURSOR as i64),
                len,
            ))?;
            let mut store = seq[k + 1];
            store.set_ip(commit);
            out.extend([nop, lea, arm, load, add, store]);
            self.rseq_sites.push(RseqSite {
                literal,
                abort,
                start,
                commit,
            });
            k += 2;
        }
        Ok(out)
    }

    /// Room for a `struct rseq_cs` (32 bytes, aligned to 32) among the
    /// copy's literals: its address, and the index of its first literal.
    fn descriptor(&mut self) -> (u64, usize) {
        while !(self.at + 8 * self.literals.len() as u64).is_multiple_of(32) {
            self.literal(0);
        }
        let index = self.literals.len();
        let at = self.literal(0);
        for _ in 0..3 {
            self.literal(0);
        }
        (at, index)
    }
}

/// A store's critical section (see [`Builder::restartable`]): the index of
/// its descriptor's first literal, and the fake addresses of its abort
/// handler, its start and its commit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RseqSite {
    pub(super) literal: usize,
    abort: u64,
    start: u64,
    commit: u64,
}

/// Writes each site's `struct rseq_cs` into the copy's `bytes` (literals
/// first), given where each fake address was placed: version and flags 0,
/// `start_ip`, `post_commit_offset` (to the commit), `abort_ip`.
pub(super) fn fill_descriptors(
    sites: &[RseqSite],
    bytes: &mut [u8],
    at: u64,
    signature: u32,
    placed: impl Fn(u64) -> Option<u64>,
) -> Result<(), Refusal> {
    for s in sites {
        let (Some(abort), Some(start), Some(commit)) =
            (placed(s.abort), placed(s.start), placed(s.commit))
        else {
            return Err(Refusal::Encode(
                "a store's restartable sequence was not placed".into(),
            ));
        };
        // The kernel kills a thread whose abort handler lacks the
        // signature: check it is where the kernel will look.
        let before_abort = (abort - 4).wrapping_sub(at) as usize;
        if bytes.get(before_abort..before_abort + 4) != Some(&signature.to_le_bytes()[..]) {
            return Err(Refusal::Encode(format!(
                "the signature is not before the abort handler at {abort:#x}"
            )));
        }
        let literal_at = 8 * s.literal;
        let Some(d) = bytes.get_mut(literal_at..literal_at + 32) else {
            return Err(Refusal::Encode(
                "a store's restartable sequence has no descriptor".into(),
            ));
        };
        d[0..8].copy_from_slice(&0u64.to_le_bytes());
        d[8..16].copy_from_slice(&start.to_le_bytes());
        d[16..24].copy_from_slice(&(commit - start).to_le_bytes());
        d[24..32].copy_from_slice(&abort.to_le_bytes());
    }
    Ok(())
}

/// The 8-byte word at `fs:[offset]`.
fn fs_word(offset: i64) -> MemoryOperand {
    MemoryOperand::new(
        Register::None,
        Register::None,
        1,
        offset,
        8,
        false,
        Register::FS,
    )
}
