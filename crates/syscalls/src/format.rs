//! Calls as text, in strace's shape: `read(3, "hello", 4096) = 5`,
//! `openat(AT_FDCWD, "/nonexistent", O_RDONLY) = -1 ENOENT (No such file
//! or directory)`. Arguments are the registers, as many as the call takes,
//! with the flags, constants and structures of the common calls named as
//! strace names them (`crate::decode`); the others as numbers.

use crate::Call;
use syscalls::{Errno, Sysno};

/// The call's name (`read`), or `syscall_N` for a number Linux has not.
pub fn name(nr: u64) -> String {
    if let Some(signal) = weft_abi::delivery::signal(nr) {
        return format!("delivery of {}", crate::decode::signal_name(signal));
    }
    usize::try_from(nr)
        .ok()
        .and_then(Sysno::new)
        .map_or_else(|| format!("syscall_{nr}"), |s| s.name().to_string())
}

/// `ENOENT (No such file or directory)` for 2.
pub fn errno_name(errno: i32) -> String {
    // The C library's text, as strace prints it.
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let description = text.split(" (os error").next().unwrap_or(&text);
    match Errno::new(errno).name() {
        Some(name) => format!("{name} ({description})"),
        None => format!("E{errno} ({description})"),
    }
}

/// Calls whose result is an address (shown in hex).
const RETURN_ADDRESSES: [&str; 4] = ["mmap", "brk", "mremap", "shmat"];

