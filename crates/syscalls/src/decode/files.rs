//! File calls' values as strace 6 shows them: modes (`0644`,
//! `S_IFDIR|S_ISVTX|0777`), `statx`'s flags, mask and structure,
//! `getdents64`'s entries in strace's abbreviated form (`0x... /* 5
//! entries */`), `fadvise64`'s advice and `faccessat2`'s flags.

use super::names::{Bits, AT_FLAGS};
use super::{bits, pointer};

/// A number as C's `%#03o` writes it: `000`, `007`, `0644`.
fn octal(value: u64) -> String {
    match value {
        0 => "000".to_string(),
        v => format!("0{v:02o}"),
    }
}

/// A mode argument (`chmod`'s, `mkdir`'s, `openat`'s), a kernel
/// `umode_t`: octal, special bits and file type included (`01777`).
pub(super) fn numeric_mode(value: u64) -> String {
    octal(value & 0xffff)
}

/// File types by their `S_IFMT` bits.
const FILE_TYPES: &[(u64, &str)] = &[
    (0o140000, "S_IFSOCK"),
    (0o120000, "S_IFLNK"),
    (0o100000, "S_IFREG"),
    (0o060000, "S_IFBLK"),
    (0o040000, "S_IFDIR"),
    (0o020000, "S_IFCHR"),
    (0o010000, "S_IFIFO"),
];

/// A mode a `stat` or `statx` filled: its type, then `S_ISUID`,
/// `S_ISGID` and `S_ISVTX` by name and the permissions in octal
/// (`S_IFREG|S_ISUID|0755`); a mode of unknown type whole in octal.
pub(super) fn symbolic_mode(value: u64) -> String {
    let kind = match value & 0o170000 {
        0 => Some(""),
        t => FILE_TYPES.iter().find(|(v, _)| *v == t).map(|(_, n)| *n),
    };
    let Some(kind) = kind else {
        return octal(value);
    };
    let mut out = String::new();
    if !kind.is_empty() {
        out.push_str(kind);
        out.push('|');
    }
    for (bit, name) in [
        (0o4000, "S_ISUID"),
        (0o2000, "S_ISGID"),
        (0o1000, "S_ISVTX"),
    ] {
        if value & bit != 0 {
            out.push_str(name);
            out.push('|');
        }
    }
    out.push_str(&octal(value & 0o777));
    out
}

/// `statx`'s mask bits as strace 6.1 knows them, the sums first.
const STATX_MASK: Bits = &[
    (0xfff, "STATX_ALL"),
    (0x7ff, "STATX_BASIC_STATS"),
    (0x1, "STATX_TYPE"),
    (0x2, "STATX_MODE"),
    (0x4, "STATX_NLINK"),
    (0x8, "STATX_UID"),
    (0x10, "STATX_GID"),
    (0x20, "STATX_ATIME"),
    (0x40, "STATX_MTIME"),
    (0x80, "STATX_CTIME"),
    (0x100, "STATX_INO"),
    (0x200, "STATX_SIZE"),
    (0x400, "STATX_BLOCKS"),
    (0x800, "STATX_BTIME"),
    (0x1000, "STATX_MNT_ID"),
    (0x2000, "STATX_DIOALIGN"),
];

/// `stx_attributes`' bits as strace 6.1 knows them.
const STATX_ATTRIBUTES: Bits = &[
    (0x4, "STATX_ATTR_COMPRESSED"),
    (0x10, "STATX_ATTR_IMMUTABLE"),
    (0x20, "STATX_ATTR_APPEND"),
    (0x40, "STATX_ATTR_NODUMP"),
    (0x800, "STATX_ATTR_ENCRYPTED"),
    (0x1000, "STATX_ATTR_AUTOMOUNT"),
    (0x2000, "STATX_ATTR_MOUNT_ROOT"),
    (0x100000, "STATX_ATTR_VERITY"),
    (0x200000, "STATX_ATTR_DAX"),
];

/// `AT_RECURSIVE`, which strace adds to the `AT_*` flags for `statx`.
const AT_RECURSIVE: u64 = 0x8000;

/// `statx`'s mask (its argument, or `stx_mask`).
pub(super) fn statx_mask(value: u64) -> String {
    bits(value & 0xffff_ffff, STATX_MASK, "0")
}

