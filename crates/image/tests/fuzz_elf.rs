//! Fuzzing the ELF readers: whatever bytes a file holds, `Image::open` and
//! `Image::from_bytes` return an image or a typed error (`NotElf`,
//! `NotX86_64`, `Malformed`, `Io`), never panic and never hang, and every
//! reader the CLI reaches on an untrusted file (functions from `.symtab`,
//! `.dynsym` and `.eh_frame`, lookups by name and address, file bytes by
//! address, load biases, USDT notes, `weft_events` descriptors, the
//! interpreter) runs on the result without panicking.
//!
//! The inputs are random bytes, and real ELF files (`/bin/true`, libc, and
//! a small program with a USDT probe and a rich event site compiled here)
//! mutated: bytes flipped anywhere or inside the interesting sections,
//! header fields (`e_shoff`, `e_shnum`, `sh_offset`, `sh_size`,
//! `p_offset`, note `namesz`/`descsz`, symbol values and sizes, event
//! descriptor words...) set to huge, misaligned or boundary values, and
//! files cut at random lengths.
//!
//! The case counts are small and the seed fixed so that the file runs in
//! seconds and CI sees the same cases each run; `PROPTEST_RNG_SEED` and
//! `PROPTEST_CASES` explore others.

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;
use weft_image::{parse_notes, Error, FileAddr, Image};

/// The longest one case may take (a debug build reading libc on a loaded
/// machine takes well under a second); longer is a hang.
const CASE_LIMIT: Duration = Duration::from_secs(20);

/// The seed used unless `PROPTEST_RNG_SEED` gives one.
const SEED: u64 = 0x7765_6674_656c_6631;

/// A bounded, deterministic proptest configuration of `cases` cases
/// (`PROPTEST_CASES` and `PROPTEST_RNG_SEED` override count and seed).
fn config(cases: u32) -> Config {
    let base = Config::default();
    let env = |name: &str| std::env::var_os(name).is_some();
    Config {
        cases: if env("PROPTEST_CASES") {
            base.cases
        } else {
            cases
        },
        rng_seed: if env("PROPTEST_RNG_SEED") {
            base.rng_seed
        } else {
            RngSeed::Fixed(SEED)
        },
        // Regressions are kept as explicit tests below, not as seed files
        // (a seed means nothing for another libc).
        failure_persistence: None,
        max_shrink_iters: 512,
        ..base
    }
}

// ---------------------------------------------------------------------------
// Running one input.

