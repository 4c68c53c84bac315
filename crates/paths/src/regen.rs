//! Regeneration: a thread's witness stream walked through the CFGs of the
//! traced functions, giving back every stretch of code it ran.
//!
//! A frame per traced call is kept on a stack. Within a frame the walk
//! follows the CFG: a block with one way out takes it (reading its
//! witness, if it has one); a block with several reads ahead the next
//! witness and takes the edge along which it can come next (the plan made
//! those sets disjoint), consuming it if it is the edge's own. At a call,
//! the records that follow belong to it until the call's `RETURNED`
//! record: an `ENTERED` record opens the frame of a traced function it
//! reached (the callee, or a callback of an untraced one). `EXIT` closes
//! the frame. A forked child's stream starts with the frames its parent
//! had at the fork ([`Program::inherited`]); another stream that starts
//! inside a call is read from its first `ENTERED` record at the top. A `RESUMED` record (a
//! `setjmp` returning, perhaps through a `longjmp` that skipped frames)
//! drops the frames above the innermost one of its function and goes on
//! after its call.
//!
//! A trace recorded with `--validate` also holds a record per block run:
//! each block regeneration reaches is checked against it, and the first
//! difference is the error.
//!
//! A direct call or tail call to a function its process image linked
//! (`ImageLoads::linked`, see `rebuild::link`) writes no record: the
//! callee's frame opens at the call (or replaces the frame at the tail
//! call), and the caller goes on when it returns.
//!
//! Each stretch is a [`Segment`]: instructions of one block from its start
//! or from just after a call, up to its end or a call.

use crate::data::{self, Access, Regs};
use crate::instrument::{FunctionInfo, ImageLoads};
mod fast;
mod inherit;
mod plain;
mod reader;
#[cfg(test)]
mod tests;
mod walkable;

use crate::record::Record;
use reader::Reader;
use std::collections::HashMap;
use walkable::{walkable, Walkable};

/// Instructions run without a break: `block`'s instructions
/// `first..last` (indexes into [`crate::instrument::BlockInfo::insns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// The function (index into the table).
    pub function: u32,
    /// The block.
    pub block: u32,
    /// First instruction.
    pub first: u32,
    /// One past the last.
    pub last: u32,
    /// ELF virtual address of the first.
    pub at: u64,
}

/// Why a stream cannot be regenerated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("at byte {offset} of the thread's stream: {what}")]
pub struct RegenError {
    /// Offset in the thread's stream (its buffers, in order).
    pub offset: usize,
    /// What was wrong.
    pub what: String,
}

/// The traced functions, prepared for regeneration.
pub struct Program<'a> {
    functions: &'a [FunctionInfo],
    walk: Vec<Walkable>,
    /// Resume place id → (function, block, first instruction to run).
    resumes: HashMap<u32, (u32, usize, u32)>,
    /// The resume places that are ways back in from another part.
    reentries: std::collections::HashSet<u32>,
    /// Landing pads: resume place → the function whose frame catches.
    landing_pads: HashMap<u32, u32>,
    validate: bool,
    /// Per function and block, for each call: the id of the traced
    /// function a direct call reaches, or [`NONE`].
    callees: Vec<Vec<Box<[u32]>>>,
    /// Per function and block: the id of the traced function its tail
    /// call reaches, or [`NONE`].
    tails: Vec<Vec<u32>>,
    /// Per process image, per function id: whether it is linked.
    linked: Vec<Vec<bool>>,
    /// Where the streams hold witnesses and calls only (no block records,
    /// no register values), most of the walk takes [`Program::run_plain`],
    /// with these tables per process image; otherwise there are none.
    fast: Vec<fast::Fast>,
}

/// No function.
const NONE: u32 = u32::MAX;

/// Segments a walk may give without the stream moving before the table
/// is taken for damaged (edges without witnesses in a cycle).
const UNREAD_MAX: u64 = 100_000_000;

/// The frames a forked child's stream starts in: its parent's when it
/// forked (see [`Program::inherited`]).
#[derive(Clone)]
pub struct Inherited(Vec<Frame>);

/// What a regenerated stream held besides its code.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Summary {
    /// Records before the first `ENTERED` (a stream that began inside a
    /// call), passed over.
    pub skipped: usize,
    /// Blocks checked against their own records (`--validate`).
    pub checked: u64,
}

