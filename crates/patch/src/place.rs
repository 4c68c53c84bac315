//! Placement policy: which splice a point gets when the plain choice of
//! [`choose_splice`](crate::choose_splice) is not the whole story. These
//! are decisions on bytes alone (the function's code, the module's branch
//! targets, the threads' pcs and stack words, the bytes other splices
//! already claim); the live applier gathers those facts and carries the
//! decision out.
//!
//! * [`entry_point`]: a function's entry probe goes after its `endbr64`.
//! * [`trap_fallback`]: the `int3` a point falls back to when its jump
//!   window would overlap another splice.
//! * [`relocation_window`]: a jump window over branch targets, safe when
//!   the trampoline runs a relocated copy of the whole function.
//! * [`springboard`]: a two-byte `jmp rel8` to unused padding nearby that
//!   holds the `jmp rel32`, when five bytes are not safe.

use crate::{SpliceChoice, SpliceContext, SpliceMethod, Unsafe, JMP_LEN};
use weft_code::{BranchTargets, FunctionCode};

/// Where an entry probe of `code` goes: its first instruction, or the one
/// after a leading `endbr64` (which must stay the target of indirect
/// branches under CET). `None` for a function with no instruction.
pub fn entry_point(code: &FunctionCode) -> Option<u64> {
    let insns = code.instructions();
    let first = insns.first()?;
    Some(match insns.get(1) {
        Some(second) if first.code() == iced_x86::Code::Endbr64 => second.ip(),
        _ => first.ip(),
    })
}

/// The `int3` at `point` (an instruction boundary of `code`), for a point
/// whose jump window would overlap bytes another splice claims.
pub fn trap_fallback(code: &FunctionCode, point: u64) -> Option<SpliceChoice> {
    let insn = *code.instruction_at(point)?;
    Some(SpliceChoice {
        method: SpliceMethod::Trap,
        point,
        start: point,
        end: insn.next_ip(),
        displaced: vec![insn],
        why_trap: Some(Unsafe::BranchTargetInside(point)),
    })
}

/// A jump window at an entry `point` for a trampoline that runs a relocated
/// copy of the whole function, when that is safe although branch targets
/// lie inside the window: the function has no jump tables or other indirect
/// jumps (which would lead back into the original body), only its own
/// branches reach into the window, and no thread is inside the function or
/// will return into it (`stack_words`, sorted, holds every word of every
/// thread's stack: a superset of the return addresses).
pub fn relocation_window(
    code: &FunctionCode,
    point: u64,
    targets: &BranchTargets,
    pcs: &[u64],
    stack_words: &[u64],
) -> Option<SpliceChoice> {
    if !code.jump_tables().is_empty() || code.has_unresolved_indirect_jump() {
        return None;
    }
    let insns = code.instructions();
    let k = code.index_of(point)?;
    if insns[k..].iter().any(|i| {
        crate::can_relocate(i).is_some()
            && !matches!(
                i.flow_control(),
                iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
            )
    }) {
        return None;
    }
    let mut end = point;
    let mut displaced = Vec::new();
    for i in &insns[k..] {
        if end >= point + JMP_LEN {
            break;
        }
        if i.ip() != end {
            return None;
        }
        end = i.next_ip();
        displaced.push(*i);
    }
    if end < point + JMP_LEN {
        return None;
    }
    let internal = code.internal_targets();
    if (point + 1..end).any(|a| targets.contains(a) && !internal.contains(&a)) {
        return None;
    }
    let inside = |a: u64| a >= code.start() && a < code.end();
    if pcs
        .iter()
        .any(|&pc| inside(pc) && pc != point && pc != code.start())
    {
        return None;
    }
    let from = stack_words.partition_point(|&w| w < code.start());
    if stack_words.get(from).is_some_and(|&w| w < code.end()) {
        return None;
    }
    Some(SpliceChoice {
        method: SpliceMethod::Jump,
        point,
        start: point,
        end,
        displaced,
        why_trap: None,
    })
}

