//! Jump tables: finding the targets of `switch` dispatch from machine code.
//!
//! A backward slice over the few instructions before an indirect `jmp`
//! recognises the two shapes compilers emit on x86-64:
//!
//! * position-independent: `lea rB,[rip+T]; movsxd rX,dword [rB+rI*4];
//!   add rX,rB; jmp rX` (entries are 32-bit offsets from T);
//! * absolute: `jmp qword [T+rI*8]` or `mov rX,[T+rI*8]; jmp rX`.
//!
//! The table size comes from the bounds check (`cmp rI,N; ja default`);
//! without one, entries are read while they point inside the function.
//! A bounded table may send some cases outside the function: into a part
//! the compiler split off (`.cold`), kept in [`JumpTable::outside`].

use crate::DataSource;
use iced_x86::{
    Code, ConditionCode, FlowControl, Instruction, InstructionInfoFactory, OpAccess, OpKind,
    Register,
};

/// A resolved jump table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JumpTable {
    /// Address of the indirect jump.
    pub jump: u64,
    /// Address of the table (0 for the targets of a computed `goto`, see
    /// [`crate::FunctionCode::add_computed_targets`]).
    pub table: u64,
    /// The distinct targets inside the function, in table order.
    pub targets: Vec<u64>,
    /// The distinct targets outside it (another part of the function), in
    /// table order.
    pub outside: Vec<u64>,
    /// The jump may go anywhere else too: its targets are a computed
    /// `goto`'s labels, not a bounded table.
    pub elsewhere: bool,
}

const MAX_ENTRIES: usize = 4096;
const SLICE: usize = 16;

/// Tries to resolve the indirect jump `insns[at]` of a function spanning `[lo, hi)`.
pub(crate) fn resolve(
    insns: &[Instruction],
    at: usize,
    lo: u64,
    hi: u64,
    data: &dyn DataSource,
) -> Option<JumpTable> {
    let jmp = &insns[at];
    let (table, kind, index_reg, load_at) = match jmp.op0_kind() {
        OpKind::Memory if jmp.memory_base() == Register::None && jmp.memory_index_scale() == 8 => (
            jmp.memory_displacement64(),
            Kind::Absolute,
            jmp.memory_index(),
            at,
        ),
        OpKind::Register => slice_register(insns, at, jmp.op0_register())?,
        _ => return None,
    };
    // A compare of the index (or of memory, which it is often loaded from)
    // says; one of another register says less than a byte index does.
    let bound = match bound_before(insns, load_at, index_reg) {
        Some((b, true)) => Some(b),
        other => narrow_index(insns, load_at, index_reg).or(other.map(|(b, _)| b)),
    };
    let count = bound.unwrap_or(MAX_ENTRIES).min(MAX_ENTRIES);
    let entry_size = match kind {
        Kind::Relative => 4,
        Kind::Absolute => 8,
    };
    let mut targets = Vec::new();
    let mut outside = Vec::new();
    for i in 0..count {
        let Some(bytes) = data.read(table + (i * entry_size) as u64, entry_size) else {
            break;
        };
        let target = match kind {
            Kind::Relative => {
                table.wrapping_add(i32::from_le_bytes(bytes[..4].try_into().ok()?) as i64 as u64)
            }
            Kind::Absolute => u64::from_le_bytes(bytes[..8].try_into().ok()?),
        };
        if target < lo || target >= hi {
            if bound.is_none() {
                break;
            }
            // A case in another part of the function.
            if !outside.contains(&target) {
                outside.push(target);
            }
            continue;
        }
        if !targets.contains(&target) {
            targets.push(target);
        }
    }
    if targets.is_empty() && outside.is_empty() {
        return None;
    }
    Some(JumpTable {
        jump: jmp.ip(),
        table,
        targets,
        outside,
        elsewhere: false,
    })
}

#[derive(Clone, Copy)]
enum Kind {
    Relative,
    Absolute,
}

/// The load of a table entry feeding a `jmp reg`.
enum TableLoad {
    /// `movsxd rX, dword [rB+rI*4]; add rX, rB`: an offset from the table
    /// whose address `rB` holds.
    Relative {
        base: Register,
        index: Register,
        at: usize,
    },
    /// `mov rX, [T+rI*8]`.
    Absolute {
        table: u64,
        index: Register,
        at: usize,
    },
}

