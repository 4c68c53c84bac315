//! Flags, constants and structures of the common calls as strace shows
//! them (`openat(AT_FDCWD, "/etc/passwd", O_RDONLY|O_CLOEXEC)`,
//! `mmap(NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1,
//! 0)`, `{st_mode=S_IFREG|0644, st_size=39791, ...}`), from the registers
//! and the bytes a record holds. x86-64 values (`include/uapi`). By role:
//! `signals` (names, sets, actions), `process` (`clone`, `sysinfo`),
//! `files` (modes, `statx`, directory entries), `messages` (vectors,
//! messages, addresses, terminal `ioctl`s), `names` (the tables).

/// `AT_FDCWD`.
const AT_FDCWD: i32 = -100;

mod epoll;
mod files;
mod messages;
mod names;
mod process;
mod signals;
mod sockets;
mod times;

pub(crate) use messages::{ioctl, iovecs, message, sockaddr, Message};

use files::numeric_mode as mode;
use names::*;
pub(crate) use signals::delivery;

/// A signal's name as strace gives it (`SIGCHLD`, `SIGRT_1`).
pub(crate) fn signal_name(signal: i32) -> String {
    signals::signal(signal as u64)
}
use signals::signal;

/// `NAME1|NAME2|0x...` for `value`'s bits, `zero` when none is set.
fn bits(value: u64, names: &[(u64, &str)], zero: &str) -> String {
    let mut left = value;
    let mut out: Vec<String> = Vec::new();
    for &(bit, name) in names {
        if bit != 0 && left & bit == bit {
            out.push(name.to_string());
            left &= !bit;
        }
    }
    if left != 0 {
        out.push(format!("{left:#x}"));
    }
    match out.is_empty() {
        true => zero.to_string(),
        false => out.join("|"),
    }
}

/// The name `table` gives `value`, else the number.
fn named(value: u64, table: &[(u64, &str)]) -> String {
    table
        .iter()
        .find(|(v, _)| *v == value)
        .map_or_else(|| format!("{value:#x}"), |(_, n)| n.to_string())
}

/// The name at index `value` of `table`, else the number.
fn indexed(value: u64, table: &[&str]) -> String {
    table
        .get(value as usize)
        .map_or_else(|| value.to_string(), |n| n.to_string())
}

/// A descriptor that may be `AT_FDCWD`.
fn dirfd(value: u64) -> String {
    match value as u32 as i32 {
        AT_FDCWD => "AT_FDCWD".to_string(),
        fd => fd.to_string(),
    }
}

/// `open`'s flags: the access mode, then the other bits.
pub(crate) fn open_flags(value: u64) -> String {
    let mode = ["O_RDONLY", "O_WRONLY", "O_RDWR", "O_ACCMODE"][(value & 3) as usize];
    match bits(value & !3, OPEN_FLAGS, "") {
        rest if rest.is_empty() => mode.to_string(),
        rest => format!("{mode}|{rest}"),
    }
}

/// `PREFIX_CLOEXEC|PREFIX_NONBLOCK` (`O_`, `EPOLL_`, `EFD_`, `IN_`: one
/// value, named after the call), `0` for none.
fn cloexec_nonblock(value: u64, prefix: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut left = value;
    for (bit, name) in [(0o2000000, "CLOEXEC"), (0o4000, "NONBLOCK")] {
        if left & bit != 0 {
            out.push(format!("{prefix}_{name}"));
            left &= !bit;
        }
    }
    if left != 0 || out.is_empty() {
        out.push(match left {
            0 => "0".to_string(),
            v => format!("{v:#x}"),
        });
    }
    out.join("|")
}

/// A pointer argument: `NULL` for 0.
fn pointer(value: u64) -> String {
    match value {
        0 => "NULL".to_string(),
        v => format!("{v:#x}"),
    }
}

/// A file mode creation mask as strace writes one (`022`).
fn umask(value: u64) -> String {
    match value & 0o777 {
        0 => "000".to_string(),
        m => format!("0{m:02o}"),
    }
}

/// The result of call `name` as strace explains it, where it does:
/// `fcntl`'s flags (`0x8001 (flags O_WRONLY|O_LARGEFILE)`), `umask`'s
/// mask.
pub(crate) fn result(name: &str, raw: &[u64; 6], result: i64) -> Option<String> {
    match (name, raw[1], result) {
        ("umask", _, r) if r >= 0 => Some(umask(r as u64)),
        ("fcntl", 1, r) if r > 0 => Some(format!(
            "{r:#x} (flags {})",
            bits(r as u64, &[(1, "FD_CLOEXEC")], "0")
        )),
        ("fcntl", 3, r) if r >= 0 => Some(format!("{r:#x} (flags {})", open_flags(r as u64))),
        _ => None,
    }
}

