//! The names strace gives the values of the common calls' flags and
//! constants (x86-64's, from `include/uapi`), as tables `decode` reads.

/// Bits and their names, the first matching each.
pub(super) type Bits = &'static [(u64, &'static str)];

/// `O_*` of `open`'s flags but the access mode, in strace's order.
pub(super) const OPEN_FLAGS: Bits = &[
    (0o100, "O_CREAT"),
    (0o200, "O_EXCL"),
    (0o400, "O_NOCTTY"),
    (0o1000, "O_TRUNC"),
    (0o2000, "O_APPEND"),
    (0o4000, "O_NONBLOCK"),
    (0o4010000, "O_SYNC"),
    (0o10000, "O_DSYNC"),
    (0o20000, "O_ASYNC"),
    (0o40000, "O_DIRECT"),
    (0o100000, "O_LARGEFILE"),
    (0o400000, "O_NOFOLLOW"),
    (0o1000000, "O_NOATIME"),
    (0o2000000, "O_CLOEXEC"),
    (0o10000000, "O_PATH"),
    (0o20200000, "O_TMPFILE"),
    (0o200000, "O_DIRECTORY"),
];

pub(super) const PROT: Bits = &[(1, "PROT_READ"), (2, "PROT_WRITE"), (4, "PROT_EXEC")];

pub(super) const MAP_FLAGS: Bits = &[
    (0x10, "MAP_FIXED"),
    (0x20, "MAP_ANONYMOUS"),
    (0x40, "MAP_32BIT"),
    (0x100, "MAP_GROWSDOWN"),
    (0x800, "MAP_DENYWRITE"),
    (0x1000, "MAP_EXECUTABLE"),
    (0x2000, "MAP_LOCKED"),
    (0x4000, "MAP_NORESERVE"),
    (0x8000, "MAP_POPULATE"),
    (0x10000, "MAP_NONBLOCK"),
    (0x20000, "MAP_STACK"),
    (0x40000, "MAP_HUGETLB"),
    (0x80000, "MAP_SYNC"),
    (0x100000, "MAP_FIXED_NOREPLACE"),
];

pub(super) const AT_FLAGS: Bits = &[
    (0x100, "AT_SYMLINK_NOFOLLOW"),
    (0x200, "AT_REMOVEDIR"),
    (0x400, "AT_SYMLINK_FOLLOW"),
    (0x800, "AT_NO_AUTOMOUNT"),
    (0x1000, "AT_EMPTY_PATH"),
];

pub(super) const ACCESS: Bits = &[(4, "R_OK"), (2, "W_OK"), (1, "X_OK")];

pub(super) const GRND: Bits = &[
    (1, "GRND_NONBLOCK"),
    (2, "GRND_RANDOM"),
    (4, "GRND_INSECURE"),
];

pub(super) const POLL: Bits = &[
    (0x1, "POLLIN"),
    (0x2, "POLLPRI"),
    (0x4, "POLLOUT"),
    (0x8, "POLLERR"),
    (0x10, "POLLHUP"),
    (0x20, "POLLNVAL"),
    (0x40, "POLLRDNORM"),
    (0x80, "POLLRDBAND"),
    (0x100, "POLLWRNORM"),
    (0x200, "POLLWRBAND"),
    (0x400, "POLLMSG"),
    (0x2000, "POLLRDHUP"),
];

pub(super) const SOCK_FLAGS: Bits = &[(0o2000000, "SOCK_CLOEXEC"), (0o4000, "SOCK_NONBLOCK")];

/// Signals by number (1 to 31).
pub(super) const SIGNALS: [&str; 31] = [
    "SIGHUP",
    "SIGINT",
    "SIGQUIT",
    "SIGILL",
    "SIGTRAP",
    "SIGABRT",
    "SIGBUS",
    "SIGFPE",
    "SIGKILL",
    "SIGUSR1",
    "SIGSEGV",
    "SIGUSR2",
    "SIGPIPE",
    "SIGALRM",
    "SIGTERM",
    "SIGSTKFLT",
    "SIGCHLD",
    "SIGCONT",
    "SIGSTOP",
    "SIGTSTP",
    "SIGTTIN",
    "SIGTTOU",
    "SIGURG",
    "SIGXCPU",
    "SIGXFSZ",
    "SIGVTALRM",
    "SIGPROF",
    "SIGWINCH",
    "SIGIO",
    "SIGPWR",
    "SIGSYS",
];

