//! Errors of patch planning and code generation.

/// What went wrong while generating patch bytes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An instruction cannot be moved to another address.
    #[error("instruction at {addr:#x} cannot be relocated: {why}")]
    NotRelocatable {
        /// Its address.
        addr: u64,
        /// Why.
        why: &'static str,
    },
    /// A branch or RIP-relative operand does not reach from the new place.
    #[error("code at {from:#x} cannot reach {to:#x} (more than 2 GiB away)")]
    OutOfReach {
        /// Where the code is.
        from: u64,
        /// What it must reach.
        to: u64,
    },
    /// A CPU timer was asked of a process that does not map the
    /// per-thread CPU clock.
    #[error("a CPU timer needs the per-thread CPU clock, which this process does not map")]
    NoCpuClock,
    /// The encoder refused an instruction.
    #[error("encoding failed: {0}")]
    Encode(#[from] iced_x86::IcedError),
}

/// Result of patch generation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Leaves this far short of the ±2 GiB of a rel32 operand, for the
/// instruction's own length and for branches a block encoder lengthens.
const REACH_MARGIN: u64 = 1 << 20;

/// The first branch target or RIP-relative address of `insns` that a
/// rel32 operand placed near `ip` cannot reach: checked before encoding,
/// so that an encoder failure is never told apart by its message.
pub(crate) fn beyond_reach(insns: &[iced_x86::Instruction], ip: u64) -> Option<u64> {
    use iced_x86::OpKind;
    insns
        .iter()
        .filter_map(|i| {
            if i.is_ip_rel_memory_operand() {
                Some(i.ip_rel_memory_address())
            } else {
                (0..i.op_count())
                    .any(|n| {
                        matches!(
                            i.op_kind(n),
                            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
                        )
                    })
                    .then(|| i.near_branch_target())
            }
        })
        .find(|&target| target.abs_diff(ip) >= (1 << 31) - REACH_MARGIN)
}
