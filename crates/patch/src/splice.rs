//! Choosing how to splice at an instruction point.
//!
//! A `jmp rel32` needs five bytes. It may cover several whole instructions
//! (a *window*) only when nothing can arrive in the middle of the window:
//! no branch target of the module lies strictly inside it, and no stopped
//! thread's pc does. Calls may only end a window (their return address,
//! the window's end, stays in original code). Instructions before the
//! point may join the window if they fall through. Where no window is
//! safe, the point gets a 1-byte `int3` (always safe: it replaces exactly
//! one instruction's first byte) that an in-process handler redirects.

use crate::{relocate::can_relocate, JMP_LEN};
use iced_x86::{FlowControl, Instruction, Mnemonic};
use weft_code::{decode_all, BranchTargets, FunctionCode};

/// How a point is spliced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpliceMethod {
    /// `jmp rel32` over a window of whole instructions.
    Jump,
    /// `int3` redirected by weft's in-process SIGTRAP handler.
    Trap,
    /// A 2-byte `jmp rel8` to a springboard (five bytes of unused padding
    /// within 127 bytes, given here) that holds the `jmp rel32`: KernInst's
    /// springboard, for points with too little room for a `jmp rel32`.
    Springboard(u64),
}

impl SpliceMethod {
    /// Whether the splice is a jump over a window of whole instructions,
    /// which the trampoline relocates (so the window's instructions only
    /// ever run there).
    pub fn is_window(self) -> bool {
        matches!(self, SpliceMethod::Jump | SpliceMethod::Springboard(_))
    }
}

impl std::fmt::Display for SpliceMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpliceMethod::Jump => f.write_str("jmp"),
            SpliceMethod::Trap => f.write_str("int3"),
            SpliceMethod::Springboard(board) => write!(f, "jmp8 to a springboard at {board:#x}"),
        }
    }
}

/// Why a `jmp` window was not safe at a point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unsafe {
    /// Fewer than five bytes before the function (or its padding) ends.
    TooShort,
    /// A branch target lies inside every candidate window (the address given).
    BranchTargetInside(u64),
    /// A thread's pc lies inside the window.
    ThreadInside(u64),
    /// An instruction in the window cannot be relocated.
    NotRelocatable(&'static str),
    /// Not unsafe at all: `int3` was asked for (`WEFT_SPLICE=int3`, a test
    /// switch that exercises the trap path everywhere).
    Forced,
}

impl std::fmt::Display for Unsafe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unsafe::TooShort => write!(f, "fewer than 5 bytes to overwrite"),
            Unsafe::BranchTargetInside(a) => write!(f, "branch target {a:#x} inside the 5 bytes"),
            Unsafe::ThreadInside(a) => {
                write!(f, "a thread is stopped at {a:#x}, inside the 5 bytes")
            }
            Unsafe::NotRelocatable(why) => {
                write!(f, "an instruction there cannot be moved ({why})")
            }
            Unsafe::Forced => write!(f, "int3 forced (WEFT_SPLICE=int3)"),
        }
    }
}

/// What the splicer knows around a point.
pub struct SpliceContext<'a> {
    /// The function holding the point (runtime addresses).
    pub func: &'a FunctionCode,
    /// Every branch target of the module (runtime addresses).
    pub targets: &'a BranchTargets,
    /// Instruction pointers of the stopped threads.
    pub thread_pcs: &'a [u64],
    /// The bytes from the function's end up to the next function: padding a
    /// window may cover after an instruction that does not fall through.
    pub after_end: &'a [u8],
}

/// The decision for one point.
#[derive(Debug, Clone)]
pub struct SpliceChoice {
    /// Jump or trap.
    pub method: SpliceMethod,
    /// The instruction point.
    pub point: u64,
    /// First byte overwritten.
    pub start: u64,
    /// One past the last byte overwritten (for a jump) or relocated (for a trap).
    pub end: u64,
    /// Instructions moved into the trampoline, in order (padding excluded).
    pub displaced: Vec<Instruction>,
    /// Why a jump was not possible, for a trap.
    pub why_trap: Option<Unsafe>,
}

/// Old and new bytes at an address: what applying and removing a splice writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpliceRecord {
    /// Where.
    pub addr: u64,
    /// The original bytes.
    pub old: Vec<u8>,
    /// The bytes that replace them.
    pub new: Vec<u8>,
}

