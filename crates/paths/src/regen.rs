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
//! the frame. A stream that starts inside a call (a forked child) is read
//! from its first `ENTERED` record at the top. A `RESUMED` record (a
//! `setjmp` returning, perhaps through a `longjmp` that skipped frames)
//! drops the frames above the innermost one of its function and goes on
//! after its call.
//!
//! A trace recorded with `--validate` also holds a record per block run:
//! each block regeneration reaches is checked against it, and the first
//! difference is the error.
//!
//! Each stretch is a [`Segment`]: instructions of one block from its start
//! or from just after a call, up to its end or a call.

use crate::data::{self, Access, Regs};
use crate::instrument::FunctionInfo;
use crate::record::{self, Record};
use std::collections::HashMap;

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

/// A function ready for walking: its out-edges per block, and for blocks
/// with several, which edge each witness that can come next belongs to.
struct Walkable {
    outs: Vec<Vec<(usize, u32)>>,
    /// Per block with several ways out: (witness, the edge it decides),
    /// sorted by witness.
    decide: Vec<Vec<(u32, (usize, u32))>>,
    /// The same as a dense table, where it is small enough: for block `b`
    /// and witness `x`, `dense[dense_row[b] + x]` is 1 + the index in
    /// `outs[b]` of the edge `x` decides (0: none).
    dense: Vec<u16>,
    dense_row: Vec<usize>,
    /// Witness numbers the dense table covers (0 when there is none).
    dense_width: usize,
    exit: usize,
    /// Blocks whose way to `EXIT` is a jump into another part of the
    /// function.
    part_exit: Vec<bool>,
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
}

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
    /// Prepares the functions of a trace's table (ids are indexes); with
    /// `validate`, the streams hold a record per block, checked.
    pub fn new(functions: &'a [FunctionInfo], validate: bool) -> Program<'a> {
        let walk = functions.iter().map(walkable).collect();
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
        Program {
            functions,
            walk,
            resumes,
            reentries,
            landing_pads,
            validate,
        }
    }

    /// The function table.
    pub fn functions(&self) -> &'a [FunctionInfo] {
        self.functions
    }

    /// Walks `stream`, calling `out` for every segment in the order run.
    pub fn regenerate(
        &self,
        stream: &[u8],
        mut out: impl FnMut(Segment),
    ) -> Result<Summary, RegenError> {
        self.regenerate_at(stream, |s, _| out(s))
    }

    /// [`Program::regenerate`], giving `out` with each segment the bytes
    /// of the stream read before it: the records up to there decided it,
    /// so it ran after the last of them was written (and, as far as a
    /// cut of the stream can tell, before the next one).
    pub fn regenerate_at(
        &self,
        stream: &[u8],
        out: impl FnMut(Segment, usize),
    ) -> Result<Summary, RegenError> {
        self.walk(stream, out, None::<(&[u64], fn(Access))>)
    }

    /// [`Program::regenerate_at`] with data addresses (`--data`): `data`
    /// gets every access, before the segment holding its instruction;
    /// `biases` are the load biases of the functions' modules (by id) in
    /// the stream's process image.
    pub fn regenerate_data(
        &self,
        stream: &[u8],
        biases: &[u64],
        out: impl FnMut(Segment, usize),
        data: impl FnMut(Access),
    ) -> Result<Summary, RegenError> {
        self.walk(stream, out, Some((biases, data)))
    }

    fn walk<D: FnMut(Access)>(
        &self,
        stream: &[u8],
        mut out: impl FnMut(Segment, usize),
        mut data: Option<(&[u64], D)>,
    ) -> Result<Summary, RegenError> {
        let mut r = Reader {
            bytes: stream,
            at: 0,
        };
        let mut stack: Vec<Frame> = Vec::new();
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
            if unread > 100_000_000 {
                return Err(r.error(
                    "regeneration goes round without reading a witness (a damaged table)".into(),
                ));
            }
            let Some(top) = stack.last_mut() else {
                match r.next()? {
                    None => return done(skipped, checked),
                    Some(Record::Entered(id)) => {
                        stack.push(self.enter(id, &mut r)?);
                        continue;
                    }
                    Some(Record::Resumed(id)) => {
                        self.resume(&mut stack, id, &r)?;
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
                        self.resume(&mut stack, id, &r)?;
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
                            "{other:?} after {} jumped into another part of itself",
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
                        self.resume(&mut stack, id, &r)?;
                        continue;
                    }
                    Some(other) => {
                        return Err(r.error(format!(
                            "{other:?} where a call made by {} should return",
                            f.name
                        )))
                    }
                }
            }
            let block = &f.blocks[top.block];
            let end = block.insns.len() as u32;
            let call = block
                .calls
                .iter()
                .copied()
                .find(|&c| c >= top.insn)
                .map(|c| c + 1);
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
                             {other:?} where regeneration enters {:#x} of {}",
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
                    },
                    r.at,
                );
            }
            top.insn = last;
            if call.is_some() {
                top.in_call = true;
                continue;
            }
            // The block ends: which way?
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
                            self.resume(&mut stack, id, &r)?;
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
                                "{other:?} where {} decides at block {:#x}",
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
                            "{other:?} where {} writes witness {witness} after block {:#x}",
                            f.name, block.start
                        )))
                    }
                }
            }
            if to == w.exit && w.part_exit[top.block] {
                top.in_part = true;
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

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl Reader<'_> {
    /// The next record, blocks' included.
    fn peek_raw(&self) -> Result<Option<Record>, RegenError> {
        match record::read(self.bytes, self.at) {
            Ok(Some((rec, _))) => Ok(Some(rec)),
            Ok(None) => self.ended(self.at),
            Err(_) => Err(self.error("the stream ends inside a record".into())),
        }
    }

    /// The stream ends at `at` (a 0 where a record would start): truly,
    /// or at a record its thread reserved and never wrote, if records
    /// follow.
    fn ended(&self, at: usize) -> Result<Option<Record>, RegenError> {
        match self
            .bytes
            .get(at..)
            .unwrap_or(&[])
            .iter()
            .position(|&b| b != 0)
        {
            None => Ok(None),
            Some(gap) => Err(RegenError {
                offset: at,
                what: format!(
                    "{gap} byte(s) of a record were reserved and never written (its thread \
                     left a signal handler by longjmp, or was killed, in between)"
                ),
            }),
        }
    }

    /// The next record that is not a block's (`--validate`) or a
    /// register's value (`--data`): those of the blocks along an edge
    /// without a witness come before the witness that decides.
    fn peek_past_blocks(&self) -> Result<Option<Record>, RegenError> {
        let mut at = self.at;
        loop {
            match record::read(self.bytes, at) {
                Ok(Some((Record::Block(_) | Record::Value(_), n))) => at += n,
                Ok(Some((rec, _))) => return Ok(Some(rec)),
                Ok(None) => return self.ended(at),
                Err(_) => {
                    return Err(RegenError {
                        offset: at,
                        what: "the stream ends inside a record".into(),
                    })
                }
            }
        }
    }

    fn next(&mut self) -> Result<Option<Record>, RegenError> {
        match record::read(self.bytes, self.at) {
            Ok(Some((rec, n))) => {
                self.at += n;
                Ok(Some(rec))
            }
            Ok(None) => self.ended(self.at),
            Err(_) => Err(self.error("the stream ends inside a record".into())),
        }
    }

    /// A register's value (`--data`), which the plan says comes next.
    fn value(&mut self) -> Result<u64, RegenError> {
        match self.next()? {
            Some(Record::Value(v)) => Ok(v),
            other => Err(self.error(format!("{other:?} where a register's value was recorded"))),
        }
    }

    fn error(&self, what: String) -> RegenError {
        RegenError {
            offset: self.at,
            what,
        }
    }
}