/// Reads `data` as an image and runs every reader on it; returns the
/// error if it was refused. Runs on its own thread so that a hang fails
/// the test after [`CASE_LIMIT`] instead of stopping it; a panic is
/// raised again here for proptest to catch and shrink.
fn read_bounded(name: &str, data: Vec<u8>) -> Option<String> {
    let name = PathBuf::from(name);
    let (tx, rx) = std::sync::mpsc::channel();
    let worker = std::thread::spawn(move || {
        let outcome = read_and_exercise(&name, data);
        let _ = tx.send(());
        outcome
    });
    match rx.recv_timeout(CASE_LIMIT) {
        Ok(()) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("reading the image took more than {CASE_LIMIT:?}: a hang")
        }
    }
    match worker.join() {
        Ok(outcome) => outcome,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `Image::from_bytes` and, if it succeeds, every reader; the error
/// message if it fails (checked to be a typed, one-line error).
fn read_and_exercise(name: &Path, data: Vec<u8>) -> Option<String> {
    match Image::from_bytes(name, data) {
        Ok(image) => {
            exercise(&image);
            None
        }
        Err(e) => Some(check_error(&e)),
    }
}

/// Checks that a refusal is one of the typed errors of reading a file and
/// prints as one line; returns that line.
fn check_error(e: &Error) -> String {
    assert!(
        matches!(
            e,
            Error::NotElf { .. }
                | Error::NotX86_64 { .. }
                | Error::Malformed { .. }
                | Error::Io { .. }
        ),
        "unexpected error kind: {e:?}"
    );
    let text = e.to_string();
    assert!(!text.is_empty() && !text.contains('\n'), "{text:?}");
    text
}

/// Runs what the CLI runs on an image (`weft inspect functions|usdt|events`,
/// the module setup of `weft run`: biases, code bytes, padding between
/// functions, the bytes of each function, USDT sites and semaphores).
fn exercise(image: &Image) {
    let _ = (
        image.kind(),
        image.interp(),
        image.path(),
        image.file_name(),
    );
    let _ = image.bytes_at(image.entry(), 16);
    let _ = image.function_at(image.entry());
    for seg in image.segments() {
        let _ = image.load_bias(0x5555_0000_0000, seg.offset);
        let _ = image.load_bias(seg.vaddr.get(), seg.offset & !0xfff);
        let _ = image.bytes_at(seg.vaddr, seg.filesz as usize);
        let _ = image.bytes_at(seg.vaddr, usize::MAX);
    }
    let _ = image.load_bias(u64::MAX, u64::MAX);
    let _ = image.load_bias(0, 0);
    for (at, bytes) in image.code_segments() {
        let _ = image.function_at(at);
        assert_eq!(
            image.bytes_at(at, bytes.len()).map(<[u8]>::len),
            Some(bytes.len())
        );
    }
    let functions = image.functions();
    assert!(
        functions.windows(2).all(|w| w[0].addr < w[1].addr),
        "functions sorted by address, one per address"
    );
    for f in functions {
        assert!(f.size > 0, "{f:?}");
        let _ = f.display_name();
        assert!(f.contains(f.addr), "{f:?}");
        let _ = f.contains(FileAddr(u64::MAX));
        let _ = f.contains(FileAddr(f.addr.get().wrapping_add(f.size)));
        assert!(image.function_at(f.addr).is_some(), "{f:?}");
        let _ = image.function_at(FileAddr(f.addr.get().wrapping_add(f.size)));
        let _ = image.bytes_at(f.addr, f.size as usize);
        let _ = image.bytes_at(FileAddr(f.addr.get().wrapping_add(f.size)), 16);
    }
    // Lookups by name re-read the symbol tables: a few suffice.
    for f in functions.iter().take(3) {
        assert!(image.function_named(&f.name).is_some(), "{f:?}");
        let _ = image.symbol_address(&f.name);
    }
    for name in ["main", "malloc", "__vdso_clock_gettime", "_.stapsdt.base"] {
        let _ = image.function_named(name);
        let _ = image.symbol_address(name);
    }
    for probe in image.usdt_probes() {
        let _ = image.function_at(probe.pc);
        let _ = image.bytes_at(probe.pc, 5);
        if let Some(sem) = probe.semaphore {
            let _ = image.bytes_at(sem, 2);
        }
        let _ = (&probe.provider, &probe.name, &probe.args);
    }
    for site in image.event_sites() {
        let _ = image.bytes_at(site.addr, weft_image::SITE_SIZE as usize);
        let _ = (&site.provider, &site.name, &site.fields);
    }
}

// ---------------------------------------------------------------------------
// Real ELF files and the places in them worth mutating.

/// A field of a real file: `width` bytes at `at`, named for messages
/// (`section[3](.text).sh_size`).
#[derive(Clone, Debug)]
struct Field {
    at: usize,
    width: usize,
    what: String,
}

/// A real ELF file.
struct Sample {
    name: String,
    bytes: Vec<u8>,
    /// Header, section, segment, note, symbol and descriptor fields.
    fields: Vec<Field>,
    /// Byte ranges of the sections parsers walk: notes, symbol and string
    /// tables, `.eh_frame`, `.dynamic`, relocations, `weft_events`.
    regions: Vec<(usize, usize)>,
}

fn le(bytes: &[u8], at: usize, width: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(width)?)?;
    Some(b.iter().rev().fold(0, |v, &x| (v << 8) | u64::from(x)))
}

