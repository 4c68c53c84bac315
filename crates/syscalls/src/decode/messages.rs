//! The structures of vectored and message calls and of the terminal
//! `ioctl`s, as strace shows them: `[{iov_base="hell", iov_len=4}, ...]`,
//! `{msg_name=NULL, msg_namelen=0, msg_iov=[...], msg_iovlen=1,
//! msg_control=[{cmsg_len=20, cmsg_level=SOL_SOCKET, cmsg_type=SCM_RIGHTS,
//! cmsg_data=[3]}], msg_controllen=24}`, socket addresses
//! (`{sa_family=AF_INET, sin_port=htons(80), sin_addr=inet_addr("127.0.0.1")}`),
//! `struct winsize` and `struct termios`.

use super::names::Bits;
use super::{bits, named};

/// The little-endian word of `n` bytes at `at`.
fn word(bytes: &[u8], at: usize, n: usize) -> Option<u64> {
    let b = bytes.get(at..at + n)?;
    let mut v = [0u8; 8];
    v[..n].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

/// An `iovec` array (`iov`, its entries' bytes) with the bytes gathered
/// through it (`data`), each entry showing its share, cut at `max` bytes
/// as strace's `-s`.
pub(crate) fn iovecs(iov: &[u8], data: &[u8], truncated: bool, max: usize) -> String {
    let mut left = data;
    let entries: Vec<String> = iov
        .chunks_exact(16)
        .map(|e| {
            let len = word(e, 8, 8).unwrap_or(0);
            let take = (len as usize).min(left.len());
            let (mine, rest) = left.split_at(take);
            left = rest;
            let cut = truncated && rest.is_empty() && (take as u64) < len;
            format!(
                "{{iov_base={}, iov_len={len}}}",
                crate::quoted(mine, cut, max)
            )
        })
        .collect();
    format!("[{}]", entries.join(", "))
}

/// Address families by number.
const FAMILIES: &[(u64, &str)] = &[
    (0, "AF_UNSPEC"),
    (1, "AF_UNIX"),
    (2, "AF_INET"),
    (10, "AF_INET6"),
    (16, "AF_NETLINK"),
    (17, "AF_PACKET"),
];

/// A socket address as strace shows it.
pub(crate) fn sockaddr(bytes: &[u8]) -> String {
    let Some(family) = word(bytes, 0, 2) else {
        return "{}".to_string();
    };
    let port = || word(bytes, 2, 2).map(|p| (p as u16).swap_bytes());
    let name = named(family, FAMILIES);
    let rest = match family {
        1 => {
            let path = &bytes[2..];
            match path.first() {
                None => None,
                // An abstract name: its NUL first, all its bytes counted.
                Some(0) => Some(format!(
                    "sun_path=@{}",
                    crate::quoted(&path[1..], false, 108)
                )),
                Some(_) => {
                    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                    Some(format!(
                        "sun_path={}",
                        crate::quoted(&path[..end], false, 108)
                    ))
                }
            }
        }
        2 if bytes.len() >= 8 => {
            let a = &bytes[4..8];
            Some(format!(
                "sin_port=htons({}), sin_addr=inet_addr(\"{}.{}.{}.{}\")",
                port().unwrap_or(0),
                a[0],
                a[1],
                a[2],
                a[3]
            ))
        }
        10 if bytes.len() >= 28 => {
            let address: [u8; 16] = bytes[8..24].try_into().unwrap_or([0; 16]);
            Some(format!(
                "sin6_port=htons({}), sin6_flowinfo=htonl({}), inet_pton(AF_INET6, \"{}\", \
                 &sin6_addr), sin6_scope_id={}",
                port().unwrap_or(0),
                u32::from_be_bytes(bytes[4..8].try_into().unwrap_or([0; 4])),
                std::net::Ipv6Addr::from(address),
                word(bytes, 24, 4).unwrap_or(0)
            ))
        }
        16 if bytes.len() >= 12 => Some(format!(
            "nl_pid={}, nl_groups={:08x}",
            word(bytes, 4, 4).unwrap_or(0),
            word(bytes, 8, 4).unwrap_or(0)
        )),
        _ => None,
    };
    match rest {
        Some(r) => format!("{{sa_family={name}, {r}}}"),
        None => format!("{{sa_family={name}}}"),
    }
}

/// `SOL_SOCKET`, and its control messages by type.
const SOL_SOCKET: u64 = 1;
const SCM_RIGHTS: u64 = 1;
const SCM_CREDENTIALS: u64 = 2;

/// Control messages (`struct cmsghdr`s, each 8-byte aligned).
pub(crate) fn control(bytes: &[u8]) -> String {
    let mut out = Vec::new();
    let mut at = 0;
    while let (Some(len), Some(level), Some(kind)) = (
        word(bytes, at, 8),
        word(bytes, at + 8, 4),
        word(bytes, at + 12, 4),
    ) {
        if len < 16 {
            break;
        }
        let data = &bytes[(at + 16).min(bytes.len())..(at + len as usize).min(bytes.len())];
        let (level_name, kind_name, shown) = match (level, kind) {
            (SOL_SOCKET, SCM_RIGHTS) => {
                let fds: Vec<String> = data
                    .chunks_exact(4)
                    .map(|f| {
                        (u32::from_le_bytes(f.try_into().unwrap_or([0; 4])) as i32).to_string()
                    })
                    .collect();
                (
                    "SOL_SOCKET".to_string(),
                    "SCM_RIGHTS".to_string(),
                    format!("[{}]", fds.join(", ")),
                )
            }
            (SOL_SOCKET, SCM_CREDENTIALS) if data.len() >= 12 => (
                "SOL_SOCKET".to_string(),
                "SCM_CREDENTIALS".to_string(),
                format!(
                    "{{pid={}, uid={}, gid={}}}",
                    word(data, 0, 4).unwrap_or(0),
                    word(data, 4, 4).unwrap_or(0),
                    word(data, 8, 4).unwrap_or(0)
                ),
            ),
            _ => (
                level.to_string(),
                format!("{kind:#x}"),
                crate::quoted(data, false, 32),
            ),
        };
        out.push(format!(
            "{{cmsg_len={len}, cmsg_level={level_name}, cmsg_type={kind_name}, cmsg_data={shown}}}"
        ));
        at += (len as usize).div_ceil(8) * 8;
    }
    format!("[{}]", out.join(", "))
}

/// The parts of a `msghdr` a record holds, as [`message`] shows them.
pub(crate) struct Message<'a> {
    /// The socket address, if `msg_name` was not null.
    pub address: Option<&'a [u8]>,
    /// The `iovec` array.
    pub iov: &'a [u8],
    /// The bytes received or sent through it, and whether cut.
    pub data: (&'a [u8], bool),
    /// The control messages, if `msg_control` was not null.
    pub control: Option<&'a [u8]>,
    /// The flags `recvmsg` set (none for `sendmsg`, which ignores them).
    pub flags: Option<u64>,
}

/// A `msghdr` as strace shows it.
pub(crate) fn message(m: &Message<'_>, max: usize) -> String {
    let name = match m.address {
        None => "msg_name=NULL, msg_namelen=0".to_string(),
        Some([]) => "msg_namelen=0".to_string(),
        Some(a) => format!("msg_name={}, msg_namelen={}", sockaddr(a), a.len()),
    };
    let control = match m.control {
        Some(c) if !c.is_empty() => {
            format!("msg_control={}, msg_controllen={}", control(c), c.len())
        }
        _ => "msg_controllen=0".to_string(),
    };
    format!(
        "{{{name}, msg_iov={}, msg_iovlen={}, {control}, msg_flags={}}}",
        iovecs(m.iov, m.data.0, m.data.1, max),
        m.iov.len() / 16,
        bits(m.flags.unwrap_or(0), MSG_FLAGS, "0")
    )
}

/// `send`/`recv` flags.
pub(crate) const MSG_FLAGS: Bits = &[
    (0x1, "MSG_OOB"),
    (0x2, "MSG_PEEK"),
    (0x4, "MSG_DONTROUTE"),
    (0x8, "MSG_CTRUNC"),
    (0x20, "MSG_TRUNC"),
    (0x40, "MSG_DONTWAIT"),
    (0x80, "MSG_EOR"),
    (0x100, "MSG_WAITALL"),
    (0x4000, "MSG_NOSIGNAL"),
    (0x8000, "MSG_MORE"),
    (0x4000_0000, "MSG_CMSG_CLOEXEC"),
];

/// `c_iflag`'s bits.
const IFLAG: Bits = &[
    (0x1, "IGNBRK"),
    (0x2, "BRKINT"),
    (0x4, "IGNPAR"),
    (0x8, "PARMRK"),
    (0x10, "INPCK"),
    (0x20, "ISTRIP"),
    (0x40, "INLCR"),
    (0x80, "IGNCR"),
    (0x100, "ICRNL"),
    (0x200, "IUCLC"),
    (0x400, "IXON"),
    (0x800, "IXANY"),
    (0x1000, "IXOFF"),
    (0x2000, "IMAXBEL"),
    (0x4000, "IUTF8"),
];
/// `c_oflag`'s bits, after its delay fields.
const OFLAG: Bits = &[
    (0x1, "OPOST"),
    (0x2, "OLCUC"),
    (0x4, "ONLCR"),
    (0x8, "OCRNL"),
    (0x10, "ONOCR"),
    (0x20, "ONLRET"),
    (0x40, "OFILL"),
    (0x80, "OFDEL"),
];
/// `c_cflag`'s bits, after its speed and character size.
const CFLAG: Bits = &[
    (0x40, "CSTOPB"),
    (0x80, "CREAD"),
    (0x100, "PARENB"),
    (0x200, "PARODD"),
    (0x400, "HUPCL"),
    (0x800, "CLOCAL"),
    (0x8000_0000, "CRTSCTS"),
];
/// `c_lflag`'s bits, in strace's order.
const LFLAG: Bits = &[
    (0x1, "ISIG"),
    (0x2, "ICANON"),
    (0x4, "XCASE"),
    (0x8, "ECHO"),
    (0x10, "ECHOE"),
    (0x20, "ECHOK"),
    (0x40, "ECHONL"),
    (0x80, "NOFLSH"),
    (0x8000, "IEXTEN"),
    (0x200, "ECHOCTL"),
    (0x400, "ECHOPRT"),
    (0x800, "ECHOKE"),
    (0x1000, "FLUSHO"),
    (0x4000, "PENDIN"),
    (0x100, "TOSTOP"),
    (0x10000, "EXTPROC"),
];
/// The speeds of `c_cflag & CBAUD`, 0 to 15, then from 0x1001.
const SPEEDS: [&str; 16] = [
    "B0", "B50", "B75", "B110", "B134", "B150", "B200", "B300", "B600", "B1200", "B1800", "B2400",
    "B4800", "B9600", "B19200", "B38400",
];
const HIGH_SPEEDS: [&str; 15] = [
    "B57600", "B115200", "B230400", "B460800", "B500000", "B576000", "B921600", "B1000000",
    "B1152000", "B1500000", "B2000000", "B2500000", "B3000000", "B3500000", "B4000000",
];

/// A `struct termios` (the kernel's, 36 bytes) as strace shows it.
fn termios(bytes: &[u8]) -> Option<String> {
    let (i, o, c, l) = (
        word(bytes, 0, 4)?,
        word(bytes, 4, 4)?,
        word(bytes, 8, 4)?,
        word(bytes, 12, 4)?,
    );
    let delays = format!(
        "NL{}|CR{}|TAB{}|BS{}|VT{}|FF{}",
        (o >> 8) & 1,
        (o >> 9) & 3,
        (o >> 11) & 3,
        (o >> 13) & 1,
        (o >> 14) & 1,
        (o >> 15) & 1
    );
    let oflag = match bits(o & 0xff, OFLAG, "") {
        b if b.is_empty() => delays,
        b => format!("{delays}|{b}"),
    };
    let speed = match c & 0x100f {
        s if s < 16 => SPEEDS[s as usize].to_string(),
        s => HIGH_SPEEDS
            .get((s - 0x1001) as usize)
            .map_or_else(|| format!("{s:#x}"), |n| n.to_string()),
    };
    let size = ["CS5", "CS6", "CS7", "CS8"][((c >> 4) & 3) as usize];
    let cflag = match bits(c & !0x103f, CFLAG, "") {
        b if b.is_empty() => format!("{speed}|{size}"),
        b => format!("{speed}|{size}|{b}"),
    };
    Some(format!(
        "{{c_iflag={}, c_oflag={oflag}, c_cflag={cflag}, c_lflag={}, ...}}",
        bits(i, IFLAG, "0"),
        bits(l, LFLAG, "0")
    ))
}

/// What an `ioctl` filled or read, for the requests a record holds it
/// of (`crate::vectored`'s).
pub(crate) fn ioctl(request: u64, bytes: &[u8]) -> Option<String> {
    match request {
        0x5401..=0x5404 => termios(bytes),
        0x5413 | 0x5414 => Some(format!(
            "{{ws_row={}, ws_col={}, ws_xpixel={}, ws_ypixel={}}}",
            word(bytes, 0, 2)?,
            word(bytes, 2, 2)?,
            word(bytes, 4, 2)?,
            word(bytes, 6, 2)?
        )),
        0x540f | 0x5410 | 0x541b | 0x5421 | 0x8004_5430 | 0x4004_5431 => {
            Some(format!("[{}]", word(bytes, 0, 4)? as i32))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_strace_shows_them() {
        let mut inet = vec![2, 0, 0x1f, 0x90, 127, 0, 0, 1];
        inet.resize(16, 0);
        assert_eq!(
            sockaddr(&inet),
            "{sa_family=AF_INET, sin_port=htons(8080), sin_addr=inet_addr(\"127.0.0.1\")}"
        );
        let mut unix = vec![1, 0];
        unix.extend_from_slice(b"/tmp/s\0");
        assert_eq!(sockaddr(&unix), "{sa_family=AF_UNIX, sun_path=\"/tmp/s\"}");
        assert_eq!(
            sockaddr(&[1, 0, 0, b'x']),
            "{sa_family=AF_UNIX, sun_path=@\"x\"}"
        );
        let mut six = vec![10, 0, 0, 80, 0, 0, 0, 0];
        six.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        six.extend_from_slice(&[0; 4]);
        assert_eq!(
            sockaddr(&six),
            "{sa_family=AF_INET6, sin6_port=htons(80), sin6_flowinfo=htonl(0), \
             inet_pton(AF_INET6, \"::1\", &sin6_addr), sin6_scope_id=0}"
        );
    }

    #[test]
    fn a_terminals_settings_read_as_strace_shows_them() {
        let mut t = Vec::new();
        for v in [0x500u32, 0x5, 0xbf, 0x8a3b] {
            t.extend_from_slice(&v.to_le_bytes());
        }
        t.resize(36, 0);
        assert_eq!(
            ioctl(0x5401, &t).unwrap(),
            "{c_iflag=ICRNL|IXON, c_oflag=NL0|CR0|TAB0|BS0|VT0|FF0|OPOST|ONLCR, \
             c_cflag=B38400|CS8|CREAD, c_lflag=ISIG|ICANON|ECHO|ECHOE|ECHOK|IEXTEN|ECHOCTL|ECHOKE, ...}"
        );
    }
}