/// Resources of `prlimit64` and `getrlimit`, by number.
pub(super) const RLIMITS: [&str; 16] = [
    "RLIMIT_CPU",
    "RLIMIT_FSIZE",
    "RLIMIT_DATA",
    "RLIMIT_STACK",
    "RLIMIT_CORE",
    "RLIMIT_RSS",
    "RLIMIT_NPROC",
    "RLIMIT_NOFILE",
    "RLIMIT_MEMLOCK",
    "RLIMIT_AS",
    "RLIMIT_LOCKS",
    "RLIMIT_SIGPENDING",
    "RLIMIT_MSGQUEUE",
    "RLIMIT_NICE",
    "RLIMIT_RTPRIO",
    "RLIMIT_RTTIME",
];

/// `fcntl`'s commands.
pub(super) const FCNTL: &[(u64, &str)] = &[
    (0, "F_DUPFD"),
    (1, "F_GETFD"),
    (2, "F_SETFD"),
    (3, "F_GETFL"),
    (4, "F_SETFL"),
    (5, "F_GETLK"),
    (6, "F_SETLK"),
    (7, "F_SETLKW"),
    (8, "F_SETOWN"),
    (9, "F_GETOWN"),
    (1024, "F_SETLEASE"),
    (1025, "F_GETLEASE"),
    (1030, "F_DUPFD_CLOEXEC"),
    (1031, "F_SETPIPE_SZ"),
    (1032, "F_GETPIPE_SZ"),
    (1033, "F_ADD_SEALS"),
    (1034, "F_GET_SEALS"),
];

/// `ioctl`'s requests strace names most often.
pub(super) const IOCTLS: &[(u64, &str)] = &[
    (0x5401, "TCGETS"),
    (0x5402, "TCSETS"),
    (0x5403, "TCSETSW"),
    (0x5404, "TCSETSF"),
    (0x540f, "TIOCGPGRP"),
    (0x5410, "TIOCSPGRP"),
    (0x5413, "TIOCGWINSZ"),
    (0x5414, "TIOCSWINSZ"),
    (0x541b, "FIONREAD"),
    (0x5421, "FIONBIO"),
    (0x5450, "FIONCLEX"),
    (0x5451, "FIOCLEX"),
    (0x802c542a, "TCGETS2"),
    (0x80045430, "TIOCGPTN"),
    (0x40045431, "TIOCSPTLCK"),
    (0x5441, "TIOCGPTPEER"),
];

pub(super) const ARCH_PRCTL: &[(u64, &str)] = &[
    (0x1001, "ARCH_SET_GS"),
    (0x1002, "ARCH_SET_FS"),
    (0x1003, "ARCH_GET_FS"),
    (0x1004, "ARCH_GET_GS"),
    (0x1011, "ARCH_GET_CPUID"),
    (0x1012, "ARCH_SET_CPUID"),
    (0x3001, "ARCH_CET_STATUS"),
    (0x5001, "ARCH_SHSTK_ENABLE"),
    (0x5002, "ARCH_SHSTK_DISABLE"),
    (0x5003, "ARCH_SHSTK_LOCK"),
    (0x5005, "ARCH_SHSTK_STATUS"),
];

pub(super) const SEEK: [&str; 5] = ["SEEK_SET", "SEEK_CUR", "SEEK_END", "SEEK_DATA", "SEEK_HOLE"];

pub(super) const FUTEX_OPS: [&str; 14] = [
    "FUTEX_WAIT",
    "FUTEX_WAKE",
    "FUTEX_FD",
    "FUTEX_REQUEUE",
    "FUTEX_CMP_REQUEUE",
    "FUTEX_WAKE_OP",
    "FUTEX_LOCK_PI",
    "FUTEX_UNLOCK_PI",
    "FUTEX_TRYLOCK_PI",
    "FUTEX_WAIT_BITSET",
    "FUTEX_WAKE_BITSET",
    "FUTEX_WAIT_REQUEUE_PI",
    "FUTEX_CMP_REQUEUE_PI",
    "FUTEX_LOCK_PI2",
];

pub(super) const DOMAINS: &[(u64, &str)] = &[
    (1, "AF_UNIX"),
    (2, "AF_INET"),
    (10, "AF_INET6"),
    (16, "AF_NETLINK"),
    (17, "AF_PACKET"),
];

pub(super) const SOCK_TYPES: &[(u64, &str)] = &[
    (1, "SOCK_STREAM"),
    (2, "SOCK_DGRAM"),
    (3, "SOCK_RAW"),
    (5, "SOCK_SEQPACKET"),
];