impl SpliceChoice {
    /// The splice bytes that send execution to a trampoline entered at `entry`:
    /// `jmp rel32` padded with `int3`, or a lone `int3`.
    pub fn record(&self, original: &[u8], entry: u64) -> Option<SpliceRecord> {
        match self.method {
            SpliceMethod::Jump => {
                let len = (self.end - self.start) as usize;
                let rel = entry as i64 - (self.start + JMP_LEN) as i64;
                let rel = i32::try_from(rel).ok()?;
                let mut new = vec![crate::INT3; len];
                new[0] = 0xe9;
                new[1..5].copy_from_slice(&rel.to_le_bytes());
                Some(SpliceRecord {
                    addr: self.start,
                    old: original.get(..len)?.to_vec(),
                    new,
                })
            }
            SpliceMethod::Trap => Some(SpliceRecord {
                addr: self.point,
                old: original.get(..1)?.to_vec(),
                new: vec![crate::INT3],
            }),
            SpliceMethod::Springboard(board) => {
                let len = (self.end - self.start) as usize;
                let rel = i8::try_from(board as i64 - (self.start + SHORT_JMP_LEN) as i64).ok()?;
                let mut new = vec![crate::INT3; len];
                new[0] = 0xeb;
                new[1] = rel as u8;
                Some(SpliceRecord {
                    addr: self.start,
                    old: original.get(..len)?.to_vec(),
                    new,
                })
            }
        }
    }

    /// For a springboard splice: the `jmp rel32` written into the
    /// springboard (`original` holds its five padding bytes).
    pub fn springboard_record(&self, original: &[u8], entry: u64) -> Option<SpliceRecord> {
        let SpliceMethod::Springboard(board) = self.method else {
            return None;
        };
        let rel = i32::try_from(entry as i64 - (board + JMP_LEN) as i64).ok()?;
        let mut new = vec![0xe9];
        new.extend_from_slice(&rel.to_le_bytes());
        Some(SpliceRecord {
            addr: board,
            old: original.get(..JMP_LEN as usize)?.to_vec(),
            new,
        })
    }
}

/// Length of a `jmp rel8`.
pub const SHORT_JMP_LEN: u64 = 2;
/// How far a `jmp rel8` reaches forward from the end of the jump.
pub const SHORT_JMP_FORWARD: u64 = 127;
/// How far back it reaches from the end of the jump.
pub const SHORT_JMP_BACKWARD: u64 = 128;

/// A window of at least two bytes for a springboard splice at `point`
/// (same safety rules as a `jmp rel32` window); the caller picks the
/// springboard and sets it in the method.
pub fn choose_short_window(ctx: &SpliceContext<'_>, point: u64) -> Option<SpliceChoice> {
    let (start, end, displaced) = find_window(ctx, point, SHORT_JMP_LEN).ok()?;
    Some(SpliceChoice {
        method: SpliceMethod::Springboard(0),
        point,
        start,
        end,
        displaced,
        why_trap: None,
    })
}

/// Chooses a jump window or a trap for the instruction at `point`.
/// Returns `None` if `point` is not an instruction boundary of the function
/// or the instruction there cannot be relocated at all.
pub fn choose_splice(ctx: &SpliceContext<'_>, point: u64) -> Option<Result<SpliceChoice, Unsafe>> {
    let insns = ctx.func.instructions();
    let k = ctx.func.index_of(point)?;
    if let Some(why) = can_relocate(&insns[k]) {
        return Some(Err(Unsafe::NotRelocatable(why)));
    }
    Some(Ok(match find_window(ctx, point, JMP_LEN) {
        Ok((start, end, displaced)) => SpliceChoice {
            method: SpliceMethod::Jump,
            point,
            start,
            end,
            displaced,
            why_trap: None,
        },
        Err(why) => SpliceChoice {
            method: SpliceMethod::Trap,
            point,
            start: point,
            end: insns[k].next_ip(),
            displaced: vec![insns[k]],
            why_trap: Some(why),
        },
    }))
}

/// A safe window of at least `min_len` bytes covering the point: starting
/// at it, or up to three fall-through instructions before it.
fn find_window(
    ctx: &SpliceContext<'_>,
    point: u64,
    min_len: u64,
) -> Result<(u64, u64, Vec<Instruction>), Unsafe> {
    let insns = ctx.func.instructions();
    let k = ctx
        .func
        .index_of(point)
        .ok_or(Unsafe::NotRelocatable("not an instruction"))?;
    let internal = ctx.func.internal_targets();
    let is_target = |a: u64| ctx.targets.contains(a) || internal.contains(&a);
    let mut first_reason = None;
    for back in 0..=3usize {
        if back > k {
            break;
        }
        let s_idx = k - back;
        // Instructions joining the window before the point must fall through,
        // and nothing may jump between them and the point.
        if insns[s_idx..k]
            .iter()
            .any(|i| i.flow_control() != FlowControl::Next || can_relocate(i).is_some())
            || insns[s_idx + 1..=k].iter().any(|i| is_target(i.ip()))
        {
            break;
        }
        match window_from(ctx, s_idx, insns[k].next_ip(), min_len, &is_target) {
            Ok((end, displaced)) => return Ok((insns[s_idx].ip(), end, displaced)),
            Err(why) => {
                first_reason.get_or_insert(why);
            }
        }
    }
    Err(first_reason.unwrap_or(Unsafe::TooShort))
}