/// Arguments the calls that strace shows with fewer than six take.
const ARGUMENTS: &[(&str, usize)] = &[
    ("read", 3),
    ("write", 3),
    ("open", 3),
    ("close", 1),
    ("stat", 2),
    ("fstat", 2),
    ("lstat", 2),
    ("poll", 3),
    ("lseek", 3),
    ("mmap", 6),
    ("mprotect", 3),
    ("munmap", 2),
    ("brk", 1),
    ("rt_sigaction", 4),
    ("rt_sigprocmask", 4),
    ("rt_sigreturn", 0),
    ("ioctl", 3),
    ("pread64", 4),
    ("pwrite64", 4),
    ("readv", 3),
    ("writev", 3),
    ("preadv2", 5),
    ("pwritev2", 5),
    ("access", 2),
    ("pipe", 1),
    ("sched_yield", 0),
    ("madvise", 3),
    ("dup", 1),
    ("dup2", 2),
    ("nanosleep", 2),
    ("getpid", 0),
    ("socket", 3),
    ("connect", 3),
    ("clone", 5),
    ("fork", 0),
    ("vfork", 0),
    ("execve", 3),
    ("exit", 1),
    ("wait4", 4),
    ("kill", 2),
    ("uname", 1),
    ("fcntl", 3),
    ("getcwd", 2),
    ("chdir", 1),
    ("rename", 2),
    ("mkdir", 2),
    ("rmdir", 1),
    ("unlink", 1),
    ("readlink", 3),
    ("umask", 1),
    ("getuid", 0),
    ("getgid", 0),
    ("geteuid", 0),
    ("getegid", 0),
    ("getppid", 0),
    ("getpgrp", 0),
    ("setsid", 0),
    ("arch_prctl", 2),
    ("gettid", 0),
    ("time", 1),
    ("futex", 6),
    ("getdents64", 3),
    ("set_tid_address", 1),
    ("clock_gettime", 2),
    ("clock_nanosleep", 4),
    ("timer_create", 3),
    ("timer_settime", 4),
    ("timer_gettime", 2),
    ("timer_getoverrun", 1),
    ("timer_delete", 1),
    ("exit_group", 1),
    ("tgkill", 3),
    ("rt_sigqueueinfo", 3),
    ("rt_tgsigqueueinfo", 4),
    ("openat", 3),
    ("newfstatat", 4),
    ("unlinkat", 3),
    ("readlinkat", 4),
    ("faccessat", 3),
    ("set_robust_list", 2),
    ("pipe2", 2),
    ("dup3", 3),
    ("prlimit64", 4),
    ("getrandom", 3),
    ("statx", 5),
    ("rseq", 4),
    ("clone3", 2),
    ("close_range", 3),
    ("faccessat2", 4),
    ("fadvise64", 4),
    ("setxattr", 5),
    ("lsetxattr", 5),
    ("fsetxattr", 5),
    ("getxattr", 4),
    ("lgetxattr", 4),
    ("fgetxattr", 4),
    ("listxattr", 3),
    ("llistxattr", 3),
    ("flistxattr", 3),
    ("removexattr", 2),
    ("lremovexattr", 2),
    ("fremovexattr", 2),
    ("kill", 2),
    ("ftruncate", 2),
    ("fsync", 1),
    ("fchdir", 1),
    ("fchmod", 2),
    ("sendto", 6),
    ("recvfrom", 6),
    ("bind", 3),
    ("listen", 2),
    ("accept", 3),
    ("accept4", 4),
    ("shutdown", 2),
    ("getsockname", 3),
    ("getpeername", 3),
    ("chmod", 2),
    ("fchown", 3),
    ("lchown", 3),
    ("chown", 3),
    ("fchmodat", 3),
    ("fchownat", 5),
    ("utimensat", 4),
    ("truncate", 2),
    ("link", 2),
    ("symlink", 2),
    ("linkat", 5),
    ("symlinkat", 3),
    ("renameat", 4),
    ("renameat2", 5),
    ("mkdirat", 3),
    ("mknodat", 4),
    ("socketpair", 4),
    ("sendmsg", 3),
    ("recvmsg", 3),
    ("timerfd_create", 2),
    ("fdatasync", 1),
    ("flock", 2),
    ("statfs", 2),
    ("fstatfs", 2),
    ("getgroups", 2),
    ("waitid", 5),
    ("execveat", 5),
    ("preadv", 4),
    ("pwritev", 4),
    ("creat", 2),
    ("chroot", 1),
    ("sendfile", 4),
    ("splice", 6),
    ("copy_file_range", 6),
    ("fallocate", 4),
    ("setrlimit", 2),
    ("getrusage", 2),
    ("times", 1),
    ("memfd_create", 2),
    ("inotify_init1", 1),
    ("inotify_add_watch", 3),
    ("rt_sigsuspend", 2),
    ("rt_sigpending", 2),
    ("rt_sigtimedwait", 4),
    ("getitimer", 2),
    ("setitimer", 3),
    ("gettimeofday", 2),
    ("getcpu", 3),
    ("clock_getres", 2),
    ("sched_setaffinity", 3),
    ("membarrier", 3),
    ("mlock", 2),
    ("munlock", 2),
    ("setsockopt", 5),
    ("getsockopt", 5),
    ("epoll_create1", 1),
    ("epoll_ctl", 4),
    ("epoll_wait", 4),
    ("epoll_pwait", 6),
    ("eventfd2", 2),
    ("sysinfo", 1),
    ("getrlimit", 2),
    ("setpgid", 2),
    ("getpgid", 1),
    ("getsid", 1),
    ("setuid", 1),
    ("setgid", 1),
    ("setresuid", 3),
    ("setresgid", 3),
    ("getresuid", 3),
    ("getresgid", 3),
    ("sigaltstack", 2),
    ("prctl", 5),
    ("sched_getaffinity", 3),
    ("mremap", 5),
    ("msync", 3),
    ("mincore", 3),
    ("pselect6", 6),
    ("ppoll", 5),
    ("select", 5),
    ("getdents", 3),
    ("getpriority", 2),
    ("alarm", 1),
    ("pause", 0),
    ("restart_syscall", 0),
];

/// Whether call `nr` returns an address (a rerun's may differ from the
/// record's with nothing wrong).
pub fn returns_address(nr: u64) -> bool {
    RETURN_ADDRESSES.contains(&name(nr).as_str())
}

