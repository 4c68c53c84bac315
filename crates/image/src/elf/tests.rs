//! The ELF reader against Debian's C library, programs gcc links, and
//! files that are no x86-64 ELF.

use super::*;

fn libc_path() -> Option<PathBuf> {
    [
        "/lib/x86_64-linux-gnu/libc.so.6",
        "/usr/lib/x86_64-linux-gnu/libc.so.6",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| p.exists())
}

#[test]
fn libc_has_dynsym_and_stripped_ranges() {
    let Some(path) = libc_path() else {
        eprintln!("SKIP: no libc.so.6 found at the Debian paths");
        return;
    };
    let img = Image::open(&path).unwrap();
    assert_eq!(img.kind(), ImageKind::Dynamic);
    let malloc = img.function_named("malloc").expect("malloc in libc");
    assert!(malloc.size > 16);
    assert!(img
        .functions()
        .iter()
        .any(|f| f.source == FunctionSource::EhFrame));
    assert!(img.functions().len() > 2000);
    assert!(img.bytes_at(malloc.addr, malloc.size as usize).is_some());
    assert!(img
        .function_at(malloc.addr + 3)
        .is_some_and(|f| f.addr == malloc.addr));
}

#[test]
fn compatibility_versions_are_named_with_their_version() {
    let Some(path) = libc_path() else {
        eprintln!("SKIP: no libc.so.6 found at the Debian paths");
        return;
    };
    let img = Image::open(&path).unwrap();
    let names: Vec<&str> = img
        .functions()
        .iter()
        .flat_map(|f| std::iter::once(f.name.as_str()).chain(f.aliases.iter().map(|a| a.as_str())))
        .collect();
    // glibc keeps the pre-2.15 posix_spawn and the pre-2.14 memcpy.
    assert!(
        names.contains(&"posix_spawn@GLIBC_2.2.5"),
        "posix_spawn@GLIBC_2.2.5"
    );
    assert!(names.contains(&"posix_spawn"));
    assert!(names.contains(&"memcpy@GLIBC_2.2.5"));
    // Plain `memcpy` means the default version (an IFUNC), never the
    // compatibility one.
    assert!(img
        .function_named("memcpy")
        .is_none_or(|f| f.ifunc && !f.aliases.iter().any(|a| a == "memcpy@GLIBC_2.2.5")));
}

#[test]
fn an_unsized_function_ends_with_its_section() {
    // `_init` (from crti.o) has size 0 in every program gcc links, and
    // `.plt`'s stubs follow `.init`: they are no part of it.
    let dir = std::env::temp_dir().join(format!("weft-image-init-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, exe) = (dir.join("main.c"), dir.join("main"));
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
    )
    .unwrap();
    let built = std::process::Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc (scripts/install-deps.sh installs it)");
    assert!(built.success());
    let bytes = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*bytes).unwrap();
    let init = file.section_by_name(".init").expect(".init");
    let img = Image::open(&exe).unwrap();
    let f = img
        .functions()
        .iter()
        .find(|f| f.name == "_init")
        .expect("_init");
    assert_eq!(f.addr.get(), init.address());
    assert!(
        f.size > 0 && f.size <= init.size(),
        "_init takes {} bytes, .init has {}",
        f.size,
        init.size()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn rejects_non_elf_and_wrong_arch() {
    let err = Image::from_bytes(Path::new("x.txt"), b"hello world".to_vec()).unwrap_err();
    assert!(matches!(err, Error::NotElf { .. }));
    // A minimal ELF64 header for AArch64 (e_machine 183).
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    h[16] = 2;
    h[18] = 183;
    h[20] = 1;
    h[52] = 64;
    let err = Image::from_bytes(Path::new("arm"), h).unwrap_err();
    assert!(matches!(err, Error::NotX86_64 { .. }), "{err:?}");
}

#[test]
fn bias_of_pie_mapping() {
    let img = Image {
        path: "x".into(),
        data: vec![],
        kind: ImageKind::Dynamic,
        interp: None,
        segments: vec![
            Segment {
                vaddr: FileAddr(0),
                memsz: 0x1000,
                offset: 0,
                filesz: 0x1000,
                exec: false,
            },
            Segment {
                vaddr: FileAddr(0x1000),
                memsz: 0x2000,
                offset: 0x1000,
                filesz: 0x2000,
                exec: true,
            },
        ],
        functions: vec![],
        plt: vec![],
        entry: FileAddr(0),
        usdt: vec![],
        event_sites: vec![],
        import_slots: Default::default(),
        exports: Default::default(),
        landing_pads: Default::default(),
        frame_parts: Default::default(),
        code_pointers: Default::default(),
        syscall_functions: Default::default(),
    };
    assert_eq!(
        img.load_bias(0x5555_0000_1000, 0x1000),
        Some(0x5555_0000_0000)
    );
    assert_eq!(img.load_bias(0x5555_0000_0000, 0), Some(0x5555_0000_0000));
}

/// The C library's `syscall` bytes that no function holds are its signal
/// return's alone (`mov rax, 15; syscall`, `__restore_rt`, which has no
/// symbol of its own): every other one is decoded with its function, so
/// a process can settle (docs/syscalls.md, "Settled processes").
#[test]
fn the_c_librarys_syscall_bytes_outside_functions_are_its_signal_return() {
    let Some(path) = libc_path() else {
        eprintln!("SKIP: no libc.so.6 found at the Debian paths");
        return;
    };
    let img = Image::open(&path).unwrap();
    let outside = img.syscall_bytes_outside_functions();
    assert!(!outside.is_empty() && outside.len() <= 2, "{outside:x?}");
    for at in outside {
        let before = img.bytes_at(FileAddr(at - 7), 9).unwrap();
        assert_eq!(
            before,
            [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0, 0x0f, 0x05],
            "{at:#x}"
        );
    }
}