/// The `args` of call `name` (already in strace's general shape) with its
/// flags and constants named, and an argument added or left out where
/// strace shows one more or fewer (`openat`'s mode with `O_CREAT`,
/// `fcntl`'s argument with `F_GETFD`); `result` is the call's, if it
/// returned (`clone`'s names the new thread).
pub(crate) fn arguments(name: &str, raw: &[u64; 6], result: Option<i64>, args: &mut Vec<String>) {
    if name == "clone" {
        *args = process::clone(raw, result);
        return;
    }
    let mut set = |k: usize, text: String| {
        if let Some(a) = args.get_mut(k) {
            *a = text;
        }
    };
    match name {
        "openat" => {
            set(0, dirfd(raw[0]));
            set(2, open_flags(raw[2]));
            if raw[2] & 0o100 != 0 || raw[2] & 0o20200000 == 0o20200000 {
                args.truncate(3);
                args.push(mode(raw[3]));
            }
        }
        "open" => {
            set(1, open_flags(raw[1]));
            if raw[1] & 0o100 != 0 {
                args.truncate(2);
                args.push(mode(raw[2]));
            }
        }
        "newfstatat" => {
            set(0, dirfd(raw[0]));
            set(3, bits(raw[3], AT_FLAGS, "0"));
        }
        "statx" => {
            set(0, dirfd(raw[0]));
            set(2, files::statx_flags(raw[2]));
            set(3, files::statx_mask(raw[3]));
        }
        "unlinkat" | "faccessat2" | "fchmodat" => {
            set(0, dirfd(raw[0]));
            if name == "unlinkat" {
                set(2, bits(raw[2], AT_FLAGS, "0"));
            }
            if name == "faccessat2" {
                set(2, bits(raw[2], ACCESS, "F_OK"));
                set(3, files::faccessat_flags(raw[3]));
            }
            if name == "fchmodat" {
                set(2, mode(raw[2]));
            }
        }
        "readlinkat" | "mkdirat" | "fchownat" | "utimensat" | "mknodat" | "execveat" => {
            set(0, dirfd(raw[0]));
            if name == "mkdirat" {
                set(2, mode(raw[2]));
            }
            // utimensat on the descriptor itself: no path; its times and
            // flags.
            if name == "utimensat" {
                set(1, pointer(raw[1]));
                set(2, pointer(raw[2]));
                set(3, bits(raw[3], AT_FLAGS, "0"));
            }
        }
        "faccessat" => {
            set(0, dirfd(raw[0]));
            set(2, bits(raw[2], ACCESS, "F_OK"));
        }
        "renameat" | "renameat2" | "linkat" => {
            set(0, dirfd(raw[0]));
            set(2, dirfd(raw[2]));
        }
        "symlinkat" => set(1, dirfd(raw[1])),
        "access" => set(1, bits(raw[1], ACCESS, "F_OK")),
        "umask" => set(0, umask(raw[0])),
        "mkdir" | "chmod" | "fchmod" | "creat" => set(1, mode(raw[1])),
        "mmap" => {
            set(0, pointer(raw[0]));
            set(2, bits(raw[2], PROT, "PROT_NONE"));
            let kind =
                ["0", "MAP_SHARED", "MAP_PRIVATE", "MAP_SHARED_VALIDATE"][(raw[3] & 3) as usize];
            set(
                3,
                match bits(raw[3] & !3, MAP_FLAGS, "") {
                    rest if rest.is_empty() => kind.to_string(),
                    rest => format!("{kind}|{rest}"),
                },
            );
            set(4, (raw[4] as u32 as i32).to_string());
            set(
                5,
                match raw[5] {
                    0 => "0".to_string(),
                    offset => format!("{offset:#x}"),
                },
            );
        }
        "mprotect" | "pkey_mprotect" => set(2, bits(raw[2], PROT, "PROT_NONE")),
        "brk" => set(0, pointer(raw[0])),
        "arch_prctl" => set(0, named(raw[0], ARCH_PRCTL)),
        "lseek" => {
            set(1, (raw[1] as i64).to_string());
            set(2, indexed(raw[2], &SEEK));
        }
        "fcntl" => {
            set(1, named(raw[1], FCNTL));
            match raw[1] {
                // No argument.
                1 | 3 | 9 | 1025 | 1032 | 1034 => args.truncate(2),
                2 => set(2, bits(raw[2], &[(1, "FD_CLOEXEC")], "0")),
                4 => set(2, open_flags(raw[2])),
                _ => {}
            }
        }
        "ioctl" => {
            set(1, named(raw[1], IOCTLS));
            // FIONCLEX, FIOCLEX: no argument; TIOCGPTPEER: open flags,
            // which strace leaves in hex.
            if raw[1] == 0x5441 {
                set(2, format!("{:#x}", raw[2]));
            }
            if matches!(raw[1], 0x5450 | 0x5451) {
                args.truncate(2);
            }
        }
        "setsockopt" | "getsockopt" => {
            let (level, option) = sockets::level_and_option(raw[1], raw[2]);
            set(1, level);
            set(2, option);
            set(3, pointer(raw[3]));
            if name == "getsockopt" {
                set(4, pointer(raw[4]));
            }
        }
        "madvise" => set(2, named(raw[2], sockets::ADVICE)),
        "setitimer" | "getitimer" => {
            set(0, named(raw[0], sockets::TIMERS));
            if name == "setitimer" {
                set(2, pointer(raw[2]));
            }
        }
        "sendto" | "recvfrom" => {
            set(3, bits(raw[3], messages::MSG_FLAGS, "0"));
            set(4, pointer(raw[4]));
            if name == "recvfrom" {
                set(5, pointer(raw[5]));
            }
        }
        "sendmsg" | "recvmsg" => set(2, bits(raw[2], messages::MSG_FLAGS, "0")),
        "getrandom" => set(2, bits(raw[2], GRND, "0")),
        "select" | "pselect6" => {
            for (k, &value) in raw.iter().enumerate().skip(1) {
                set(k, pointer(value));
            }
        }
        "epoll_ctl" => {
            set(1, epoll::operation(raw[1]));
            set(3, pointer(raw[3]));
        }
        "pipe2" | "dup3" | "eventfd2" | "inotify_init1" | "epoll_create1" => {
            let (k, prefix) = match name {
                "pipe2" => (1, "O"),
                "dup3" => (2, "O"),
                "eventfd2" => (1, "EFD"),
                "inotify_init1" => (0, "IN"),
                _ => (0, "EPOLL"),
            };
            set(k, cloexec_nonblock(raw[k], prefix));
        }
        // Counts and limits strace prints in decimal however large.
        "close_range" => {
            set(0, (raw[0] as u32).to_string());
            set(1, (raw[1] as u32).to_string());
        }
        "getxattr" | "lgetxattr" | "fgetxattr" => set(2, pointer(raw[2])),
        "rt_sigaction" => {
            set(0, signal(raw[0]));
            set(1, pointer(raw[1]));
            set(2, pointer(raw[2]));
        }
        "rt_sigprocmask" => {
            set(0, signals::sigprocmask_how(raw[0]));
            set(1, pointer(raw[1]));
            set(2, pointer(raw[2]));
        }
        "kill" | "tkill" => {
            // A pid is an `int`: a process group's is negative.
            set(0, (raw[0] as u32 as i32).to_string());
            set(1, signal(raw[1]));
        }
        "tgkill" => set(2, signal(raw[2])),
        "rt_sigqueueinfo" => {
            set(1, signal(raw[1]));
            set(2, pointer(raw[2]));
        }
        "rt_tgsigqueueinfo" => {
            set(2, signal(raw[2]));
            set(3, pointer(raw[3]));
        }
        "prlimit64" => {
            set(1, indexed(raw[1], &RLIMITS));
            set(2, pointer(raw[2]));
            set(3, pointer(raw[3]));
        }
        "getrlimit" | "setrlimit" => set(0, indexed(raw[0], &RLIMITS)),
        "futex" => {
            let op = raw[1] & 0x7f;
            let mut text = indexed(op, &FUTEX_OPS);
            if raw[1] & 128 != 0 {
                text.push_str("_PRIVATE");
            }
            if raw[1] & 256 != 0 {
                text.push_str("|FUTEX_CLOCK_REALTIME");
            }
            set(1, text);
            set(2, (raw[2] as u32 as i32).to_string());
            // FUTEX_WAKE takes a count only.
            if op == 1 {
                args.truncate(3);
            }
        }
        "socket" | "socketpair" => {
            set(0, named(raw[0], DOMAINS));
            set(2, sockets::protocol(raw[0], raw[2]));
            let kind = named(raw[1] & 0xf, SOCK_TYPES);
            set(
                1,
                match bits(raw[1] & !0xf, SOCK_FLAGS, "") {
                    rest if rest.is_empty() => kind,
                    rest => format!("{kind}|{rest}"),
                },
            );
        }
        "set_robust_list" | "set_tid_address" => set(0, pointer(raw[0])),
        "rseq" => {
            set(0, pointer(raw[0]));
            set(1, format!("{:#x}", raw[1]));
        }
        "nanosleep" => set(1, pointer(raw[1])),
        "timer_create" => {
            set(1, pointer(raw[1]));
            set(2, pointer(raw[2]));
        }
        "timer_settime" => {
            set(2, pointer(raw[2]));
            set(3, pointer(raw[3]));
        }
        "timer_gettime" => set(1, pointer(raw[1])),
        "fadvise64" => {
            set(1, (raw[1] as i64).to_string());
            set(2, (raw[2] as i64).to_string());
            set(3, files::advice(raw[3]));
        }
        // The offsets: strace reads them where they are not NULL, which
        // the record does not hold.
        "copy_file_range" => {
            set(1, pointer(raw[1]));
            set(3, pointer(raw[3]));
            set(4, raw[4].to_string());
        }
        "clock_nanosleep" => {
            set(1, bits(raw[1], &[(1, "TIMER_ABSTIME")], "0"));
            set(3, pointer(raw[3]));
        }
        "wait4" => {
            set(
                2,
                bits(
                    raw[2],
                    &[
                        (1, "WNOHANG"),
                        (2, "WUNTRACED"),
                        (8, "WCONTINUED"),
                        (0x40000000, "__WALL"),
                        (0x80000000, "__WCLONE"),
                    ],
                    "0",
                ),
            );
            set(1, pointer(raw[1]));
            set(3, pointer(raw[3]));
        }
        _ => {}
    }
}