/// For `jmp reg`, finds the table load feeding `reg`.
fn table_load(insns: &[Instruction], at: usize, reg: Register) -> Option<TableLoad> {
    let start = at.saturating_sub(SLICE);
    let mut want = reg.full_register();
    let mut base_reg = None;
    for j in (start..at).rev() {
        let i = &insns[j];
        // add rX, rB  (rX = loaded entry, rB = table base)
        if base_reg.is_none()
            && i.code() == Code::Add_r64_rm64
            && i.op0_register().full_register() == want
            && i.op1_kind() == OpKind::Register
        {
            base_reg = Some(i.op1_register().full_register());
            continue;
        }
        if base_reg.is_none()
            && i.code() == Code::Add_rm64_r64
            && i.op0_kind() == OpKind::Register
            && i.op0_register().full_register() == want
        {
            base_reg = Some(i.op1_register().full_register());
            continue;
        }
        if i.op_count() >= 2
            && i.op0_kind() == OpKind::Register
            && i.op0_register().full_register() == want
            && i.op1_kind() == OpKind::Memory
        {
            match (i.code(), base_reg) {
                (Code::Movsxd_r64_rm32, Some(b))
                    if i.memory_base().full_register() == b && i.memory_index_scale() == 4 =>
                {
                    return Some(TableLoad::Relative {
                        base: b,
                        index: i.memory_index(),
                        at: j,
                    });
                }
                (Code::Mov_r64_rm64, None)
                    if i.memory_base() == Register::None && i.memory_index_scale() == 8 =>
                {
                    return Some(TableLoad::Absolute {
                        table: i.memory_displacement64(),
                        index: i.memory_index(),
                        at: j,
                    });
                }
                _ => {}
            }
        }
        // A plain register move feeding the jump register.
        if i.code() == Code::Mov_r64_rm64
            && i.op0_register().full_register() == want
            && i.op1_kind() == OpKind::Register
        {
            want = i.op1_register().full_register();
        }
    }
    None
}

/// For `jmp reg`, the table (address, kind, index register, where its
/// entry is loaded).
fn slice_register(
    insns: &[Instruction],
    at: usize,
    reg: Register,
) -> Option<(u64, Kind, Register, usize)> {
    match table_load(insns, at, reg)? {
        TableLoad::Relative { base, index, at: j } => {
            let table = find_lea(insns, at.saturating_sub(SLICE), j, base)
                .or_else(|| table_base_of(insns, j, base))
                .or_else(|| base_reaching(insns, at, j, base))?;
            Some((table, Kind::Relative, index, j))
        }
        TableLoad::Absolute {
            table,
            index,
            at: j,
        } => Some((table, Kind::Absolute, index, j)),
    }
}

/// Whether the indirect jump `insns[at]` adds an entry of a table of
/// offsets to the table's address (a `switch`, never a computed `goto`,
/// even when weft cannot tell the table's address).
pub(crate) fn is_offset_switch(insns: &[Instruction], at: usize) -> bool {
    let jmp = &insns[at];
    jmp.op0_kind() == OpKind::Register
        && matches!(
            table_load(insns, at, jmp.op0_register()),
            Some(TableLoad::Relative { .. })
        )
}

/// Whether the indirect jump `insns[at]` takes its target from a table:
/// an indexed memory operand (`jmp [T+rI*8]`), or a register a table
/// entry was loaded into (see [`table_load`]), whether or not weft can
/// tell the table's address.
pub(crate) fn fed_by_table(insns: &[Instruction], at: usize) -> bool {
    let jmp = &insns[at];
    match jmp.op0_kind() {
        OpKind::Register => table_load(insns, at, jmp.op0_register()).is_some(),
        OpKind::Memory => jmp.memory_index() != Register::None,
        _ => false,
    }
}

/// Whether `i` may change register `b`: any write to it or a part of it,
/// and a call for a register calls do not keep.
fn writes(i: &Instruction, b: Register, factory: &mut InstructionInfoFactory) -> bool {
    if is_caller_saved(b)
        && matches!(
            i.flow_control(),
            FlowControl::Call | FlowControl::IndirectCall
        )
    {
        return true;
    }
    factory.info(i).used_registers().iter().any(|u| {
        u.register().full_register() == b
            && !matches!(
                u.access(),
                OpAccess::Read | OpAccess::CondRead | OpAccess::None
            )
    })
}

