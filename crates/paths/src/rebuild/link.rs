//! Calls and tail calls from one copy straight into another (linking).
//!
//! A copy first calls other functions as the original did: through their
//! entry, whose 5-byte jump leads to the callee's copy, which writes its
//! entry record, and the call's return writes the return record. Once
//! every copy of a batch is in place, the instrument *links* the calls
//! whose callee is traced and leaves only by returning (or by a linked
//! tail call): the call goes straight to the callee's copy past its entry
//! record, and its return skips the return record. Regeneration knows the
//! callee from the call instruction, and its return from the call stack
//! (the paper's way), so such a call costs no record at all.
//!
//! A copy lists the branches linking may change ([`LinkSite`]): its
//! direct calls and its direct tail calls to function entries.

use super::Builder;
use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction};
use weft_code::{BlockEnd, FunctionCode};

/// A branch of a copy to a function's entry that linking may send
/// straight into that function's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkSite {
    /// The entry the branch goes to now (a runtime address; a recursive
    /// call's is the function's own).
    pub target: u64,
    /// Where its displacement lies and its width, 4 bytes or 1 (a short
    /// jump to the copy's own entry record); the branch ends with it.
    /// `None` if the encoder gave it another form (then its target is
    /// never linked).
    pub displacement: Option<(u64, u8)>,
    /// What comes back, for a call.
    pub returned: Returned,
}

/// What the return of a [`LinkSite`] writes, and how linking skips it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Returned {
    /// A tail call: nothing comes back here.
    Nothing,
    /// The return comes through the 5-byte jump at the original return
    /// address `ret` to the return record; linked, that jump goes to
    /// `after` instead.
    Spliced {
        /// The original return address.
        ret: u64,
        /// The copy's code after the record.
        after: u64,
    },
    /// The return comes into the copy, to the record at `at`; linked, a
    /// 2-byte jump there skips to `after`.
    Inline {
        /// The record's first instruction.
        at: u64,
        /// The copy's code after the record.
        after: u64,
    },
    /// Its return writes a record that stays: a resume record (after
    /// `setjmp`), or one linking could not skip. Its target is never
    /// linked.
    Kept,
}

/// A site noted while the copy is built: indexes into its instructions
/// (the body, then the stubs in order), resolved once it is encoded.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    pub(super) branch: Place,
    pub(super) target: u64,
    /// For a call: its address, where its return lands in the original,
    /// and the return record's instructions `first..end` in the body.
    pub(super) call: Option<CallMark>,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct CallMark {
    pub(super) ip: u64,
    pub(super) spliced_ret: Option<u64>,
    pub(super) record: Option<(usize, usize)>,
    pub(super) resumes: bool,
    /// The call runs at its original address (the copy jumps to it):
    /// linking changes the original `call rel32`'s displacement.
    pub(super) in_place: bool,
}

/// An instruction of the copy: in its body, or in one of its stubs.
#[derive(Debug, Clone, Copy)]
pub(super) enum Place {
    Body(usize),
    Stub(usize, usize),
}

/// The entry of the function a tail call at the end of block `bi` goes
/// to: a direct jump (or the taken side of a conditional one) out of the
/// function to an address that is not one of its other parts. A
/// conditional jump that ends the function has no tail call: its other
/// way out, falling into the next function, is an edge to `EXIT` too,
/// and regeneration could not tell the two apart.
pub fn tail_target(code: &FunctionCode, bi: usize) -> Option<u64> {
    let b = code.blocks().get(bi)?;
    if b.kind == BlockEnd::CondJump && b.last == code.instructions().len() {
        return None;
    }
    let tail = &code.instructions()[b.last - 1];
    let direct = matches!(
        tail.flow_control(),
        FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
    ) && tail.near_branch_target() != 0;
    let target = tail.near_branch_target();
    let out = target < code.start() || target >= code.end();
    (direct
        && out
        && matches!(b.kind, BlockEnd::TailCall | BlockEnd::CondJump)
        && !code.is_other_part(target))
    .then_some(target)
}

/// The entry of the function a direct call goes to.
pub fn call_target(call: &Instruction) -> Option<u64> {
    (call.code() == Code::Call_rel32_64).then(|| call.near_branch_target())
}

