//! Real ELF files (`/bin/true`, libc, a program compiled here) and the
//! fields in them worth mutating.

use super::*;

/// A field of a real file: `width` bytes at `at`, named for messages
/// (`section[3](.text).sh_size`).
#[derive(Clone, Debug)]
pub(crate) struct Field {
    pub(crate) at: usize,
    pub(crate) width: usize,
    pub(crate) what: String,
}

/// A real ELF file.
pub(crate) struct Sample {
    pub(crate) name: String,
    pub(crate) bytes: Vec<u8>,
    /// Header, section, segment, note, symbol and descriptor fields.
    pub(crate) fields: Vec<Field>,
    /// Byte ranges of the sections parsers walk: notes, symbol and string
    /// tables, `.eh_frame`, `.dynamic`, relocations, `weft_events`.
    pub(crate) regions: Vec<(usize, usize)>,
}

pub(crate) fn le(bytes: &[u8], at: usize, width: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(width)?)?;
    Some(b.iter().rev().fold(0, |v, &x| (v << 8) | u64::from(x)))
}

impl Sample {
    /// Finds the fields and regions of a well-formed ELF64 file (at most
    /// a few hundred of each kind, spread over the file).
    pub(crate) fn new(name: &str, bytes: Vec<u8>) -> Sample {
        let mut fields = Vec::new();
        let mut regions = Vec::new();
        let f = |fields: &mut Vec<Field>, base: usize, of: &str, list: &[(usize, usize, &str)]| {
            for &(at, width, what) in list {
                if base + at + width <= bytes.len() {
                    fields.push(Field {
                        at: base + at,
                        width,
                        what: format!("{of}{what}"),
                    });
                }
            }
        };
        let header = &[
            (4, 1, "EI_CLASS"),
            (5, 1, "EI_DATA"),
            (16, 2, "e_type"),
            (18, 2, "e_machine"),
            (24, 8, "e_entry"),
            (32, 8, "e_phoff"),
            (40, 8, "e_shoff"),
            (48, 4, "e_flags"),
            (52, 2, "e_ehsize"),
            (54, 2, "e_phentsize"),
            (56, 2, "e_phnum"),
            (58, 2, "e_shentsize"),
            (60, 2, "e_shnum"),
            (62, 2, "e_shstrndx"),
        ];
        f(&mut fields, 0, "", header);
        let word = |at: usize, width: usize| le(&bytes, at, width).unwrap_or(0) as usize;
        let (phoff, phnum) = (word(32, 8), word(56, 2));
        for i in 0..phnum.min(64) {
            let ph = &[
                (0, 4, "p_type"),
                (4, 4, "p_flags"),
                (8, 8, "p_offset"),
                (16, 8, "p_vaddr"),
                (32, 8, "p_filesz"),
                (40, 8, "p_memsz"),
                (48, 8, "p_align"),
            ];
            let ty = match word(phoff + i * 56, 4) {
                1 => "PT_LOAD".to_string(),
                2 => "PT_DYNAMIC".to_string(),
                3 => "PT_INTERP".to_string(),
                4 => "PT_NOTE".to_string(),
                ty => format!("{ty:#x}"),
            };
            f(
                &mut fields,
                phoff + i * 56,
                &format!("phdr[{i}]({ty})."),
                ph,
            );
        }
        let (shoff, shnum, shstrndx) = (word(40, 8), word(60, 2), word(62, 2));
        let section = |i: usize| {
            let at = shoff + i * 64;
            (
                at,
                word(at, 4),
                word(at + 4, 4),
                word(at + 24, 8),
                word(at + 32, 8),
            )
        };
        // The NUL-terminated string at `name_off` in the string table of
        // section `strtab`.
        let string = |strtab: usize, name_off: usize| {
            let start = section(strtab).3 + name_off;
            let rest = bytes.get(start..).unwrap_or(&[]);
            let end = rest.iter().position(|&b| b == 0).unwrap_or(0);
            String::from_utf8_lossy(&rest[..end]).into_owned()
        };
        let section_name = |name_off: usize| string(shstrndx, name_off);
        for i in 0..shnum.min(128) {
            let (at, name_off, ty, off, size) = section(i);
            let name = section_name(name_off);
            let sh = &[
                (0, 4, "sh_name"),
                (4, 4, "sh_type"),
                (8, 8, "sh_flags"),
                (16, 8, "sh_addr"),
                (24, 8, "sh_offset"),
                (32, 8, "sh_size"),
                (40, 4, "sh_link"),
                (44, 4, "sh_info"),
                (48, 8, "sh_addralign"),
                (56, 8, "sh_entsize"),
            ];
            f(&mut fields, at, &format!("section[{i}]({name})."), sh);
            if off.checked_add(size).is_none_or(|end| end > bytes.len()) || ty == 8 {
                continue; // SHT_NOBITS, or not in the file
            }
            match ty {
                // SHT_NOTE: namesz, descsz, type of each note, and the
                // three addresses of a stapsdt descriptor.
                7 => {
                    regions.push((off, size));
                    let mut at = off;
                    for k in 0..256 {
                        if at + 12 > off + size {
                            break;
                        }
                        let (namesz, descsz) = (word(at, 4), word(at + 4, 4));
                        let of = format!("{name}.note[{k}].");
                        let note = &[(0, 4, "namesz"), (4, 4, "descsz"), (8, 4, "type")];
                        f(&mut fields, at, &of, note);
                        let desc = at + 12 + namesz.next_multiple_of(4);
                        let words = &[(0, 8, "desc[0]"), (8, 8, "desc[1]"), (16, 8, "desc[2]")];
                        f(&mut fields, desc, &of, words);
                        at = desc + descsz.next_multiple_of(4);
                    }
                }
                // SHT_SYMTAB, SHT_DYNSYM: st_name, st_info, st_shndx,
                // st_value, st_size of up to 128 symbols spread over it.
                2 | 11 => {
                    regions.push((off, size));
                    let count = size / 24;
                    let step = (count / 128).max(1);
                    let strtab = word(at + 40, 4);
                    for k in (0..count).step_by(step) {
                        let symbol = string(strtab, word(off + k * 24, 4));
                        let st = &[
                            (0, 4, "st_name"),
                            (4, 1, "st_info"),
                            (6, 2, "st_shndx"),
                            (8, 8, "st_value"),
                            (16, 8, "st_size"),
                        ];
                        let of = format!("{name}[{k}]({symbol}).");
                        f(&mut fields, off + k * 24, &of, st);
                    }
                }
                // Event descriptors: magic and the three string pointers.
                _ if name == "weft_events" => {
                    regions.push((off, size));
                    for k in 0..(size / 88).min(32) {
                        let d = &[
                            (0, 8, "magic"),
                            (8, 8, "provider"),
                            (16, 8, "name"),
                            (24, 8, "fields"),
                        ];
                        f(&mut fields, off + k * 88, &format!("weft_events[{k}]."), d);
                    }
                }
                // String tables, relocations, dynamic section, unwind tables.
                3 | 4 | 6 => regions.push((off, size)),
                _ if name == ".eh_frame" || name == ".eh_frame_hdr" => regions.push((off, size)),
                _ => {}
            }
        }
        regions.retain(|&(_, size)| size > 0);
        Sample {
            name: name.to_string(),
            bytes,
            fields,
            regions,
        }
    }

