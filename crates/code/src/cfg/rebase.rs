//! A function's analysed code moved to another load address: a program
//! that runs again (each `cc1` of a build) loads its file at another
//! address, and what was worked out for one address holds at any other,
//! every address shifted alike.

use super::FunctionCode;
use iced_x86::{Instruction, OpKind};

impl FunctionCode {
    /// This code as analysed `delta` bytes further on (wrapping): every
    /// instruction, branch target, `rip`-relative operand, block, jump
    /// table and noted place shifted by `delta`. The same as analysing
    /// the function's bytes there, where its jump tables hold offsets or
    /// relocated addresses (position-independent code); a program whose
    /// code holds absolute addresses loads at one address only.
    pub fn rebased(&self, delta: u64) -> FunctionCode {
        let shift = |a: u64| a.wrapping_add(delta);
        FunctionCode {
            start: shift(self.start),
            end: shift(self.end),
            insns: self.insns.iter().map(|i| moved(i, delta)).collect(),
            blocks: self
                .blocks
                .iter()
                .map(|b| super::Block {
                    start: shift(b.start),
                    end: shift(b.end),
                    ..b.clone()
                })
                .collect(),
            jump_tables: self
                .jump_tables
                .iter()
                .map(|t| crate::jump_table::JumpTable {
                    jump: shift(t.jump),
                    // 0: a computed `goto`'s labels, no table.
                    table: if t.table == 0 { 0 } else { shift(t.table) },
                    targets: t.targets.iter().map(|&a| shift(a)).collect(),
                    outside: t.outside.iter().map(|&a| shift(a)).collect(),
                    elsewhere: t.elsewhere,
                })
                .collect(),
            other_parts: self.other_parts.iter().map(|&a| shift(a)).collect(),
            entries: self.entries.iter().map(|&a| shift(a)).collect(),
            tail_jumps: self.tail_jumps.iter().map(|&a| shift(a)).collect(),
        }
    }
}

/// `i` decoded `delta` bytes further on.
fn moved(i: &Instruction, delta: u64) -> Instruction {
    let mut m = *i;
    m.set_ip(i.ip().wrapping_add(delta));
    if (0..i.op_count()).any(|o| i.op_kind(o) == OpKind::NearBranch64) {
        m.set_near_branch64(i.near_branch64().wrapping_add(delta));
    }
    if i.is_ip_rel_memory_operand() {
        m.set_memory_displacement64(i.memory_displacement64().wrapping_add(delta));
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use iced_x86::{Decoder, DecoderOptions};

    /// The bytes of a file's sections by link-time address.
    struct Sections(Vec<(u64, Vec<u8>)>);

    impl Sections {
        fn at(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
            self.0.iter().find_map(|(start, bytes)| {
                let off = addr.checked_sub(*start)? as usize;
                bytes.get(off..off + len).map(<[u8]>::to_vec)
            })
        }
    }

    /// Every function of the C library analysed at its link-time address,
    /// then moved, is what analysing it at the new address gives: jump
    /// tables and all.
    #[test]
    fn moved_code_is_the_code_analysed_there() {
        use object::{Object, ObjectSection, ObjectSymbol};
        let path = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("the C library");
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let sections = Sections(
            file.sections()
                .filter_map(|s| Some((s.address(), s.data().ok()?.to_vec())))
                .filter(|(a, b)| *a != 0 && !b.is_empty())
                .collect(),
        );
        let delta: u64 = 0x7f12_3456_7000;
        let (mut functions, mut tables) = (0, 0);
        // The C library is stripped: its exported functions.
        let symbols = file.symbols().chain(file.dynamic_symbols());
        for sym in symbols.filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0) {
            let Some(bytes) = sections.at(sym.address(), sym.size() as usize) else {
                continue;
            };
            let here = |addr: u64, len: usize| sections.at(addr, len);
            let there = |addr: u64, len: usize| sections.at(addr.wrapping_sub(delta), len);
            let a = FunctionCode::analyze(sym.address(), &bytes, &here);
            let b = FunctionCode::analyze(sym.address() + delta, &bytes, &there);
            let moved = a.rebased(delta);
            assert_eq!(moved.start, b.start);
            assert_eq!(moved.end, b.end);
            assert_eq!(moved.blocks, b.blocks, "{:?}", sym.name());
            assert_eq!(moved.jump_tables, b.jump_tables, "{:?}", sym.name());
            assert_eq!(moved.insns.len(), b.insns.len());
            for (x, y) in moved.insns.iter().zip(&b.insns) {
                assert!(x.eq_all_bits(y), "{:?}: {x} / {y}", sym.name());
            }
            functions += 1;
            tables += b.jump_tables.len();
        }
        assert!(
            functions > 2000 && tables > 20,
            "{functions} functions, {tables} tables"
        );
        // Decoding at the new address agrees too.
        let first = Decoder::with_ip(64, &[0xE8, 0, 0, 0, 0], 0x1000, DecoderOptions::NONE)
            .iter()
            .next()
            .unwrap();
        assert_eq!(moved(&first, 0x10).near_branch64(), 0x1015);
    }
}