/// Grows a window from instruction `s_idx` to at least `min_len` bytes and at
/// least to the end of the point's instruction (`point_end`).
fn window_from(
    ctx: &SpliceContext<'_>,
    s_idx: usize,
    point_end: u64,
    min_len: u64,
    is_target: &dyn Fn(u64) -> bool,
) -> Result<(u64, Vec<Instruction>), Unsafe> {
    let insns = ctx.func.instructions();
    let start = insns[s_idx].ip();
    let want = (start + min_len).max(point_end);
    let mut end = start;
    let mut displaced = Vec::new();
    let mut idx = s_idx;
    let mut falls_through = true;
    while end < want {
        if !falls_through {
            // Only unreachable padding may follow: nops or int3, no target.
            end = cover_padding(ctx, end, want, idx, is_target)?;
            break;
        }
        let Some(i) = insns.get(idx).filter(|i| i.ip() == end) else {
            return Err(Unsafe::TooShort);
        };
        if let Some(why) = can_relocate(i) {
            return Err(Unsafe::NotRelocatable(why));
        }
        end = i.next_ip();
        displaced.push(*i);
        idx += 1;
        match i.flow_control() {
            FlowControl::Call | FlowControl::IndirectCall if end < want => {
                // Its return address would land inside the overwritten bytes.
                return Err(Unsafe::BranchTargetInside(end));
            }
            FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch => falls_through = false,
            FlowControl::Interrupt | FlowControl::Exception => {
                return Err(Unsafe::NotRelocatable("trap instruction"))
            }
            _ => {}
        }
    }
    if let Some(t) = (start + 1..end).find(|&a| is_target(a)) {
        return Err(Unsafe::BranchTargetInside(t));
    }
    if ctx.targets.any_inside(start, end) {
        return Err(Unsafe::BranchTargetInside(start + 1));
    }
    if let Some(&pc) = ctx.thread_pcs.iter().find(|&&pc| pc > start && pc < end) {
        return Err(Unsafe::ThreadInside(pc));
    }
    Ok((end, displaced))
}