impl Sample {
    /// Finds the fields and regions of a well-formed ELF64 file (at most
    /// a few hundred of each kind, spread over the file).
    fn new(name: &str, bytes: Vec<u8>) -> Sample {
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
    fn named(name: &str) -> Option<&'static Sample> {
        samples().iter().find(|s| s.name == name)
    }

    /// A copy of the file with each field `what` (as [`Field`] names
    /// it, `phdr[2](PT_LOAD).p_memsz`) set to its `value`.
    fn with(&self, changes: &[(&str, u64)]) -> Vec<u8> {
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
    fn field(&self, pick: impl Fn(&str) -> bool) -> String {
        self.fields
            .iter()
            .map(|f| f.what.clone())
            .find(|w| pick(w))
            .unwrap_or_else(|| panic!("{}: no such field", self.name))
    }

    /// The bytes of this file's `.note.stapsdt` sections.
    fn stapsdt_notes(&self) -> Vec<&[u8]> {
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
fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
    if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
        panic!("WEFT_CI is set, so a skip is a failure: {why}");
    }
}

/// A program with a USDT probe (`<weft/probe.h>`), a rich event site
/// (`<weft/event.h>`) and functions with and without symbols.
const PROGRAM: &str = r#"
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
fn compiled(name: &str, flags: &[&str]) -> Option<Vec<u8>> {
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
fn samples() -> &'static [Sample] {
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

// ---------------------------------------------------------------------------
// Mutations.

/// A value written into a field.
#[derive(Clone, Debug)]
enum Value {
    /// This number.
    Const(u64),
    /// The file's length plus this (near or past the end).
    NearEnd(i16),
    /// The field's own value plus this (1..8: misaligned).
    Nudge(u8),
}

/// One change to a real file; indexes are taken modulo what they index.
#[derive(Clone, Debug)]
enum Mutation {
    /// XOR a byte anywhere.
    Flip { at: usize, xor: u8 },
    /// XOR a byte inside one of the parsed sections.
    FlipIn { region: usize, at: usize, xor: u8 },
    /// Set a header, section, segment, note, symbol or descriptor field.
    Set { field: usize, value: Value },
}

fn value() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => prop::sample::select(vec![
            0,
            1,
            3,
            0x40,
            0xff,
            0xffff,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_fff0,
            0xffff_ffff,
            0x1_0000_0000,
            1 << 62,
            1 << 63,
            u64::MAX - 7,
            u64::MAX,
        ])
        .prop_map(Value::Const),
        1 => any::<u64>().prop_map(Value::Const),
        1 => (-256i16..256).prop_map(Value::NearEnd),
        1 => (1u8..8).prop_map(Value::Nudge),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => (any::<usize>(), 1u8..=255).prop_map(|(at, xor)| Mutation::Flip { at, xor }),
        2 => (any::<usize>(), any::<usize>(), 1u8..=255)
            .prop_map(|(region, at, xor)| Mutation::FlipIn { region, at, xor }),
        4 => (any::<usize>(), value()).prop_map(|(field, value)| Mutation::Set { field, value }),
    ]
}

/// A real file, the changes to make, and the length to cut it to (a
/// fraction of its length, in 1/65536ths). Prints with what its indexes
/// stand for.
#[derive(Clone)]
struct Case {
    sample: usize,
    mutations: Vec<Mutation>,
    cut: Option<u16>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<usize>(),
        prop::collection::vec(mutation(), 1..6),
        prop::option::weighted(0.25, any::<u16>()),
    )
        .prop_map(|(sample, mutations, cut)| Case {
            sample,
            mutations,
            cut,
        })
}