impl<'a> Program<'a> {
    /// Prepares the functions of a trace's table (ids are indexes) for the
    /// process images `images` (the streams of image `k` are regenerated
    /// with its linked functions); with `validate`, the streams hold a
    /// record per block, checked.
    pub fn new(
        functions: &'a [FunctionInfo],
        images: &[ImageLoads],
        validate: bool,
    ) -> Program<'a> {
        let plain = !validate && functions.iter().all(|f| f.data.is_none());
        let walk: Vec<Walkable> = functions.iter().map(|f| walkable(f, !plain)).collect();
        let resumes = functions
            .iter()
            .flat_map(|f| {
                f.resumes.iter().map(|r| {
                    let first = if r.block_start { 0 } else { r.insn + 1 };
                    (r.id, (f.id, r.block, first))
                })
            })
            .collect();
        let reentries = functions
            .iter()
            .flat_map(|f| f.resumes.iter().filter(|r| r.block_start).map(|r| r.id))
            .collect();
        let by_place: HashMap<(&str, u64), u32> = functions
            .iter()
            .map(|f| ((f.path.as_str(), f.vaddr), f.id))
            .collect();
        let landing_pads = functions
            .iter()
            .flat_map(|f| {
                let by_place = &by_place;
                f.resumes.iter().filter_map(move |r| {
                    let owner = r.unwound_to?;
                    let id = by_place.get(&(f.path.as_str(), owner)).copied();
                    Some((r.id, id.unwrap_or(f.id)))
                })
            })
            .collect();
        let id_at = |f: &FunctionInfo, vaddr: u64| -> u32 {
            if vaddr == 0 {
                return NONE;
            }
            by_place
                .get(&(f.path.as_str(), vaddr))
                .copied()
                .unwrap_or(NONE)
        };
        let callees: Vec<Vec<Box<[u32]>>> = functions
            .iter()
            .map(|f| {
                f.blocks
                    .iter()
                    .map(|b| b.callees.iter().map(|&v| id_at(f, v)).collect())
                    .collect()
            })
            .collect();
        let tails: Vec<Vec<u32>> = functions
            .iter()
            .map(|f| f.blocks.iter().map(|b| id_at(f, b.tail)).collect())
            .collect();
        let linked: Vec<Vec<bool>> = images
            .iter()
            .map(|image| {
                let mut set = vec![false; functions.len()];
                for &id in &image.linked {
                    if let Some(x) = set.get_mut(id as usize) {
                        *x = true;
                    }
                }
                set
            })
            .collect();
        let fast = if plain {
            linked
                .iter()
                .map(|set| fast::Fast::new(functions, &walk, (&callees, &tails), set))
                .collect::<Option<_>>()
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        Program {
            fast,
            functions,
            walk,
            resumes,
            reentries,
            landing_pads,
            validate,
            callees,
            tails,
            linked,
        }
    }

    /// The function a linked call or tail call reaches: `callee` if
    /// process image `image` linked it.
    fn linked(&self, image: usize, callee: u32) -> Option<u32> {
        let set = self.linked.get(image)?;
        set.get(callee as usize).copied()?.then_some(callee)
    }