fn is_caller_saved(b: Register) -> bool {
    matches!(
        b,
        Register::RAX
            | Register::RCX
            | Register::RDX
            | Register::RSI
            | Register::RDI
            | Register::R8
            | Register::R9
            | Register::R10
            | Register::R11
    )
}

/// The table whose address register `b` holds at `insns[load]`, the load
/// of the `switch` jump `insns[jump]`, found by walking the function's
/// instructions back from the load along every way in (fall-through and
/// direct branches): each must meet the same `lea b, [rip+T]` before any
/// other write of `b`, and none may reach the function's entry. An
/// instruction no direct branch or fall-through reaches is a case of this
/// very `switch` (where `b` holds the table, if it does on every other
/// way): allowed only when the jump is the function's one indirect jump.
/// bash's `enable_builtin` loads its table in its prologue and writes the
/// register again after the option loop.
fn base_reaching(insns: &[Instruction], jump: usize, load: usize, b: Register) -> Option<u64> {
    let index: std::collections::HashMap<u64, usize> =
        insns.iter().enumerate().map(|(k, i)| (i.ip(), k)).collect();
    let mut preds: Vec<Vec<usize>> = vec![Vec::new(); insns.len()];
    for (k, i) in insns.iter().enumerate() {
        let falls = matches!(
            i.flow_control(),
            FlowControl::Next
                | FlowControl::Call
                | FlowControl::IndirectCall
                | FlowControl::ConditionalBranch
        );
        if falls && k + 1 < insns.len() {
            preds[k + 1].push(k);
        }
        if matches!(
            i.flow_control(),
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
        ) && crate::cfg::is_direct_branch(i)
        {
            if let Some(&t) = index.get(&i.near_branch_target()) {
                preds[t].push(k);
            }
        }
    }
    let one_indirect_jump = insns
        .iter()
        .enumerate()
        .all(|(k, i)| k == jump || i.flow_control() != FlowControl::IndirectBranch);
    let mut factory = InstructionInfoFactory::new();
    let mut table = None;
    let mut seen = vec![false; insns.len()];
    let mut work = vec![load];
    seen[load] = true;
    while let Some(k) = work.pop() {
        if k == 0 {
            return None;
        }
        if preds[k].is_empty() && !one_indirect_jump {
            return None;
        }
        for &p in &preds[k] {
            if seen[p] {
                continue;
            }
            seen[p] = true;
            let i = &insns[p];
            if i.code() == Code::Lea_r64_m
                && i.op0_register().full_register() == b
                && i.is_ip_rel_memory_operand()
            {
                let t = i.ip_rel_memory_address();
                if table.is_some_and(|x| x != t) {
                    return None;
                }
                table = Some(t);
                continue;
            }
            if writes(i, b, &mut factory) {
                return None;
            }
            work.push(p);
        }
    }
    table
}

/// `lea b, [rip+T]` before `before`.
fn find_lea(insns: &[Instruction], start: usize, before: usize, b: Register) -> Option<u64> {
    insns[start..before]
        .iter()
        .rev()
        .find(|i| {
            i.code() == Code::Lea_r64_m
                && i.op0_register().full_register() == b
                && i.is_ip_rel_memory_operand()
        })
        .map(|i| i.ip_rel_memory_address())
}

/// The table a function keeps in register `b` for the whole of its body:
/// the `lea b, [rip+T]` before `before`, however far (GCC hoists it out of
/// the loop around a `switch`: perl's `Perl_ck_fun` loads it 17
/// instructions before its jump), when no other instruction of the
/// function writes `b` except `lea`s of the same table and the `pop` of
/// an epilogue. A register calls do not keep (caller-saved) must not live
/// across any call.
fn table_base_of(insns: &[Instruction], before: usize, b: Register) -> Option<u64> {
    let is_lea_of_b = |i: &Instruction| {
        i.code() == Code::Lea_r64_m
            && i.op0_register().full_register() == b
            && i.is_ip_rel_memory_operand()
    };
    let table = insns[..before]
        .iter()
        .rev()
        .find(|i| is_lea_of_b(i))?
        .ip_rel_memory_address();
    let mut factory = InstructionInfoFactory::new();
    for i in insns {
        if is_lea_of_b(i) {
            if i.ip_rel_memory_address() != table {
                return None;
            }
            continue;
        }
        let epilogue = i.code() == Code::Pop_r64 && i.op0_register() == b;
        if !epilogue && writes(i, b, &mut factory) {
            return None;
        }
    }
    Some(table)
}

