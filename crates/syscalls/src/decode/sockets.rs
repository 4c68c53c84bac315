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

/// `SOL_SOCKET`'s options (Linux's numbers; the names strace 6.1 gives).
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
    (11, "SO_NO_CHECK"),
    (12, "SO_PRIORITY"),
    (13, "SO_LINGER"),
    (14, "SO_BSDCOMPAT"),
    (15, "SO_REUSEPORT"),
    (16, "SO_PASSCRED"),
    (17, "SO_PEERCRED"),
    (18, "SO_RCVLOWAT"),
    (19, "SO_SNDLOWAT"),
    (20, "SO_RCVTIMEO_OLD"),
    (21, "SO_SNDTIMEO_OLD"),
    (25, "SO_BINDTODEVICE"),
    (26, "SO_ATTACH_FILTER"),
    (27, "SO_DETACH_FILTER"),
    (28, "SO_PEERNAME"),
    (29, "SO_TIMESTAMP_OLD"),
    (30, "SO_ACCEPTCONN"),
    (31, "SO_PEERSEC"),
    (32, "SO_SNDBUFFORCE"),
    (33, "SO_RCVBUFFORCE"),
    (34, "SO_PASSSEC"),
    (35, "SO_TIMESTAMPNS_OLD"),
    (36, "SO_MARK"),
    (37, "SO_TIMESTAMPING_OLD"),
    (38, "SO_PROTOCOL"),
    (39, "SO_DOMAIN"),
    (40, "SO_RXQ_OVFL"),
    (41, "SO_WIFI_STATUS"),
    (42, "SO_PEEK_OFF"),
    (43, "SO_NOFCS"),
    (44, "SO_LOCK_FILTER"),
    (45, "SO_SELECT_ERR_QUEUE"),
    (46, "SO_BUSY_POLL"),
    (47, "SO_MAX_PACING_RATE"),
    (48, "SO_BPF_EXTENSIONS"),
    (49, "SO_INCOMING_CPU"),
    (50, "SO_ATTACH_BPF"),
    (57, "SO_COOKIE"),
    (59, "SO_PEERGROUPS"),
    (60, "SO_ZEROCOPY"),
    (61, "SO_TXTIME"),
    (62, "SO_BINDTOIFINDEX"),
    (63, "SO_TIMESTAMP_NEW"),
    (64, "SO_TIMESTAMPNS_NEW"),
    (65, "SO_TIMESTAMPING_NEW"),
    (66, "SO_RCVTIMEO_NEW"),
    (67, "SO_SNDTIMEO_NEW"),
];

/// `SOL_TCP`'s options.
const TCP_OPTIONS: &[(u64, &str)] = &[
    (1, "TCP_NODELAY"),
    (2, "TCP_MAXSEG"),
    (3, "TCP_CORK"),
    (4, "TCP_KEEPIDLE"),
    (5, "TCP_KEEPINTVL"),
    (6, "TCP_KEEPCNT"),
    (7, "TCP_SYNCNT"),
    (8, "TCP_LINGER2"),
    (9, "TCP_DEFER_ACCEPT"),
    (10, "TCP_WINDOW_CLAMP"),
    (11, "TCP_INFO"),
    (12, "TCP_QUICKACK"),
    (13, "TCP_CONGESTION"),
    (14, "TCP_MD5SIG"),
    (18, "TCP_USER_TIMEOUT"),
    (19, "TCP_REPAIR"),
    (23, "TCP_FASTOPEN"),
    (24, "TCP_TIMESTAMP"),
    (25, "TCP_NOTSENT_LOWAT"),
    (30, "TCP_FASTOPEN_CONNECT"),
    (31, "TCP_ULP"),
    (35, "TCP_ZEROCOPY_RECEIVE"),
    (36, "TCP_INQ"),
];

/// `setsockopt`'s and `getsockopt`'s level and option, named where this
/// knows them.
pub(crate) fn level_and_option(level: u64, option: u64) -> (String, String) {
    // An option the level does not name, as strace shows it.
    let unknown = |prefix: &str| format!("{option:#x} /* {prefix}_??? */");
    let option = match level {
        1 if SOCKET_OPTIONS.iter().all(|&(v, _)| v != option) => unknown("SO"),
        6 if TCP_OPTIONS.iter().all(|&(v, _)| v != option) => unknown("TCP"),
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