/// A `poll` array as strace shows it: `[{fd=3, events=POLLIN}]`, or with
/// `ready` the entries the kernel found ready, `[{fd=3, revents=POLLIN}]`.
pub(crate) fn pollfds(bytes: &[u8], ready: bool) -> String {
    let entries: Vec<String> = bytes
        .chunks_exact(8)
        .filter_map(|e| {
            let fd = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
            let (events, revents) = (
                u16::from_le_bytes([e[4], e[5]]),
                u16::from_le_bytes([e[6], e[7]]),
            );
            match ready {
                false => Some(format!(
                    "{{fd={fd}, events={}}}",
                    bits(events.into(), POLL, "0")
                )),
                true if revents != 0 => Some(format!(
                    "{{fd={fd}, revents={}}}",
                    bits(revents.into(), POLL, "0")
                )),
                true => None,
            }
        })
        .collect();
    format!("[{}]", entries.join(", "))
}

/// A buffer of call `name` the record holds (its argument `arg`, its
/// bytes, whether they were cut) as strace shows it, where that needs
/// the call's registers or shows the address: signal sets and actions,
/// `statx`'s and `sysinfo`'s structures, `getdents64`'s entries. The
/// address when the bytes cannot be what strace read (a set of another
/// size, entries cut short).
pub(crate) fn recorded(
    name: &str,
    raw: &[u64; 6],
    arg: usize,
    bytes: &[u8],
    truncated: bool,
) -> Option<String> {
    let address = || pointer(raw.get(arg).copied().unwrap_or(0));
    match (name, arg) {
        ("rt_sigprocmask", 1 | 2) | ("rt_sigpending", 0) => {
            Some(signals::sigset(bytes).unwrap_or_else(address))
        }
        ("rt_sigaction", 1 | 2) => Some(signals::sigaction(bytes).unwrap_or_else(address)),
        ("statx", 4) => Some(files::statx(bytes).unwrap_or_else(address)),
        ("sysinfo", 0) => Some(process::sysinfo(bytes).unwrap_or_else(address)),
        ("setitimer", 1 | 2) | ("getitimer", 1) => {
            Some(sockets::itimerval(bytes).unwrap_or_else(address))
        }
        ("setsockopt" | "getsockopt", 3) => sockets::option_value(bytes),
        // The length a `getsockopt` that failed was given.
        ("getsockopt", 4) => Some(match <[u8; 4]>::try_from(bytes) {
            Ok(length) => format!("[{}]", u32::from_le_bytes(length)),
            Err(_) => address(),
        }),
        ("epoll_ctl", 3) => Some(epoll::event(bytes).unwrap_or_else(address)),
        ("utimensat", 2) => Some(times::utimens(bytes).unwrap_or_else(address)),
        // strace leaves out the entries of a call that said it wrote more
        // than its buffer holds.
        ("getdents64", 1) if truncated || bytes.len() as u64 > raw[2] => Some(address()),
        ("getdents64", 1) => Some(files::dirents(raw[1], bytes)),
        _ => None,
    }
}