/// Whether every way out of the function is a return or a direct tail
/// call (what a linked callee must be: its caller's frame goes on when
/// it returns, or when the function it tail-calls does). Leaving by
/// `longjmp`, an exception or a call that never returns is fine too:
/// those write records of their own or end the thread.
pub fn leaves_by_returning(code: &FunctionCode) -> bool {
    let n = code.instructions().len();
    code.blocks().iter().enumerate().all(|(bi, b)| {
        let tail = &code.instructions()[b.last - 1];
        match b.kind {
            BlockEnd::Return | BlockEnd::Jump | BlockEnd::Trap => true,
            BlockEnd::TailCall => tail_target(code, bi).is_some(),
            BlockEnd::CondJump => {
                let t = tail.near_branch_target();
                let inside = t >= code.start() && t < code.end();
                (inside || tail_target(code, bi).is_some()) && b.last < n
            }
            BlockEnd::FallThrough => b.last < n,
            // The last instruction is a call that never returns.
            BlockEnd::End => matches!(
                tail.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            ),
            BlockEnd::Switch => code
                .jump_tables()
                .iter()
                .find(|t| t.jump == tail.ip())
                .is_some_and(|t| t.outside.is_empty() && !t.elsewhere),
            BlockEnd::IndirectJump => false,
        }
    })
}

impl Builder {
    /// Notes the branch just placed last in the body (or, with `stub`, in
    /// the last stub) as a site going to `target`.
    pub(super) fn mark_branch(&mut self, target: u64, stub: bool, call: Option<CallMark>) {
        if self.silent {
            return;
        }
        let branch = if stub {
            let k = self.stubs.len() - 1;
            Place::Stub(k, self.stubs[k].len() - 1)
        } else {
            Place::Body(self.out.len() - 1)
        };
        self.marks.push(Mark {
            branch,
            target,
            call,
        });
    }
}

/// The sites of a copy encoded at `code_at`: its instructions as given
/// to the encoder were the body (`body_len` of them), then the stubs of
/// `stub_lens`; `offsets` says where each landed in `code`. `own` is the
/// function's entry and where its copy's entry record landed (recursive
/// calls go there).
pub(super) fn resolve(
    marks: &[Mark],
    (body_len, stub_lens): (usize, &[usize]),
    code_at: u64,
    code: &[u8],
    offsets: &[u32],
    (own, entry_record): (u64, u64),
) -> Vec<LinkSite> {
    let mut stub_first = Vec::with_capacity(stub_lens.len());
    let mut at = body_len;
    for &n in stub_lens {
        stub_first.push(at);
        at += n;
    }
    let index = |p: Place| match p {
        Place::Body(k) => k,
        Place::Stub(s, k) => stub_first[s] + k,
    };
    let address = |k: usize| -> Option<u64> {
        match offsets.get(k) {
            Some(&off) if off != u32::MAX => Some(code_at + off as u64),
            Some(_) => None,
            None => Some(code_at + code.len() as u64),
        }
    };
    marks
        .iter()
        .map(|m| {
            let original = m.call.filter(|c| c.in_place).map(|c| (c.ip + 1, 4));
            let displacement = original.or_else(|| {
                address(index(m.branch)).and_then(|a| {
                    let off = (a - code_at) as usize;
                    let mut d = Decoder::with_ip(64, &code[off..], a, DecoderOptions::NONE);
                    let i = d.decode();
                    let expected = if m.target == own {
                        entry_record
                    } else {
                        m.target
                    };
                    let width = match i.code() {
                        Code::Call_rel32_64 | Code::Jmp_rel32_64 => 4,
                        Code::Jmp_rel8_64 => 1,
                        _ if i.flow_control() == FlowControl::ConditionalBranch => {
                            if i.len() == 6 {
                                4
                            } else {
                                1
                            }
                        }
                        _ => return None,
                    };
                    (i.near_branch_target() == expected)
                        .then(|| (a + i.len() as u64 - width, width as u8))
                })
            });
            let returned = match m.call {
                None => Returned::Nothing,
                Some(c) if c.resumes => Returned::Kept,
                Some(CallMark { record: None, .. }) => Returned::Kept,
                Some(CallMark {
                    spliced_ret,
                    record: Some((first, end)),
                    ..
                }) => match (address(first), address(end), spliced_ret) {
                    (_, Some(after), Some(ret)) => Returned::Spliced { ret, after },
                    (Some(at), Some(after), None) if after > at + 1 && after - at - 2 <= 127 => {
                        Returned::Inline { at, after }
                    }
                    _ => Returned::Kept,
                },
            };
            LinkSite {
                target: m.target,
                displacement,
                returned,
            }
        })
        .collect()
}
