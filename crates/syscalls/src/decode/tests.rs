//! The decoders against strace's lines for the same calls.

use super::*;

fn shown(name: &str, raw: [u64; 6], n: usize) -> String {
    let mut args: Vec<String> = raw[..n].iter().map(|v| v.to_string()).collect();
    arguments(name, &raw, None, &mut args);
    args.join(", ")
}

/// strace's own lines (strace 6, on this machine's programs).
#[test]
fn flags_read_as_strace_names_them() {
    let at = (-100i64) as u64;
    assert_eq!(
        shown("openat", [at, 1, 0o2000000, 0, 0, 0], 3),
        "AT_FDCWD, 1, O_RDONLY|O_CLOEXEC"
    );
    assert_eq!(
        shown("openat", [at, 1, 0o1101, 0o666, 0, 0], 3),
        "AT_FDCWD, 1, O_WRONLY|O_CREAT|O_TRUNC, 0666"
    );
    assert_eq!(
        shown("mmap", [0, 8192, 3, 0x22, u64::MAX, 0], 6),
        "NULL, 8192, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS, -1, 0"
    );
    assert_eq!(
        shown("mmap", [0x7f00_0000_0000, 4096, 5, 0x812, 3, 0x26000], 6),
        "0x7f0000000000, 4096, PROT_READ|PROT_EXEC, MAP_PRIVATE|MAP_FIXED|MAP_DENYWRITE, 3, 0x26000"
    );
    assert_eq!(
        shown("newfstatat", [3, 1, 2, 0x1000, 0, 0], 4),
        "3, 1, 2, AT_EMPTY_PATH"
    );
    // `clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, {...}, NULL)` of a
    // sleep until an instant; `sleep 0.01`'s flags are 0.
    let flags_and_remain = |raw| {
        let line = shown("clock_nanosleep", raw, 4);
        let args: Vec<&str> = line.split(", ").collect();
        (args[1].to_string(), args[3].to_string())
    };
    assert_eq!(
        flags_and_remain([1, 1, 0x7ff0, 0, 0, 0]),
        ("TIMER_ABSTIME".into(), "NULL".into())
    );
    assert_eq!(
        flags_and_remain([0, 0, 0x7ff0, 0x7ff8, 0, 0]),
        ("0".into(), "0x7ff8".into())
    );
    // Python's `getsockopt(IPPROTO_TCP, TCP_INFO, 16)`: addresses, where
    // the record holds no value.
    assert_eq!(
        shown("getsockopt", [3, 6, 11, 0x7ff0, 0x7ff8, 0], 5),
        "3, SOL_TCP, TCP_INFO, 0x7ff0, 0x7ff8"
    );
    // `os.openpty()`'s peer: `ioctl(3, TIOCGPTPEER, 0x102) = 4`.
    assert_eq!(
        shown("ioctl", [3, 0x5441, 0x102, 0, 0, 0], 3),
        "3, TIOCGPTPEER, 0x102"
    );
    assert_eq!(shown("access", [1, 4, 0, 0, 0, 0], 2), "1, R_OK");
    assert_eq!(shown("access", [1, 0, 0, 0, 0, 0], 2), "1, F_OK");
    assert_eq!(shown("fcntl", [1, 3, 0, 0, 0, 0], 3), "1, F_GETFL");
    assert_eq!(
        shown("fcntl", [11, 2, 1, 0, 0, 0], 3),
        "11, F_SETFD, FD_CLOEXEC"
    );
    assert_eq!(
        shown("fcntl", [1, 4, 0o102001, 0, 0, 0], 3),
        "1, F_SETFL, O_WRONLY|O_APPEND|O_LARGEFILE"
    );
    assert_eq!(
        shown("arch_prctl", [0x1002, 9, 0, 0, 0, 0], 2),
        "ARCH_SET_FS, 9"
    );
    assert_eq!(
        shown("getrandom", [1, 8, 1, 0, 0, 0], 3),
        "1, 8, GRND_NONBLOCK"
    );
    assert_eq!(
        shown("futex", [1, 129, 2147483647, 0, 0, 0], 6),
        "1, FUTEX_WAKE_PRIVATE, 2147483647"
    );
    assert_eq!(
        shown("rt_sigprocmask", [0, 5, 0, 8, 0, 0], 4),
        "SIG_BLOCK, 0x5, NULL, 8"
    );
    assert_eq!(
        shown("prlimit64", [0, 3, 0, 7, 0, 0], 4),
        "0, RLIMIT_STACK, NULL, 0x7"
    );
    assert_eq!(shown("brk", [0, 0, 0, 0, 0, 0], 1), "NULL");
    assert_eq!(
        shown("pipe2", [1, 0o2000000, 0, 0, 0, 0], 2),
        "1, O_CLOEXEC"
    );
    assert_eq!(
        shown("epoll_create1", [0o2000000, 0, 0, 0, 0, 0], 1),
        "EPOLL_CLOEXEC"
    );
    assert_eq!(shown("dup3", [3, 4, 0, 0, 0, 0], 3), "3, 4, 0");
    assert_eq!(
        shown("openat", [at, 1, 0o2204000, 0, 0, 0], 3),
        "AT_FDCWD, 1, O_RDONLY|O_NONBLOCK|O_CLOEXEC|O_DIRECTORY"
    );
    assert_eq!(
        shown("close_range", [5, 0x7fff_ffff, 0, 0, 0, 0], 3),
        "5, 2147483647, 0"
    );
    assert_eq!(
        shown("socket", [1, 0o2004001, 0, 0, 0, 0], 3),
        "AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC|SOCK_NONBLOCK, 0"
    );
    let mut wake = vec!["1".to_string(), "129".into(), "0x7fffffff".into()];
    arguments("futex", &[1, 129, 0x7fff_ffff, 0, 0, 0], None, &mut wake);
    assert_eq!(wake[2], "2147483647", "a count in decimal");
    assert_eq!(
        shown("socket", [1, 0o2000001, 0, 0, 0, 0], 3),
        "AF_UNIX, SOCK_STREAM|SOCK_CLOEXEC, 0"
    );
    assert_eq!(shown("kill", [9, 15, 0, 0, 0, 0], 2), "9, SIGTERM");
    // strace writes the siginfo it reads; the record holds its address.
    assert_eq!(
        shown("rt_sigqueueinfo", [7929, 34, 0x7fff_ffff_e3c0, 0, 0, 0], 3),
        "7929, SIGRT_2, 0x7fffffffe3c0"
    );
    assert_eq!(
        shown(
            "rt_tgsigqueueinfo",
            [7929, 7930, 14, 0x7fff_ffff_e3c0, 0, 0],
            4
        ),
        "7929, 7930, SIGALRM, 0x7fffffffe3c0"
    );
    assert_eq!(shown("umask", [0o22, 0, 0, 0, 0, 0], 1), "022");
    assert_eq!(
        result("umask", &[0o22, 0, 0, 0, 0, 0], 0o22).unwrap(),
        "022"
    );
    assert_eq!(
        result("fcntl", &[1, 3, 0, 0, 0, 0], 0x8001).unwrap(),
        "0x8001 (flags O_WRONLY|O_LARGEFILE)"
    );
    assert_eq!(result("fcntl", &[1, 1, 0, 0, 0, 0], 0), None);
}