    /// The sample named `name`, if this system has it.
    pub(crate) fn named(name: &str) -> Option<&'static Sample> {
        samples().iter().find(|s| s.name == name)
    }

    /// A copy of the file with each field `what` (as [`Field`] names
    /// it, `phdr[2](PT_LOAD).p_memsz`) set to its `value`.
    pub(crate) fn with(&self, changes: &[(&str, u64)]) -> Vec<u8> {
        let mut bytes = self.bytes.clone();
        for &(what, value) in changes {
            let field = self
                .fields
                .iter()
                .find(|f| f.what == what)
                .unwrap_or_else(|| panic!("{}: no field {what}", self.name));
            bytes[field.at..field.at + field.width]
                .copy_from_slice(&value.to_le_bytes()[..field.width]);
        }
        bytes
    }

    /// The name of the first field whose name matches `pick`.
    pub(crate) fn field(&self, pick: impl Fn(&str) -> bool) -> String {
        self.fields
            .iter()
            .map(|f| f.what.clone())
            .find(|w| pick(w))
            .unwrap_or_else(|| panic!("{}: no such field", self.name))
    }

    /// The bytes of this file's `.note.stapsdt` sections.
    pub(crate) fn stapsdt_notes(&self) -> Vec<&[u8]> {
        self.regions
            .iter()
            .filter(|&&(off, size)| {
                le(&self.bytes, off + 12, 8) == Some(u64::from_le_bytes(*b"stapsdt\0"))
                    && size >= 12
            })
            .map(|&(off, size)| &self.bytes[off..off + size])
            .collect()
    }
}

