//! Data addresses (`--data`; Section 2.2.4 of the qpt paper): which
//! register values a function's copy records so that the address of every
//! load and store it makes can be computed offline along the regenerated
//! path, and the small register machine regeneration runs to compute them.
//!
//! Each instruction becomes a few [`Op`]s over the 16 general registers:
//! its memory accesses (from iced's instruction info, the implicit ones of
//! `push`, `call` and `ret` included), and how it changes registers when
//! that is simple arithmetic on known values (`mov`, `lea`, `add`/`sub` of
//! a constant or a register, `shl`, `and`, `movsxd`, `push`/`pop`'s `rsp`).
//! Any other write of a register makes it unknown ([`Op::Forget`]). A
//! backward analysis finds the registers whose values some later address
//! needs (*relevant*); a register that becomes unknown while relevant is
//! recorded right after (8 bytes in the stream), and so are the relevant
//! registers at the function's entry. A call leaves the caller-saved
//! registers unknown; the callee-saved ones and `rsp` keep their values.
//!
//! An access is not regenerated when its address is thread-local (`fs`,
//! `gs`), comes from a string instruction with a `rep` prefix or a vector
//! of indexes, or uses a register regeneration cannot know (after a jump
//! back in from another part or a landing pad, until it is recorded
//! again). Regeneration counts those by reason.

use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use serde::{Deserialize, Serialize};

/// A general register, numbered as x86 encodes it (`rax` 0 … `r15` 15).
pub type Gpr = u8;

/// `rsp`.
pub const RSP: Gpr = 4;
/// The registers a call may change (System V): rax, rcx, rdx, rsi, rdi,
/// r8-r11.
const CALLER_SAVED: [Gpr; 9] = [0, 1, 2, 6, 7, 8, 9, 10, 11];

/// An address: `base + index * scale + disp`, or (`rip`) the ELF virtual
/// address `disp` of the function's module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Addr {
    /// Base register, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<Gpr>,
    /// Index register, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<Gpr>,
    /// Scale of the index.
    #[serde(default = "one")]
    pub scale: u8,
    /// Displacement (or the static address).
    #[serde(default)]
    pub disp: i64,
    /// `disp` is an address in the module.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rip: bool,
}

fn one() -> u8 {
    1
}

impl Addr {
    fn regs(&self) -> impl Iterator<Item = Gpr> {
        self.base.into_iter().chain(self.index)
    }
}

/// What an access does, as valgrind's lackey says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    /// A load.
    L,
    /// A store.
    S,
    /// A load and a store of the same bytes.
    M,
}

/// Why an access's address is not regenerated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Why {
    /// Relative to `fs` or `gs` (thread-local storage).
    ThreadLocal,
    /// A string instruction repeated `rcx` times, or a gather's vector of
    /// indexes.
    Repeated,
    /// A register regeneration does not know there.
    Unknown,
}

/// One step of an instruction's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// A memory access of `size` bytes.
    Access(Kind, u8, Addr),
    /// An access whose address cannot be regenerated.
    Untraced(Kind, u8, Why),
    /// `dst = value`.
    Set(Gpr, i64),
    /// `dst = src` (`narrow`: the low 32 bits, zero-extended).
    Copy(Gpr, Gpr, bool),
    /// `dst = address` (`narrow` as above).
    Lea(Gpr, Addr, bool),
    /// `dst = dst + imm` (`narrow` as above).
    AddImm(Gpr, i64, bool),
    /// `dst = dst + src`, or `- src` (`negate`), (`narrow` as above).
    AddReg(Gpr, Gpr, bool, bool),
    /// `dst = dst << n` (`narrow` as above).
    Shl(Gpr, u8, bool),
    /// `dst = dst & imm` (`narrow` as above).
    And(Gpr, i64, bool),
    /// `dst = sign-extended low 32 bits of src` (`movsxd`).
    SignExtend(Gpr, Gpr),
    /// `dst` is no longer known.
    Forget(Gpr),
}

/// The data plan of a function: per block and instruction its ops and the
/// registers recorded after it (after a call: once it returned), and the
/// registers recorded at its entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPlan {
    /// Recorded right after the entry record.
    pub entry: Vec<Gpr>,
    /// Per block, per instruction.
    pub ops: Vec<Vec<Vec<Op>>>,
    /// Per block, per instruction: recorded after it.
    pub after: Vec<Vec<Vec<Gpr>>>,
}

