//! A traced function laid out again with its witness stores.
//!
//! The copy keeps every instruction of the original, in order, re-encoded
//! for its new address, and adds the stores of the [`record`] stream:
//!
//! * at the copy's start, the function's entry record (branches back to
//!   the first instruction skip it);
//! * on each edge the plan gives a witness: before the block's last jump,
//!   `ret` or tail call; after a conditional jump for its fall-through
//!   edge; in a stub at the copy's end for its taken edge; at the end of a
//!   block that falls through;
//! * after each call, the record that the call returned (skipped once
//!   the call is linked straight to its callee's copy: see [`link`]).
//!
//! A store is three instructions that keep every live register, and the
//! flags where they are live: `mov r32, len; xadd fs:[CURSOR], r;
//! mov [r], value`, with `r` a register liveness proves dead there (or
//! one saved below the red zone, where none is), and live flags held in
//! `rax` meanwhile (`lahf`, `seto al` if the overflow flag is live; then
//! `add al, 0x7f; sahf`). Where the process's threads registered a
//! restartable sequence, the reservation is plain moves in a critical
//! section the kernel restarts instead ([`restartable`]). The thread's
//! cursor lives in its TCB (see
//! [`CURSOR`]). A full buffer ends in a guard page: the store faults, and
//! weft's handler hands the thread a new buffer by changing `r` (see
//! `handler.rs`). `store_tests.rs` runs stores in-process.
//!
//! Calls leave the *original* return address on the stack, so that
//! unwinders, `backtrace()` and debuggers see the original caller; the
//! original return address then holds a jump back into the copy
//! ([`Rebuilt::returns`]). A call whose original instruction no jump
//! covers runs there (the copy jumps to it: the return predictor then
//! sees a real call); others push the return address and jump to the
//! callee. Where that jump cannot be written (a return
//! address within five bytes of another spliced address, or of the
//! function's end), the copy makes a real call, returning into the copy.

mod calls;
mod check;
mod emit;
mod encode;
mod link;
mod restartable;
mod splices;
#[cfg(test)]
mod store_tests;

pub use check::check;
pub use link::{call_target, leaves_by_returning, tail_target, LinkSite, Returned};
pub use restartable::Rseq;
pub use splices::{splices, Splices};

use crate::record::{Record, MAX_FUNCTION, MAX_WITNESS};
use crate::witness::{Cfg, Plan};
use iced_x86::{Code, FlowControl, Instruction, Register};
use std::collections::HashMap;
use weft_code::{BlockEnd, FunctionCode, RegSet};

/// Offset in the thread control block (`fs:`) of the thread's witness
/// cursor: glibc's `unused_vgetcpu_cache[1]` in `tcbhead_t`, which no
/// glibc since 2.14 reads or writes. Zero until the thread's first store
/// faults and weft's handler gives it a buffer.
pub const CURSOR: u64 = 0x40;

/// Registers a store may use: every GPR but `rsp`, `rbp`, `r12` and
/// `r13`, whose `[r]` forms need another encoding (the fault handler
/// decodes the store's register from a plain ModRM byte).
const CURSOR_REGS: [Register; 12] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RBX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
    Register::R14,
    Register::R15,
];

/// What a copy is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// It records its path.
    Traced,
    /// The C library's thread start, which every new thread runs first,
    /// with every signal blocked (a store that faulted there would kill
    /// the process): the copy records nothing and first calls the claim
    /// routine at `claim` (`handler.rs`) to give the thread a buffer
    /// (its TCB may be an exited thread's, cursor and all).
    ThreadStart {
        /// The claim routine's address.
        claim: u64,
    },
    /// The C library's `_Fork`: the copy records nothing, and after its
    /// system call the child's cursor is cleared (the child shares the
    /// pool; its first store faults and claims a buffer of its own) and
    /// the child's pid written at `process` (the pool's
    /// `program_process`: the child's own copy of that page).
    Fork {
        /// Where the child writes its pid.
        process: u64,
        /// Where the child keeps the cursor it inherited (the pool's
        /// `forked_cursor`, in the child's own page).
        forked: u64,
    },
    /// The C library's `pthread_sigmask` (which `sigprocmask` calls): the
    /// copy records nothing, and after its system call, a mask that
    /// blocked SIGSEGV is changed to let it through (a thread that
    /// faults with SIGSEGV blocked is killed, and a buffer handover is a
    /// fault).
    SignalMask,
}

