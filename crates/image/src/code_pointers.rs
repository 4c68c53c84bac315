//! Code addresses a module keeps in its data: where an indirect jump may
//! go that no jump table describes (GCC's computed `goto`: a static array
//! of label addresses, `goto *targets[op]`, as interpreters dispatch).
//!
//! In a position-independent file each such word is an
//! `R_X86_64_RELATIVE` relocation, whose addend is the address; in a
//! position-dependent executable it is the word itself, read from the
//! data sections (8-byte aligned; not the GOT, whose words are the PLT's
//! lazy-binding addresses). Either way the addresses that lie in
//! executable sections are kept, sorted.

use crate::{FileAddr, Image};
use object::{Object, ObjectSection, RelocationFlags, SectionFlags, SectionKind};

impl Image {
    /// The code addresses stored in the module's data, from `lo` up to
    /// `hi` (ELF virtual addresses).
    pub fn code_pointers(&self, lo: FileAddr, hi: FileAddr) -> &[u64] {
        let all = self.code_pointers.get_or_init(|| code_pointers(&self.data));
        let from = all.partition_point(|&a| a < lo.get());
        let to = all.partition_point(|&a| a < hi.get());
        &all[from..to]
    }
}

fn code_pointers(data: &[u8]) -> Vec<u64> {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let code: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.address(), s.address() + s.size()))
        .collect();
    let in_code = |a: u64| code.iter().any(|&(lo, hi)| a >= lo && a < hi);
    let mut found: Vec<u64> = file
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(_, r)| {
            matches!(r.flags(), RelocationFlags::Elf { r_type }
                if r_type == object::elf::R_X86_64_RELATIVE)
        })
        .map(|(_, r)| r.addend() as u64)
        .filter(|&a| in_code(a))
        .collect();
    if file.kind() == object::ObjectKind::Executable {
        for s in file.sections() {
            let writable_or_data = matches!(
                s.kind(),
                SectionKind::Data | SectionKind::ReadOnlyData | SectionKind::ReadOnlyDataWithRel
            );
            let alloc = match s.flags() {
                SectionFlags::Elf { sh_flags } => sh_flags & u64::from(object::elf::SHF_ALLOC) != 0,
                _ => false,
            };
            // The GOT holds the PLT's lazy-binding addresses, not labels.
            let got = s.name().is_ok_and(|n| n.starts_with(".got"));
            let Ok(bytes) = s.data() else {
                continue;
            };
            if !writable_or_data || !alloc || got {
                continue;
            }
            let skip = (8 - (s.address() % 8) as usize) % 8;
            for w in bytes.get(skip..).unwrap_or(&[]).chunks_exact(8) {
                let a = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                if in_code(a) {
                    found.push(a);
                }
            }
        }
    }
    found.sort_unstable();
    found.dedup();
    found
}