impl DataPlan {
    /// The plan for `code` (loaded at `bias`: its addresses less `bias`
    /// are ELF virtual addresses).
    pub fn new(code: &weft_code::FunctionCode, bias: u64) -> DataPlan {
        let mut factory = InstructionInfoFactory::new();
        let ops: Vec<Vec<Vec<Op>>> = code
            .blocks()
            .iter()
            .map(|b| {
                code.instructions()[b.first..b.last]
                    .iter()
                    .map(|i| ops_of(i, bias, &mut factory))
                    .collect()
            })
            .collect();
        let n = code.blocks().len();
        // Relevant registers at each block's start, to a fixed point.
        let mut live_in = vec![0u16; n];
        let mut after: Vec<Vec<Vec<Gpr>>> = ops.iter().map(|b| vec![Vec::new(); b.len()]).collect();
        loop {
            let mut changed = false;
            for bi in (0..n).rev() {
                let mut live = code.blocks()[bi]
                    .succs
                    .iter()
                    .fold(0u16, |m, &s| m | live_in[s]);
                for (k, insn_ops) in ops[bi].iter().enumerate().rev() {
                    let mut recorded = Vec::new();
                    live = backward(insn_ops, live, &mut recorded);
                    after[bi][k] = recorded;
                }
                if live != live_in[bi] {
                    live_in[bi] = live;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        let entry_block = code
            .blocks()
            .iter()
            .position(|b| b.start == code.start())
            .unwrap_or(0);
        let entry = (0..16u8)
            .filter(|&r| live_in.get(entry_block).is_some_and(|m| m & (1 << r) != 0))
            .collect();
        DataPlan { entry, ops, after }
    }

    /// Registers recorded anywhere (for the cost).
    pub fn records(&self) -> usize {
        self.entry.len() + self.after.iter().flatten().map(Vec::len).sum::<usize>()
    }
}

/// Steps `live` (relevant after the instruction) back over its ops; the
/// registers it makes unknown while relevant go to `recorded`.
fn backward(ops: &[Op], mut live: u16, recorded: &mut Vec<Gpr>) -> u16 {
    let bit = |r: Gpr| 1u16 << r;
    for op in ops.iter().rev() {
        match *op {
            Op::Access(_, _, a) => {
                for r in a.regs() {
                    live |= bit(r);
                }
            }
            Op::Untraced(..) => {}
            Op::Set(d, _) => live &= !bit(d),
            Op::Copy(d, s, _) | Op::SignExtend(d, s) => {
                if live & bit(d) != 0 {
                    live = (live & !bit(d)) | bit(s);
                }
            }
            Op::Lea(d, a, _) => {
                if live & bit(d) != 0 {
                    live &= !bit(d);
                    for r in a.regs() {
                        live |= bit(r);
                    }
                }
            }
            Op::AddReg(d, s, _, _) => {
                if live & bit(d) != 0 {
                    live |= bit(s);
                }
            }
            Op::AddImm(..) | Op::Shl(..) | Op::And(..) => {}
            Op::Forget(d) => {
                if live & bit(d) != 0 {
                    if !recorded.contains(&d) {
                        recorded.push(d);
                    }
                    live &= !bit(d);
                }
            }
        }
    }
    recorded.sort_unstable();
    live
}

/// The general register `r` is (its full 64-bit one), if it is one.
fn gpr(r: Register) -> Option<Gpr> {
    let full = r.full_register();
    let n = (full as u32).checked_sub(Register::RAX as u32)?;
    (n < 16).then_some(n as Gpr)
}

/// The ops of one instruction at runtime address `i.ip()`.
fn ops_of(i: &Instruction, bias: u64, factory: &mut InstructionInfoFactory) -> Vec<Op> {
    let mut ops = Vec::new();
    let info = factory.info(i);
    let repeated = (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction();
    let mut accesses: Vec<(Kind, u8, Result<Addr, Why>)> = Vec::new();
    for m in info.used_memory() {
        let kind = match m.access() {
            OpAccess::Read | OpAccess::CondRead => Kind::L,
            OpAccess::Write | OpAccess::CondWrite => Kind::S,
            OpAccess::ReadWrite | OpAccess::ReadCondWrite => Kind::M,
            _ => continue,
        };
        let size = m.memory_size().size() as u8;
        let addr = if matches!(m.segment(), Register::FS | Register::GS) {
            Err(Why::ThreadLocal)
        } else if repeated || m.vsib_size() != 0 {
            Err(Why::Repeated)
        } else if m.base() == Register::RIP {
            Ok(Addr {
                base: None,
                index: None,
                scale: 1,
                disp: i.ip_rel_memory_address().wrapping_sub(bias) as i64,
                rip: true,
            })
        } else {
            let base = (m.base() != Register::None).then(|| gpr(m.base()));
            let index = (m.index() != Register::None).then(|| gpr(m.index()));
            match (base, index) {
                (Some(None), _) | (_, Some(None)) => Err(Why::Unknown),
                (b, x) => Ok(Addr {
                    base: b.flatten(),
                    index: x.flatten(),
                    scale: m.scale() as u8,
                    disp: m.displacement() as i64,
                    rip: false,
                }),
            }
        };
        accesses.push((kind, size, addr));
    }
    // Loads before stores, as the machine (and lackey) does them.
    accesses.sort_by_key(|&(k, _, _)| k == Kind::S);
    for (kind, size, addr) in accesses {
        ops.push(match addr {
            Ok(a) => Op::Access(kind, size, a),
            Err(why) => Op::Untraced(kind, size, why),
        });
    }
    let mut handled = simple_effect(i, bias, &mut ops);
    if i.mnemonic() == Mnemonic::Call {
        for r in CALLER_SAVED {
            ops.push(Op::Forget(r));
        }
        handled = true;
    }
    if !handled {
        for u in info.used_registers() {
            let writes = matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::CondWrite
                    | OpAccess::ReadWrite
                    | OpAccess::ReadCondWrite
            );
            if let Some(r) = gpr(u.register()).filter(|_| writes) {
                if !ops.contains(&Op::Forget(r)) {
                    ops.push(Op::Forget(r));
                }
            }
        }
    }
    ops
}

/// The register effect of `i` when it is simple arithmetic, appended to
/// `ops`; whether it was.
fn simple_effect(i: &Instruction, bias: u64, ops: &mut Vec<Op>) -> bool {
    let reg0 = (i.op_count() >= 1 && i.op0_kind() == OpKind::Register).then(|| i.op0_register());
    let dst = reg0.and_then(|r| {
        let full = gpr(r)?;
        match r.size() {
            8 => Some((full, false)),
            4 => Some((full, true)),
            _ => None,
        }
    });
    let src_reg = |ops_kind: OpKind, r: Register| -> Option<Gpr> {
        (ops_kind == OpKind::Register && matches!(r.size(), 4 | 8))
            .then(|| gpr(r))
            .flatten()
    };
    let imm = || -> Option<i64> {
        match i.op1_kind() {
            OpKind::Immediate8to64 | OpKind::Immediate32to64 | OpKind::Immediate64 => {
                Some(i.immediate(1) as i64)
            }
            OpKind::Immediate8to32 | OpKind::Immediate32 | OpKind::Immediate8 => {
                Some(i.immediate(1) as u32 as i64)
            }
            _ => None,
        }
    };
    match i.mnemonic() {
        Mnemonic::Push => {
            ops.push(Op::AddImm(RSP, -8, false));
            true
        }
        Mnemonic::Pop => {
            match dst {
                Some((d, false)) if d != RSP => ops.push(Op::Forget(d)),
                _ => return false,
            }
            ops.push(Op::AddImm(RSP, 8, false));
            true
        }
        Mnemonic::Leave => {
            ops.push(Op::Copy(RSP, 5, false));
            ops.push(Op::AddImm(RSP, 8, false));
            ops.push(Op::Forget(5));
            true
        }
        Mnemonic::Ret | Mnemonic::Jmp | Mnemonic::Nop => true,
        _ if i.flow_control() == iced_x86::FlowControl::ConditionalBranch => true,
        Mnemonic::Cmp | Mnemonic::Test => true,
        Mnemonic::Mov => {
            let Some((d, narrow)) = dst else {
                return false;
            };
            if let Some(s) = src_reg(i.op1_kind(), i.op1_register()) {
                ops.push(Op::Copy(d, s, narrow));
            } else if let Some(v) = imm() {
                ops.push(Op::Set(d, if narrow { v as u32 as i64 } else { v }));
            } else {
                ops.push(Op::Forget(d));
            }
            true
        }
        Mnemonic::Lea => {
            let Some((d, narrow)) = dst else {
                return false;
            };
            let base = (i.memory_base() != Register::None).then(|| gpr(i.memory_base()));
            let index = (i.memory_index() != Register::None).then(|| gpr(i.memory_index()));
            if i.memory_base() == Register::RIP {
                // An address in the module: known with its load bias.
                let vaddr = i.ip_rel_memory_address().wrapping_sub(bias);
                ops.push(Op::Lea(
                    d,
                    Addr {
                        base: None,
                        index: None,
                        scale: 1,
                        disp: vaddr as i64,
                        rip: true,
                    },
                    narrow,
                ));
                return true;
            }
            match (base, index) {
                (Some(None), _) | (_, Some(None)) => ops.push(Op::Forget(d)),
                (b, x) => ops.push(Op::Lea(
                    d,
                    Addr {
                        base: b.flatten(),
                        index: x.flatten(),
                        scale: i.memory_index_scale() as u8,
                        disp: i.memory_displacement64() as i64,
                        rip: false,
                    },
                    narrow,
                )),
            }
            true
        }
        Mnemonic::Add | Mnemonic::Sub => {
            let Some((d, narrow)) = dst else {
                return false;
            };
            let negate = i.mnemonic() == Mnemonic::Sub;
            if let Some(s) = src_reg(i.op1_kind(), i.op1_register()) {
                if negate && s == d {
                    ops.push(Op::Set(d, 0));
                } else {
                    ops.push(Op::AddReg(d, s, negate, narrow));
                }
            } else if let Some(v) = imm() {
                ops.push(Op::AddImm(
                    d,
                    if negate { v.wrapping_neg() } else { v },
                    narrow,
                ));
            } else {
                ops.push(Op::Forget(d));
            }
            true
        }
        Mnemonic::Inc | Mnemonic::Dec => {
            let Some((d, narrow)) = dst else {
                return false;
            };
            let step = if i.mnemonic() == Mnemonic::Inc { 1 } else { -1 };
            ops.push(Op::AddImm(d, step, narrow));
            true
        }
        Mnemonic::Xor => {
            let Some((d, _)) = dst else {
                return false;
            };
            if src_reg(i.op1_kind(), i.op1_register()) == Some(d) {
                ops.push(Op::Set(d, 0));
            } else {
                ops.push(Op::Forget(d));
            }
            true
        }
        Mnemonic::Shl | Mnemonic::Sal => {
            let (Some((d, narrow)), Some(n)) = (dst, imm()) else {
                return false;
            };
            ops.push(Op::Shl(d, n as u8, narrow));
            true
        }
        Mnemonic::And => {
            let (Some((d, narrow)), Some(v)) = (dst, imm()) else {
                return false;
            };
            ops.push(Op::And(d, v, narrow));
            true
        }
        Mnemonic::Movsxd => {
            let (Some((d, false)), Some(s)) = (dst, src_reg(i.op1_kind(), i.op1_register())) else {
                return false;
            };
            ops.push(Op::SignExtend(d, s));
            true
        }
        _ => false,
    }
}

/// The register file regeneration keeps per frame.
pub type Regs = [Option<u64>; 16];

/// One access regeneration found: instruction `insn` of block `block` of
/// function `function` made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Access {
    /// The function (its id).
    pub function: u32,
    /// The block.
    pub block: u32,
    /// The instruction's index in the block.
    pub insn: u32,
    /// Load, store or both.
    pub kind: Kind,
    /// Bytes.
    pub size: u8,
    /// The runtime address, or why it is not known.
    pub addr: Result<u64, Why>,
}

/// Runs `ops` on `regs` (`bias`: the load bias of the function's module),
/// calling `access` with each access's kind, size and address.
pub fn run(
    ops: &[Op],
    regs: &mut Regs,
    bias: u64,
    mut access: impl FnMut(Kind, u8, Result<u64, Why>),
) {
    let addr = |a: &Addr, regs: &Regs| -> Option<u64> {
        let mut v = a.disp as u64;
        if a.rip {
            v = v.wrapping_add(bias);
        }
        if let Some(b) = a.base {
            v = v.wrapping_add(regs[b as usize]?);
        }
        if let Some(x) = a.index {
            v = v.wrapping_add(regs[x as usize]?.wrapping_mul(a.scale as u64));
        }
        Some(v)
    };
    let narrowed = |v: u64, narrow: bool| if narrow { v as u32 as u64 } else { v };
    for op in ops {
        match *op {
            Op::Access(kind, size, a) => access(kind, size, addr(&a, regs).ok_or(Why::Unknown)),
            Op::Untraced(kind, size, why) => access(kind, size, Err(why)),
            Op::Set(d, v) => regs[d as usize] = Some(v as u64),
            Op::Copy(d, s, n) => regs[d as usize] = regs[s as usize].map(|v| narrowed(v, n)),
            Op::Lea(d, a, n) => regs[d as usize] = addr(&a, regs).map(|v| narrowed(v, n)),
            Op::AddImm(d, v, n) => {
                regs[d as usize] = regs[d as usize].map(|x| narrowed(x.wrapping_add(v as u64), n))
            }
            Op::AddReg(d, s, negate, n) => {
                regs[d as usize] = match (regs[d as usize], regs[s as usize]) {
                    (Some(x), Some(y)) if negate => Some(narrowed(x.wrapping_sub(y), n)),
                    (Some(x), Some(y)) => Some(narrowed(x.wrapping_add(y), n)),
                    _ => None,
                }
            }
            Op::Shl(d, by, n) => {
                regs[d as usize] = regs[d as usize].map(|x| narrowed(x << (by & 63), n))
            }
            Op::And(d, v, n) => {
                regs[d as usize] = regs[d as usize].map(|x| narrowed(x & v as u64, n))
            }
            Op::SignExtend(d, s) => {
                regs[d as usize] = regs[s as usize].map(|x| x as u32 as i32 as i64 as u64)
            }
            Op::Forget(d) => regs[d as usize] = None,
        }
    }
}
