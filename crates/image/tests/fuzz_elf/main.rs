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

mod mutate;
mod samples;

use mutate::*;
use samples::*;

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
