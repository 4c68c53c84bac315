//! Programs `weft syscalls record` does not record: refused in one clear
//! line, and a workload that runs one goes on.

use super::*;

/// The smallest 32-bit program (`exit(0)` through `int 0x80`), made here
/// byte by byte so that no 32-bit tool chain is needed.
fn exit_32_bit(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let base: u32 = 0x0804_8000;
    let code = [0xb8, 1, 0, 0, 0, 0x31, 0xdb, 0xcd, 0x80];
    let total = 84 + code.len() as u32;
    let mut elf = b"\x7fELF\x01\x01\x01\0\0\0\0\0\0\0\0\0".to_vec();
    for half in [2u16, 3] {
        elf.extend(half.to_le_bytes()); // ET_EXEC, EM_386
    }
    for word in [1u32, base + 84, 52, 0, 0] {
        elf.extend(word.to_le_bytes()); // version, entry, phoff, shoff, flags
    }
    for half in [52u16, 32, 1, 0, 0, 0] {
        elf.extend(half.to_le_bytes()); // ehsize, phentsize, phnum, sh...
    }
    for word in [1u32, 0, base, base, total, total, 5, 0x1000] {
        elf.extend(word.to_le_bytes()); // PT_LOAD, R+X
    }
    elf.extend(code);
    std::fs::write(path, elf).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// A 32-bit program is refused in one line that says so, whether weft
/// starts it or a workload execs it (which then runs on, unrecorded).
#[test]
fn a_32_bit_program_is_one_clear_line() {
    let dir = scratch("syscalls-32-bit");
    let program = dir.join("exit32");
    exit_32_bit(&program);
    let plain = run(
        &mut std::process::Command::new(&program),
        Duration::from_secs(30),
    );
    assert_eq!(
        plain.status, 0,
        "this kernel runs no 32-bit program: {}",
        plain.stderr
    );
    let (_, started) = record_into_status(&dir, &program, &[]);
    assert_eq!(started.status, 1);
    assert_eq!(
        started.stderr.trim(),
        format!(
            "weft: {} is a 32-bit program, and weft measures x86-64 programs only",
            program.display()
        )
    );
    let script = format!("{} && echo ran", program.display());
    let (_, followed) = record_into_status(
        &dir,
        Path::new("/bin/sh"),
        &["-c".as_ref(), script.as_ref()],
    );
    assert_eq!(
        (followed.status, followed.stdout.as_str()),
        (0, "ran\n"),
        "{}",
        followed.stderr
    );
    assert!(
        followed
            .stderr
            .contains("exit32 is a 32-bit program, and weft measures x86-64 programs only"),
        "{}",
        followed.stderr
    );
}