/// strace 6.1's lines on this machine (`tests/targets/syscalls.c`'s
/// calls and others).
#[test]
fn more_arguments_read_as_strace_names_them() {
    let at = (-100i64) as u64;
    assert_eq!(
        shown("faccessat2", [at, 1, 4, 0x200, 0, 0], 4),
        "AT_FDCWD, 1, R_OK, AT_EACCESS"
    );
    assert_eq!(
        shown("faccessat2", [at, 1, 0, 0x300, 0, 0], 4),
        "AT_FDCWD, 1, F_OK, AT_SYMLINK_NOFOLLOW|AT_EACCESS"
    );
    assert_eq!(
        shown("fadvise64", [3, 0, 100, 4, 0, 0], 4),
        "3, 0, 100, POSIX_FADV_DONTNEED"
    );
    assert_eq!(
        shown("copy_file_range", [3, 0, 4, 0, 3, 0], 6),
        "3, NULL, 4, NULL, 3, 0"
    );
    assert_eq!(
        shown("statx", [3, 1, 0x1100, 0xfff, 5, 0], 5),
        "3, 1, AT_STATX_SYNC_AS_STAT|AT_SYMLINK_NOFOLLOW|AT_EMPTY_PATH, STATX_ALL, 5"
    );
    assert_eq!(
        shown("kill", [(-4194305i32) as u32 as u64, 32, 0, 0, 0, 0], 2),
        "-4194305, SIGRTMIN"
    );
    assert_eq!(shown("chmod", [1, 0o1777, 0, 0, 0, 0], 2), "1, 01777");
    assert_eq!(shown("fchmod", [3, 0o7, 0, 0, 0, 0], 2), "3, 007");
    assert_eq!(
        shown("openat", [at, 1, 0o102, 0o4755, 0, 0], 3),
        "AT_FDCWD, 1, O_RDWR|O_CREAT, 04755"
    );
    assert_eq!(
        shown("wait4", [8480, 0, 0, 0, 0, 0], 4),
        "8480, NULL, 0, NULL"
    );
    // rt_sigprocmask(SIG_BLOCK, NULL, [], 8): no new set recorded.
    assert_eq!(
        recorded(
            "rt_sigprocmask",
            &[0, 0, 0x7ffd_0000, 8, 0, 0],
            1,
            &[],
            false
        )
        .unwrap(),
        "NULL"
    );
    // rt_sigprocmask(SIG_SETMASK, 0x7fff355187d8, ..., 4): a size
    // strace does not read.
    assert_eq!(
        recorded(
            "rt_sigprocmask",
            &[2, 0x7fff_3551_87d8, 0, 4, 0, 0],
            1,
            &[0; 4],
            false
        )
        .unwrap(),
        "0x7fff355187d8"
    );
    assert_eq!(
        recorded(
            "getdents64",
            &[5, 0x1000_0000, 4096, 0, 0, 0],
            1,
            &[],
            false
        )
        .unwrap(),
        "0x10000000 /* 0 entries */"
    );
    assert_eq!(
        recorded(
            "getdents64",
            &[5, 0x1000_0000, 4096, 0, 0, 0],
            1,
            &[0; 64],
            true
        )
        .unwrap(),
        "0x10000000",
        "entries cut short are not counted"
    );
    assert_eq!(
        recorded("statx", &[0; 6], 1, b"/tmp", false),
        None,
        "its path"
    );
}