/// Why a function is not rebuilt.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Shorter than the five bytes of the jump at its entry.
    #[error("shorter than the 5-byte jump at its entry, with no padding after it to cover")]
    TooShort,
    /// A `switch` through a jump table (table translation is to come).
    #[error("jumps through a table at {0:#x}")]
    JumpTable(u64),
    /// An indirect jump weft could not resolve.
    #[error("jumps indirectly at {0:#x} to where weft cannot tell")]
    IndirectJump(u64),
    /// An instruction that cannot be moved.
    #[error("the instruction at {0:#x} cannot be moved ({1})")]
    NotRelocatable(u64, &'static str),
    /// More witnesses than a record can number.
    #[error("needs {0} witnesses, more than {MAX_WITNESS}")]
    TooManyWitnesses(u32),
    /// The function id does not fit its record.
    #[error("function id {0} above {MAX_FUNCTION}")]
    TooManyFunctions(u32),
    /// Code elsewhere jumps into its first five bytes.
    #[error("other code jumps to {0:#x}, inside the 5 bytes of its entry's jump")]
    EnteredInside(u64),
    /// The encoder refused the copy.
    #[error("cannot encode the copy: {0}")]
    Encode(String),
}

impl Refusal {
    /// The same, its addresses the ELF virtual addresses objdump and nm
    /// show (less `bias`, where the module was loaded): weft finds them at
    /// run time, and said those of a PIE program as such.
    pub fn in_file(self, bias: u64) -> Refusal {
        match self {
            Refusal::JumpTable(a) => Refusal::JumpTable(a.wrapping_sub(bias)),
            Refusal::IndirectJump(a) => Refusal::IndirectJump(a.wrapping_sub(bias)),
            Refusal::NotRelocatable(a, why) => Refusal::NotRelocatable(a.wrapping_sub(bias), why),
            Refusal::EnteredInside(a) => Refusal::EnteredInside(a.wrapping_sub(bias)),
            other => other,
        }
    }
}

/// A function's traced copy.
#[derive(Debug, Clone)]
pub struct Rebuilt {
    /// Where the copy is placed.
    pub addr: u64,
    /// The bytes to place at `addr`: return-address literals, then code.
    pub bytes: Vec<u8>,
    /// Where the function's entry jumps to.
    pub entry: u64,
    /// For each call whose original return address gets a jump into the
    /// copy, and each re-entry: (original address, where in the copy it
    /// continues).
    pub returns: Vec<(u64, u64)>,
    /// Whether some store had no dead register and saves `rax`.
    pub saves_state: bool,
    /// Where the copy goes on past its entry record: a linked call from
    /// another copy comes here (see [`link`]).
    pub linked_entry: u64,
    /// Its branches to function entries that linking may change.
    pub sites: Vec<LinkSite>,
}

impl Rebuilt {
    /// Every original address that gets a 5-byte jump, with its target:
    /// the entry, then the return addresses.
    pub fn splices(&self, function: u64) -> Vec<(u64, u64)> {
        std::iter::once((function, self.entry))
            .chain(self.returns.iter().copied())
            .collect()
    }
}

/// Branch targets inside the copy that are not original instructions
/// (stubs, continuations) get addresses from here: far from any code.
const FAKE_IP: u64 = 0xffff_f000_0000_0000;

/// Where and how a copy is laid out.
#[derive(Debug, Clone)]
pub struct Layout<'a> {
    /// With `--data`: the registers to record (at the entry, after
    /// instructions, after calls return).
    pub data: Option<&'a crate::data::DataPlan>,
    /// The function's number in the entry records.
    pub id: u32,
    /// Where the copy is placed.
    pub at: u64,
    /// Addresses no jump may cover (code elsewhere jumps there).
    pub entered_from_outside: &'a [u64],
    /// Addresses no jump at a return address may cover: every branch
    /// target inside the function (one may be reached from inside and
    /// outside both).
    pub branch_targets: &'a [u64],
    /// Whether the copy records its path, or is one of the C library's
    /// functions that weft lays out again for threads and forks.
    pub role: Role,
    /// Also record every block (`--validate`).
    pub validate: bool,
    /// Calls that may return more than once (`setjmp`), and calls whose
    /// return address code outside jumps to as well: (the call's address,
    /// the resume place id its returns record).
    pub resumes: &'a [(u64, u32)],
    /// Places code outside jumps back into the function, from
    /// [`reentry_points`]: (address, the resume place id recorded there).
    pub reentries: &'a [(u64, u32)],
    /// Calls to functions that never return (`__cxa_throw`, `abort`):
    /// they push the original return address like a spliced call (the
    /// unwinder and debuggers look it up), with nothing to come back to.
    pub no_return: &'a [u64],
    /// (PLT stub, the function of the module it reaches), sorted: a call
    /// or tail call through such a stub is linked like a direct one.
    pub plt_callees: &'a [(u64, u64)],
    /// Bytes at the entry its jump may cover (see
    /// `weft_plan::Rebuilding::entry_room`).
    pub entry_room: u64,
    /// The process's restartable sequence, if its threads have one (the
    /// stores then reserve without `xadd`: see [`restartable`]).
    pub rseq: Option<Rseq>,
}