impl Case {
    /// The sample's name and the mutated bytes.
    fn apply(&self) -> (&'static str, Vec<u8>) {
        let samples = samples();
        let s = &samples[self.sample % samples.len()];
        let mut bytes = s.bytes.clone();
        for m in &self.mutations {
            apply(s, &mut bytes, m);
        }
        if let Some(cut) = self.cut {
            bytes.truncate((bytes.len() as u64 * u64::from(cut) / 65536) as usize);
        }
        (&s.name, bytes)
    }
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let samples = samples();
        let s = &samples[self.sample % samples.len()];
        write!(f, "{}:", s.name)?;
        for m in &self.mutations {
            match *m {
                Mutation::Flip { at, xor } => {
                    write!(f, " byte {:#x} ^= {xor:#x};", at % s.bytes.len())?
                }
                Mutation::FlipIn { region, at, xor } if !s.regions.is_empty() => {
                    let (off, size) = s.regions[region % s.regions.len()];
                    write!(f, " byte {:#x} ^= {xor:#x};", off + at % size)?
                }
                Mutation::FlipIn { at, xor, .. } => {
                    write!(f, " byte {:#x} ^= {xor:#x};", at % s.bytes.len())?
                }
                Mutation::Set { field, ref value } => {
                    let field = &s.fields[field % s.fields.len()];
                    write!(f, " {} (at {:#x}) = {value:x?};", field.what, field.at)?
                }
            }
        }
        if let Some(cut) = self.cut {
            let len = s.bytes.len() as u64 * u64::from(cut) / 65536;
            write!(f, " cut to {len:#x} bytes")?;
        }
        Ok(())
    }
}

fn apply(s: &Sample, bytes: &mut [u8], m: &Mutation) {
    let len = bytes.len();
    match *m {
        Mutation::Flip { at, xor } => bytes[at % len] ^= xor,
        Mutation::FlipIn { region, at, xor } if !s.regions.is_empty() => {
            let (off, size) = s.regions[region % s.regions.len()];
            bytes[off + at % size] ^= xor;
        }
        Mutation::FlipIn { at, xor, .. } => bytes[at % len] ^= xor,
        Mutation::Set { field, ref value } => {
            let Field { at, width, .. } = s.fields[field % s.fields.len()];
            let old = le(bytes, at, width).unwrap_or(0);
            let v = match *value {
                Value::Const(v) => v,
                Value::NearEnd(d) => (len as u64).wrapping_add_signed(i64::from(d)),
                Value::Nudge(d) => old.wrapping_add(u64::from(d)),
            };
            bytes[at..at + width].copy_from_slice(&v.to_le_bytes()[..width]);
        }
    }
}

// ---------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(config(512))]

    /// Random bytes, with and without an ELF64 x86-64 identification in
    /// front, are refused with a typed error (or read, should they be ELF).
    #[test]
    fn random_bytes_are_refused_cleanly(
        header in prop::sample::select(vec![
            &b""[..],
            b"\x7fELF",
            b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0\x3e\0\x01\0\0\0",
        ]),
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut bytes = header.to_vec();
        bytes.extend_from_slice(&body);
        read_bounded("random", bytes);
    }

    /// USDT notes as `weft inspect usdt` reads them: random bytes.
    #[test]
    fn random_notes_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..512),
        base in prop::option::of(any::<u64>()),
    ) {
        for probe in parse_notes(&data, base.map(FileAddr)) {
            let _ = (probe.pc, probe.semaphore, probe.args.len());
        }
    }
}

