//! Which imported function a call reaches through the PLT or the GOT:
//! the symbol of the `R_X86_64_JUMP_SLOT` or `R_X86_64_GLOB_DAT`
//! relocation that fills the slot a stub (or a `-fno-plt` call) jumps
//! through.

use crate::{FileAddr, Image};
use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
};
use std::collections::HashMap;

impl Image {
    /// The name of the imported function reached through `addr`: a GOT
    /// slot, or a PLT stub (`.plt`, `.plt.sec`, `.plt.got`) that jumps
    /// through one. Symbol versions are left out (`setjmp`, not
    /// `setjmp@GLIBC_2.2.5`).
    pub fn imported_name(&self, addr: FileAddr) -> Option<&str> {
        let slots = self.import_slots.get_or_init(|| import_slots(&self.data));
        if let Some(name) = slots.get(&addr.get()) {
            return Some(name);
        }
        let slot = plt_stub_slot(addr, self.bytes_at(addr, 16)?)?;
        slots.get(&slot.get()).map(String::as_str)
    }
}

/// A symbol the image's dynamic symbol table defines: what references to
/// its name from this image (and others) may bind to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// Its link-time address.
    pub addr: FileAddr,
    /// A function (`STT_FUNC`), not data.
    pub function: bool,
    /// An `STT_GNU_IFUNC`: the address is the resolver's.
    pub ifunc: bool,
    /// The name has several definitions (symbol versions): which one a
    /// reference binds to depends on the version it asks for.
    pub versions: bool,
}

impl Image {
    /// The definition of `name` (global or weak) in the dynamic symbol
    /// table, if any.
    pub fn export(&self, name: &str) -> Option<Export> {
        self.exports
            .get_or_init(|| exports(&self.data))
            .get(name)
            .copied()
    }

    /// Every PLT stub (`.plt`, `.plt.sec`, `.plt.got`, 16 or 8 bytes
    /// apart) that jumps through a slot of a named import: (stub address,
    /// symbol name).
    pub fn plt_stubs(&self) -> Vec<(FileAddr, String)> {
        let Ok(file) = object::File::parse(&*self.data) else {
            return Vec::new();
        };
        let mut stubs = Vec::new();
        for (section, step) in [(".plt", 16), (".plt.sec", 16), (".plt.got", 8)] {
            let Some(sec) = file.section_by_name(section) else {
                continue;
            };
            let (start, size) = (sec.address(), sec.size());
            for at in (start..start + size).step_by(step) {
                if let Some(name) = self.imported_name(FileAddr(at)) {
                    stubs.push((FileAddr(at), name.to_string()));
                }
            }
        }
        stubs
    }
}

/// Name → definition, for the dynamic symbol table's global and weak
/// definitions.
fn exports(data: &[u8]) -> HashMap<String, Export> {
    let Ok(file) = object::File::parse(data) else {
        return HashMap::new();
    };
    let mut out: HashMap<String, Export> = HashMap::new();
    for s in file.dynamic_symbols() {
        if !s.is_definition() || s.is_local() {
            continue;
        }
        let Ok(name) = s.name() else {
            continue;
        };
        let ifunc = matches!(s.flags(), object::SymbolFlags::Elf { st_info, .. }
            if st_info & 0xf == object::elf::STT_GNU_IFUNC);
        let export = Export {
            addr: FileAddr(s.address()),
            function: s.kind() == object::SymbolKind::Text,
            ifunc,
            versions: false,
        };
        out.entry(name.to_string())
            .and_modify(|e| e.versions = true)
            .or_insert(export);
    }
    out
}

/// Slot address → symbol name, for every jump-slot and GOT relocation.
pub(crate) fn import_slots(data: &[u8]) -> HashMap<u64, String> {
    let Ok(file) = object::File::parse(data) else {
        return HashMap::new();
    };
    let Some(symbols) = file.dynamic_symbol_table() else {
        return HashMap::new();
    };
    file.dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(_, r)| {
            matches!(r.flags(), RelocationFlags::Elf { r_type }
                if r_type == object::elf::R_X86_64_JUMP_SLOT
                    || r_type == object::elf::R_X86_64_GLOB_DAT)
        })
        .filter_map(|(at, r)| {
            let RelocationTarget::Symbol(index) = r.target() else {
                return None;
            };
            let name = symbols.symbol_by_index(index).ok()?.name().ok()?;
            let name = name.split('@').next().unwrap_or(name);
            Some((at, name.to_string()))
        })
        .collect()
}

/// The slot a PLT stub at `stub` jumps through: `[endbr64] [bnd] jmp
/// [rip+disp32]`, the forms GNU ld writes for x86-64.
fn plt_stub_slot(stub: FileAddr, bytes: &[u8]) -> Option<FileAddr> {
    let mut at = 0usize;
    if bytes.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        at += 4;
    }
    if bytes.get(at) == Some(&0xf2) {
        at += 1;
    }
    if bytes.get(at..at + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(bytes.get(at + 2..at + 6)?.try_into().ok()?);
    let next = stub.get().checked_add(at as u64 + 6)?;
    Some(FileAddr(next.wrapping_add(disp as i64 as u64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stub_forms_give_their_slot() {
        // jmp [rip+0x10] at 0x1000: the slot is 0x1006 + 0x10.
        let plain = [0xff, 0x25, 0x10, 0, 0, 0, 0x68, 0, 0, 0, 0];
        assert_eq!(
            plt_stub_slot(FileAddr(0x1000), &plain),
            Some(FileAddr(0x1016))
        );
        // endbr64; bnd jmp [rip-0x20]
        let ibt = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe0, 0xff, 0xff, 0xff,
        ];
        assert_eq!(
            plt_stub_slot(FileAddr(0x2000), &ibt),
            Some(FileAddr(0x2000 + 11 - 0x20))
        );
        // Not a stub: push rbp.
        assert_eq!(
            plt_stub_slot(FileAddr(0x3000), &[0x55, 0, 0, 0, 0, 0]),
            None
        );
    }

    #[test]
    fn a_dynamic_program_names_its_imports() {
        // Any dynamically linked Debian program calls the C library's
        // functions through its PLT or GOT.
        let image = Image::open(std::path::Path::new("/bin/sh")).expect("/bin/sh is ELF");
        let slots = import_slots(&image.data);
        assert!(
            slots.values().any(|n| n == "malloc" || n == "free"),
            "no malloc or free among {} imports",
            slots.len()
        );
        for (&slot, name) in slots.iter().take(20) {
            assert_eq!(image.imported_name(FileAddr(slot)), Some(name.as_str()));
        }
    }
}
