//! The common case of the walk in a loop of its own, on the compact
//! tables ([`super::fast`]): blocks left along edges decided by
//! witnesses, linked calls (which write no record) entered, and their
//! returns, and the return and entry records of calls that write them. The top frame is kept in locals while the loop runs and
//! written back to the stack when it changes hands.

use super::fast::{single, Fast, DECIDED, EXIT, NO_COPY, NO_ENTRY, PART_EXIT};
use super::reader::Reader;
use super::{Frame, Program, Segment, NONE, UNREAD_MAX};
use crate::record::{self, Record};
use std::hint::select_unpredictable;

/// Where the top frame stands.
#[derive(Clone, Copy)]
struct Here {
    function: u32,
    block: u32,
    insn: u32,
    returns_for_below: bool,
}

impl Here {
    /// At the entry block `entry` of `function`.
    fn at_entry(function: u32, entry: u32) -> Here {
        Here {
            function,
            block: entry,
            insn: 0,
            returns_for_below: false,
        }
    }

    /// The top frame of `stack`, if the plain walk can go on in it.
    fn of(stack: &[Frame]) -> Option<Here> {
        let top = stack.last()?;
        (!top.in_call && !top.in_part).then_some(Here {
            function: top.function,
            block: top.block as u32,
            insn: top.insn,
            returns_for_below: top.returns_for_below,
        })
    }

    /// Writes where it stands back into the top frame of `stack`.
    fn store(self, stack: &mut [Frame]) {
        if let Some(top) = stack.last_mut() {
            top.function = self.function;
            top.block = self.block as usize;
            top.insn = self.insn;
        }
    }
}

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
        let Some(mut here) = Here::of(stack) else {
            return;
        };
        let mut at = r.at;
        let mut since = if at == *last_at { *unread } else { 0 };
        // Leaves the loop, the top frame already in the stack: the reader
        // as the general walk reads it.
        macro_rules! hand_over {
            () => {{
                r.at = at;
                (*unread, *last_at) = (since, at);
                return;
            }};
        }
        // Leaves the loop: the stack and reader as the general walk reads them.
        macro_rules! leave {
            () => {{
                here.store(stack);
                hand_over!();
            }};
        }
        // The top frame of the stack is in a call that writes records: its
        // return goes on in it, the entry of a traced function the call
        // reached opens that function's frame; anything else is the
        // general walk's.
        macro_rules! in_call {
            () => {{
                match record::read(bytes, at) {
                    Ok(Some((Record::Returned, n))) => {
                        at += n;
                        since = 0;
                        if let Some(top) = stack.last_mut() {
                            top.in_call = false;
                        }
                        match Here::of(stack) {
                            Some(h) => here = h,
                            None => hand_over!(),
                        }
                        continue;
                    }
                    Ok(Some((Record::Entered(id), n))) => {
                        let Some(entry) = fast.functions.get(id as usize).map(|f| f.entry) else {
                            hand_over!();
                        };
                        if entry == NO_ENTRY {
                            hand_over!();
                        }
                        at += n;
                        since = 0;
                        stack.push(Frame::at_entry(id, entry as usize));
                        here = Here::at_entry(id, entry);
                        continue;
                    }
                    _ => hand_over!(),
                }
            }};
        }
        loop {
            since += 1;
            if since > UNREAD_MAX {
                leave!();
            }
            let function = fast.functions[here.function as usize];
            let g = function.base as usize + here.block as usize;
            let block = fast.blocks[g];
            let n_calls = (block.insns >> 16 & 0x7FFF) as usize;
            let calls = match n_calls {
                0 => &[][..],
                n => &fast.calls[block.calls as usize..block.calls as usize + n],
            };
            let k = calls.iter().position(|c| c.insn >= here.insn);
            let call = k.map(|k| calls[k]);
            let last = call.map_or(block.insns & 0xFFFF, |c| c.insn + 1);
            if call.is_some_and(|c| c.callee == NO_COPY) {
                // A linked callee with no copy: the general walk's error.
                leave!();
            }
            if here.insn < last {
                // From the block's start, or from after the call before
                // (else the general table says where).
                let before = calls[..k.unwrap_or(calls.len())].last();
                let offset = match (here.insn, before) {
                    (0, _) => 0,
                    (i, Some(c)) if c.insn + 1 == i => c.after,
                    (i, _) => {
                        let f = &self.functions[here.function as usize];
                        f.blocks[here.block as usize].insns[i as usize]
                    }
                };
                let s = Segment {
                    function: here.function,
                    block: here.block,
                    first: here.insn,
                    last,
                    at: function.start + u64::from(block.start) + u64::from(offset),
                };
                out(s, at);
                here.insn = last;
            }
            match call.map(|c| c.callee) {
                // A call that writes records, up to its return record.
                Some(NONE) => {
                    here.store(stack);
                    if let Some(top) = stack.last_mut() {
                        top.in_call = true;
                    }
                    in_call!();
                }
                Some(c) => {
                    here.store(stack);
                    let entry = fast.functions[c as usize].entry;
                    stack.push(Frame::at_entry(c, entry as usize));
                    here = Here::at_entry(c, entry);
                    continue;
                }
                None => {}
            }
            // The next witness (0 for anything else), and the way out:
            // the ones the data decides are selected without a branch,
            // which the processor could not predict.
            let (x, n) = record::witness(bytes, at).unwrap_or((0, 0));
            let (to, witness) = if block.step & DECIDED == 0 {
                if x == 0 && block.step != block.alt {
                    // Another record, or the end.
                    leave!();
                }
                let first = (block.step >> 32) as u32 == x;
                single(select_unpredictable(first, block.step, block.alt))
            } else {
                match fast.decided(block.step, x).filter(|_| x != 0) {
                    Some(edge) => edge,
                    None => leave!(),
                }
            };
            if to == EXIT && (block.insns & PART_EXIT != 0 || here.returns_for_below) {
                leave!();
            }
            let read = witness != 0;
            if read & (x != witness) {
                leave!();
            }
            at += select_unpredictable(read, n, 0);
            since = select_unpredictable(read, 0, since);
            if to != EXIT {
                here.block = to;
                here.insn = 0;
                continue;
            }
            match block.tail {
                NONE => {
                    stack.pop();
                    match stack.last() {
                        None => hand_over!(),
                        // Back in untraced code a call went to.
                        Some(top) if top.in_call => in_call!(),
                        Some(_) => match Here::of(stack) {
                            Some(h) => here = h,
                            None => hand_over!(),
                        },
                    }
                }
                // (A tail call to a function with no copy is the general
                // walk's error, with the witness read again there.)
                NO_COPY => {
                    if witness != 0 {
                        at -= witness_len(witness);
                    }
                    leave!();
                }
                // A linked tail call: the callee's frame takes this one's place.
                c => {
                    let entry = fast.functions[c as usize].entry;
                    if let Some(top) = stack.last_mut() {
                        *top = Frame::at_entry(c, entry as usize);
                    }
                    here = Here::at_entry(c, entry);
                }
            }
        }
    }
}

/// Bytes the record of witness `w` takes.
fn witness_len(w: u32) -> usize {
    Record::Witness(w).len() as usize
}
