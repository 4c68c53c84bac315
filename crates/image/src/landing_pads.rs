//! C++ landing pads: where the unwinder enters a function to run a
//! `catch` or a cleanup, read from each FDE's language-specific data area
//! (the `.gcc_except_table` call-site tables GCC and Clang write).

use crate::{FileAddr, Image};
use object::{Object, ObjectSection};

/// A landing pad and the function whose call sites lead to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LandingPad {
    /// The pad's address.
    pub pad: FileAddr,
    /// The start of the FDE whose call-site table names it: the function
    /// (or part of one) that called whatever threw.
    pub owner: FileAddr,
}

impl Image {
    /// Every landing pad of the file, sorted by address.
    pub fn landing_pads(&self) -> &[LandingPad] {
        self.landing_pads.get_or_init(|| {
            let mut pads = object::File::parse(&*self.data)
                .map(|f| read_pads(&f))
                .unwrap_or_default();
            pads.sort_unstable();
            pads.dedup();
            pads
        })
    }

    /// Whether the FDE starting at `addr` describes a part of another
    /// function's frame (a `.cold` part: at its first instruction the CFA
    /// is not `rsp+8`, the frame of the function it was split from being
    /// still set up), rather than a function's entry.
    pub fn is_frame_part(&self, addr: FileAddr) -> bool {
        self.frame_parts
            .get_or_init(|| {
                object::File::parse(&*self.data)
                    .map(|f| read_frame_parts(&f))
                    .unwrap_or_default()
            })
            .binary_search(&addr.get())
            .is_ok()
    }

    /// The landing pads in `[start, end)`.
    pub fn landing_pads_in(&self, start: FileAddr, end: FileAddr) -> &[LandingPad] {
        let pads = self.landing_pads();
        let lo = pads.partition_point(|p| p.pad < start);
        let hi = pads.partition_point(|p| p.pad < end);
        &pads[lo..hi]
    }
}

/// Calls `each` with every FDE of the file's `.eh_frame`, and the section
/// and bases to unwind with.
fn each_fde(
    file: &object::File<'_>,
    mut each: impl FnMut(
        &gimli::EhFrame<gimli::EndianSlice<'_, gimli::LittleEndian>>,
        &gimli::BaseAddresses,
        &gimli::FrameDescriptionEntry<gimli::EndianSlice<'_, gimli::LittleEndian>>,
    ),
) {
    use gimli::UnwindSection;
    let Some(eh) = file.section_by_name(".eh_frame") else {
        return;
    };
    let Ok(data) = eh.data() else {
        return;
    };
    let eh_frame = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(eh.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                each(&eh_frame, &bases, &fde);
            }
        }
    }
}

fn read_pads(file: &object::File<'_>) -> Vec<LandingPad> {
    let Some(table) = file.section_by_name(".gcc_except_table") else {
        return Vec::new();
    };
    let Ok(lsdas) = table.data() else {
        return Vec::new();
    };
    let mut pads = Vec::new();
    each_fde(file, |_, _, fde| {
        let Some(gimli::Pointer::Direct(lsda)) = fde.lsda() else {
            return;
        };
        let Some(at) = lsda.checked_sub(table.address()) else {
            return;
        };
        let start = fde.initial_address();
        let Some(bytes) = lsdas.get(at as usize..) else {
            return;
        };
        for pad in call_site_pads(bytes, start, table.address() + at).unwrap_or_default() {
            pads.push(LandingPad {
                pad: FileAddr(pad),
                owner: FileAddr(start),
            });
        }
    });
    pads
}

/// Starts of the FDEs whose first row's CFA is not `rsp+8`, sorted.
fn read_frame_parts(file: &object::File<'_>) -> Vec<u64> {
    let mut ctx = gimli::UnwindContext::new();
    let mut parts = Vec::new();
    each_fde(file, |eh_frame, bases, fde| {
        let start = fde.initial_address();
        let Ok(row) = fde.unwind_info_for_address(eh_frame, bases, &mut ctx, start) else {
            return;
        };
        // DWARF register 7 is rsp.
        let entry_like = matches!(
            row.cfa(),
            gimli::CfaRule::RegisterAndOffset { register, offset }
                if register.0 == 7 && *offset == 8
        );
        if !entry_like {
            parts.push(start);
        }
    });
    parts.sort_unstable();
    parts
}

