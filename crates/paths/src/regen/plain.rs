//! The common case of the walk in a loop of its own, on the compact
//! tables ([`super::fast`]): blocks left along edges decided by one- and
//! two-byte witnesses, linked calls (which write no record) entered, and
//! their returns.

use super::fast::{single, Fast, DECIDED, EXIT, NO_COPY};
use super::reader::Reader;
use super::{Frame, Program, Segment, NONE, UNREAD_MAX};
use crate::record::{self, Record};

impl Program<'_> {
    /// The walk in the common case, in a loop of its own: segments up to
    /// a call or a block's end; a call to a linked function opens its
    /// frame; a block with one way out, or whose way the next witness
    /// decides, goes on; `EXIT` closes the frame (a linked tail call
    /// replaces it). Returns at anything else (a call that writes records,
    /// another record, a witness that does not fit, a frame that jumped
    /// into another part), with the stack where the general walk takes
    /// over. `unread` counts the segments since the stream last moved
    /// (from `last_at`), as the general walk does.
    pub(super) fn run_plain(
        &self,
        fast: &Fast,
        stack: &mut Vec<Frame>,
        r: &mut Reader<'_>,
        out: &mut impl FnMut(Segment, usize),
        (unread, last_at): (&mut u64, &mut usize),
    ) {
        let bytes = r.bytes;
        let witness_at = |at: usize| record::short_witness(bytes, at);
        loop {
            let Some(top) = stack.last_mut() else {
                return;
            };
            if top.in_call || top.in_part {
                return;
            }
            if r.at != *last_at {
                *last_at = r.at;
                *unread = 0;
            }
            *unread += 1;
            if *unread > UNREAD_MAX {
                return;
            }
            let g = fast.base[top.function as usize] as usize + top.block;
            let block = fast.blocks[g];
            let calls = &fast.calls[block.calls as usize..fast.blocks[g + 1].calls as usize];
            let k = calls.iter().position(|c| c.insn >= top.insn);
            let call = k.map(|k| calls[k]);
            let last = call.map_or(block.insns, |c| c.insn + 1);
            if call.is_some_and(|c| c.callee == NO_COPY) {
                // A linked callee with no copy: the general walk's error.
                return;
            }
            if top.insn < last {
                // From the block's start, or from after the call before
                // (else the general table says where).
                let before = calls[..k.unwrap_or(calls.len())].last();
                let offset = match (top.insn, before) {
                    (0, _) => 0,
                    (i, Some(c)) if c.insn + 1 == i => c.after,
                    (i, _) => {
                        let f = &self.functions[top.function as usize];
                        f.blocks[top.block].insns[i as usize]
                    }
                };
                let s = Segment {
                    function: top.function,
                    block: top.block as u32,
                    first: top.insn,
                    last,
                    at: block.start + u64::from(offset),
                };
                out(s, r.at);
                top.insn = last;
            }
            match call.map(|c| c.callee) {
                // A call that writes records: they are the general walk's,
                // up to its return record.
                Some(NONE) => {
                    top.in_call = true;
                    return;
                }
                Some(c) => {
                    stack.push(Frame::at_entry(c, fast.entry[c as usize] as usize));
                    continue;
                }
                None => {}
            }
            let (to, witness) = if block.step & DECIDED == 0 {
                single(block.step)
            } else {
                let Some((x, _)) = witness_at(r.at) else {
                    return;
                };
                let Some(edge) = fast.decided(block.step, x) else {
                    return;
                };
                edge
            };
            if to == EXIT && (block.part_exit || top.returns_for_below) {
                return;
            }
            if witness != 0 {
                match witness_at(r.at) {
                    Some((x, n)) if x == witness => r.at += n,
                    _ => return,
                }
            }
            if to != EXIT {
                top.block = to as usize;
                top.insn = 0;
                continue;
            }
            match block.tail {
                NONE => {
                    stack.pop();
                }
                // (A tail call to a function with no copy is the general
                // walk's error, with the witness read again there.)
                NO_COPY => {
                    if witness != 0 {
                        r.at -= witness_len(witness);
                    }
                    return;
                }
                // A linked tail call: the callee's frame takes this one's place.
                c => *top = Frame::at_entry(c, fast.entry[c as usize] as usize),
            }
        }
    }
}

/// Bytes the record of witness `w` takes.
fn witness_len(w: u32) -> usize {
    Record::Witness(w).len() as usize
}