/// Extends a window over padding (nop or int3 instructions) from `from`
/// until at least `want`; the padding may be inside the function (after a
/// `ret` or `jmp`) or after its end.
fn cover_padding(
    ctx: &SpliceContext<'_>,
    from: u64,
    want: u64,
    idx: usize,
    is_target: &dyn Fn(u64) -> bool,
) -> Result<u64, Unsafe> {
    let insns = ctx.func.instructions();
    let mut end = from;
    let mut idx = idx;
    while end < want {
        let next = if end < ctx.func.end() {
            insns.get(idx).filter(|i| i.ip() == end).copied()
        } else {
            let off = (end - ctx.func.end()) as usize;
            ctx.after_end
                .get(off..)
                .and_then(|b| decode_all(end, b).first().copied())
        };
        let Some(i) = next else {
            return Err(Unsafe::TooShort);
        };
        if !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return Err(Unsafe::TooShort);
        }
        if is_target(i.ip()) {
            return Err(Unsafe::BranchTargetInside(i.ip()));
        }
        end = i.next_ip();
        idx += 1;
    }
    Ok(end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_code::NoData;

    fn ctx<'a>(
        f: &'a FunctionCode,
        t: &'a BranchTargets,
        pcs: &'a [u64],
        after: &'a [u8],
    ) -> SpliceContext<'a> {
        SpliceContext {
            func: f,
            targets: t,
            thread_pcs: pcs,
            after_end: after,
        }
    }

    #[test]
    fn entry_window_of_whole_instructions() {
        // push rbp; mov rbp,rsp; mov eax,1; pop rbp; ret
        let code = [0x55, 0x48, 0x89, 0xe5, 0xb8, 1, 0, 0, 0, 0x5d, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let c = choose_splice(&ctx(&f, &t, &[], &[]), 0x1000)
            .unwrap()
            .unwrap();
        assert_eq!(c.method, SpliceMethod::Jump);
        assert_eq!((c.start, c.end), (0x1000, 0x1009));
        assert_eq!(c.displaced.len(), 3);
        let rec = c.record(&code, 0x2000).unwrap();
        assert_eq!(rec.new[0], 0xe9);
        assert_eq!(
            i32::from_le_bytes(rec.new[1..5].try_into().unwrap()),
            0x2000 - 0x1005
        );
        assert_eq!(&rec.new[5..], &[0xcc; 4]);
    }

    #[test]
    fn branch_target_inside_forces_trap() {
        // 0x1000: xor eax,eax (2)  0x1002: inc eax (2) 0x1004: cmp eax,10 (3) 0x1007: jne 0x1002 (2) 0x1009: ret
        let code = [0x31, 0xc0, 0xff, 0xc0, 0x83, 0xf8, 0x0a, 0x75, 0xf9, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let c = choose_splice(&ctx(&f, &t, &[], &[]), 0x1000)
            .unwrap()
            .unwrap();
        assert_eq!(c.method, SpliceMethod::Trap);
        assert_eq!(c.why_trap, Some(Unsafe::BranchTargetInside(0x1002)));
        // The loop head itself can start a window: inc; cmp (5 bytes).
        let c = choose_splice(&ctx(&f, &t, &[], &[]), 0x1002)
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.method, c.start, c.end),
            (SpliceMethod::Jump, 0x1002, 0x1007)
        );
    }

    #[test]
    fn short_function_uses_padding_or_traps() {
        // xor eax,eax; ret  then padding
        let code = [0x31, 0xc0, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let padded = [0xcc, 0xcc, 0xcc, 0x90];
        let c = choose_splice(&ctx(&f, &t, &[], &padded), 0x1000)
            .unwrap()
            .unwrap();
        assert_eq!((c.method, c.end), (SpliceMethod::Jump, 0x1005));
        let c = choose_splice(&ctx(&f, &t, &[], &[0x55]), 0x1000)
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.method, c.why_trap),
            (SpliceMethod::Trap, Some(Unsafe::TooShort))
        );
    }

    #[test]
    fn thread_inside_forces_trap() {
        let code = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3, 0xcc, 0xcc];
        let f = FunctionCode::analyze(0x1000, &code[..6], &NoData);
        let t = BranchTargets::new();
        let c = choose_splice(&ctx(&f, &t, &[0x1001], &code[6..]), 0x1000)
            .unwrap()
            .unwrap();
        assert_eq!(c.why_trap, Some(Unsafe::ThreadInside(0x1001)));
    }

    #[test]
    fn exit_window_starts_before_ret() {
        // 0x1000: mov eax,1 (5) 0x1005: pop rbp (1) 0x1006: ret (1), next function right after
        let code = [0xb8, 1, 0, 0, 0, 0x5d, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let c = choose_splice(&ctx(&f, &t, &[], &[]), 0x1006)
            .unwrap()
            .unwrap();
        assert_eq!(
            (c.method, c.start, c.end),
            (SpliceMethod::Jump, 0x1000, 0x1007)
        );
        assert_eq!(c.point, 0x1006);
    }

    #[test]
    fn springboard_short_window_and_records() {
        // xor eax,eax; ret  with the next function right after: too short for rel32.
        let code = [0x31, 0xc0, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let t = BranchTargets::new();
        let c = ctx(&f, &t, &[], &[0x55]);
        assert_eq!(
            choose_splice(&c, 0x1000).unwrap().unwrap().method,
            SpliceMethod::Trap
        );
        let mut short = choose_short_window(&c, 0x1000).unwrap();
        assert_eq!((short.start, short.end), (0x1000, 0x1002));
        short.method = SpliceMethod::Springboard(0xff0);
        let site = short.record(&code, 0x9000).unwrap();
        // jmp rel8 back 0x14 bytes: 0x1002 - 0x12 = 0xff0
        assert_eq!(site.new, vec![0xeb, (0xff0i64 - 0x1002) as i8 as u8]);
        let board = short.springboard_record(&[0xcc; 5], 0x9000).unwrap();
        assert_eq!(board.addr, 0xff0);
        assert_eq!(board.new[0], 0xe9);
        assert_eq!(
            i32::from_le_bytes(board.new[1..5].try_into().unwrap()),
            0x9000 - 0xff5
        );
        // Out of rel8 reach: no record.
        short.method = SpliceMethod::Springboard(0x2000);
        assert!(short.record(&code, 0x9000).is_none());
    }
}
