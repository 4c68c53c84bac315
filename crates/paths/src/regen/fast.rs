//! The common case's tables in one compact form per process image: every
//! function's blocks side by side, each in 32 bytes (its way out, its
//! instruction count, where its calls are, its tail call), with calls and
//! tail calls already resolved against what the image linked, and the
//! edges a witness decides in one flat array. The plain walk reads a cache
//! line or two per block where the general tables (a `BlockInfo`, the
//! per-block vectors, a dense decision table of a row per block) cost it
//! several misses: sqlite3's trace regenerates about twice as fast.

use super::walkable::{unpack, Walkable};
use super::NONE;
use crate::instrument::FunctionInfo;

/// A block's way out is decided by a witness: the rest of its
/// [`FastBlock::step`] is the decisions' place in [`Fast::decide`].
pub(super) const DECIDED: u64 = 1 << 63;
/// With [`DECIDED`]: the decisions are a row indexed by the witness
/// (`start | width << 32`), not a list.
pub(super) const ROW: u64 = 1 << 62;
/// Decisions a block may have in a list; more make a row.
const SHORT_LIST: usize = 8;
/// A row may be this many times as wide as it has decisions; sparser
/// ones stay a list (searched by halves), which a function with
/// thousands of witnesses would otherwise fill with rows.
const ROW_SPREAD: usize = 16;
/// The `to` of an edge to the function's `EXIT`.
pub(super) const EXIT: u32 = u32::MAX;
/// A call or tail call to a function the image linked that has no copy
/// (the general walk reports it).
pub(super) const NO_COPY: u32 = u32::MAX - 1;

/// A function's callees per block and call, as [`super::Program`] keeps them.
pub(super) type BlockCallees = Vec<Box<[u32]>>;

/// One block as the plain walk reads it, in 32 bytes.
#[derive(Clone, Copy)]
pub(super) struct FastBlock {
    /// Without [`DECIDED`], a way out as `to | witness << 32` (`to` being
    /// [`EXIT`] for the function's end), taken when its witness comes
    /// next, and [`FastBlock::alt`] taken otherwise: a block with one way
    /// out has it in both; a branch with a witnessed way has that one
    /// here and the other in `alt` (whose own witness, or the next one
    /// along it, is checked where it is read). Most blocks are of this
    /// form, which decides without a branch and without a look
    /// elsewhere. Else [`DECIDED`] with `start | len << 32` in
    /// [`Fast::decide`] (and [`ROW`]).
    pub(super) step: u64,
    /// The way out taken when the witness of `step`'s does not come next.
    pub(super) alt: u64,
    /// Its first instruction's distance from its function's
    /// [`FastFunction::start`].
    pub(super) start: u32,
    /// Instructions in the block (the low 16 bits), its calls (the next
    /// 15), and [`PART_EXIT`].
    pub(super) insns: u32,
    /// Its first call in [`Fast::calls`].
    pub(super) calls: u32,
    /// The linked function its tail call reaches, [`NO_COPY`], or [`NONE`].
    pub(super) tail: u32,
}

/// In [`FastBlock::insns`]: the block's way to `EXIT` is a jump into
/// another part of the function.
pub(super) const PART_EXIT: u32 = 1 << 31;

/// The [`FastFunction::entry`] of a function with no copy.
pub(super) const NO_ENTRY: u32 = u32::MAX;

/// One function as the plain walk reads it.
#[derive(Clone, Copy)]
pub(super) struct FastFunction {
    /// Its first block in [`Fast::blocks`].
    pub(super) base: u32,
    /// Its entry block ([`NO_ENTRY`] if it has no copy).
    pub(super) entry: u32,
    /// The lowest ELF virtual address of its blocks.
    pub(super) start: u64,
}

/// A call in a block: its instruction, the linked function it reaches
/// ([`NONE`]: a call that writes records; [`NO_COPY`]), and the offset
/// from the block's start of the instruction after it (where the
/// segment after its return starts).
#[derive(Clone, Copy)]
pub(super) struct FastCall {
    pub(super) insn: u32,
    pub(super) callee: u32,
    pub(super) after: u32,
}

/// A witness that can come next at a block with several ways out, and
/// the edge it decides.
#[derive(Clone, Copy)]
pub(super) struct Decision {
    pub(super) witness: u32,
    pub(super) to: u32,
    pub(super) edge_witness: u32,
}

/// The compact tables of one process image.
pub(super) struct Fast {
    pub(super) functions: Vec<FastFunction>,
    pub(super) blocks: Vec<FastBlock>,
    pub(super) calls: Vec<FastCall>,
    pub(super) decide: Vec<Decision>,
}