/// Number of entries an index set just before `load_at` can select when
/// no bounds check says: a byte zero-extended into it (`movzx eax, sil`:
/// 256), or a mask (`and eax, 0x3f`: 64). CPython's dispatch indexes its
/// table of `goto` labels with the opcode byte, and unused opcodes lead
/// into another part of the function: without the size, the table would
/// seem to end at the first of them.
fn narrow_index(insns: &[Instruction], load_at: usize, index: Register) -> Option<usize> {
    if index == Register::None {
        return None;
    }
    let full = index.full_register();
    let start = load_at.saturating_sub(SLICE);
    for j in (start..load_at).rev() {
        let i = &insns[j];
        let writes = i.op_count() > 0
            && i.op0_kind() == OpKind::Register
            && i.op0_register().full_register() == full;
        if !writes {
            continue;
        }
        return match i.mnemonic() {
            iced_x86::Mnemonic::Movzx
                if i.op1_kind() == OpKind::Register && i.op1_register().size() == 1
                    || i.op1_kind() == OpKind::Memory
                        && i.memory_size() == iced_x86::MemorySize::UInt8 =>
            {
                Some(256)
            }
            iced_x86::Mnemonic::And
                if i.op1_kind() != OpKind::Register && i.op1_kind() != OpKind::Memory =>
            {
                let mask = i.immediate(1);
                (mask < MAX_ENTRIES as u64).then(|| mask as usize + 1)
            }
            _ => None,
        };
    }
    None
}

/// Number of entries from the bounds check nearest before `load_at` (a
/// compare with a constant, and the jump that leaves above it), and
/// whether it compares the index register (or the register or memory it
/// was copied from) rather than something else.
fn bound_before(insns: &[Instruction], load_at: usize, index: Register) -> Option<(usize, bool)> {
    let start = load_at.saturating_sub(SLICE * 2);
    let mut indexes = vec![index.full_register()];
    // Memory the index was loaded from (`mov eax, [rsi]`).
    let mut loaded_from = Vec::new();
    let place = |i: &Instruction| {
        (
            i.memory_base(),
            i.memory_index(),
            i.memory_index_scale(),
            i.memory_displacement64(),
        )
    };
    for j in (start..load_at).rev() {
        let i = &insns[j];
        // `mov eax, ecx`: the index came from ecx.
        let moves = matches!(
            i.code(),
            Code::Mov_r32_rm32 | Code::Mov_r64_rm64 | Code::Mov_rm32_r32 | Code::Mov_rm64_r64
        ) && i.op0_kind() == OpKind::Register
            && indexes.contains(&i.op0_register().full_register());
        if moves && i.op1_kind() == OpKind::Register {
            indexes.push(i.op1_register().full_register());
            continue;
        }
        if moves && i.op1_kind() == OpKind::Memory {
            loaded_from.push(place(i));
            continue;
        }
        if i.is_jcc_short_or_near() {
            let cmp = j.checked_sub(1).map(|k| &insns[k])?;
            if cmp.mnemonic() != iced_x86::Mnemonic::Cmp
                || cmp.op1_kind() == OpKind::Register
                || cmp.op1_kind() == OpKind::Memory
            {
                continue;
            }
            let related = match cmp.op0_kind() {
                OpKind::Memory => loaded_from.contains(&place(cmp)),
                _ => indexes.contains(&cmp.op0_register().full_register()),
            };
            let imm = cmp.immediate(1) as usize;
            return match i.condition_code() {
                ConditionCode::a => Some((imm + 1, related)),
                ConditionCode::ae => Some((imm, related)),
                _ => None,
            };
        }
    }
    None
}