/// Arguments that are sizes, shown in decimal whatever their value, as
/// strace shows them: (call, argument from 0).
const SIZES: &[(&str, usize)] = &[
    ("read", 2),
    ("write", 2),
    ("pread64", 2),
    ("pwrite64", 2),
    ("getdents64", 2),
    ("recvfrom", 2),
    ("sendto", 2),
    ("readlink", 2),
    ("readlinkat", 3),
    ("getrandom", 1),
    ("mmap", 1),
    ("munmap", 1),
    ("mprotect", 1),
    ("madvise", 1),
    ("mremap", 1),
    ("mremap", 2),
];

/// How many arguments `name` takes (six if this table does not know).
fn arguments(name: &str) -> usize {
    ARGUMENTS
        .iter()
        .find(|(n, _)| *n == name)
        .map_or(6, |&(_, k)| k)
}

/// One argument: small values in decimal (descriptors, sizes, flags, -100
/// for `AT_FDCWD`), others in hex (addresses).
fn argument(v: u64) -> String {
    let signed = v as i64;
    // An `int` argument (a descriptor such as `AT_FDCWD`) leaves the upper
    // half of its register zero.
    let int = v as u32 as i32;
    if (-4096..65536).contains(&signed) {
        signed.to_string()
    } else if v >> 32 == 0 && (-4096..0).contains(&int) {
        int.to_string()
    } else {
        format!("{v:#x}")
    }
}

/// `bytes` as a C string literal, as strace writes one: `\n`, `\t` and
/// the like, octal for other bytes outside printable ASCII, cut at `max`
/// bytes with `...` after it (as when the kernel wrote more than was
/// recorded).
pub fn quoted(bytes: &[u8], truncated: bool, max: usize) -> String {
    let shown = &bytes[..bytes.len().min(max)];
    let mut out = String::from("\"");
    for (k, &b) in shown.iter().enumerate() {
        match b {
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\r' => out.push_str("\\r"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(b as char),
            // Octal, as few digits as are unambiguous (three before a
            // digit), as strace writes it.
            _ if shown.get(k + 1).is_some_and(u8::is_ascii_digit) => {
                out.push_str(&format!("\\{b:03o}"))
            }
            _ => out.push_str(&format!("\\{b:o}")),
        }
    }
    out.push('"');
    if truncated || bytes.len() > max {
        out.push_str("...");
    }
    out
}

/// `bytes` as a C string literal of `\x` escapes, as strace writes
/// random bytes, cut as [`quoted`] cuts.
fn hex_quoted(bytes: &[u8], truncated: bool, max: usize) -> String {
    let shown = &bytes[..bytes.len().min(max)];
    let body: String = shown.iter().map(|b| format!("\\x{b:02x}")).collect();
    let more = if truncated || bytes.len() > max {
        "..."
    } else {
        ""
    };
    format!("\"{body}\"{more}")
}

/// The clocks of `clock_gettime`'s first argument, by number.
const CLOCKS: [&str; 12] = [
    "CLOCK_REALTIME",
    "CLOCK_MONOTONIC",
    "CLOCK_PROCESS_CPUTIME_ID",
    "CLOCK_THREAD_CPUTIME_ID",
    "CLOCK_MONOTONIC_RAW",
    "CLOCK_REALTIME_COARSE",
    "CLOCK_MONOTONIC_COARSE",
    "CLOCK_BOOTTIME",
    "CLOCK_REALTIME_ALARM",
    "CLOCK_BOOTTIME_ALARM",
    "CLOCK_SGI_CYCLE",
    "CLOCK_TAI",
];