/// The function a direct call or jump to `target` reaches: through a PLT
/// stub of `plt_callees` (see [`Layout::plt_callees`]), its function;
/// else `target` itself.
pub fn through_plt(plt_callees: &[(u64, u64)], target: u64) -> u64 {
    plt_callees
        .binary_search_by_key(&target, |&(stub, _)| stub)
        .map_or(target, |k| plt_callees[k].1)
}

/// Lays out `code` again with the stores of `plan` (made for `cfg`,
/// [`Cfg::from_code`] of `code`), as `layout` says.
pub fn rebuild(
    code: &FunctionCode,
    cfg: &Cfg,
    plan: &Plan,
    layout: &Layout<'_>,
) -> Result<Rebuilt, Refusal> {
    let Layout {
        data,
        id,
        at,
        entered_from_outside,
        branch_targets,
        role,
        validate,
        resumes,
        reentries,
        no_return,
        plt_callees,
        entry_room,
        rseq,
    } = *layout;
    if id > MAX_FUNCTION {
        return Err(Refusal::TooManyFunctions(id));
    }
    check(code, plan, entered_from_outside, entry_room)?;
    let spliced_returns = splices(code, entered_from_outside, branch_targets).returns;
    let liveness = code.liveness();
    let live_before = |a: u64| liveness.live_before(a).unwrap_or(RegSet::ALL);
    let live_after = |a: u64| liveness.live_after(a).unwrap_or(RegSet::ALL);
    let mut b = Builder::new(
        at,
        role != Role::Traced,
        // The last instruction of the function never returns either.
        no_return
            .iter()
            .copied()
            .chain(
                code.instructions()
                    .last()
                    .filter(|i| is_call(i))
                    .map(|i| i.ip()),
            )
            .collect(),
        match role {
            Role::Fork { process, forked } => AfterSyscall::ForkChild { process, forked },
            Role::SignalMask => AfterSyscall::UnblockFaults,
            _ => AfterSyscall::Nothing,
        },
        code.start()..code.end(),
    );
    b.rseq = rseq;
    b.occupied = std::iter::once(code.start())
        .chain(spliced_returns.iter().copied())
        .chain(reentries.iter().map(|&(a, _)| a))
        .map(|a| (a, a + 5))
        .collect();
    let first = code.instructions()[0];
    // The entry record gets an address of its own: calls of the function
    // from inside it (recursion) go there, while branches to the first
    // instruction (loops) skip it.
    let entry_label = b.fake();
    b.pending_fake = Some(entry_label);
    if let Role::ThreadStart { claim } = role {
        // A new thread may have a TCB an exited thread used, cursor and
        // all. It gets a buffer of its own here, without a fault: it runs
        // with every signal blocked until the C library unblocks them.
        b.claim_buffer(claim)?;
    }
    b.store(Record::Entered(id), live_before(first.ip()))?;
    // A linked call comes in here, past the entry record.
    let linked_entry = b.out.len();
    if let Some(d) = data {
        for &g in &d.entry {
            b.store_value(g, live_before(first.ip()))?;
        }
    }
    // The registers recorded after instruction `k` of block `bi`.
    let values_after = |bi: usize, k: usize| -> &[u8] {
        data.and_then(|d| d.after.get(bi)?.get(k))
            .map_or(&[], Vec::as_slice)
    };
    b.own_entry = Some((code.start(), entry_label));
    let exit = cfg.exit();
    let outs = cfg.out_index();
    let witness_of = |from: usize, to: usize| -> Option<u32> {
        outs[from]
            .iter()
            .find(|&&e| cfg.edges[e].to == to)
            .and_then(|&e| plan.witness[e])
    };
    // A block's edges to EXIT in order: a conditional jump out of the
    // function first, then falling off the function's end (Cfg::from_code).
    let exit_witnesses = |from: usize| -> Vec<Option<u32>> {
        outs[from]
            .iter()
            .filter(|&&e| cfg.edges[e].to == exit)
            .map(|&e| plan.witness[e])
            .collect()
    };
    let mut block_starts: HashMap<u64, usize> = HashMap::new();
    for (k, blk) in code.blocks().iter().enumerate() {
        block_starts.entry(blk.start).or_insert(k);
    }
    let block_at = |addr: u64| block_starts.get(&addr).copied();
    let mut continuations: Vec<(u64, u64)> = Vec::new();
    // What a call's return records: that it returned, or, for a call
    // that may return again later (`setjmp`), where its frame resumed.
    let returned = |call: &Instruction| -> Record {
        resumes
            .iter()
            .find(|&&(ip, _)| ip == call.ip())
            .map_or(Record::Returned, |&(_, place)| Record::Resumed(place))
    };
    for (bi, blk) in code.blocks().iter().enumerate() {
        let first_out = b.out.len();
        if validate {
            b.store(Record::Block(bi as u32), live_before(blk.start))?;
        }
        let insns = &code.instructions()[blk.first..blk.last];
        let (tail, body) = insns.split_last().expect("a block has an instruction");
        for (k, i) in body.iter().enumerate() {
            b.instruction(i, &spliced_returns, &mut continuations)?;
            if is_call(i) {
                b.store_returned(i, returned(i), live_after(i.ip()))?;
            }
            for &g in values_after(bi, k) {
                b.store_value(g, live_after(i.ip()))?;
            }
        }
        // Falling off the function's end into the code after it.
        let falls_off = blk.last == code.instructions().len()
            && matches!(
                tail.flow_control(),
                FlowControl::Next
                    | FlowControl::Call
                    | FlowControl::IndirectCall
                    | FlowControl::ConditionalBranch
            );
        match blk.kind {
            BlockEnd::Jump | BlockEnd::TailCall | BlockEnd::Return => {
                let to = blk.succs.first().copied().unwrap_or(exit);
                if let Some(w) = witness_of(bi, to) {
                    b.store(Record::Witness(w), live_before(tail.ip()))?;
                }
                b.instruction(tail, &spliced_returns, &mut continuations)?;
                if let Some(t) = link::tail_target(code, bi) {
                    b.mark_branch(t, false, None);
                }
            }
            BlockEnd::CondJump => {
                let next = (!falls_off).then(|| tail.next_ip());
                let target = tail.near_branch_target();
                let taken = block_at(target).unwrap_or(exit);
                let fall = next.and_then(block_at).unwrap_or(exit);
                let exits = exit_witnesses(bi);
                let taken_w = if taken == exit {
                    exits.first().copied().flatten()
                } else {
                    witness_of(bi, taken)
                };
                let fall_w = if fall == exit {
                    exits.last().copied().flatten()
                } else {
                    witness_of(bi, fall)
                };
                let mut jcc = *tail;
                // A backward jump (a loop going round, as the compiler lays
                // loops out) whose way round writes a witness: that store
                // goes inline, on the fall-through of the inverted jump, so
                // the way round takes one jump instead of two (into a stub
                // and back).
                let inline_taken = taken_w.filter(|_| {
                    taken != exit
                        && fall != exit
                        && taken != fall
                        && !falls_off
                        && target < tail.ip()
                        && tail.is_jcc_short_or_near()
                });
                if taken == fall && taken != exit {
                    // One edge either way: its witness before the jump.
                    if let Some(w) = taken_w {
                        b.store(Record::Witness(w), live_before(tail.ip()))?;
                    }
                    b.out.push(jcc);
                } else if let (Some(w), Some(next)) = (inline_taken, next) {
                    jcc.negate_condition_code();
                    let fall_store = fall_w.map(|_| b.fake());
                    jcc.set_near_branch64(fall_store.unwrap_or(next));
                    b.out.push(jcc);
                    b.store(Record::Witness(w), live_before(target))?;
                    let mut round =
                        Instruction::with_branch(Code::Jmp_rel32_64, target).map_err(enc)?;
                    round.set_ip(0);
                    b.out.push(round);
                    if let (Some(label), Some(w)) = (fall_store, fall_w) {
                        b.pending_fake = Some(label);
                        b.store(Record::Witness(w), live_before(next))?;
                    }
                } else {
                    let tail_call = link::tail_target(code, bi).filter(|_| taken == exit);
                    if let Some(w) = taken_w {
                        let live = if taken == exit {
                            RegSet::ALL
                        } else {
                            live_before(target)
                        };
                        let stub = b.stub(Record::Witness(w), live, target)?;
                        jcc.set_near_branch64(stub);
                        if let Some(t) = tail_call {
                            b.mark_branch(t, true, None);
                        }
                    }
                    b.out.push(jcc);
                    if let (Some(t), None) = (tail_call, taken_w) {
                        b.mark_branch(t, false, None);
                    }
                    if let Some(w) = fall_w {
                        let live = next.map_or(RegSet::ALL, live_before);
                        b.store(Record::Witness(w), live)?;
                    }
                }
                if falls_off {
                    b.jump_to(tail.next_ip())?;
                }
            }
            BlockEnd::FallThrough | BlockEnd::Trap | BlockEnd::End => {
                b.instruction(tail, &spliced_returns, &mut continuations)?;
                if is_call(tail) {
                    b.store_returned(tail, returned(tail), live_after(tail.ip()))?;
                }
                for &g in values_after(bi, body.len()) {
                    b.store_value(g, live_after(tail.ip()))?;
                }
                if let Some(&to) = blk.succs.first() {
                    if let Some(w) = witness_of(bi, to) {
                        b.store(Record::Witness(w), live_before(code.blocks()[to].start))?;
                    }
                } else if falls_off {
                    if let Some(w) = exit_witnesses(bi).last().copied().flatten() {
                        b.store(Record::Witness(w), RegSet::ALL)?;
                    }
                    b.jump_to(tail.next_ip())?;
                }
            }
            BlockEnd::Switch => {
                let table = code
                    .jump_tables()
                    .iter()
                    .find(|t| t.jump == tail.ip())
                    .ok_or(Refusal::JumpTable(tail.ip()))?;
                // Cases in another part of the function take the edge to EXIT.
                let out_witness = exit_witnesses(bi).first().copied().flatten();
                // Each case with what is live where it goes: its stub
                // restores and stores for that, not for the jump (where a
                // computed `goto`, which may leave, has everything live).
                let cases: Vec<Case> = table
                    .targets
                    .iter()
                    .map(|&t| Case {
                        target: t,
                        witness: block_at(t).and_then(|to| witness_of(bi, to)),
                        live: live_before(t),
                    })
                    .chain(table.outside.iter().map(|&t| Case {
                        target: t,
                        witness: out_witness,
                        live: RegSet::ALL,
                    }))
                    .collect();
                // A computed `goto` elsewhere leaves the function.
                let elsewhere = if table.elsewhere { out_witness } else { None };
                b.switch(tail, &cases, live_before(tail.ip()), elsewhere)?;
            }
            BlockEnd::IndirectJump => unreachable!("refused above"),
        }
        // Branches to the block must reach its first instruction, store
        // included (a block that is one `jmp` with a witness before it).
        b.label_block(first_out, blk.start);
    }
    // Jumps back in from outside (another part of the function): the
    // resume record, then the block.
    for &(addr, place) in reentries {
        let stub = b.stub(Record::Resumed(place), live_before(addr), addr)?;
        continuations.push((addr, stub));
    }
    let code_at = at + 8 * b.literals.len() as u64;
    let mut all = std::mem::take(&mut b.out);
    let body_len = all.len();
    let stub_lens: Vec<usize> = b.stubs.iter().map(Vec::len).collect();
    for stub in std::mem::take(&mut b.stubs) {
        all.extend(stub);
    }
    let r = encode::encode(&all, code_at).map_err(Refusal::Encode)?;
    let mut bytes = Vec::with_capacity(8 * b.literals.len() + r.code.len());
    for &literal in &b.literals {
        bytes.extend_from_slice(&literal.to_le_bytes());
    }
    bytes.extend_from_slice(&r.code);
    let mut first_with_ip: encode::IpMap<usize> =
        encode::IpMap::with_capacity_and_hasher(all.len(), Default::default());
    for (k, i) in all.iter().enumerate().rev() {
        first_with_ip.insert(i.ip(), k);
    }
    let offset_of_fake = |fake: u64| -> Option<u64> {
        let k = *first_with_ip.get(&fake)?;
        let off = r.offsets[k];
        (off != u32::MAX).then(|| code_at + off as u64)
    };
    if let Some(rseq) = b.rseq {
        restartable::fill_descriptors(
            &b.rseq_sites,
            &mut bytes,
            at,
            rseq.signature,
            offset_of_fake,
        )?;
    }
    let mut returns = Vec::new();
    for (ret, fake) in continuations {
        let addr = offset_of_fake(fake).ok_or(Refusal::Encode(format!(
            "the continuation of the call returning to {ret:#x} was not placed"
        )))?;
        returns.push((ret, addr));
    }
    let offsets = &r.offsets;
    let linked_entry = code_at + offsets.get(linked_entry).map_or(0, |&o| o as u64);
    let mut sites = link::resolve(
        &b.marks,
        (body_len, &stub_lens),
        code_at,
        &r.code,
        offsets,
        (code.start(), code_at),
    );
    // A call through a stub of the module's own function links like a
    // direct call to it: the copy then calls the callee's copy, past the
    // PLT.
    for s in &mut sites {
        s.target = through_plt(plt_callees, s.target);
    }
    Ok(Rebuilt {
        addr: at,
        bytes,
        entry: code_at,
        returns,
        saves_state: b.saves_state,
        linked_entry,
        sites,
    })
}