proptest! {
    #![proptest_config(config(768))]

    /// Real ELF files mutated and cut: read, or refused with a typed error.
    #[test]
    fn mutated_elf_files_never_panic(case in case()) {
        let (name, bytes) = case.apply();
        read_bounded(name, bytes);
    }

    /// Real `.note.stapsdt` sections mutated (sizes, types, addresses)
    /// and cut, read as notes directly.
    #[test]
    fn mutated_usdt_notes_never_panic(
        sample in any::<usize>(),
        note in any::<usize>(),
        edits in prop::collection::vec((any::<usize>(), value()), 1..6),
        cut in any::<usize>(),
        base in prop::option::of(any::<u64>()),
    ) {
        let with_notes: Vec<&Sample> = samples()
            .iter()
            .filter(|s| !s.stapsdt_notes().is_empty())
            .collect();
        prop_assume!(!with_notes.is_empty());
        let s = with_notes[sample % with_notes.len()];
        let notes = s.stapsdt_notes();
        let mut data = notes[note % notes.len()].to_vec();
        for (at, value) in edits {
            // A 4-byte field at a 4-aligned offset: namesz, descsz, type,
            // or half of an address.
            let at = (at % (data.len() / 4)) * 4;
            let v = match value {
                Value::Const(v) => v,
                Value::NearEnd(d) => (data.len() as u64).wrapping_add_signed(i64::from(d)),
                Value::Nudge(d) => u64::from(d),
            };
            data[at..at + 4].copy_from_slice(&v.to_le_bytes()[..4]);
        }
        data.truncate(cut % (data.len() + 1));
        for probe in parse_notes(&data, base.map(FileAddr)) {
            let _ = (probe.pc, probe.semaphore, probe.args.len());
        }
    }
}

proptest! {
    #![proptest_config(config(32))]

    /// `Image::open`, as the CLI calls it, on mutated files written to disk.
    #[test]
    fn mutated_files_on_disk_never_panic(case in case()) {
        let (name, bytes) = case.apply();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuzz_elf");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.{:?}.mutated", std::thread::current().id()));
        std::fs::write(&path, &bytes).unwrap();
        match Image::open(&path) {
            Ok(image) => {
                assert_eq!(image.file_name(), path.file_name().unwrap().to_string_lossy());
                exercise(&image);
            }
            Err(e) => {
                check_error(&e);
                prop_assert!(!matches!(e, Error::Io { .. }), "{e}");
            }
        }
        std::fs::remove_file(&path).unwrap();
    }
}

// ---------------------------------------------------------------------------
// Fixed cases.

#[test]
fn every_sample_reads_whole_and_cut_at_its_headers() {
    for s in samples() {
        read_bounded(&s.name, s.bytes.clone());
        for cut in [0, 3, 4, 16, 63, 64, 65, 120, 4096] {
            if let Some(e) = read_bounded(&s.name, s.bytes[..cut.min(s.bytes.len())].to_vec()) {
                assert!(e.contains(&s.name), "{e}");
            }
        }
    }
}

#[test]
fn missing_files_and_directories_are_io_errors() {
    for path in [Path::new("/nonexistent/weft-fuzz"), Path::new("/")] {
        let e = Image::open(path).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        check_error(&e);
    }
}

// Regressions: cases the properties above found, each written out.

/// The sample `name`, or None after a loud skip (without gcc).
fn sample(name: &str) -> Option<&'static Sample> {
    let found = Sample::named(name);
    if found.is_none() {
        skip(&format!("no sample {name}"));
    }
    found
}

fn read(s: &Sample, bytes: Vec<u8>) -> Result<Image, Error> {
    Image::from_bytes(Path::new(&s.name), bytes)
}

/// `bytes_at` of a length past the end of the address space (a symbol's
/// size, as `weft inspect disasm` asks) added with overflow.
#[test]
fn bytes_past_the_end_of_the_address_space_are_none() {
    let Some(s) = sample("true") else { return };
    let image = read(s, s.bytes.clone()).unwrap();
    for seg in image.segments() {
        assert_eq!(image.bytes_at(seg.vaddr, usize::MAX), None);
        if let Some(len) = ((u64::MAX - seg.vaddr.get()) as usize).checked_add(1) {
            assert_eq!(image.bytes_at(seg.vaddr, len), None);
        }
    }
    assert_eq!(image.bytes_at(FileAddr(u64::MAX), 1), None);
    assert_eq!(image.bytes_at(FileAddr(u64::MAX), 0), None);
}