/// What a clock call wrote, as strace shows it: `{tv_sec=S, tv_nsec=N}`
/// for a `timespec` (a sleep's remaining time too), `{tv_sec=S,
/// tv_usec=U}` for a `timeval`, `[S]` for `time`'s and `[N]` for
/// `getcpu`'s.
fn clock_structure(name: &str, bytes: &[u8]) -> Option<String> {
    let word = |k: usize| -> Option<i64> {
        Some(i64::from_le_bytes(
            bytes.get(8 * k..8 * k + 8)?.try_into().ok()?,
        ))
    };
    match (name, bytes.len()) {
        ("clock_gettime" | "clock_getres" | "nanosleep" | "clock_nanosleep", 16) => {
            Some(format!("{{tv_sec={}, tv_nsec={}}}", word(0)?, word(1)?))
        }
        ("gettimeofday", 16) => Some(format!("{{tv_sec={}, tv_usec={}}}", word(0)?, word(1)?)),
        ("time", 8) => Some(format!("[{}]", word(0)?)),
        ("getcpu", 4) => Some(format!("[{}]", u32::from_le_bytes(bytes.try_into().ok()?))),
        _ => None,
    }
}

/// The arguments of a vectored call (`readv`, `writev`, ...), of a
/// message call (`recvmsg`, `sendmsg`) and of an `ioctl` whose buffer
/// the record holds, from their buffers; whether the call was one.
fn vectors(call: &Call, name: &str, args: &mut [String]) -> bool {
    use crate::Memory;
    let find = |what: Memory| call.buffers.iter().find(|b| b.what == what);
    let data = find(Memory::Filled).or_else(|| find(Memory::Sent));
    let shown = match name {
        "readv" | "writev" | "preadv" | "pwritev" | "preadv2" | "pwritev2" => {
            let (Some(iov), Some(data)) = (find(Memory::Iovecs), data) else {
                return false;
            };
            crate::decode::iovecs(&iov.bytes, &data.bytes, data.truncated, 32)
        }
        "recvmsg" | "sendmsg" => {
            let (Some(iov), Some(data)) = (find(Memory::Iovecs), data) else {
                return false;
            };
            crate::decode::message(
                &crate::decode::Message {
                    address: find(Memory::Address).map(|b| &b.bytes[..]),
                    iov: &iov.bytes,
                    data: (&data.bytes, data.truncated),
                    control: find(Memory::Control).map(|b| &b.bytes[..]),
                    flags: find(Memory::Flags)
                        .and_then(|b| Some(u64::from_le_bytes(b.bytes.get(..8)?.try_into().ok()?))),
                },
                32,
            )
        }
        "ioctl" => match data.and_then(|d| crate::decode::ioctl(call.args[1], &d.bytes)) {
            Some(s) => {
                if let Some(a) = args.get_mut(2) {
                    *a = s;
                }
                return true;
            }
            None => return false,
        },
        _ => return false,
    };
    if let Some(a) = args.get_mut(1) {
        *a = shown;
    }
    true
}

/// An `execve`'s arguments (each followed by a NUL) as strace shows the
/// array: each string quoted and cut at 32 bytes, the first 32 of them.
fn argument_list(bytes: &[u8]) -> String {
    let strings: Vec<&[u8]> = match bytes.strip_suffix(&[0]) {
        Some(b) => b.split(|&c| c == 0).collect(),
        None => Vec::new(),
    };
    let mut shown: Vec<String> = (strings.iter().take(32))
        .map(|a| quoted(a, false, 32))
        .collect();
    if strings.len() > 32 {
        shown.push("...".to_string());
    }
    format!("[{}]", shown.join(", "))
}

