//! The common case of the walk in a loop of its own: blocks left along
//! edges decided by one- and two-byte witnesses, linked calls (which write
//! no record) entered, and their returns.

use super::reader::Reader;
use super::walkable::{unpack, MULTI, NO_ROW};
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
        image: usize,
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
            let function = top.function as usize;
            let f = &self.functions[function];
            let w = &self.walk[function];
            let b = top.block;
            let block = &f.blocks[b];
            let call_k = block.calls.iter().position(|&c| c >= top.insn);
            let last = call_k.map_or(block.insns.len() as u32, |k| block.calls[k] + 1);
            let linked = call_k.map(|k| {
                let callee = self.callees[function][b].get(k).copied().unwrap_or(NONE);
                self.linked(image, callee)
            });
            if let Some(Some(c)) = linked {
                if self.functions[c as usize].blocks.is_empty() {
                    // A linked callee with no copy: the general walk's error.
                    return;
                }
            }
            if top.insn < last {
                let s = Segment {
                    function: top.function,
                    block: b as u32,
                    first: top.insn,
                    last,
                };
                out(s, r.at);
                top.insn = last;
            }
            match linked {
                Some(Some(c)) => {
                    let entry = self.functions[c as usize].entry;
                    stack.push(Frame::at_entry(c, entry));
                    continue;
                }
                // A call that writes records: they are the general walk's,
                // up to its return record.
                Some(None) => {
                    top.in_call = true;
                    return;
                }
                None => {}
            }
            let step = w.step[b];
            let (to, witness) = if step & MULTI == 0 {
                unpack(step)
            } else {
                let Some((x, _)) = witness_at(r.at) else {
                    return;
                };
                let row = step & !MULTI;
                let edge = if row != NO_ROW && (x as usize) < w.dense_width {
                    match w.dense[row as usize + x as usize] {
                        0 => None,
                        k => Some(unpack(w.flat[k as usize - 1])),
                    }
                } else {
                    w.decided(b, x)
                };
                let Some(edge) = edge else {
                    return;
                };
                edge
            };
            if to == w.exit && (w.part_exit[b] || top.returns_for_below) {
                return;
            }
            if witness != 0 {
                match witness_at(r.at) {
                    Some((x, n)) if x == witness => r.at += n,
                    _ => return,
                }
            }
            if to != w.exit {
                top.block = to;
                top.insn = 0;
                continue;
            }
            match self.linked(image, self.tails[function][b]) {
                // A linked tail call: the callee's frame takes this one's place.
                Some(c) if !self.functions[c as usize].blocks.is_empty() => {
                    *top = Frame::at_entry(c, self.functions[c as usize].entry);
                }
                // (A tail call to a function with no copy is the general
                // walk's error, with the witness read again there.)
                Some(_) => {
                    if witness != 0 {
                        r.at -= witness_len(witness);
                    }
                    return;
                }
                None => {
                    stack.pop();
                }
            }
        }
    }
}

/// Bytes the record of witness `w` takes.
fn witness_len(w: u32) -> usize {
    Record::Witness(w).len() as usize
}
