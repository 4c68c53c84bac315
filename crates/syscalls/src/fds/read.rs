//! What the record's bytes and texts say, read for the descriptor
//! simulation: paths joined as text, socket addresses, the descriptors a
//! `poll` or a `select` found ready.

use crate::Call;

/// The descriptors a `poll` or `ppoll` found ready: its array of
/// `struct pollfd` (`fd`, `events`, `revents`; 8 bytes) as the kernel
/// filled it, entries with `revents` set.
pub(crate) fn ready(call: &Call) -> Vec<i32> {
    let Some(array) = call
        .buffers
        .iter()
        .find(|b| b.what == crate::Memory::Filled)
    else {
        return Vec::new();
    };
    array
        .bytes
        .chunks_exact(8)
        .filter(|e| u16::from_le_bytes([e[6], e[7]]) != 0)
        .map(|e| i32::from_le_bytes([e[0], e[1], e[2], e[3]]))
        .filter(|&fd| fd >= 0)
        .collect()
}

/// The descriptors a `select` or `pselect6` found ready to read: the
/// bits of its read set as the kernel wrote it back.
pub(crate) fn selected(call: &Call) -> Vec<i32> {
    let Some(set) = call
        .buffers
        .iter()
        .find(|b| b.what == crate::Memory::Filled && b.arg == 1)
    else {
        return Vec::new();
    };
    (0..set.bytes.len() * 8)
        .filter(|&bit| set.bytes[bit / 8] & (1 << (bit % 8)) != 0)
        .map(|bit| bit as i32)
        .collect()
}

/// `path` resolved against directory `base`, `.` and `..` taken out as
/// text (`..` of `/` is `/`; of a relative directory, kept).
pub(super) fn join(base: &str, path: &str) -> String {
    let whole = match path.starts_with('/') {
        true => path.to_string(),
        false => format!("{base}/{path}"),
    };
    let rooted = whole.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in whole.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    match (rooted, parts.is_empty()) {
        (true, _) => format!("/{}", parts.join("/")),
        (false, true) => ".".into(),
        (false, false) => format!("./{}", parts.join("/")),
    }
}

/// A socket address as a name: `port:N` for IPv4 and IPv6 (on one
/// machine a server bound to any address and a client connecting to the
/// loopback meet at the port), `unix:PATH` (resolved against `cwd`) or
/// `unix-abstract:NAME`; none for other families.
pub(super) fn address(bytes: &[u8], cwd: &str) -> Option<String> {
    let family = u16::from_le_bytes(bytes.get(..2)?.try_into().ok()?);
    match family {
        2 | 10 => {
            let port = u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?);
            Some(format!("port:{port}"))
        }
        1 => {
            let path = bytes.get(2..)?;
            match path.first() {
                Some(0) => Some(format!(
                    "unix-abstract:{}",
                    String::from_utf8_lossy(&path[1..])
                )),
                Some(_) => {
                    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
                    Some(format!(
                        "unix:{}",
                        join(cwd, &String::from_utf8_lossy(&path[..end]))
                    ))
                }
                None => None,
            }
        }
        _ => None,
    }
}

/// The directory that holds `path` (as [`join`] writes it).
pub(super) fn parent(path: &str) -> String {
    join(path, "..")
}
