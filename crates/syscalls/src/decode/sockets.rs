//! The constants of socket and memory calls strace names: a socket's
//! protocol (`IPPROTO_TCP`), `setsockopt`'s level and option (`SOL_SOCKET,
//! SO_REUSEADDR`) and an `int` value read (`[1]`), `madvise`'s advice,
//! and the interval timers of `setitimer` and `getitimer`.

use super::named;

/// Protocols of an Internet socket.
const PROTOCOLS: &[(u64, &str)] = &[
    (0, "IPPROTO_IP"),
    (1, "IPPROTO_ICMP"),
    (6, "IPPROTO_TCP"),
    (17, "IPPROTO_UDP"),
    (41, "IPPROTO_IPV6"),
    (58, "IPPROTO_ICMPV6"),
    (132, "IPPROTO_SCTP"),
    (136, "IPPROTO_UDPLITE"),
    (255, "IPPROTO_RAW"),
];

/// A socket's protocol (argument 2 of `socket`, `socketpair`) for its
/// domain: named for AF_INET and AF_INET6, as strace does, a number else.
pub(crate) fn protocol(domain: u64, value: u64) -> String {
    match domain {
        2 | 10 => named(value, PROTOCOLS),
        _ => value.to_string(),
    }
}

/// Socket option levels.
const LEVELS: &[(u64, &str)] = &[
    (0, "SOL_IP"),
    (1, "SOL_SOCKET"),
    (6, "SOL_TCP"),
    (17, "SOL_UDP"),
    (41, "SOL_IPV6"),
];

/// `SOL_SOCKET`'s options.
const SOCKET_OPTIONS: &[(u64, &str)] = &[
    (1, "SO_DEBUG"),
    (2, "SO_REUSEADDR"),
    (3, "SO_TYPE"),
    (4, "SO_ERROR"),
    (5, "SO_DONTROUTE"),
    (6, "SO_BROADCAST"),
    (7, "SO_SNDBUF"),
    (8, "SO_RCVBUF"),
    (9, "SO_KEEPALIVE"),
    (10, "SO_OOBINLINE"),
    (12, "SO_PRIORITY"),
    (13, "SO_LINGER"),
    (15, "SO_REUSEPORT"),
    (16, "SO_PASSCRED"),
    (17, "SO_PEERCRED"),
    (18, "SO_RCVLOWAT"),
    (19, "SO_SNDLOWAT"),
    (32, "SO_SNDBUFFORCE"),
    (33, "SO_RCVBUFFORCE"),
];

/// `SOL_TCP`'s options.
const TCP_OPTIONS: &[(u64, &str)] = &[
    (1, "TCP_NODELAY"),
    (2, "TCP_MAXSEG"),
    (3, "TCP_CORK"),
    (4, "TCP_KEEPIDLE"),
    (5, "TCP_KEEPINTVL"),
    (6, "TCP_KEEPCNT"),
    (9, "TCP_DEFER_ACCEPT"),
    (11, "TCP_INFO"),
    (12, "TCP_QUICKACK"),
];

/// `setsockopt`'s and `getsockopt`'s level and option, named where this
/// knows them.
pub(crate) fn level_and_option(level: u64, option: u64) -> (String, String) {
    let option = match level {
        1 => named(option, SOCKET_OPTIONS),
        6 => named(option, TCP_OPTIONS),
        _ => option.to_string(),
    };
    (named(level, LEVELS), option)
}

/// An option's value the call read: an `int` as `[N]`, else none.
pub(crate) fn option_value(bytes: &[u8]) -> Option<String> {
    let v: [u8; 4] = bytes.try_into().ok()?;
    Some(format!("[{}]", i32::from_le_bytes(v)))
}

/// `madvise`'s advice.
pub(crate) const ADVICE: &[(u64, &str)] = &[
    (0, "MADV_NORMAL"),
    (1, "MADV_RANDOM"),
    (2, "MADV_SEQUENTIAL"),
    (3, "MADV_WILLNEED"),
    (4, "MADV_DONTNEED"),
    (8, "MADV_FREE"),
    (9, "MADV_REMOVE"),
    (10, "MADV_DONTFORK"),
    (11, "MADV_DOFORK"),
    (12, "MADV_MERGEABLE"),
    (13, "MADV_UNMERGEABLE"),
    (14, "MADV_HUGEPAGE"),
    (15, "MADV_NOHUGEPAGE"),
    (16, "MADV_DONTDUMP"),
    (17, "MADV_DODUMP"),
    (18, "MADV_WIPEONFORK"),
    (19, "MADV_KEEPONFORK"),
    (20, "MADV_COLD"),
    (21, "MADV_PAGEOUT"),
    (22, "MADV_POPULATE_READ"),
    (23, "MADV_POPULATE_WRITE"),
];

/// The interval timers.
pub(crate) const TIMERS: &[(u64, &str)] = &[
    (0, "ITIMER_REAL"),
    (1, "ITIMER_VIRTUAL"),
    (2, "ITIMER_PROF"),
];

/// A `struct itimerval` (32 bytes).
pub(crate) fn itimerval(bytes: &[u8]) -> Option<String> {
    let word = |k: usize| -> Option<i64> {
        Some(i64::from_le_bytes(
            bytes.get(8 * k..8 * k + 8)?.try_into().ok()?,
        ))
    };
    Some(format!(
        "{{it_interval={{tv_sec={}, tv_usec={}}}, it_value={{tv_sec={}, tv_usec={}}}}}",
        word(0)?,
        word(1)?,
        word(2)?,
        word(3)?
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// strace 6.1's lines on this machine.
    #[test]
    fn socket_constants_read_as_strace_names_them() {
        assert_eq!(protocol(2, 0), "IPPROTO_IP");
        assert_eq!(protocol(2, 6), "IPPROTO_TCP");
        assert_eq!(protocol(1, 0), "0");
        assert_eq!(
            level_and_option(1, 2),
            ("SOL_SOCKET".to_string(), "SO_REUSEADDR".to_string())
        );
        assert_eq!(
            level_and_option(6, 1),
            ("SOL_TCP".to_string(), "TCP_NODELAY".to_string())
        );
        assert_eq!(option_value(&1i32.to_le_bytes()).unwrap(), "[1]");
        assert_eq!(
            itimerval(&[0; 32]).unwrap(),
            "{it_interval={tv_sec=0, tv_usec=0}, it_value={tv_sec=0, tv_usec=0}}"
        );
    }
}