/// `statx`'s flags: the synchronisation type first
/// (`AT_STATX_SYNC_AS_STAT` for none), then the other `AT_*` flags.
pub(super) fn statx_flags(value: u64) -> String {
    let value = value & 0xffff_ffff;
    let sync = match value & 0x6000 {
        0 => "AT_STATX_SYNC_AS_STAT",
        0x2000 => "AT_STATX_FORCE_SYNC",
        0x4000 => "AT_STATX_DONT_SYNC",
        _ => "AT_STATX_FORCE_SYNC|AT_STATX_DONT_SYNC",
    };
    match value & !0x6000 {
        0 => sync.to_string(),
        rest => {
            let mut names = AT_FLAGS.to_vec();
            names.push((AT_RECURSIVE, "AT_RECURSIVE"));
            format!("{sync}|{}", bits(rest, &names, "0"))
        }
    }
}

/// The `struct statx` a call filled, abbreviated as strace shows it
/// (`{stx_mask=..., stx_attributes=0, stx_mode=S_IFREG|0644,
/// stx_size=3, ...}`); none if the record holds too few bytes.
pub(super) fn statx(bytes: &[u8]) -> Option<String> {
    let word = |at: usize, n: usize| -> Option<u64> {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(bytes.get(at..at + n)?);
        Some(u64::from_le_bytes(v))
    };
    Some(format!(
        "{{stx_mask={}, stx_attributes={}, stx_mode={}, stx_size={}, ...}}",
        statx_mask(word(0, 4)?),
        bits(word(8, 8)?, STATX_ATTRIBUTES, "0"),
        symbolic_mode(word(28, 2)?),
        word(40, 8)?
    ))
}

/// `struct linux_dirent64`'s header: `d_ino`, `d_off`, `d_reclen` and
/// `d_type`, before the name.
const DIRENT64_HEADER: usize = 19;

/// The entries `getdents64` wrote at `address` (`bytes`, its result's
/// worth), as strace shows them without `-v`: the address and a count,
/// `+` after it if bytes too few for an entry are left over. Just the
/// address if an entry's length is impossible.
pub(super) fn dirents(address: u64, bytes: &[u8]) -> String {
    let mut count = 0;
    let mut at = 0;
    while bytes.len() - at >= DIRENT64_HEADER {
        let reclen = u16::from_le_bytes([bytes[at + 16], bytes[at + 17]]) as usize;
        if reclen < DIRENT64_HEADER || reclen > bytes.len() - at {
            return pointer(address);
        }
        count += 1;
        at += reclen;
    }
    let more = if at < bytes.len() { "+" } else { "" };
    format!("{} /* {count}{more} entries */", pointer(address))
}

/// `fadvise64`'s advice (x86-64's numbers).
pub(super) fn advice(value: u64) -> String {
    const ADVICE: [&str; 6] = [
        "POSIX_FADV_NORMAL",
        "POSIX_FADV_RANDOM",
        "POSIX_FADV_SEQUENTIAL",
        "POSIX_FADV_WILLNEED",
        "POSIX_FADV_DONTNEED",
        "POSIX_FADV_NOREUSE",
    ];
    let advice = value as u32;
    match ADVICE.get(advice as usize) {
        Some(name) => name.to_string(),
        None => format!("{advice:#x} /* POSIX_FADV_??? */"),
    }
}