/// The landing pads of one LSDA at address `at` (its bytes from there),
/// for the FDE starting at `start`.
fn call_site_pads(bytes: &[u8], start: u64, at: u64) -> Option<Vec<u64>> {
    let mut r = Reader { bytes, at: 0 };
    let lp_encoding = r.u8()?;
    let lp_start = if lp_encoding == DW_EH_PE_OMIT {
        start
    } else {
        r.encoded(lp_encoding, at)?
    };
    let ttype_encoding = r.u8()?;
    if ttype_encoding != DW_EH_PE_OMIT {
        r.uleb()?;
    }
    let site_encoding = r.u8()?;
    let table_len = r.uleb()? as usize;
    let end = r.at.checked_add(table_len)?;
    let mut pads = Vec::new();
    while r.at < end {
        let _site_start = r.encoded(site_encoding, at)?;
        let _site_len = r.encoded(site_encoding, at)?;
        let pad = r.encoded(site_encoding, at)?;
        let _action = r.uleb()?;
        if pad != 0 {
            pads.push(lp_start.wrapping_add(pad));
        }
    }
    Some(pads)
}

const DW_EH_PE_OMIT: u8 = 0xff;

struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl Reader<'_> {
    fn u8(&mut self) -> Option<u8> {
        let b = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(b)
    }

    fn uleb(&mut self) -> Option<u64> {
        self.leb(false)
    }

    fn sleb(&mut self) -> Option<i64> {
        self.leb(true).map(|v| v as i64)
    }

    /// A LEB128 number, sign-extended if `signed`.
    fn leb(&mut self, signed: bool) -> Option<u64> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let b = self.u8()?;
            if shift < 64 {
                value |= ((b & 0x7f) as u64) << shift;
            }
            shift += 7;
            if b & 0x80 == 0 {
                if signed && shift < 64 && b & 0x40 != 0 {
                    value |= u64::MAX << shift;
                }
                return Some(value);
            }
        }
    }

    fn fixed<const N: usize>(&mut self) -> Option<[u8; N]> {
        let b = self.bytes.get(self.at..self.at + N)?.try_into().ok()?;
        self.at += N;
        Some(b)
    }

    /// A value in DWARF pointer encoding `enc` (value format in the low
    /// nibble; `pcrel` relative to its own address, LSDA at `base`).
    fn encoded(&mut self, enc: u8, base: u64) -> Option<u64> {
        let here = base + self.at as u64;
        let v = match enc & 0x0f {
            0x00 => u64::from_le_bytes(self.fixed::<8>()?),
            0x01 => self.uleb()?,
            0x02 => u16::from_le_bytes(self.fixed::<2>()?) as u64,
            0x03 => u32::from_le_bytes(self.fixed::<4>()?) as u64,
            0x04 => u64::from_le_bytes(self.fixed::<8>()?),
            0x09 => self.sleb()? as u64,
            0x0a => i16::from_le_bytes(self.fixed::<2>()?) as i64 as u64,
            0x0b => i32::from_le_bytes(self.fixed::<4>()?) as i64 as u64,
            0x0c => i64::from_le_bytes(self.fixed::<8>()?) as u64,
            _ => return None,
        };
        Some(match enc & 0x70 {
            0x10 => here.wrapping_add(v),
            _ => v,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_site_table_gives_its_pads() {
        // lpstart omitted, no type table, uleb128 call sites, 8 bytes of
        // table: [0x10,+4) → pad 0x40; [0x20,+4) → no pad.
        let lsda = [0xff, 0xff, 0x01, 8, 0x10, 4, 0x40, 0, 0x20, 4, 0, 0];
        assert_eq!(call_site_pads(&lsda, 0x1000, 0x9000), Some(vec![0x1040]));
        // Cut short: no answer, not a panic.
        assert_eq!(call_site_pads(&lsda[..6], 0x1000, 0x9000), None);
    }

    #[test]
    fn libstdcxx_has_landing_pads() {
        // Installed with g++ (scripts/install-deps.sh).
        let lib = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libstdc++.so.6");
        let image = Image::open(lib).expect("libstdc++ (apt-get install g++) is ELF");
        // Its functions start frames of their own.
        let throw = image
            .function_named("__cxa_throw")
            .expect("libstdc++ throws");
        assert!(!image.is_frame_part(throw.addr));
        let pads = image.landing_pads();
        assert!(pads.len() > 100, "{} pads", pads.len());
        // Each pad lies in the code, near the FDE that names it.
        for p in pads.iter().take(50) {
            assert!(p.pad.get().abs_diff(p.owner.get()) < 1 << 24, "{p:?}");
        }
    }
}
