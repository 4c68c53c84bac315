//! x86-64 machine code analysis: decoding, basic blocks and control-flow
//! graphs, jump tables, and register and flags liveness; and the cheap
//! sequences that save and restore the status flags around inserted code.
//!
//! This crate knows nothing of processes or files: it analyses bytes at
//! addresses, and reads jump tables through a [`DataSource`] the caller
//! provides. It is what the splicer asks "is any branch target inside these
//! bytes?" and "which registers and flags may this snippet clobber here?".
//!
//! ```
//! use weft_code::{FunctionCode, NoData};
//! // push rbp; mov rbp,rsp; xor eax,eax; pop rbp; ret
//! let bytes = [0x55, 0x48, 0x89, 0xe5, 0x31, 0xc0, 0x5d, 0xc3];
//! let f = FunctionCode::analyze(0x1000, &bytes, &NoData);
//! assert_eq!(f.blocks().len(), 1);
//! let live = f.liveness().live_before(0x1000).unwrap();
//! assert!(!live.flags_live(weft_code::STATUS_FLAGS));
//! ```

mod cfg;
mod decode;
mod flag_save;
mod jump_table;
mod liveness;
mod regs;
mod stack;
mod start;
mod syscall;

pub use cfg::{jump_targets, Block, BlockEnd, FunctionCode};
pub use decode::{decode_all, format_instruction, BranchTargets};
pub use flag_save::{restore_status_flags, save_status_flags, step_rsp};
pub use jump_table::JumpTable;
pub use liveness::{flags_dead_by_scan, Liveness};
pub use regs::{RegSet, FLAG_AF, FLAG_CF, FLAG_OF, FLAG_PF, FLAG_SF, FLAG_ZF, STATUS_FLAGS};
pub use start::main_from_start;

/// Read-only data by virtual address, for jump tables.
pub trait DataSource {
    /// `len` bytes at `addr`, if known.
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>>;
}

/// A data source that knows nothing: jump tables stay unresolved.
pub struct NoData;

impl DataSource for NoData {
    fn read(&self, _addr: u64, _len: usize) -> Option<Vec<u8>> {
        None
    }
}

impl<F: Fn(u64, usize) -> Option<Vec<u8>>> DataSource for F {
    fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        self(addr, len)
    }
}