/// `faccessat2`'s flags.
pub(super) fn faccessat_flags(value: u64) -> String {
    const FACCESSAT: Bits = &[
        (0x100, "AT_SYMLINK_NOFOLLOW"),
        (0x200, "AT_EACCESS"),
        (0x1000, "AT_EMPTY_PATH"),
    ];
    bits(value & 0xffff_ffff, FACCESSAT, "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|k| u8::from_str_radix(&text[k..k + 2], 16).unwrap())
            .collect()
    }

    /// strace 6.1's arguments and structures on this machine, with the
    /// bytes the kernel wrote.
    #[test]
    fn modes_read_as_strace_shows_them() {
        assert_eq!(numeric_mode(0o7), "007");
        assert_eq!(numeric_mode(0), "000");
        assert_eq!(numeric_mode(0o4755), "04755");
        assert_eq!(numeric_mode(0o1777), "01777");
        assert_eq!(numeric_mode(0o170777), "0170777");
        assert_eq!(symbolic_mode(0o104000), "S_IFREG|S_ISUID|000");
        assert_eq!(symbolic_mode(0o41777), "S_IFDIR|S_ISVTX|0777");
        assert_eq!(symbolic_mode(0o20666), "S_IFCHR|0666");
    }

    #[test]
    fn statx_reads_as_strace_shows_it() {
        assert_eq!(statx_flags(0), "AT_STATX_SYNC_AS_STAT");
        assert_eq!(statx_flags(0x1000), "AT_STATX_SYNC_AS_STAT|AT_EMPTY_PATH");
        assert_eq!(
            statx_flags(0x4100),
            "AT_STATX_DONT_SYNC|AT_SYMLINK_NOFOLLOW"
        );
        assert_eq!(
            statx_flags(0x1e000),
            "AT_STATX_FORCE_SYNC|AT_STATX_DONT_SYNC|AT_RECURSIVE|0x10000"
        );
        assert_eq!(statx_mask(0xfff), "STATX_ALL");
        assert_eq!(statx_mask(0x201), "STATX_TYPE|STATX_SIZE");
        assert_eq!(
            statx_mask(0x8003_f000),
            "STATX_MNT_ID|STATX_DIOALIGN|0x8003c000"
        );
        assert_eq!(statx_mask(0), "0");
        let tmp = hex(
            "ff1f00000010000000000000000000006d0000000000000000000000ff430000\
             a3c4030000000000003000000000000018000000000000007438300000000000",
        );
        assert_eq!(
            statx(&tmp).unwrap(),
            "{stx_mask=STATX_ALL|STATX_MNT_ID, stx_attributes=0, \
             stx_mode=S_IFDIR|S_ISVTX|0777, stx_size=12288, ...}"
        );
        let root = hex(
            "ff170000001000000020000000000000150000000000000000000000ed410000\
             0200000000000000001000000000000008000000000000007438300000000000",
        );
        assert_eq!(
            statx(&root).unwrap(),
            "{stx_mask=STATX_BASIC_STATS|STATX_MNT_ID, stx_attributes=STATX_ATTR_MOUNT_ROOT, \
             stx_mode=S_IFDIR|0755, stx_size=4096, ...}"
        );
        let null = hex(
            "ff170000001000000000000000000000010000000000000000000000b6210000\
             0300000000000000000000000000000000000000000000007030200000000000",
        );
        assert_eq!(
            statx(&null).unwrap(),
            "{stx_mask=STATX_BASIC_STATS|STATX_MNT_ID, stx_attributes=0, \
             stx_mode=S_IFCHR|0666, stx_size=0, ...}"
        );
        assert_eq!(statx(&null[..40]), None);
    }

    #[test]
    fn directory_entries_read_as_strace_counts_them() {
        let five = hex(
            "1d409e0000000000179a0a7048e2fc1e180008626200000008409e0000000000\
             a46108c24fdecc541800042e0000000018409e00000000001eba4030d7643a58\
             18000473756200007c809a00000000008781b4acbd3efd6a1800042e2e000000\
             1c409e0000000000ffffffffffffff7f1800086100000000",
        );
        assert_eq!(
            dirents(0x7ffd_1b67_4d40, &five),
            "0x7ffd1b674d40 /* 5 entries */"
        );
        assert_eq!(
            dirents(0x7ffd_a523_a8a0, &[]),
            "0x7ffda523a8a0 /* 0 entries */"
        );
        // Not strace's: bad bytes (an entry shorter than its header) and
        // leftovers shown without a panic.
        let mut bad = five.clone();
        bad[16] = 2;
        assert_eq!(dirents(0x1000, &bad), "0x1000");
        assert!(dirents(0x1000, &five[..30]).starts_with("0x1000 /* 1"));
    }

    #[test]
    fn advice_and_access_flags_read_as_strace_names_them() {
        assert_eq!(advice(2), "POSIX_FADV_SEQUENTIAL");
        assert_eq!(advice(4), "POSIX_FADV_DONTNEED");
        assert_eq!(advice(5), "POSIX_FADV_NOREUSE");
        assert_eq!(advice(77), "0x4d /* POSIX_FADV_??? */");
        assert_eq!(faccessat_flags(0x200), "AT_EACCESS");
        assert_eq!(faccessat_flags(0x300), "AT_SYMLINK_NOFOLLOW|AT_EACCESS");
    }
}