/// A target of a `switch`: the witness of the edge to it, and what is
/// live there.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Case {
    target: u64,
    witness: Option<u32>,
    live: RegSet,
}

fn is_call(i: &Instruction) -> bool {
    matches!(
        i.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    )
}

/// What a copy adds after each `syscall` instruction (see [`Role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AfterSyscall {
    Nothing,
    /// In a forked child (`rax` 0): clear the cursor, write the pid.
    ForkChild {
        process: u64,
        forked: u64,
    },
    /// After `rt_sigprocmask` blocked SIGSEGV: unblock it.
    UnblockFaults,
}

pub(crate) struct Builder {
    /// Where the copy starts: its 8-byte literals, then its code.
    at: u64,
    literals: Vec<u64>,
    out: Vec<Instruction>,
    stubs: Vec<Vec<Instruction>>,
    next_fake: u64,
    saves_state: bool,
    /// The address the next store's first instruction takes (a call's
    /// continuation), instead of none.
    pending_fake: Option<u64>,
    /// (the function's start, the fake address of the copy's entry record).
    own_entry: Option<(u64, u64)>,
    /// Stores nothing (see [`Role`]).
    silent: bool,
    /// Calls that never return (see [`Layout::no_return`]).
    no_return: Vec<u64>,
    /// What follows each `syscall`.
    after_syscall: AfterSyscall,
    /// The original function's addresses.
    range: std::ops::Range<u64>,
    /// Branches linking may change (see [`link`]).
    marks: Vec<link::Mark>,
    /// Where stores arm their restartable sequence, if they do.
    rseq: Option<Rseq>,
    /// The critical sections of the copy's stores, whose descriptors are
    /// written once the copy is placed.
    rseq_sites: Vec<restartable::RseqSite>,
    /// The original's bytes weft's jumps cover (the entry's, the spliced
    /// return addresses', the re-entries'): a call there cannot run in
    /// place.
    occupied: Vec<(u64, u64)>,
}

impl Builder {
    /// A builder for a copy at `at` of the code in `range`, which stores
    /// nothing if `silent`.
    fn new(
        at: u64,
        silent: bool,
        no_return: Vec<u64>,
        after_syscall: AfterSyscall,
        range: std::ops::Range<u64>,
    ) -> Builder {
        Builder {
            at,
            literals: Vec::new(),
            out: Vec::new(),
            stubs: Vec::new(),
            next_fake: FAKE_IP,
            saves_state: false,
            pending_fake: None,
            own_entry: None,
            silent,
            no_return,
            after_syscall,
            range,
            marks: Vec::new(),
            rseq: None,
            rseq_sites: Vec::new(),
            occupied: Vec::new(),
        }
    }

    fn fake(&mut self) -> u64 {
        self.next_fake += 1;
        self.next_fake
    }

    /// The address of a new 8-byte literal holding `value`.
    fn literal(&mut self, value: u64) -> u64 {
        self.literals.push(value);
        self.at + 8 * (self.literals.len() as u64 - 1)
    }
}

pub(crate) fn enc(e: iced_x86::IcedError) -> Refusal {
    Refusal::Encode(e.to_string())
}
