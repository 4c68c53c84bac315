//! USDT probes: the `.note.stapsdt` entries that `sys/sdt.h` (and
//! DTrace-style providers in python, libstdc++, postgres...) leave in a
//! binary. Each names a probe site (usually a `nop`), an optional
//! semaphore (a u16 that callers test before computing the arguments),
//! and the arguments as assembler operands, such as `-4@%edi`,
//! `8@-16(%rbp)` or `4@$5`.

/// One probe of an image, at link-time addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsdtProbe {
    /// Provider, such as `python`.
    pub provider: String,
    /// Probe name, such as `function__entry`.
    pub name: String,
    /// Address of the probe site.
    pub pc: FileAddr,
    /// Address of the semaphore, if the probe has one.
    pub semaphore: Option<FileAddr>,
    /// Arguments: size in bytes (negative = signed) and operand text.
    pub args: Vec<(i8, String)>,
}

use crate::FileAddr;
use object::elf::FileHeader64;
use object::read::elf::{FileHeader, NoteIterator};
use object::LittleEndian;

/// The note type of a SystemTap probe (`n_type` of a `stapsdt` note).
const NT_STAPSDT: u32 = 3;

/// Parses the notes of a `.note.stapsdt` section (little-endian, 4-byte
/// aligned notes). `stapsdt_base` is the link-time address of
/// `.stapsdt.base`, used (like SystemTap) to correct addresses of
/// prelinked files.
pub fn parse_notes(data: &[u8], stapsdt_base: Option<FileAddr>) -> Vec<UsdtProbe> {
    match NoteIterator::<FileHeader64<LittleEndian>>::new(LittleEndian, 4, data) {
        Ok(notes) => probes(notes, LittleEndian, stapsdt_base),
        Err(_) => vec![],
    }
}

/// The probes among `notes` (those of a `.note.stapsdt` section), read
/// until the first malformed note.
pub(crate) fn probes<Elf: FileHeader>(
    mut notes: NoteIterator<'_, Elf>,
    endian: Elf::Endian,
    stapsdt_base: Option<FileAddr>,
) -> Vec<UsdtProbe> {
    let mut out = Vec::new();
    let quad = |b: &[u8], i: usize| {
        b.get(i..i + 8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
    };
    while let Ok(Some(note)) = notes.next() {
        let desc = note.desc();
        if note.n_type(endian) != NT_STAPSDT
            || !note.name().starts_with(b"stapsdt")
            || desc.len() < 24
        {
            continue;
        }
        let (Some(pc), Some(base), Some(sem)) = (quad(desc, 0), quad(desc, 8), quad(desc, 16))
        else {
            break;
        };
        let adjust = stapsdt_base.map_or(0, |b| b.get().wrapping_sub(base));
        let mut strings = desc[24..]
            .split(|&b| b == 0)
            .map(|s| String::from_utf8_lossy(s).into_owned());
        let provider = strings.next().unwrap_or_default();
        let probe = strings.next().unwrap_or_default();
        let args_text = strings.next().unwrap_or_default();
        let args = args_text
            .split_whitespace()
            .filter_map(|a| {
                let (size, operand) = a.split_once('@')?;
                Some((size.parse().ok()?, operand.to_string()))
            })
            .collect();
        out.push(UsdtProbe {
            provider,
            name: probe,
            pc: FileAddr(pc.wrapping_add(adjust)),
            semaphore: (sem != 0).then(|| FileAddr(sem.wrapping_add(adjust))),
            args,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(pc: u64, base: u64, sem: u64, strings: &str) -> Vec<u8> {
        let mut desc = Vec::new();
        for v in [pc, base, sem] {
            desc.extend_from_slice(&v.to_le_bytes());
        }
        desc.extend_from_slice(strings.as_bytes());
        let mut n = Vec::new();
        n.extend_from_slice(&8u32.to_le_bytes());
        n.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        n.extend_from_slice(&3u32.to_le_bytes());
        n.extend_from_slice(b"stapsdt\0");
        n.extend_from_slice(&desc);
        while n.len() % 4 != 0 {
            n.push(0);
        }
        n
    }

    #[test]
    fn parses_probes_and_adjusts_prelinked_addresses() {
        let mut data = note(0x1000, 0x5000, 0, "libstdcxx\0throw\08@%rdi 8@%rsi\0");
        data.extend(note(
            0x2000,
            0x5000,
            0x9000,
            "python\0function__entry\08@%rbp 8@%r12 -4@%eax\0",
        ));
        let probes = parse_notes(&data, Some(FileAddr(0x5000)));
        assert_eq!(probes.len(), 2);
        assert_eq!(
            (
                probes[0].provider.as_str(),
                probes[0].name.as_str(),
                probes[0].pc
            ),
            ("libstdcxx", "throw", FileAddr(0x1000))
        );
        assert_eq!(probes[0].semaphore, None);
        assert_eq!(
            probes[1].args,
            vec![(8, "%rbp".into()), (8, "%r12".into()), (-4, "%eax".into())]
        );
        assert_eq!(probes[1].semaphore, Some(FileAddr(0x9000)));
        // The same note in a file prelinked 0x100 higher.
        let moved = parse_notes(&data, Some(FileAddr(0x5100)));
        assert_eq!(
            (moved[1].pc, moved[1].semaphore),
            (FileAddr(0x2100), Some(FileAddr(0x9100)))
        );
    }
}
