//! Encoding a copy's instructions at its address: what iced's
//! `BlockEncoder` does, for the forms a copy holds, at a fraction of its
//! cost. Setting up gcc's `cc1` (45,000 functions) spent a quarter of its
//! time in `BlockEncoder`, which wraps every instruction in an allocation
//! and encodes each again on every pass over the block.
//!
//! Here an instruction that does not depend on where it is lies encoded
//! once. Direct jumps, conditional jumps and calls are written by hand:
//! to an instruction of the block (its `ip`, as with `BlockEncoder`) they
//! start short and grow to 32-bit displacements only where the target is
//! out of reach, until no jump grows; elsewhere they take 32 bits. An
//! operand relative to `rip` is encoded once its place is known. Anything
//! else (`loop`, `jrcxz`, `xbegin`, a prefixed branch, a target out of a
//! 32-bit reach) is left to `BlockEncoder`, which the result of this
//! module equals in meaning (`tests` compare them on whole libraries).

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Encoder, FlowControl, Instruction, InstructionBlock,
    OpKind,
};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by instruction addresses, hashed by one multiplication
/// (std's SipHash, made to withstand chosen keys, was a twentieth of a
/// large program's setup here).
pub(crate) type IpMap<V> = HashMap<u64, V, BuildHasherDefault<IpHasher>>;

/// The hasher of [`IpMap`]: for `u64` keys only.
#[derive(Default)]
pub(crate) struct IpHasher(u64);

