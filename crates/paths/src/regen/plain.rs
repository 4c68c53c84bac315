//! The common case of the walk in a loop of its own: a frame's blocks with
//! no call left, left along edges decided by byte witnesses.

use super::reader::Reader;
use super::walkable::{unpack, MULTI, NO_ROW};
use super::{Frame, Program, Segment, UNREAD_MAX};
use crate::record;

impl Program<'_> {
    /// The walk of `top`'s frame in the common case, in a loop of its
    /// own: blocks with no call left, left along an edge with no witness
    /// or with a byte witness that comes next. Returns at anything else
    /// (a call, an exit, another record, a witness that does not fit),
    /// with the frame where the general walk takes over. `unread` counts
    /// the segments since the stream last moved (from `last_at`), as the
    /// general walk does.
    pub(super) fn run_plain(
        &self,
        top: &mut Frame,
        r: &mut Reader<'_>,
        out: &mut impl FnMut(Segment, usize),
        (unread, last_at): (&mut u64, &mut usize),
    ) {
        let f = &self.functions[top.function as usize];
        let w = &self.walk[top.function as usize];
        let bytes = r.bytes;
        let byte_witness = |at: usize| match bytes.get(at) {
            Some(&x) if x != 0 && u32::from(x) <= record::MAX_BYTE_WITNESS => Some(u32::from(x)),
            _ => None,
        };
        loop {
            if r.at != *last_at {
                *last_at = r.at;
                *unread = 0;
            }
            *unread += 1;
            if *unread > UNREAD_MAX {
                return;
            }
            let b = top.block;
            let block = &f.blocks[b];
            if block.calls.last().is_some_and(|&c| c >= top.insn) {
                return;
            }
            let end = block.insns.len() as u32;
            if top.insn < end {
                let s = Segment {
                    function: top.function,
                    block: b as u32,
                    first: top.insn,
                    last: end,
                };
                out(s, r.at);
                top.insn = end;
            }
            let step = w.step[b];
            let (to, witness) = if step & MULTI == 0 {
                unpack(step)
            } else {
                let Some(x) = byte_witness(r.at) else {
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
            if to == w.exit {
                return;
            }
            if witness != 0 {
                if byte_witness(r.at) != Some(witness) {
                    return;
                }
                r.at += 1;
            }
            top.block = to;
            top.insn = 0;
        }
    }
}