/// The call as strace prints it (without its pid): `name(args) = result`,
/// `= -1 ENAME (description)` for an error, `= ?` when it did not return.
/// A call the vDSO answered, which strace does not see, ends in
/// ` (vDSO)`.
pub fn strace_line(call: &Call) -> String {
    if let Some(signo) = weft_abi::delivery::signal(call.nr) {
        return crate::decode::delivery(signo, &call.args);
    }
    let name = name(call.nr);
    let mut args: Vec<String> = call.args[..arguments(&name)]
        .iter()
        .map(|&v| argument(v))
        .collect();
    for &(_, k) in SIZES.iter().filter(|(n, _)| *n == name) {
        if let Some(a) = args.get_mut(k) {
            *a = call.args[k].to_string();
        }
    }
    if let ("clock_gettime" | "clock_getres" | "clock_nanosleep" | "timer_create", Some(clock)) =
        (name.as_str(), CLOCKS.get(call.args[0] as usize))
    {
        args[0] = clock.to_string();
    }
    crate::decode::arguments(&name, &call.args, call.exit.map(|e| e.result), &mut args);
    // The buffers, as strace shows them: paths whole, data cut at 32
    // bytes (its `-s 32`).
    // A buffer the call did not fill (it failed, or `wait4` reaped
    // nobody) keeps its address, as strace shows it.
    let sized_by_result = crate::writes(call.nr).is_some_and(|w| {
        matches!(
            w.count,
            crate::Count::Result | crate::Count::ResultWithin(_) | crate::Count::ResultTimes(_)
        )
    });
    let structured = vectors(call, &name, &mut args);
    for b in call.buffers.iter().filter(|_| !structured) {
        let failed = call.exit.is_some_and(|e| e.result < 0);
        if b.what == crate::Memory::Filled && b.bytes.is_empty() && (failed || !sized_by_result) {
            continue;
        }
        // getcwd's count includes the string's end, which strace leaves out.
        let bytes = match (name.as_str(), b.bytes.split_last()) {
            ("getcwd", Some((0, text))) => text,
            _ => &b.bytes[..],
        };
        if let Some(arg) = args.get_mut(b.arg) {
            match b.what {
                // The read set as the kernel wrote it back: strace shows
                // it after the result (the record lacks the set given).
                crate::Memory::Filled if matches!(name.as_str(), "select" | "pselect6") => {
                    continue;
                }
                crate::Memory::Argv => {
                    *arg = argument_list(bytes);
                    continue;
                }
                crate::Memory::Environment => {
                    let vars = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
                    let noun = if vars == 1 { "var" } else { "vars" };
                    *arg = format!("{arg} /* {vars} {noun} */");
                    continue;
                }
                _ => {}
            }
            let max = match b.what {
                crate::Memory::Path => usize::MAX,
                _ => 32,
            };
            let address = matches!(
                (name.as_str(), b.arg),
                ("connect" | "bind", 1)
                    | ("sendto" | "recvfrom", 4)
                    | ("accept" | "accept4" | "getsockname" | "getpeername", 1)
            );
            // No address filled in (a socket without one): strace shows
            // where it would have gone.
            if address && bytes.is_empty() {
                continue;
            }
            *arg = crate::decode::recorded(&name, &call.args, b.arg, bytes, b.truncated)
                .or_else(|| clock_structure(&name, bytes))
                .or_else(|| crate::decode::structure(&name, bytes))
                .or_else(|| address.then(|| crate::decode::sockaddr(bytes)))
                .unwrap_or_else(|| match name.as_str() {
                    // strace writes random bytes in hex whatever they are.
                    "getrandom" => hex_quoted(bytes, b.truncated, max),
                    _ => quoted(bytes, b.truncated, max),
                });
        }
    }
    // The length the kernel wrote back, which the bytes recorded are:
    // `getsockopt`'s value's, a socket address's.
    let written_length = match name.as_str() {
        "getsockopt" => Some((3, 4)),
        "accept" | "accept4" | "getsockname" | "getpeername" => Some((1, 2)),
        "recvfrom" => Some((4, 5)),
        _ => None,
    };
    if let Some((value, length)) = written_length {
        if let (Some(b), Some(shown)) = (
            call.buffers.iter().find(|b| b.arg == value && !b.truncated),
            args.get_mut(length),
        ) {
            *shown = format!("[{}]", b.bytes.len());
        }
    }
    let result = match call.exit.map(|e| e.result) {
        None => "?".to_string(),
        Some(r) if (-4095..0).contains(&r) => format!("-1 {}", errno_name(-r as i32)),
        Some(r) if crate::decode::result(&name, &call.args, r).is_some() => {
            crate::decode::result(&name, &call.args, r).unwrap_or_default()
        }
        Some(r) if RETURN_ADDRESSES.contains(&name.as_str()) => format!("{:#x}", r as u64),
        Some(r) => r.to_string(),
    };
    // strace says which descriptors `poll` found ready after its count.
    let result = match (
        name.as_str(),
        call.exit.map(|e| e.result),
        call.buffers.first(),
    ) {
        ("poll" | "ppoll", Some(r), Some(b)) if r > 0 && !b.bytes.is_empty() => {
            format!("{result} ({})", crate::decode::pollfds(&b.bytes, true))
        }
        // and which `select` found, or that its time ran out.
        ("select" | "pselect6", Some(0), _) => format!("{result} (Timeout)"),
        ("select" | "pselect6", Some(r), Some(b)) if r > 0 && b.arg == 1 => {
            format!("{result} (in {})", crate::decode::fd_set(&b.bytes))
        }
        _ => result,
    };
    let vdso = if call.vdso { " (vDSO)" } else { "" };
    format!("{name}({}) = {result}{vdso}", args.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_read_like_strace() {
        let mut call = Call {
            tid: 1,
            ring: 1,
            entry_tsc: 0,
            user_ns: None,
            loader: false,
            nr: 257,
            vdso: false,
            args: [0xffff_ff9c, 0x5555_5555_0000, 0, 0, 0, 0],
            exit: Some(crate::Return {
                tsc: Some(1),
                result: -2,
            }),
            buffers: Vec::new(),
        };
        assert_eq!(
            strace_line(&call),
            "openat(AT_FDCWD, 0x555555550000, O_RDONLY) = -1 ENOENT (No such file or directory)"
        );
        call.nr = 231;
        call.exit = None;
        call.args[0] = (-100i64) as u64;
        assert_eq!(strace_line(&call), "exit_group(-100) = ?");
        assert_eq!(name(100_000), "syscall_100000");
        call.nr = 0;
        call.args = [3, 0x7ffd_0000_1000, 256, 0, 0, 0];
        call.exit = Some(crate::Return {
            tsc: Some(2),
            result: 7,
        });
        call.buffers = vec![crate::Buffer {
            what: crate::Memory::Filled,
            arg: 1,
            bytes: b"hi\n\0\"\\\x7f".to_vec(),
            truncated: false,
        }];
        assert_eq!(strace_line(&call), r#"read(3, "hi\n\0\"\\\177", 256) = 7"#);
        assert_eq!(quoted(&[0, b'1', 27], false, 32), r#""\0001\33""#);
        assert_eq!(
            quoted(&[b'a'; 40], false, 32),
            format!("\"{}\"...", "a".repeat(32))
        );
        assert_eq!(name(39), "getpid");
        call.nr = 318;
        call.args = [0x7ffd_0000_1000, 2, 1, 0, 0, 0];
        call.exit = Some(crate::Return {
            tsc: Some(2),
            result: 2,
        });
        call.buffers[0].arg = 0;
        call.buffers[0].bytes = vec![0x7b, 0x0a];
        assert_eq!(
            strace_line(&call),
            r#"getrandom("\x7b\x0a", 2, GRND_NONBLOCK) = 2"#
        );
    }

    /// strace 6.1's lines for `sh -c 'exec /bin/true $(seq 1 40)'`'s
    /// `execve`, and for one with a single variable.
    #[test]
    fn an_execve_reads_like_strace() {
        let argv: Vec<u8> = std::iter::once("/bin/true".to_string())
            .chain((1..=40).map(|k| k.to_string()))
            .flat_map(|a| a.into_bytes().into_iter().chain([0]))
            .collect();
        let mut call = Call {
            tid: 1,
            ring: 1,
            entry_tsc: 0,
            user_ns: None,
            loader: false,
            nr: 59,
            vdso: false,
            args: [
                0x5623_d271_6000,
                0x5623_d271_6100,
                0x5623_d271_61a8,
                0,
                0,
                0,
            ],
            exit: Some(crate::Return {
                tsc: None,
                result: 0,
            }),
            buffers: vec![
                crate::Buffer {
                    what: crate::Memory::Path,
                    arg: 0,
                    bytes: b"/bin/true".to_vec(),
                    truncated: false,
                },
                crate::Buffer {
                    what: crate::Memory::Argv,
                    arg: 1,
                    bytes: argv,
                    truncated: false,
                },
                crate::Buffer {
                    what: crate::Memory::Environment,
                    arg: 2,
                    bytes: 35u64.to_le_bytes().to_vec(),
                    truncated: false,
                },
            ],
        };
        let numbers: Vec<String> = (1..=31).map(|k| format!("\"{k}\"")).collect();
        assert_eq!(
            strace_line(&call),
            format!(
                "execve(\"/bin/true\", [\"/bin/true\", {}, ...], 0x5623d27161a8 /* 35 vars */) = 0",
                numbers.join(", ")
            )
        );
        call.buffers[1].bytes = b"sh\0-c\0exec /bin/nonexist aaaaaaaaaaaaaaaaaaaaaaaaa\0".to_vec();
        call.buffers[2].bytes = 1u64.to_le_bytes().to_vec();
        assert_eq!(
            strace_line(&call),
            "execve(\"/bin/true\", [\"sh\", \"-c\", \"exec /bin/nonexist aaaaaaaaaaaaa\"...], \
             0x5623d27161a8 /* 1 var */) = 0"
        );
    }

    /// strace 6.1's result for a `select` on descriptors 3 and 5 that
    /// found 5 ready (its set given is not in the record: the address),
    /// and for one whose time ran out.
    #[test]
    fn a_select_reads_like_strace() {
        use crate::test_calls::{call, with};
        let found = vec![0x20, 0, 0, 0, 0, 0, 0, 0];
        let select = |result, set| {
            with(
                call(1, 0, 1, 270, &[6, 0x7fff_ffff_e0b0], result),
                crate::Memory::Filled,
                1,
                set,
            )
        };
        let call = select(1, found);
        assert_eq!(
            strace_line(&call),
            "pselect6(6, 0x7fffffffe0b0, NULL, NULL, NULL, NULL) = 1 (in [5])"
        );
        assert_eq!(
            strace_line(&select(0, vec![0; 8])),
            "pselect6(6, 0x7fffffffe0b0, NULL, NULL, NULL, NULL) = 0 (Timeout)"
        );
    }

    /// strace 6.1's line for `sigaction(SIGINT, &ignore, NULL)` in a
    /// program, with the action the C library hands the kernel.
    #[test]
    fn a_new_signal_action_reads_like_strace() {
        let mut action = vec![0u8; 32];
        action[..8].copy_from_slice(&1u64.to_le_bytes());
        action[8..16].copy_from_slice(&0x0400_0000u64.to_le_bytes());
        action[16..24].copy_from_slice(&0x7fff_f7df_1050u64.to_le_bytes());
        let call = crate::test_calls::with(
            crate::test_calls::call(1, 0, 1, 13, &[2, 0x7fff_ffff_d628, 0, 8], 0),
            crate::Memory::Sent,
            1,
            action,
        );
        assert_eq!(
            strace_line(&call),
            "rt_sigaction(SIGINT, {sa_handler=SIG_IGN, sa_mask=[], sa_flags=SA_RESTORER, \
             sa_restorer=0x7ffff7df1050}, NULL, 8) = 0"
        );
        assert_eq!(
            crate::sent_arguments(13),
            [(1, crate::Sent::OnZero(32))],
            "recorded when the kernel took it"
        );
    }
}