/// Entries a function's dense decision table may have.
const DENSE_MAX: usize = 1 << 22;

impl Walkable {
    /// The edge witness `x` decides at block `b`.
    fn decided(&self, b: usize, x: u32) -> Option<(usize, u32)> {
        if (x as usize) < self.dense_width {
            let k = self.dense[self.dense_row[b] + x as usize];
            return (k != 0).then(|| self.outs[b][k as usize - 1]);
        }
        let table = &self.decide[b];
        table
            .binary_search_by_key(&x, |&(w, _)| w)
            .ok()
            .map(|k| table[k].1)
    }
}

fn walkable(f: &FunctionInfo) -> Walkable {
    let cfg = f.cfg();
    let plan = crate::witness::Plan {
        witness: f
            .edges
            .iter()
            .map(|&(_, _, w)| (w != 0).then_some(w))
            .collect(),
        blocking: Default::default(),
    };
    let n = f.blocks.len();
    let mut outs = vec![Vec::new(); n];
    let mut decide = vec![Vec::new(); n];
    for (e, &(from, to, w)) in f.edges.iter().enumerate() {
        outs[from].push((to, w));
        let _ = e;
    }
    for (b, d) in decide.iter_mut().enumerate() {
        if outs[b].len() < 2 {
            continue;
        }
        for e in cfg.out_edges(b) {
            let (_, to, w) = f.edges[e];
            for x in plan.may_come_next(&cfg, e).into_iter().flatten() {
                d.push((x, (to, w)));
            }
        }
        d.sort_unstable_by_key(|&(x, _)| x);
        d.dedup_by_key(|&mut (x, _)| x);
    }
    // The dense table, rows for blocks with several ways out only.
    let width = f
        .edges
        .iter()
        .map(|&(_, _, w)| w as usize)
        .max()
        .unwrap_or(0)
        + 1;
    let deciders = (0..n).filter(|&b| outs[b].len() >= 2).count();
    let fits = deciders * width <= DENSE_MAX && outs.iter().all(|o| o.len() < u16::MAX as usize);
    let (mut dense, mut dense_row, mut dense_width) = (Vec::new(), vec![0; n], 0);
    if fits && deciders > 0 {
        dense_width = width;
        dense = vec![0u16; deciders * width];
        let mut row = 0;
        for b in (0..n).filter(|&b| outs[b].len() >= 2) {
            dense_row[b] = row;
            for &(x, edge) in &decide[b] {
                if let Some(k) = outs[b].iter().position(|&o| o == edge) {
                    dense[row + x as usize] = k as u16 + 1;
                }
            }
            row += width;
        }
    }
    let mut part_exit = vec![false; n];
    for &b in &f.part_exits {
        part_exit[b] = true;
    }
    Walkable {
        outs,
        decide,
        dense,
        dense_row,
        dense_width,
        exit: n,
        part_exit,
    }
}