/// A set of bits, each set one's number (a descriptor set, a CPU set), as
/// strace shows it: `[3 5]`.
pub(crate) fn fd_set(bytes: &[u8]) -> String {
    let members: Vec<String> = (0..bytes.len() * 8)
        .filter(|&bit| bytes[bit / 8] & (1 << (bit % 8)) != 0)
        .map(|bit| bit.to_string())
        .collect();
    format!("[{}]", members.join(" "))
}

/// What call `name` wrote into a buffer, as strace shows the structure:
/// a `stat`, `prlimit64`'s limits, `pipe2`'s descriptors, `wait4`'s
/// status; none for other calls (their bytes are shown as a string).
pub(crate) fn structure(name: &str, bytes: &[u8]) -> Option<String> {
    let u32_at = |k: usize| -> Option<u32> {
        Some(u32::from_le_bytes(bytes.get(k..k + 4)?.try_into().ok()?))
    };
    let u64_at = |k: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(k..k + 8)?.try_into().ok()?))
    };
    match name {
        "newfstatat" | "fstat" | "stat" | "lstat" if bytes.len() >= 144 => {
            let st_mode = u32_at(24)?;
            let rest = match st_mode & 0o170000 {
                0o060000 | 0o020000 => {
                    let rdev = u64_at(40)?;
                    let major = ((rdev >> 32) & 0xffff_f000) | ((rdev >> 8) & 0xfff);
                    let minor = ((rdev >> 12) & 0xffff_ff00) | (rdev & 0xff);
                    format!("st_rdev=makedev({major:#x}, {minor:#x})")
                }
                _ => format!("st_size={}", u64_at(48)? as i64),
            };
            Some(format!(
                "{{st_mode={}, {rest}, ...}}",
                files::symbolic_mode(u64::from(st_mode))
            ))
        }
        "epoll_wait" | "epoll_pwait" | "epoll_pwait2" => epoll::events(bytes),
        // The CPUs of the set, each bit's number.
        "sched_getaffinity" => Some(fd_set(bytes)),
        "prlimit64" | "getrlimit" if bytes.len() == 16 => {
            let limit = |v: u64| match v {
                u64::MAX => "RLIM64_INFINITY".to_string(),
                v if v >= 1024 && v % 1024 == 0 => format!("{}*1024", v / 1024),
                v => v.to_string(),
            };
            Some(format!(
                "{{rlim_cur={}, rlim_max={}}}",
                limit(u64_at(0)?),
                limit(u64_at(8)?)
            ))
        }
        "uname" if bytes.len() >= 130 => {
            let field = |k: usize| {
                let raw = &bytes[65 * k..65 * (k + 1)];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                String::from_utf8_lossy(&raw[..end]).into_owned()
            };
            Some(format!(
                "{{sysname={:?}, nodename={:?}, ...}}",
                field(0),
                field(1)
            ))
        }
        "poll" | "ppoll" => Some(pollfds(bytes, false)),
        "pipe2" | "pipe" | "socketpair" if bytes.len() == 8 => {
            Some(format!("[{}, {}]", u32_at(0)? as i32, u32_at(4)? as i32))
        }
        "wait4" if bytes.len() == 4 => {
            let s = u32_at(0)?;
            Some(match (s & 0x7f, (s >> 8) & 0xff) {
                (0, code) => format!("[{{WIFEXITED(s) && WEXITSTATUS(s) == {code}}}]"),
                (0x7f, sig) => format!(
                    "[{{WIFSTOPPED(s) && WSTOPSIG(s) == {}}}]",
                    signal(sig.into())
                ),
                (sig, _) => {
                    let core = if s & 0x80 != 0 {
                        " && WCOREDUMP(s)"
                    } else {
                        ""
                    };
                    format!(
                        "[{{WIFSIGNALED(s) && WTERMSIG(s) == {}{core}}}]",
                        signal(sig.into())
                    )
                }
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