impl Hasher for IpHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let h = (self.0 ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = h ^ (h >> 32);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A block encoded: its bytes, and where each instruction begins in them.
pub(crate) struct Encoded {
    pub(crate) code: Vec<u8>,
    pub(crate) offsets: Vec<u32>,
}

/// `instructions` encoded to run at `rip`; branches to the `ip` of an
/// instruction among them go to that instruction.
pub(crate) fn encode(instructions: &[Instruction], rip: u64) -> Result<Encoded, String> {
    if let Some(e) = by_hand(instructions, rip) {
        return Ok(e);
    }
    with_iced(instructions, rip)
}

/// `BlockEncoder`'s encoding.
fn with_iced(instructions: &[Instruction], rip: u64) -> Result<Encoded, String> {
    let r = BlockEncoder::encode(
        64,
        InstructionBlock::new(instructions, rip),
        BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS,
    )
    .map_err(|e| e.to_string())?;
    Ok(Encoded {
        code: r.code_buffer,
        offsets: r.new_instruction_offsets,
    })
}

/// Where a branch or a `rip`-relative operand goes.
#[derive(Clone, Copy)]
enum Target {
    /// The instruction of the block with this index.
    Local(usize),
    /// An address outside the block.
    Away(u64),
}

#[derive(Clone, Copy)]
enum Form {
    /// Bytes `from..from + len` of the pre-encoded instructions.
    Fixed { from: usize },
    /// `jmp`: short (2 bytes) or 32-bit (5).
    Jump(Target),
    /// `jcc` with condition nibble `cc`: short (2) or 32-bit (6).
    Branch(u8, Target),
    /// `call rel32` (5).
    Call(Target),
    /// A memory operand relative to `rip`, encoded in place.
    RipRelative(Target),
}

/// The block encoded here, or `None` for a form left to `BlockEncoder`.
fn by_hand(instructions: &[Instruction], rip: u64) -> Option<Encoded> {
    let n = instructions.len();
    // Instructions by `ip`: a zero `ip` names none (BlockEncoder's rule;
    // other `ip`s are unique, which BlockEncoder checks).
    let mut by_ip: IpMap<usize> = IpMap::with_capacity_and_hasher(n, Default::default());
    for (k, i) in instructions.iter().enumerate() {
        if i.ip() != 0 && by_ip.insert(i.ip(), k).is_some() {
            return None;
        }
    }
    let target = |to: u64| {
        by_ip
            .get(&to)
            .map_or(Target::Away(to), |&k| Target::Local(k))
    };
    // Two encoders: one collects the fixed instructions' bytes end to
    // end, the other encodes one instruction at a time.
    let mut encoder = Encoder::new(64);
    let mut one = Encoder::new(64);
    let mut forms = Vec::with_capacity(n);
    let mut lens: Vec<u8> = Vec::with_capacity(n);
    let mut fixed_len = 0usize;
    for i in instructions {
        let branch_prefixed = i.has_repne_prefix()
            || i.has_rep_prefix()
            || i.segment_prefix() != iced_x86::Register::None;
        let (form, len) = match i.flow_control() {
            FlowControl::UnconditionalBranch if i.op0_kind() == OpKind::NearBranch64 => {
                if branch_prefixed || !matches!(i.code(), Code::Jmp_rel8_64 | Code::Jmp_rel32_64) {
                    return None;
                }
                let t = target(i.near_branch64());
                (
                    Form::Jump(t),
                    if matches!(t, Target::Local(_)) { 2 } else { 5 },
                )
            }
            FlowControl::ConditionalBranch if i.is_jcc_short_or_near() => {
                if branch_prefixed || i.op0_kind() != OpKind::NearBranch64 {
                    return None;
                }
                let cc = (i.condition_code() as u8).checked_sub(1)?;
                let t = target(i.near_branch64());
                (
                    Form::Branch(cc, t),
                    if matches!(t, Target::Local(_)) { 2 } else { 6 },
                )
            }
            FlowControl::Call if i.code() == Code::Call_rel32_64 => {
                if branch_prefixed {
                    return None;
                }
                (Form::Call(target(i.near_branch64())), 5)
            }
            _ if (0..i.op_count()).any(|o| {
                matches!(
                    i.op_kind(o),
                    OpKind::NearBranch16
                        | OpKind::NearBranch32
                        | OpKind::NearBranch64
                        | OpKind::FarBranch16
                        | OpKind::FarBranch32
                )
            }) =>
            {
                return None
            }
            _ if i.is_ip_rel_memory_operand() => {
                // Its length does not depend on where it is: measured at
                // the block's start, pointing there.
                let mut probe = *i;
                probe.set_memory_displacement64(rip);
                let len = one.encode(&probe, rip).ok()?;
                one.set_buffer(Vec::new());
                (
                    Form::RipRelative(target(i.ip_rel_memory_address())),
                    len as u8,
                )
            }
            _ => {
                let len = encoder.encode(i, rip).ok()?;
                let form = Form::Fixed { from: fixed_len };
                fixed_len += len;
                (form, len as u8)
            }
        };
        forms.push(form);
        lens.push(len);
    }
    let fixed = encoder.take_buffer();
    // Grow the short jumps that do not reach, until none has to.
    let mut at = vec![0u64; n + 1];
    loop {
        let mut a = rip;
        for k in 0..n {
            at[k] = a;
            a += u64::from(lens[k]);
        }
        at[n] = a;
        let mut grew = false;
        for k in 0..n {
            let (Form::Jump(Target::Local(t)) | Form::Branch(_, Target::Local(t))) = forms[k]
            else {
                continue;
            };
            if lens[k] == 2 && i8::try_from(at[t].wrapping_sub(at[k] + 2) as i64).is_err() {
                lens[k] = if matches!(forms[k], Form::Jump(_)) {
                    5
                } else {
                    6
                };
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let place = |t: Target| match t {
        Target::Local(k) => at[k],
        Target::Away(a) => a,
    };
    let rel32 = |to: u64, end: u64| i32::try_from(to.wrapping_sub(end) as i64).ok();
    let mut code = Vec::with_capacity((at[n] - rip) as usize);
    for k in 0..n {
        let end = at[k] + u64::from(lens[k]);
        match forms[k] {
            Form::Fixed { from } => {
                code.extend_from_slice(&fixed[from..from + usize::from(lens[k])]);
            }
            Form::Jump(t) | Form::Branch(_, t) if lens[k] == 2 => {
                let opcode = match forms[k] {
                    Form::Branch(cc, _) => 0x70 | cc,
                    _ => 0xEB,
                };
                let d = place(t).wrapping_sub(end) as i8;
                code.extend_from_slice(&[opcode, d as u8]);
            }
            Form::Jump(t) => {
                code.push(0xE9);
                code.extend_from_slice(&rel32(place(t), end)?.to_le_bytes());
            }
            Form::Branch(cc, t) => {
                code.extend_from_slice(&[0x0F, 0x80 | cc]);
                code.extend_from_slice(&rel32(place(t), end)?.to_le_bytes());
            }
            Form::Call(t) => {
                code.push(0xE8);
                code.extend_from_slice(&rel32(place(t), end)?.to_le_bytes());
            }
            Form::RipRelative(t) => {
                let mut i = instructions[k];
                i.set_memory_displacement64(place(t));
                let len = one.encode(&i, at[k]).ok()?;
                if len != usize::from(lens[k]) {
                    return None;
                }
                code.extend_from_slice(&one.take_buffer());
            }
        }
    }
    let offsets = at[..n].iter().map(|&a| (a - rip) as u32).collect();
    Some(Encoded { code, offsets })
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    /// Each instruction of `a` (encoded at `rip`) means what the same
    /// one of `b` does: the same operation and operands, and branches and
    /// `rip`-relative operands to the same instruction or address.
    fn same_meaning(instructions: &[Instruction], rip: u64, a: &Encoded, b: &Encoded) {
        let decode = |e: &Encoded| -> Vec<Instruction> {
            let mut d = Decoder::with_ip(64, &e.code, rip, DecoderOptions::NONE);
            let mut out = Vec::new();
            while d.can_decode() {
                out.push(d.decode());
            }
            assert_eq!(out.len(), instructions.len(), "one instruction each");
            out
        };
        let (da, db) = (decode(a), decode(b));
        let index = |e: &Encoded, addr: u64| {
            e.offsets
                .iter()
                .position(|&o| rip + u64::from(o) == addr)
                .ok_or(addr)
        };
        for k in 0..instructions.len() {
            let (x, y) = (&da[k], &db[k]);
            assert_eq!(rip + u64::from(a.offsets[k]), x.ip());
            assert_eq!(x.mnemonic(), y.mnemonic(), "instruction {k}");
            if x.op_count() > 0 && x.op0_kind() == OpKind::NearBranch64 {
                assert_eq!(
                    index(a, x.near_branch64()),
                    index(b, y.near_branch64()),
                    "branch {k}: {x} / {y}"
                );
            } else if x.is_ip_rel_memory_operand() {
                assert_eq!(
                    index(a, x.ip_rel_memory_address()),
                    index(b, y.ip_rel_memory_address()),
                    "operand {k}: {x} / {y}"
                );
            } else {
                assert_eq!(x.code(), y.code(), "instruction {k}: {x} / {y}");
                assert_eq!(format!("{x}"), format!("{y}"), "instruction {k}");
            }
        }
    }

    /// Every function of the C library, decoded and then moved: each
    /// instruction keeps its `ip` (branches between them stay inside,
    /// others go back to the original), encoded elsewhere by hand and by
    /// `BlockEncoder`, which must mean the same.
    #[test]
    fn moved_code_means_what_block_encoder_makes_of_it() {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the C library");
        let image = weft_image::Image::open(std::path::Path::new(libc)).unwrap();
        let (mut checked, mut by_hand_count) = (0, 0);
        let mut sizes = (0usize, 0usize);
        for f in image.functions() {
            let Some(bytes) = image.bytes_at(f.addr, f.size as usize) else {
                continue;
            };
            let addr = f.addr.0;
            let mut d = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
            let instructions: Vec<Instruction> = d.iter().collect();
            if instructions.iter().any(|i| i.is_invalid()) {
                continue;
            }
            let rip = 0x7000_0000 + addr * 2;
            let Ok(iced) = with_iced(&instructions, rip) else {
                continue;
            };
            if let Some(mine) = by_hand(&instructions, rip) {
                same_meaning(&instructions, rip, &mine, &iced);
                sizes.0 += mine.code.len();
                sizes.1 += iced.code.len();
                assert!(mine.code.len() <= iced.code.len() + 8 * instructions.len());
                by_hand_count += 1;
            }
            checked += 1;
        }
        eprintln!(
            "{by_hand_count} of {checked} functions by hand: {} bytes, BlockEncoder {}",
            sizes.0, sizes.1
        );
        assert!(checked > 2000, "{checked} functions");
        assert!(
            by_hand_count * 10 > checked * 9,
            "{by_hand_count} of {checked} by hand"
        );
    }
}