/// A function symbol whose `st_size` runs past the end of the address
/// space made `Function::contains` (so `function_at`) add with overflow;
/// its range now ends with its segment.
#[test]
fn a_symbol_size_past_the_end_of_the_address_space_ends_with_its_segment() {
    let Some(s) = sample("program-pie") else {
        return;
    };
    let size = s.field(|w| w.starts_with(".symtab[") && w.ends_with("(work).st_size"));
    let image = read(s, s.with(&[(&size, u64::MAX - 7)])).unwrap();
    let work = image.function_named("work").expect("work");
    let seg = image
        .segments()
        .iter()
        .find(|seg| seg.exec && work.addr >= seg.vaddr && work.addr - seg.vaddr < seg.memsz)
        .expect("work's segment");
    assert_eq!(work.addr + work.size, seg.vaddr + seg.memsz);
    assert!(work.contains(work.addr) && !work.contains(FileAddr(u64::MAX)));
    assert_eq!(
        image.function_at(work.addr).map(|f| f.addr),
        Some(work.addr)
    );
    exercise(&image);
}

/// A `PT_LOAD` segment whose end (`p_vaddr + p_memsz`, `p_offset +
/// p_filesz`) is past the end of the address space is malformed: no
/// kernel loads it, and every range of the image adds up without overflow.
#[test]
fn a_segment_past_the_end_of_the_address_space_is_malformed() {
    let Some(s) = sample("true") else { return };
    let load = s.field(|w| w.starts_with("phdr[") && w.contains("(PT_LOAD)."));
    let load = &load[..load.find('.').unwrap()];
    let field = |name: &str| format!("{load}.{name}");
    for changes in [
        [(field("p_vaddr"), 0x1000), (field("p_memsz"), u64::MAX)],
        [(field("p_vaddr"), u64::MAX - 3), (field("p_memsz"), 4)],
        [(field("p_offset"), u64::MAX - 1), (field("p_filesz"), 2)],
    ] {
        let changes = changes.each_ref().map(|(f, v)| (f.as_str(), *v));
        let e = match read(s, s.with(&changes)) {
            Ok(image) => panic!("{changes:?} read: {:?}", image.segments()),
            Err(e) => e,
        };
        assert!(matches!(e, Error::Malformed { .. }), "{changes:?}: {e:?}");
        let text = check_error(&e);
        assert!(
            text.contains("runs past the end of the address space"),
            "{text}"
        );
    }
}

/// A segment at the last file offset with no file bytes: `load_bias`
/// added one past the end of the address space.
#[test]
fn a_segment_at_the_last_file_offset_has_no_bias_overflow() {
    let Some(s) = sample("true") else { return };
    let load = s.field(|w| w.starts_with("phdr[") && w.contains("(PT_LOAD)."));
    let load = &load[..load.find('.').unwrap()];
    let bytes = s.with(&[
        (&format!("{load}.p_offset"), u64::MAX),
        (&format!("{load}.p_filesz"), 0),
    ]);
    let image = read(s, bytes).unwrap();
    assert!(image.segments().iter().any(|seg| seg.offset == u64::MAX));
    let _ = image.load_bias(0x5555_0000_0000, u64::MAX);
    exercise(&image);
}

/// A `weft_events` section whose address is near the end of the address
/// space: its end added with overflow. It holds no site weft could enable.
#[test]
fn an_event_section_past_the_end_of_the_address_space_has_no_sites() {
    let Some(s) = sample("program-pie") else {
        return;
    };
    let addr = s.field(|w| w.contains("(weft_events).sh_addr"));
    let image = read(s, s.with(&[(&addr, u64::MAX - 7)])).unwrap();
    assert!(image.event_sites().is_empty());
    exercise(&image);
}