impl Fast {
    /// The tables for an image whose linked functions `linked` marks (by
    /// id), from the general ones: `callees` and `tails` as
    /// [`super::Program`] keeps them. None where a function's blocks
    /// spread over more than 4 GiB.
    pub(super) fn new(
        functions: &[FunctionInfo],
        walk: &[Walkable],
        (callees, tails): (&[BlockCallees], &[Vec<u32>]),
        linked: &[bool],
    ) -> Option<Fast> {
        let resolve = |callee: u32| -> u32 {
            match linked.get(callee as usize) {
                Some(true) if functions[callee as usize].blocks.is_empty() => NO_COPY,
                Some(true) => callee,
                _ => NONE,
            }
        };
        let to = |to: usize, exit: usize| if to == exit { EXIT } else { to as u32 };
        let mut fast = Fast {
            functions: Vec::with_capacity(functions.len()),
            blocks: Vec::new(),
            calls: Vec::new(),
            decide: Vec::new(),
        };
        for (id, f) in functions.iter().enumerate() {
            let w = &walk[id];
            let start = f.blocks.iter().map(|b| b.start).min().unwrap_or(0);
            fast.functions.push(FastFunction {
                base: fast.blocks.len() as u32,
                entry: if f.blocks.is_empty() {
                    NO_ENTRY
                } else {
                    f.entry as u32
                },
                start,
            });
            for (b, block) in f.blocks.iter().enumerate() {
                let calls = fast.calls.len() as u32;
                for (k, &insn) in block.calls.iter().enumerate() {
                    let callee = callees[id][b].get(k).copied().unwrap_or(NONE);
                    fast.calls.push(FastCall {
                        insn,
                        callee: resolve(callee),
                        after: block.insns.get(insn as usize + 1).copied().unwrap_or(0),
                    });
                }
                let edge = |(t, witness): (usize, u32)| {
                    u64::from(to(t, w.exit)) | u64::from(witness) << 32
                };
                let mut alt = 0;
                let step = match *w.outs[b].as_slice() {
                    [only] => {
                        alt = edge(only);
                        alt
                    }
                    [a, b] if a.1 != 0 || b.1 != 0 => {
                        let (first, other) = if a.1 != 0 { (a, b) } else { (b, a) };
                        alt = edge(other);
                        edge(first)
                    }
                    _ => fast.decisions(&w.decide[b], |t| to(t, w.exit)),
                };
                let insns = u32::try_from(block.insns.len())
                    .ok()
                    .filter(|&n| n <= 0xFFFF)?;
                let n_calls = u32::try_from(block.calls.len())
                    .ok()
                    .filter(|&n| n <= 0x7FFF)?;
                fast.blocks.push(FastBlock {
                    start: u32::try_from(block.start - start).ok()?,
                    step,
                    alt,
                    insns: insns | n_calls << 16 | if w.part_exit[b] { PART_EXIT } else { 0 },
                    calls,
                    tail: resolve(tails[id][b]),
                });
            }
        }
        Some(fast)
    }

    /// Appends the decisions of a block (`decide`, sorted by witness, as
    /// [`Walkable::decide`] has them; `to` maps a target block) to
    /// [`Fast::decide`], and returns the block's step: a list to search
    /// when it is short or sparse, else a row indexed by the witness
    /// itself (a binary search through the hundreds of witnesses that can
    /// follow an interpreter's dispatch missed the cache at every probe).
    fn decisions(&mut self, decide: &[(u32, (usize, u32))], to: impl Fn(usize) -> u32) -> u64 {
        let start = self.decide.len() as u64;
        let decision = |&(x, (t, witness)): &(u32, (usize, u32))| Decision {
            witness: x,
            to: to(t),
            edge_witness: witness,
        };
        let width = decide.last().map_or(0, |&(x, _)| x as usize + 1);
        if decide.len() <= SHORT_LIST || width > ROW_SPREAD * decide.len() {
            self.decide.extend(decide.iter().map(decision));
            return DECIDED | start | (decide.len() as u64) << 32;
        }
        let none = Decision {
            witness: NONE,
            to: EXIT,
            edge_witness: 0,
        };
        self.decide.resize(start as usize + width, none);
        for d in decide {
            self.decide[start as usize + d.0 as usize] = decision(d);
        }
        DECIDED | ROW | start | (width as u64) << 32
    }

    /// The edge (`to`, its witness) witness `x` decides at a block whose
    /// step is `step` (with [`DECIDED`] set).
    #[inline]
    pub(super) fn decided(&self, step: u64, x: u32) -> Option<(u32, u32)> {
        let start = (step & 0xFFFF_FFFF) as usize;
        let len = ((step >> 32) & 0x3FFF_FFFF) as usize;
        let d = if step & ROW == 0 {
            let table = &self.decide[start..start + len];
            if len <= SHORT_LIST {
                table.iter().find(|d| d.witness == x)?
            } else {
                &table[table.binary_search_by_key(&x, |d| d.witness).ok()?]
            }
        } else {
            let d = self
                .decide
                .get(start + x as usize)
                .filter(|_| (x as usize) < len)?;
            Some(d).filter(|d| d.witness == x)?
        };
        Some((d.to, d.edge_witness))
    }
}

/// A single edge's (`to`, witness) from its step.
#[inline]
pub(super) fn single(step: u64) -> (u32, u32) {
    let (to, witness) = unpack(step);
    (to as u32, witness)
}
