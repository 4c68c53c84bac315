//! The function table a trace keeps (`paths.json`): each traced
//! function's blocks, instructions, edges and witnesses, its resume
//! places, and where each process image had its modules.

use crate::witness::Cfg;
use serde::{Deserialize, Serialize};

/// One block of a traced function, as regeneration needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// ELF virtual address of its first instruction.
    pub start: u64,
    /// Offset of each instruction from `start`.
    pub insns: Vec<u32>,
    /// Indexes (into `insns`) of its calls.
    pub calls: Vec<u32>,
    /// For each call, the ELF virtual address a direct call goes to (0
    /// for an indirect one): a call to a function the process image
    /// linked ([`ImageLoads::linked`]) writes no record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callees: Vec<u64>,
    /// The entry (ELF virtual address) of the function its last
    /// instruction tail-calls directly, or 0: the edge to `EXIT` goes on
    /// in that function's frame if the image linked it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tail: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
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
    /// Its calls that may return more than once (`setjmp`), whose
    /// returns write a resume record, and the blocks code outside jumps
    /// back into (its other parts), which write one too.
    #[serde(default)]
    pub resumes: Vec<ResumePlace>,
    /// Blocks whose jump out of the function goes on in another part of it
    /// (a `.cold` part): the frame stays, and the part comes back through a
    /// resume place or returns for it.
    #[serde(default)]
    pub part_exits: Vec<usize>,
    /// With `--data`: how its copy records registers and how its accesses'
    /// addresses are computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<crate::data::DataPlan>,
}

/// A call whose returns write [`crate::record::Record::Resumed`]: a
/// `longjmp` comes back there, past the frames it skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePlace {
    /// The id in the records (unique in the trace).
    pub id: u32,
    /// The block of the call.
    pub block: usize,
    /// The call's index in the block's instructions.
    pub insn: u32,
    /// The place is the block's start (a jump back in from outside), not
    /// the return of a call.
    #[serde(default)]
    pub block_start: bool,
    /// For a C++ landing pad: the ELF virtual address of the function
    /// whose frame catches there (its call site led to the pad), in the
    /// same module.
    #[serde(default)]
    pub unwound_to: Option<u64>,
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

/// Where one process image has its traced modules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLoads {
    /// The process.
    pub pid: i32,
    /// (module path, load bias: runtime address minus ELF virtual address).
    pub modules: Vec<(String, u64)>,
    /// The functions (ids) that every direct call and tail call of the
    /// image's copies reaches without a record (see `rebuild::link`),
    /// sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<u32>,
}