/// strace 6.1's `sched_getaffinity(0, 8, [0 1]) = 8` on this
/// two-CPU machine, and a set of CPUs 3 and 9 of 16 bytes.
#[test]
fn cpu_sets_read_as_strace_shows_them() {
    assert_eq!(
        structure("sched_getaffinity", &[3, 0, 0, 0, 0, 0, 0, 0]).unwrap(),
        "[0 1]"
    );
    let mut set = [0u8; 16];
    set[0] = 1 << 3;
    set[1] = 1 << 1;
    assert_eq!(structure("sched_getaffinity", &set).unwrap(), "[3 9]");
}

#[test]
fn structures_read_as_strace_shows_them() {
    let mut stat = vec![0u8; 144];
    stat[24..28].copy_from_slice(&0o100644u32.to_le_bytes());
    stat[48..56].copy_from_slice(&39791u64.to_le_bytes());
    assert_eq!(
        structure("newfstatat", &stat).unwrap(),
        "{st_mode=S_IFREG|0644, st_size=39791, ...}"
    );
    stat[24..28].copy_from_slice(&0o020620u32.to_le_bytes());
    stat[40..48].copy_from_slice(&((0x88u64 << 8) | 3).to_le_bytes());
    assert_eq!(
        structure("newfstatat", &stat).unwrap(),
        "{st_mode=S_IFCHR|0620, st_rdev=makedev(0x88, 0x3), ...}"
    );
    stat[24..28].copy_from_slice(&0o41777u32.to_le_bytes());
    stat[48..56].copy_from_slice(&12288u64.to_le_bytes());
    assert_eq!(
        structure("newfstatat", &stat).unwrap(),
        "{st_mode=S_IFDIR|S_ISVTX|0777, st_size=12288, ...}"
    );
    stat[24..28].copy_from_slice(&0o42755u32.to_le_bytes());
    stat[48..56].copy_from_slice(&4096u64.to_le_bytes());
    assert_eq!(
        structure("newfstatat", &stat).unwrap(),
        "{st_mode=S_IFDIR|S_ISGID|0755, st_size=4096, ...}"
    );
    let mut limits = (8192u64 * 1024).to_le_bytes().to_vec();
    limits.extend(u64::MAX.to_le_bytes());
    assert_eq!(
        structure("prlimit64", &limits).unwrap(),
        "{rlim_cur=8192*1024, rlim_max=RLIM64_INFINITY}"
    );
    assert_eq!(
        structure("pipe2", &[3, 0, 0, 0, 4, 0, 0, 0]).unwrap(),
        "[3, 4]"
    );
    let polled = [3, 0, 0, 0, 1, 0, 0x11, 0, 5, 0, 0, 0, 1, 0, 0, 0];
    assert_eq!(
        structure("poll", &polled).unwrap(),
        "[{fd=3, events=POLLIN}, {fd=5, events=POLLIN}]"
    );
    assert_eq!(pollfds(&polled, true), "[{fd=3, revents=POLLIN|POLLHUP}]");
    assert_eq!(
        structure("wait4", &[0, 1, 0, 0]).unwrap(),
        "[{WIFEXITED(s) && WEXITSTATUS(s) == 1}]"
    );
    assert_eq!(
        structure("wait4", &[9, 0, 0, 0]).unwrap(),
        "[{WIFSIGNALED(s) && WTERMSIG(s) == SIGKILL}]"
    );
}