/// Skips loudly, and fails under `WEFT_CI` (where every tool is installed).
pub(crate) fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
    if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
        panic!("WEFT_CI is set, so a skip is a failure: {why}");
    }
}

/// A program with a USDT probe (`<weft/probe.h>`), a rich event site
/// (`<weft/event.h>`) and functions with and without symbols.
pub(crate) const PROGRAM: &str = r#"
#include <stdio.h>
#include <weft/probe.h>
#include <weft/event.h>
__attribute__((noinline)) long work(long x)
{
    WEFT_PROBE(fuzz, step, x, x * 2);
    WEFT_EVENT(fuzz, tick, "n:i label:s", WEFT_INT(x), WEFT_STR("label"));
    return x * 3 + 1;
}
static __attribute__((noinline)) long helper(long x) { return work(x) ^ 5; }
int main(int argc, char **argv)
{
    long sum = 0;
    for (long i = 0; i < argc; i++) sum += helper(i);
    printf("%ld %s\n", sum, argv[0]);
    return 0;
}
"#;

/// Compiles [`PROGRAM`] with `flags` (once per test run); None, after a
/// loud skip, without gcc.
pub(crate) fn compiled(name: &str, flags: &[&str]) -> Option<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz_elf");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("program.c");
    let out = dir.join(name);
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    std::fs::write(&src, PROGRAM).unwrap();
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/../../include");
    let status = std::process::Command::new("gcc")
        .args(flags)
        .args(["-g", "-I", include, "-o"])
        .arg(&tmp)
        .arg(&src)
        .status();
    match status {
        Ok(s) if s.success() => {
            std::fs::rename(&tmp, &out).unwrap();
            Some(std::fs::read(&out).unwrap())
        }
        Ok(s) => panic!("gcc failed ({s}) for {name}"),
        Err(e) => {
            skip(&format!(
                "gcc is missing ({e}); fuzzing without the compiled sample \
                 (bash scripts/install-deps.sh installs it)"
            ));
            None
        }
    }
}

/// The real files: `/bin/true`, libc, and [`PROGRAM`] built PIE with
/// symbols and non-PIE stripped (functions from `.eh_frame` only).
pub(crate) fn samples() -> &'static [Sample] {
    static SAMPLES: OnceLock<Vec<Sample>> = OnceLock::new();
    SAMPLES.get_or_init(|| {
        let mut samples = Vec::new();
        let mut system =
            |name: &str, paths: &[&str]| match paths.iter().find_map(|p| std::fs::read(p).ok()) {
                Some(bytes) => samples.push(Sample::new(name, bytes)),
                None => skip(&format!("no {name} at {paths:?}")),
            };
        system("true", &["/bin/true", "/usr/bin/true"]);
        system(
            "libc.so.6",
            &[
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
            ],
        );
        for (name, flags) in [
            ("program-pie", &["-O2", "-fpie", "-pie"][..]),
            (
                "program-nopie-stripped",
                &["-O0", "-fno-pie", "-no-pie", "-s"],
            ),
        ] {
            if let Some(bytes) = compiled(name, flags) {
                samples.push(Sample::new(name, bytes));
            }
        }
        assert!(!samples.is_empty(), "no ELF file to fuzz");
        // The samples are well-formed: each reads, and the compiled ones
        // have the probe and the event site the mutations aim at.
        for s in &samples {
            let image = Image::from_bytes(Path::new(&s.name), s.bytes.clone())
                .unwrap_or_else(|e| panic!("{}: {e}", s.name));
            assert!(!image.functions().is_empty(), "{}", s.name);
            if s.name.starts_with("program") {
                assert_eq!(image.usdt_probes().len(), 1, "{}", s.name);
                assert_eq!(image.event_sites().len(), 1, "{}", s.name);
                assert!(!s.stapsdt_notes().is_empty(), "{}", s.name);
            }
        }
        samples
    })
}
