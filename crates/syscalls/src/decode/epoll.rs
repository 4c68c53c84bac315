//! `epoll` as strace shows it: `epoll_ctl`'s operation and event, and the
//! events an `epoll_wait` returned (`{events=EPOLLIN, data={u32=4,
//! u64=4}}`).

use super::{bits, named};

/// `epoll_ctl`'s operations.
const OPERATIONS: &[(u64, &str)] = &[
    (1, "EPOLL_CTL_ADD"),
    (2, "EPOLL_CTL_DEL"),
    (3, "EPOLL_CTL_MOD"),
];

/// Event bits, in strace's order.
const EVENTS: &[(u64, &str)] = &[
    (0x1, "EPOLLIN"),
    (0x2, "EPOLLPRI"),
    (0x4, "EPOLLOUT"),
    (0x40, "EPOLLRDNORM"),
    (0x80, "EPOLLRDBAND"),
    (0x100, "EPOLLWRNORM"),
    (0x200, "EPOLLWRBAND"),
    (0x400, "EPOLLMSG"),
    (0x8, "EPOLLERR"),
    (0x10, "EPOLLHUP"),
    (0x2000, "EPOLLRDHUP"),
    (1 << 28, "EPOLLEXCLUSIVE"),
    (1 << 29, "EPOLLWAKEUP"),
    (1 << 30, "EPOLLONESHOT"),
    (1 << 31, "EPOLLET"),
];

/// Bytes of a `struct epoll_event` on x86-64 (packed).
const EVENT: usize = 12;

/// `epoll_ctl`'s operation argument.
pub(super) fn operation(value: u64) -> String {
    named(value, OPERATIONS)
}

/// One `struct epoll_event`.
pub(super) fn event(bytes: &[u8]) -> Option<String> {
    let events = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    let data = u64::from_le_bytes(bytes.get(4..EVENT)?.try_into().ok()?);
    Some(format!(
        "{{events={}, data={{u32={}, u64={data}}}}}",
        bits(u64::from(events), EVENTS, "0"),
        data as u32
    ))
}

/// The events a wait returned: an array of them, the first 32.
pub(super) fn events(bytes: &[u8]) -> Option<String> {
    let mut shown: Vec<String> = (bytes.chunks_exact(EVENT).take(32))
        .map(event)
        .collect::<Option<_>>()?;
    if bytes.len() / EVENT > 32 {
        shown.push("...".to_string());
    }
    Some(format!("[{}]", shown.join(", ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event_bytes(events: u32, data: u64) -> Vec<u8> {
        events
            .to_le_bytes()
            .into_iter()
            .chain(data.to_le_bytes())
            .collect()
    }

    /// strace 6.1's lines for the test program `syscalls_epoll.c` and for
    /// Python's `epoll.register(r, EPOLLIN|EPOLLET|EPOLLRDHUP|EPOLLONESHOT)`.
    #[test]
    fn epoll_reads_as_strace_shows_it() {
        assert_eq!(operation(1), "EPOLL_CTL_ADD");
        assert_eq!(operation(2), "EPOLL_CTL_DEL");
        assert_eq!(
            event(&event_bytes(1, 97)).unwrap(),
            "{events=EPOLLIN, data={u32=97, u64=97}}"
        );
        assert_eq!(
            event(&event_bytes(0xc000_2001, 4)).unwrap(),
            "{events=EPOLLIN|EPOLLRDHUP|EPOLLONESHOT|EPOLLET, data={u32=4, u64=4}}"
        );
        let two: Vec<u8> = [event_bytes(0x11, 1 << 33 | 5), event_bytes(4, 6)].concat();
        assert_eq!(
            events(&two).unwrap(),
            "[{events=EPOLLIN|EPOLLHUP, data={u32=5, u64=8589934597}}, \
             {events=EPOLLOUT, data={u32=6, u64=6}}]"
        );
        assert_eq!(events(&[]).unwrap(), "[]");
    }
}
