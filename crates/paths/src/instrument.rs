//! The instrument: a [`weft_plan::Rebuild`] that plans each matched
//! function's witnesses, lays it out again with its stores, and keeps the
//! function table that regeneration reads (ELF virtual addresses, blocks,
//! instructions, edges and their witnesses).

use crate::rebuild::rebuild;
use crate::witness::{place, Cfg};
use serde::{Deserialize, Serialize};
use std::sync::Mutex;
use weft_plan::{Rebuild, Rebuilding, RebuiltCode};

/// One block of a traced function, as regeneration needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// ELF virtual address of its first instruction.
    pub start: u64,
    /// Offset of each instruction from `start`.
    pub insns: Vec<u32>,
    /// Indexes (into `insns`) of its calls.
    pub calls: Vec<u32>,
}

/// A traced function: where it is and the plan its copy records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionInfo {
    /// Its number in the entry records.
    pub id: u32,
    /// Module file name.
    pub module: String,
    /// The module's path when traced.
    pub path: String,
    /// Its name.
    pub name: String,
    /// ELF virtual address of its entry.
    pub vaddr: u64,
    /// Its blocks; the vertex `blocks.len()` is `EXIT`.
    pub blocks: Vec<BlockInfo>,
    /// The entry block.
    pub entry: usize,
    /// Edges: (from, to, witness or 0).
    pub edges: Vec<(usize, usize, u32)>,
}

impl FunctionInfo {
    /// The CFG the plan was made for.
    pub fn cfg(&self) -> Cfg {
        Cfg {
            blocks: self.blocks.len(),
            entry: self.entry,
            edges: self
                .edges
                .iter()
                .map(|&(from, to, _)| crate::witness::Edge { from, to })
                .collect(),
            calls: self
                .blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.calls.is_empty())
                .map(|(i, _)| i)
                .collect(),
        }
    }
}

/// Traces functions by laying them out again; one per weft run, shared by
/// the sessions of every process it traces.
#[derive(Debug, Default)]
pub struct PathsInstrument {
    functions: Mutex<Vec<FunctionInfo>>,
}

impl PathsInstrument {
    /// An instrument with no function traced yet.
    pub fn new() -> PathsInstrument {
        PathsInstrument::default()
    }

    /// Every function traced so far.
    pub fn functions(&self) -> Vec<FunctionInfo> {
        self.functions.lock().map(|f| f.clone()).unwrap_or_default()
    }
}

impl Rebuild for PathsInstrument {
    fn rebuild(&self, f: &Rebuilding<'_>) -> Result<RebuiltCode, String> {
        let code = f.code;
        let cfg = Cfg::from_code(code);
        let plan = place(&cfg);
        let mut functions = self
            .functions
            .lock()
            .map_err(|_| "the function table is poisoned".to_string())?;
        // The same code reached under two names (an alias) is one function.
        let vaddr = code.start() - f.bias;
        if functions
            .iter()
            .any(|g| g.vaddr == vaddr && g.path == f.path.to_string_lossy())
        {
            return Err("traced already under another name".into());
        }
        let id = functions.len() as u32;
        let built = rebuild(code, &cfg, &plan, id, f.at, f.entered_from_outside)
            .map_err(|e| e.to_string())?;
        let blocks = code
            .blocks()
            .iter()
            .map(|b| {
                let insns = &code.instructions()[b.first..b.last];
                BlockInfo {
                    start: b.start - f.bias,
                    insns: insns.iter().map(|i| (i.ip() - b.start) as u32).collect(),
                    calls: insns
                        .iter()
                        .enumerate()
                        .filter(|(_, i)| {
                            matches!(
                                i.flow_control(),
                                iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
                            )
                        })
                        .map(|(k, _)| k as u32)
                        .collect(),
                }
            })
            .collect();
        functions.push(FunctionInfo {
            id,
            module: f.module.to_string(),
            path: f.path.to_string_lossy().into_owned(),
            name: f.function.to_string(),
            vaddr,
            blocks,
            entry: cfg.entry,
            edges: cfg
                .edges
                .iter()
                .zip(&plan.witness)
                .map(|(e, w)| (e.from, e.to, w.unwrap_or(0)))
                .collect(),
        });
        Ok(RebuiltCode {
            jumps: built.splices(code.start()),
            bytes: built.bytes,
        })
    }
}