    /// The function table.
    pub fn functions(&self) -> &'a [FunctionInfo] {
        self.functions
    }

    /// Walks `stream`, a thread's of process image `image`, calling `out`
    /// for every segment in the order run.
    pub fn regenerate(
        &self,
        image: usize,
        stream: &[u8],
        mut out: impl FnMut(Segment),
    ) -> Result<Summary, RegenError> {
        self.regenerate_at(image, stream, None, |s, _| out(s))
    }

    /// [`Program::regenerate`], giving `out` with each segment the bytes
    /// of the stream read before it: the records up to there decided it,
    /// so it ran after the last of them was written (and, as far as a
    /// cut of the stream can tell, before the next one).
    pub fn regenerate_at(
        &self,
        image: usize,
        stream: &[u8],
        from: Option<&Inherited>,
        out: impl FnMut(Segment, usize),
    ) -> Result<Summary, RegenError> {
        let mut stack = from.map_or_else(Vec::new, |f| f.0.clone());
        self.walk(image, stream, out, None::<(&[u64], fn(Access))>, &mut stack)
    }

    /// [`Program::regenerate_at`] with data addresses (`--data`): `data`
    /// gets every access, before the segment holding its instruction;
    /// `biases` are the load biases of the functions' modules (by id) in
    /// the stream's process image.
    pub fn regenerate_data(
        &self,
        image: usize,
        stream: &[u8],
        (biases, from): (&[u64], Option<&Inherited>),
        out: impl FnMut(Segment, usize),
        data: impl FnMut(Access),
    ) -> Result<Summary, RegenError> {
        let mut stack = from.map_or_else(Vec::new, |f| f.0.clone());
        self.walk(image, stream, out, Some((biases, data)), &mut stack)
    }

    fn walk<D: FnMut(Access)>(
        &self,
        image: usize,
        stream: &[u8],
        mut out: impl FnMut(Segment, usize),
        mut data: Option<(&[u64], D)>,
        stack: &mut Vec<Frame>,
    ) -> Result<Summary, RegenError> {
        let mut r = Reader {
            bytes: stream,
            at: 0,
        };
        let mut skipped = 0usize;
        let mut checked = 0u64;
        let done = |skipped, checked| Ok(Summary { skipped, checked });
        // Segments since the last record read: a walk that goes on without
        // reading (edges without witnesses in a cycle) is a damaged table.
        let mut unread = 0u64;
        let mut last_at = 0usize;
        loop {
            if r.at != last_at {
                last_at = r.at;
                unread = 0;
            }
            unread += 1;
            if unread > UNREAD_MAX {
                return Err(r.error(
                    "regeneration goes round without reading a witness (a damaged table)".into(),
                ));
            }
            if let Some(fast) = self.fast.get(image) {
                self.run_plain(fast, stack, &mut r, &mut out, (&mut unread, &mut last_at));
                if unread > UNREAD_MAX {
                    return Err(r.error(
                        "regeneration goes round without reading a witness (a damaged table)"
                            .into(),
                    ));
                }
            }
            let Some(top) = stack.last_mut() else {
                match r.next()? {
                    None => return done(skipped, checked),
                    Some(Record::Entered(id)) => {
                        stack.push(self.enter(id, &mut r)?);
                        continue;
                    }
                    Some(Record::Resumed(id)) => {
                        self.resume(stack, id, &r)?;
                        continue;
                    }
                    Some(_) => {
                        skipped += 1;
                        continue;
                    }
                }
            };
            let f = &self.functions[top.function as usize];
            let w = &self.walk[top.function as usize];
            if top.in_part {
                match r.peek_raw()? {
                    None => return done(skipped, checked),
                    Some(Record::Resumed(id)) => {
                        r.next()?;
                        self.resume(stack, id, &r)?;
                    }
                    Some(Record::Entered(id)) => {
                        r.next()?;
                        // The part itself, or a tail call it makes: its
                        // return is the function's.
                        let mut frame = self.enter(id, &mut r)?;
                        frame.returns_for_below = true;
                        stack.push(frame);
                    }
                    // The other part returned for the function: the caller's.
                    Some(Record::Returned) => {
                        stack.pop();
                    }
                    Some(other) => {
                        return Err(r.error(format!(
                            "{other} after {} jumped into another part of itself",
                            f.name
                        )))
                    }
                }
                continue;
            }
            if top.in_call {
                match r.next()? {
                    None => return done(skipped, checked),
                    Some(Record::Returned) => top.in_call = false,
                    Some(Record::Entered(id)) => {
                        let frame = self.enter(id, &mut r)?;
                        stack.push(frame);
                        continue;
                    }
                    Some(Record::Resumed(id)) => {
                        self.resume(stack, id, &r)?;
                        continue;
                    }
                    Some(other) => {
                        return Err(r.error(format!(
                            "{other} where a call made by {} should return",
                            f.name
                        )))
                    }
                }
            }
            let block = &f.blocks[top.block];
            let end = block.insns.len() as u32;
            let call_k = block.calls.iter().position(|&c| c >= top.insn);
            let call = call_k.map(|k| block.calls[k] + 1);
            let last = call.unwrap_or(end);
            if self.validate && top.insn == 0 {
                match r.next()? {
                    Some(Record::Block(b)) if b as usize == top.block => checked += 1,
                    Some(Record::Entered(id)) => {
                        stack.push(self.signal_handler(id, &mut r)?);
                        continue;
                    }
                    None => return done(skipped, checked),
                    Some(Record::Block(b)) => {
                        let ran = f
                            .blocks
                            .get(b as usize)
                            .map_or(format!("block {b}"), |x| format!("{:#x}", x.start));
                        return Err(r.error(format!(
                            "first difference after {checked} blocks: the thread ran {ran} of \
                             {}, regeneration gives {:#x}",
                            f.name, block.start
                        )));
                    }
                    Some(other) => {
                        return Err(r.error(format!(
                            "first difference after {checked} blocks: the thread recorded \
                             {other} where regeneration enters {:#x} of {}",
                            block.start, f.name
                        )))
                    }
                }
            }
            if top.insn < last {
                self.data_of_segment(top, (top.insn, last), &mut r, &mut data)?;
                out(
                    Segment {
                        function: top.function,
                        block: top.block as u32,
                        first: top.insn,
                        last,
                        at: block.start + u64::from(block.insns[top.insn as usize]),
                    },
                    r.at,
                );
            }
            top.insn = last;
            if let Some(k) = call_k {
                let callee = self.callees[top.function as usize][top.block]
                    .get(k)
                    .copied()
                    .unwrap_or(NONE);
                match self.linked(image, callee) {
                    Some(callee) => stack.push(self.enter(callee, &mut r)?),
                    None => top.in_call = true,
                }
                continue;
            }
            // The block ends (its call, if it ends with one, returned):
            // the registers recorded after that call, then which way?
            self.data_after_last_call(top, &mut r)?;
            let outs = &w.outs[top.block];
            let (to, witness) = match outs.as_slice() {
                [] => {
                    return Err(r.error(format!(
                        "{} left block {:#x}, which has no way out",
                        f.name, block.start
                    )))
                }
                [only] => *only,
                _ => {
                    let upcoming = r.peek_past_blocks()?;
                    match upcoming {
                        Some(Record::Witness(x)) => match w.decided(top.block, x) {
                            Some(edge) => edge,
                            None => {
                                return Err(r.error(format!(
                                    "witness {x} cannot follow block {:#x} of {}",
                                    block.start, f.name
                                )))
                            }
                        },
                        Some(Record::Resumed(id)) => {
                            // A signal handler's longjmp, out of this frame
                            // (block records before it are the handler's).
                            while !matches!(r.next()?, Some(Record::Resumed(_)) | None) {}
                            self.resume(stack, id, &r)?;
                            continue;
                        }
                        Some(Record::Entered(id)) => match r.peek_raw()? {
                            // (--validate) The frame went on along an edge
                            // without a witness before a signal came.
                            Some(Record::Block(b)) => {
                                match outs.iter().find(|&&(to, w)| to == b as usize && w == 0) {
                                    Some(&edge) => edge,
                                    None => {
                                        return Err(r.error(format!(
                                            "first difference after {checked} blocks: the \
                                             thread ran block {b} of {} after {:#x}",
                                            f.name, block.start
                                        )))
                                    }
                                }
                            }
                            _ => {
                                r.next()?;
                                stack.push(self.signal_handler(id, &mut r)?);
                                continue;
                            }
                        },
                        None => return done(skipped, checked),
                        Some(other) => {
                            return Err(r.error(format!(
                                "{other} where {} decides at block {:#x}",
                                f.name, block.start
                            )))
                        }
                    }
                }
            };
            if witness != 0 {
                match r.next()? {
                    Some(Record::Witness(x)) if x == witness => {}
                    Some(Record::Entered(id)) => {
                        stack.push(self.signal_handler(id, &mut r)?);
                        continue;
                    }
                    None => return done(skipped, checked),
                    other => {
                        return Err(r.error(format!(
                            "{} where {} writes witness {witness} after block {:#x}",
                            crate::record::describe(other),
                            f.name,
                            block.start
                        )))
                    }
                }
            }
            let tail = match to == w.exit {
                true => self.linked(image, self.tails[top.function as usize][top.block]),
                false => None,
            };
            if to == w.exit && w.part_exit[top.block] {
                top.in_part = true;
            } else if let Some(callee) = tail {
                // A linked tail call: the callee's frame takes this one's place.
                let returns_for_below = top.returns_for_below;
                let mut frame = self.enter(callee, &mut r)?;
                frame.returns_for_below = returns_for_below;
                *stack.last_mut().expect("the frame walked") = frame;
            } else if to == w.exit {
                // A frame run on behalf of a function that jumped into
                // another part returns for it too.
                while let Some(done) = stack.pop() {
                    let below_left = stack.last().is_some_and(|b| b.in_part);
                    if !(done.returns_for_below && below_left) {
                        break;
                    }
                }
            } else {
                top.block = to;
                top.insn = 0;
            }
        }
    }

    /// Resume place `id` came back: the frames above the innermost one of
    /// its function are gone (a `longjmp` skipped them), and that frame
    /// goes on after its call. A way back from another part goes on in
    /// the frame that jumped there (the parts between it and the top left
    /// for other parts too). With no such frame (its call came before the
    /// stream began, or the part was entered in its middle), one starts
    /// there.
    fn resume(&self, stack: &mut Vec<Frame>, id: u32, r: &Reader<'_>) -> Result<(), RegenError> {
        let &(function, block, insn) = self.resumes.get(&id).ok_or_else(|| {
            r.error(format!(
                "resume place {id} is not in the trace's table ({} places)",
                self.resumes.len()
            ))
        })?;
        // A landing pad: the unwinder dropped the frames above the one that
        // catches (whose function may be another part than the pad's).
        if let Some(&owner) = self.landing_pads.get(&id) {
            if let Some(k) = stack.iter().rposition(|f| f.function == owner) {
                stack.truncate(k + 1);
                let top = &mut stack[k];
                if owner == function {
                    (top.block, top.insn, top.in_call, top.in_part) = (block, insn, false, false);
                    top.regs = self.unknown_regs(function);
                    return Ok(());
                }
                (top.in_call, top.in_part) = (false, true);
            }
            let below_left = stack.last().is_some_and(|f| f.in_part);
            stack.push(Frame {
                function,
                block,
                insn,
                in_call: false,
                in_part: false,
                returns_for_below: below_left,
                regs: self.unknown_regs(function),
            });
            return Ok(());
        }
        let reentry = self.reentries.contains(&id);
        let found = if reentry {
            // A way back from another part: into the frame that jumped
            // there, among those at the top that left for other parts.
            stack
                .iter()
                .rev()
                .take_while(|f| f.in_part)
                .position(|f| f.function == function)
                .map(|k| stack.len() - 1 - k)
        } else {
            stack.iter().rposition(|f| f.function == function)
        };
        let below_left = stack.last().is_some_and(|f| f.in_part);
        match found {
            Some(k) => stack.truncate(k + 1),
            None => stack.push(Frame {
                function,
                block,
                insn: 0,
                in_call: false,
                in_part: false,
                returns_for_below: below_left,
                regs: None,
            }),
        }
        let top = stack.last_mut().expect("a frame was kept or pushed");
        top.block = block;
        top.insn = insn;
        top.in_call = false;
        top.in_part = false;
        // Nothing says what its registers hold after a longjmp or a jump
        // back in, until they are recorded again.
        top.regs = self.unknown_regs(function);
        Ok(())
    }

    /// A register file with nothing known, for a function with a data plan.
    fn unknown_regs(&self, function: u32) -> Option<Box<Regs>> {
        let f = self.functions.get(function as usize)?;
        f.data.as_ref().map(|_| Box::new([None; 16]))
    }

    /// A traced function entered while the frame below was not in a call:
    /// a signal handler the kernel ran. The frame below goes on where its
    /// walk stood when the entry was read: the block the signal came in
    /// (with `--validate`), or up to a few blocks later where the frame
    /// next reads a record (its blocks in between carry no record that
    /// would say).
    fn signal_handler(&self, id: u32, r: &mut Reader<'_>) -> Result<Frame, RegenError> {
        self.enter(id, r)
    }

    /// The frame of function `id`, entered: with `--data`, the registers
    /// its entry recorded (read from `r`).
    fn enter(&self, id: u32, r: &mut Reader<'_>) -> Result<Frame, RegenError> {
        let f = self.functions.get(id as usize).ok_or_else(|| RegenError {
            offset: r.at,
            what: format!(
                "function {id} entered, but the trace has {}",
                self.functions.len()
            ),
        })?;
        if f.blocks.is_empty() {
            return Err(RegenError {
                offset: r.at,
                what: format!(
                    "function {id} ({}) entered, but weft placed no copy of it",
                    f.name
                ),
            });
        }
        let regs = match &f.data {
            Some(plan) => {
                let mut regs = Box::new([None; 16]);
                for &g in &plan.entry {
                    regs[g as usize & 15] = Some(r.value()?);
                }
                Some(regs)
            }
            None => None,
        };
        Ok(Frame {
            function: id,
            block: f.entry,
            insn: 0,
            in_call: false,
            in_part: false,
            returns_for_below: false,
            regs,
        })
    }

    /// With `--data`, the registers recorded after the call that ends the
    /// frame's block, if it ends with one (the copy records them after the
    /// call returns, before the way out of the block).
    fn data_after_last_call(
        &self,
        frame: &mut Frame,
        r: &mut Reader<'_>,
    ) -> Result<(), RegenError> {
        let f = &self.functions[frame.function as usize];
        let (Some(plan), Some(regs)) = (&f.data, frame.regs.as_mut()) else {
            return Ok(());
        };
        let block = &f.blocks[frame.block];
        let Some(last) = (block.insns.len() as u32).checked_sub(1) else {
            return Ok(());
        };
        if !block.calls.contains(&last) {
            return Ok(());
        }
        if let Some(after) = plan
            .after
            .get(frame.block)
            .and_then(|a| a.get(last as usize))
        {
            for &g in after {
                regs[g as usize & 15] = Some(r.value()?);
            }
        }
        Ok(())
    }

    /// With `--data`, the segment `first..last` of block `block` that
    /// `frame` runs: reads the registers recorded after its instructions
    /// (and after the call just before it), and with `data` runs its ops,
    /// giving `data` every access.
    fn data_of_segment<D: FnMut(Access)>(
        &self,
        frame: &mut Frame,
        (first, last): (u32, u32),
        r: &mut Reader<'_>,
        data: &mut Option<(&[u64], D)>,
    ) -> Result<(), RegenError> {
        let f = &self.functions[frame.function as usize];
        let (Some(plan), Some(regs)) = (&f.data, frame.regs.as_mut()) else {
            return Ok(());
        };
        let b = frame.block;
        let calls = &f.blocks[b].calls;
        let mut read = |k: u32, regs: &mut Regs| -> Result<(), RegenError> {
            if let Some(after) = plan.after.get(b).and_then(|a| a.get(k as usize)) {
                for &g in after {
                    regs[g as usize & 15] = Some(r.value()?);
                }
            }
            Ok(())
        };
        if first > 0 && calls.contains(&(first - 1)) {
            read(first - 1, regs)?;
        }
        for k in first..last {
            if let Some((biases, out)) = data.as_mut() {
                let bias = biases.get(frame.function as usize).copied().unwrap_or(0);
                let ops = plan.ops.get(b).and_then(|o| o.get(k as usize));
                for op in ops.into_iter() {
                    data::run(op, regs, bias, |kind, size, addr| {
                        out(Access {
                            function: frame.function,
                            block: b as u32,
                            insn: k,
                            kind,
                            size,
                            addr,
                        })
                    });
                }
            }
            if !calls.contains(&k) {
                read(k, regs)?;
            }
        }
        Ok(())
    }
}

impl Frame {
    /// A frame at the entry `block` of function `function`, with nothing
    /// known of its registers.
    fn at_entry(function: u32, block: usize) -> Frame {
        Frame {
            function,
            block,
            insn: 0,
            in_call: false,
            in_part: false,
            returns_for_below: false,
            regs: None,
        }
    }
}

/// A traced call being walked: where it stands, and what comes next.
#[derive(Clone)]
struct Frame {
    function: u32,
    block: usize,
    insn: u32,
    in_call: bool,
    /// It jumped into another part of itself: what comes next is that
    /// part's (a traced part's entry, a resume place, or its return).
    in_part: bool,
    /// It runs for the frame below, which jumped into another part (it is
    /// that part, or a tail call from it): its return is that frame's.
    returns_for_below: bool,
    /// With `--data`: what regeneration knows of its registers.
    regs: Option<Box<Regs>>,
}