/// A springboard splice for `point`: a safe two-byte window, and five
/// bytes of unused padding (`padding`: sorted `(start, end)` runs) within a
/// `jmp rel8` of it, neither overlapping bytes that `claimed(start, end)`
/// says another splice holds.
pub fn springboard(
    ctx: &SpliceContext<'_>,
    point: u64,
    padding: &[(u64, u64)],
    claimed: &dyn Fn(u64, u64) -> bool,
) -> Option<SpliceChoice> {
    let mut short = crate::choose_short_window(ctx, point)?;
    if claimed(short.start, short.end) {
        return None;
    }
    let from = short.start + crate::SHORT_JMP_LEN;
    let lo = from.saturating_sub(crate::SHORT_JMP_BACKWARD);
    let hi = from + crate::SHORT_JMP_FORWARD;
    let first = padding.partition_point(|&(_, end)| end <= lo);
    for &(start, end) in padding[first..]
        .iter()
        .take_while(|&&(start, _)| start <= hi)
    {
        let mut b = start.max(lo);
        while b + JMP_LEN <= end && b <= hi {
            let taken = claimed(b, b + JMP_LEN) || (b < short.end && short.start < b + JMP_LEN);
            if !taken {
                short.method = SpliceMethod::Springboard(b);
                return Some(short);
            }
            b += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_code::NoData;

    /// Writes a splice record into `bytes` (loaded at `base`), as the live
    /// applier writes it into the process.
    fn apply(bytes: &mut [u8], base: u64, record: &crate::SpliceRecord) {
        let at = (record.addr - base) as usize;
        assert_eq!(&bytes[at..at + record.old.len()], &record.old[..]);
        bytes[at..at + record.new.len()].copy_from_slice(&record.new);
    }

    fn first_instruction(bytes: &[u8], ip: u64) -> iced_x86::Instruction {
        iced_x86::Decoder::with_ip(64, bytes, ip, iced_x86::DecoderOptions::NONE).decode()
    }

    #[test]
    fn entry_skips_endbr64_unless_it_is_all() {
        // endbr64; push rbp; ret
        let f = FunctionCode::analyze(0x1000, &[0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0xc3], &NoData);
        assert_eq!(entry_point(&f), Some(0x1004));
        let plain = FunctionCode::analyze(0x1000, &[0x55, 0xc3], &NoData);
        assert_eq!(entry_point(&plain), Some(0x1000));
        let only = FunctionCode::analyze(0x1000, &[0xf3, 0x0f, 0x1e, 0xfa], &NoData);
        assert_eq!(entry_point(&only), Some(0x1000));
        assert_eq!(
            entry_point(&FunctionCode::analyze(0x1000, &[], &NoData)),
            None
        );
    }

    #[test]
    fn trap_fallback_takes_one_instruction() {
        // push rbp; mov rbp,rsp; ret
        let f = FunctionCode::analyze(0x1000, &[0x55, 0x48, 0x89, 0xe5, 0xc3], &NoData);
        let c = trap_fallback(&f, 0x1001).unwrap();
        assert_eq!(c.method, SpliceMethod::Trap);
        assert_eq!((c.point, c.start, c.end), (0x1001, 0x1001, 0x1004));
        assert_eq!(c.displaced.len(), 1);
        assert!(trap_fallback(&f, 0x1002).is_none(), "not a boundary");
    }

    /// A loop whose head is the entry: `xor eax,eax` is jumped back to.
    /// 0: 31 c0 xor eax,eax ; 2: ff c7 inc edi ; 4: 83 ff 0a cmp edi,10 ;
    /// 7: 75 f7 jne 0 ; 9: c3 ret
    const LOOP: [u8; 10] = [0x31, 0xc0, 0xff, 0xc7, 0x83, 0xff, 0x0a, 0x75, 0xf7, 0xc3];

    #[test]
    fn relocation_window_covers_the_function_s_own_targets() {
        let f = FunctionCode::analyze(0x1000, &LOOP, &NoData);
        let mut targets = BranchTargets::new();
        targets.add_instructions(f.instructions());
        let c = relocation_window(&f, 0x1000, &targets, &[], &[]).unwrap();
        assert_eq!(
            (c.method, c.start, c.end),
            (SpliceMethod::Jump, 0x1000, 0x1007)
        );
        let mut bytes = LOOP.to_vec();
        apply(&mut bytes, 0x1000, &c.record(&LOOP, 0x5000).unwrap());
        let jmp = first_instruction(&bytes, 0x1000);
        assert_eq!(
            jmp.near_branch_target(),
            0x5000,
            "spliced to the trampoline"
        );
        assert_eq!(
            &bytes[5..7],
            &[0xcc, 0xcc],
            "the rest of the window is int3"
        );
    }

    #[test]
    fn relocation_window_refuses_what_would_reenter_the_original() {
        let f = FunctionCode::analyze(0x1000, &LOOP, &NoData);
        let mut targets = BranchTargets::new();
        targets.add_instructions(f.instructions());
        // Another function branches into the window.
        let mut outside = BranchTargets::new();
        outside.add_instructions(f.instructions());
        outside.insert(0x1002);
        assert!(relocation_window(&f, 0x1000, &outside, &[], &[]).is_none());
        // A thread is inside, or will return into the function.
        assert!(relocation_window(&f, 0x1000, &targets, &[0x1004], &[]).is_none());
        assert!(relocation_window(&f, 0x1000, &targets, &[0x1000], &[]).is_some());
        assert!(relocation_window(&f, 0x1000, &targets, &[], &[0x10, 0x1009, 0x9000]).is_none());
        assert!(relocation_window(&f, 0x1000, &targets, &[], &[0x10, 0x100a]).is_some());
    }

    #[test]
    fn springboard_uses_free_padding_in_reach() {
        // A 3-byte function whose five bytes would run into the next one:
        // 0: 31 c0 xor eax,eax ; 2: c3 ret ; then padding at 0x1010..0x1020.
        let code = [0x31, 0xc0, 0xc3];
        let f = FunctionCode::analyze(0x1000, &code, &NoData);
        let targets = BranchTargets::new();
        let ctx = SpliceContext {
            func: &f,
            targets: &targets,
            thread_pcs: &[],
            after_end: &[],
        };
        let padding = [(0x1010, 0x1020)];
        let c = springboard(&ctx, 0x1000, &padding, &|_, _| false).unwrap();
        assert_eq!(c.method, SpliceMethod::Springboard(0x1010));
        assert_eq!((c.start, c.end), (0x1000, 0x1002));
        // The first five bytes of padding are taken: the next free ones.
        let c = springboard(&ctx, 0x1000, &padding, &|s, e| s < 0x1015 && e > 0x1010).unwrap();
        assert_eq!(c.method, SpliceMethod::Springboard(0x1015));
        // The two-byte window itself is taken, or no padding is in reach.
        assert!(springboard(&ctx, 0x1000, &padding, &|s, _| s == 0x1000).is_none());
        assert!(springboard(&ctx, 0x1000, &[(0x2000, 0x2010)], &|_, _| false).is_none());
        // Written into memory: jmp rel8 to the board, jmp rel32 from it.
        let c = springboard(&ctx, 0x1000, &padding, &|_, _| false).unwrap();
        let mut bytes = vec![0xcc; 0x20];
        bytes[..3].copy_from_slice(&code);
        let board = c.springboard_record(&bytes[0x10..0x15], 0x9000).unwrap();
        apply(&mut bytes, 0x1000, &c.record(&code[..2], 0x9000).unwrap());
        apply(&mut bytes, 0x1000, &board);
        let short = first_instruction(&bytes, 0x1000);
        assert_eq!(short.near_branch_target(), 0x1010);
        let long = first_instruction(&bytes[0x10..], 0x1010);
        assert_eq!(long.near_branch_target(), 0x9000);
    }
}
