//! One recorded call made again: its descriptors translated into the
//! replay process's own, its paths moved into the sandbox, its buffers
//! made here (what it wrote out as recorded, zeros past what the record
//! holds; what the kernel fills, a buffer of the size the program gave).
//! Calls with memory the record does not hold or the replay cannot make
//! again (a message's control data, `fcntl`'s locks), and calls that only concern the
//! recorded process's own memory, signals or scheduling (`mmap`, `brk`,
//! `futex`, `rt_sigaction`, ...), are not made again: [`Issued::Skipped`]
//! says why.

use crate::sandbox::Paths;
use std::collections::HashMap;
use std::sync::Mutex;
use weft_syscalls::{Call, Memory};

/// A replay process's translation of the recorded descriptors.
#[derive(Debug, Default, Clone)]
pub(crate) struct Fds {
    /// Recorded descriptor to the replay's.
    pub map: HashMap<i32, i32>,
}

/// What making a call again gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Issued {
    /// It was made; its result (minus the error number for an error).
    Made(i64),
    /// It was made and read other bytes than the record holds.
    OtherBytes(i64),
    /// It was not, for this reason.
    Skipped(&'static str),
}

/// How an argument is passed again.
#[derive(Debug, Clone, Copy)]
enum Arg {
    /// As recorded.
    Int,
    /// A descriptor: translated.
    Fd,
    /// A directory descriptor: `AT_FDCWD` as it is, else translated.
    DirFd,
    /// A path (recorded as text): moved into the sandbox.
    Path,
    /// A path's text left as it is (a symbolic link's target).
    Text,
    /// Bytes the call writes out, their count in that argument.
    Sent(usize),
    /// A buffer the kernel fills, its size in that argument.
    Filled(usize),
    /// A buffer the kernel fills, of a structure's size.
    Struct,
    /// A socket address, its length in that argument: a Unix socket's
    /// path moved into the sandbox.
    Address(usize),
    /// A null pointer.
    Null,
}

/// What the result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gives {
    /// A value.
    Value,
    /// A new descriptor.
    NewFd,
}

use Arg::*;

/// The calls made again as they are, their arguments translated.
const CALLS: &[(u64, &[Arg], Gives)] = &[
    (0, &[Fd, Filled(2), Int], Gives::Value),          // read
    (1, &[Fd, Sent(2), Int], Gives::Value),            // write
    (2, &[Path, Int, Int], Gives::NewFd),              // open
    (4, &[Path, Struct], Gives::Value),                // stat
    (5, &[Fd, Struct], Gives::Value),                  // fstat
    (6, &[Path, Struct], Gives::Value),                // lstat
    (8, &[Fd, Int, Int], Gives::Value),                // lseek
    (17, &[Fd, Filled(2), Int, Int], Gives::Value),    // pread64
    (18, &[Fd, Sent(2), Int, Int], Gives::Value),      // pwrite64
    (21, &[Path, Int], Gives::Value),                  // access
    (32, &[Fd], Gives::NewFd),                         // dup
    (41, &[Int, Int, Int], Gives::NewFd),              // socket
    (42, &[Fd, Address(2), Int], Gives::Value),        // connect
    (43, &[Fd, Null, Null], Gives::NewFd),             // accept
    (48, &[Fd, Int], Gives::Value),                    // shutdown
    (49, &[Fd, Address(2), Int], Gives::Value),        // bind
    (50, &[Fd, Int], Gives::Value),                    // listen
    (54, &[Fd, Int, Int, Sent(4), Int], Gives::Value), // setsockopt
    (288, &[Fd, Null, Null, Int], Gives::NewFd),       // accept4
    (45, &[Fd, Filled(2), Int, Null, Null], Gives::Value), // recvfrom
    (73, &[Fd, Int], Gives::Value),                    // flock
    (74, &[Fd], Gives::Value),                         // fsync
    (75, &[Fd], Gives::Value),                         // fdatasync
    (76, &[Path, Int], Gives::Value),                  // truncate
    (77, &[Fd, Int], Gives::Value),                    // ftruncate
    (80, &[Path], Gives::Value),                       // chdir
    (81, &[Fd], Gives::Value),                         // fchdir
    (82, &[Path, Path], Gives::Value),                 // rename
    (83, &[Path, Int], Gives::Value),                  // mkdir
    (84, &[Path], Gives::Value),                       // rmdir
    (85, &[Path, Int], Gives::NewFd),                  // creat
    (86, &[Path, Path], Gives::Value),                 // link
    (87, &[Path], Gives::Value),                       // unlink
    (88, &[Text, Path], Gives::Value),                 // symlink
    (89, &[Path, Filled(2), Int], Gives::Value),       // readlink
    (90, &[Path, Int], Gives::Value),                  // chmod
    (91, &[Fd, Int], Gives::Value),                    // fchmod
    (92, &[Path, Int, Int], Gives::Value),             // chown
    (93, &[Fd, Int, Int], Gives::Value),               // fchown
    (94, &[Path, Int, Int], Gives::Value),             // lchown
    (95, &[Int], Gives::Value),                        // umask
    (137, &[Path, Struct], Gives::Value),              // statfs
    (138, &[Fd, Struct], Gives::Value),                // fstatfs
    (217, &[Fd, Filled(2), Int], Gives::Value),        // getdents64
    (221, &[Fd, Int, Int, Int], Gives::Value),         // fadvise64
    (257, &[DirFd, Path, Int, Int], Gives::NewFd),     // openat
    (258, &[DirFd, Path, Int], Gives::Value),          // mkdirat
    (260, &[DirFd, Path, Int, Int, Int], Gives::Value), // fchownat
    (262, &[DirFd, Path, Struct, Int], Gives::Value),  // newfstatat
    (263, &[DirFd, Path, Int], Gives::Value),          // unlinkat
    (264, &[DirFd, Path, DirFd, Path], Gives::Value),  // renameat
    (265, &[DirFd, Path, DirFd, Path, Int], Gives::Value), // linkat
    (266, &[Text, DirFd, Path], Gives::Value),         // symlinkat
    (267, &[DirFd, Path, Filled(3), Int], Gives::Value), // readlinkat
    (268, &[DirFd, Path, Int], Gives::Value),          // fchmodat
    (269, &[DirFd, Path, Int], Gives::Value),          // faccessat
    (280, &[DirFd, Path, Null, Int], Gives::Value),    // utimensat (now)
    (285, &[Fd, Int, Int, Int], Gives::Value),         // fallocate
    (316, &[DirFd, Path, DirFd, Path, Int], Gives::Value), // renameat2
    (332, &[DirFd, Path, Int, Int, Struct], Gives::Value), // statx
    (439, &[DirFd, Path, Int, Int], Gives::Value),     // faccessat2
];

/// Why a call is not made again.
pub(crate) const NOT_FILES: &str =
    "not made again (only calls on files, descriptors and sleeps are)";
pub(crate) const NO_DESCRIPTOR: &str = "a descriptor the replay does not have";
pub(crate) const NO_PATH: &str = "a path the record does not hold";
pub(crate) const NO_MEMORY: &str = "memory the record does not hold";
pub(crate) const INTERRUPTED: &str = "a call a signal interrupted (EINTR)";
/// A record of a signal's delivery to the program's handler
/// (`weft_abi::delivery`): no call to make.
pub(crate) const DELIVERY: &str = "a signal's delivery, not a call";

/// The most bytes a buffer made for a call holds: a read of a 44 MB file
/// in one call reads it all (16 MiB until session 24, which a new-user
/// trial found cut). A buffer the kernel fills is allocated zeroed and
/// costs only the pages it writes.
const BUFFER_MAX: u64 = 1 << 30;
/// A structure the kernel fills is at most this big (`statx`: 256).
const STRUCT_SIZE: usize = 4096;
const AT_FDCWD: i32 = -100;
const EBADF: i64 = -9;
const EINTR: i64 = -4;
const O_CLOEXEC: u64 = 0o2000000;
/// `ioctl`'s request that sets or clears `O_NONBLOCK` by an `int`.
const FIONBIO: u64 = 0x5421;

/// Makes `call` again in a replay process whose descriptors `fds`
/// translates, with paths in `sandbox`; `took_ns` is how long the call
/// took in the record (a sleep sleeps that long).
pub(crate) fn issue(call: &Call, fds: &Mutex<Fds>, paths: &Paths, took_ns: u64) -> Issued {
    if weft_syscalls::is_delivery(call) {
        return Issued::Skipped(DELIVERY);
    }
    let recorded = call.exit.map(|e| e.result);
    // Made again, it would wait for what the signal cut short (a `close`
    // closes all the same).
    if recorded == Some(EINTR) && call.nr != 3 {
        return Issued::Skipped(INTERRUPTED);
    }
    match call.nr {
        3 => close(call, fds),
        22 | 293 | 53 => pair(call, fds),
        33 | 292 => dup_to(call, fds),
        72 => fcntl(call, fds),
        // ioctl(FIONBIO): a descriptor's O_NONBLOCK, as fcntl's F_SETFL
        // (a socket left blocking waits for ever in a read whose recorded
        // one failed with EAGAIN).
        16 if call.args[1] == FIONBIO => fionbio(call, fds),
        35 | 230 => {
            std::thread::sleep(std::time::Duration::from_nanos(took_ns));
            Issued::Made(recorded.unwrap_or(0))
        }
        // readv, writev: made as one read or write of their total (the
        // result), with the bytes the record gathered through their
        // vectors (zeros past what it holds).
        19 | 20 => match recorded {
            Some(n) if n >= 0 => {
                let mut flat = call.clone();
                flat.nr -= 19;
                flat.args[2] = n as u64;
                flat.buffers
                    .retain(|b| matches!(b.what, Memory::Sent | Memory::Filled));
                let kinds: &[Arg] = match call.nr {
                    19 => &[Fd, Filled(2), Int],
                    _ => &[Fd, Sent(2), Int],
                };
                as_table(&flat, kinds, Gives::Value, fds, paths)
            }
            _ => Issued::Skipped(NO_MEMORY),
        },
        // sendmsg, recvmsg without an address or control messages: made
        // as `sendto` and `recvfrom` of their data.
        46 | 47
            if recorded.is_some_and(|n| n >= 0)
                && !call.buffers.iter().any(|b| {
                    matches!(b.what, Memory::Address | Memory::Control) && !b.bytes.is_empty()
                }) =>
        {
            let mut flat = call.clone();
            flat.nr -= 2;
            flat.args = [
                call.args[0],
                0,
                recorded.unwrap_or(0) as u64,
                call.args[2],
                0,
                0,
            ];
            flat.buffers
                .retain(|b| matches!(b.what, Memory::Sent | Memory::Filled));
            let kinds: &[Arg] = match call.nr {
                47 => &[Fd, Filled(2), Int, Int, Null, Null],
                _ => &[Fd, Sent(2), Int, Int, Null, Int],
            };
            as_table(&flat, kinds, Gives::Value, fds, paths)
        }
        // An exec that failed only looked its path up: the replay looks
        // it up in the sandbox (can it execute it?).
        59 if recorded.is_some_and(|r| r < 0) => {
            let mut look = call.clone();
            look.nr = 21; // access(path, X_OK)
            look.args[1] = 1;
            as_table(&look, &[Path, Int], Gives::Value, fds, paths)
        }
        59 | 322 => {
            close_on_exec(fds);
            Issued::Made(0)
        }
        44 if call.args[4] == 0 => as_table(
            call,
            &[Fd, Sent(2), Int, Int, Null, Int],
            Gives::Value,
            fds,
            paths,
        ),
        44 => as_table(
            call,
            &[Fd, Sent(2), Int, Int, Address(5), Int],
            Gives::Value,
            fds,
            paths,
        ),
        _ => match CALLS.iter().find(|(nr, _, _)| *nr == call.nr) {
            Some(&(_, args, gives)) => as_table(call, args, gives, fds, paths),
            None => Issued::Skipped(NOT_FILES),
        },
    }
}

/// A call of [`CALLS`].
fn as_table(call: &Call, kinds: &[Arg], gives: Gives, fds: &Mutex<Fds>, paths: &Paths) -> Issued {
    let table = fds.lock().expect("no replay thread panics holding it");
    let mut args = [0u64; 6];
    // Buffers and paths made for the call: they live until it returns.
    let mut keep: Vec<Vec<u8>> = Vec::new();
    // The buffer the kernel fills with data the record holds: (argument,
    // index in `keep`).
    let mut filled: Option<(usize, usize)> = None;
    for (i, kind) in kinds.iter().enumerate() {
        let recorded = call.args[i];
        args[i] = match *kind {
            Int => recorded,
            Null => 0,
            Fd | DirFd => {
                let fd = recorded as i32;
                if matches!(kind, DirFd) && fd == AT_FDCWD || fd < 0 {
                    recorded
                } else {
                    match table.map.get(&fd) {
                        Some(&real) => real as u64,
                        None => return unknown(call),
                    }
                }
            }
            Path | Text => {
                if recorded == 0 {
                    0
                } else {
                    let Some(text) = buffer(call, Memory::Path, i) else {
                        return Issued::Skipped(NO_PATH);
                    };
                    let mut bytes = match kind {
                        Path => paths.map(text),
                        _ => text.to_vec(),
                    };
                    bytes.push(0);
                    keep.push(bytes);
                    keep.last().expect("just pushed").as_ptr() as u64
                }
            }
            Sent(count) => {
                let n = call.args[count].min(BUFFER_MAX) as usize;
                let mut bytes = buffer(call, Memory::Sent, i).unwrap_or(&[]).to_vec();
                bytes.resize(n, 0);
                keep.push(bytes);
                keep.last().expect("just pushed").as_ptr() as u64
            }
            Filled(count) => {
                let n = call.args[count].min(BUFFER_MAX) as usize;
                filled = Some((i, keep.len()));
                keep.push(vec![0; n.max(1)]);
                keep.last().expect("just pushed").as_ptr() as u64
            }
            Struct => {
                keep.push(vec![0; STRUCT_SIZE]);
                keep.last().expect("just pushed").as_ptr() as u64
            }
            Address(_) => {
                let Some(bytes) = buffer(call, Memory::Sent, i) else {
                    return Issued::Skipped(NO_MEMORY);
                };
                keep.push(unix_path_moved(bytes, paths));
                keep.last().expect("just pushed").as_ptr() as u64
            }
        };
    }
    // Counts of the buffers made: what they hold.
    for (i, kind) in kinds.iter().enumerate() {
        match *kind {
            Sent(count) | Filled(count) => args[count] = args[count].min(BUFFER_MAX),
            Address(len) => args[len] = keep_len(&keep, args[i]),
            _ => {}
        }
    }
    drop(table);
    // A read of a stream takes the recorded bytes, no more (the count
    // lowered to them) and no fewer (read on while the stream gives some):
    // the pieces a reader got are the writer's timing's, and a rerun's
    // other timing would cut them elsewhere, stalling or ending the
    // reader early.
    let stream_read = matches!(call.nr, 0 | 45) && (call.nr == 0 || call.args[4] == 0);
    let wanted = match (stream_read, recorded_result(call)) {
        (true, Some(r)) if r > 0 => Some(r as u64),
        _ => None,
    };
    if let Some(w) = wanted {
        args[2] = args[2].min(w);
    }
    let mut result = raw(call.nr, args);
    if let (Some(w), Some((_, k))) = (wanted, filled) {
        while result > 0 && (result as u64) < w.min(keep[k].len() as u64) {
            let mut more = args;
            more[1] = keep[k][result as usize..].as_ptr() as u64;
            more[2] = w.min(keep[k].len() as u64) - result as u64;
            let got = raw(call.nr, more);
            if got <= 0 {
                break;
            }
            result += got;
        }
    }
    if gives == Gives::NewFd {
        adopt(fds, call, result);
    }
    // Data read (not a directory's entries, whose inode numbers are the
    // sandbox's): the bytes the record holds must be the bytes read.
    if let (Some((arg, k)), true) = (filled, result > 0 && call.nr != 217) {
        if let Some(recorded) = buffer(call, Memory::Filled, arg) {
            let n = recorded.len().min(result as usize).min(keep[k].len());
            if recorded[..n] != keep[k][..n] {
                return Issued::OtherBytes(result);
            }
        }
    }
    Issued::Made(result)
}

/// What the call returned in the record, if it returned.
fn recorded_result(call: &Call) -> Option<i64> {
    call.exit.map(|e| e.result)
}

/// A call on a descriptor the replay does not have: as recorded if the
/// record says it had none either (`EBADF`), else not made.
fn unknown(call: &Call) -> Issued {
    match call.exit.map(|e| e.result) {
        Some(EBADF) => Issued::Made(EBADF),
        _ => Issued::Skipped(NO_DESCRIPTOR),
    }
}

/// The length of the buffer of `keep` at address `ptr`.
fn keep_len(keep: &[Vec<u8>], ptr: u64) -> u64 {
    keep.iter()
        .find(|b| b.as_ptr() as u64 == ptr)
        .map_or(0, |b| b.len() as u64)
}

/// A socket address with a Unix socket's absolute path moved into the
/// sandbox (when it still fits `sun_path`'s 108 bytes); others as they
/// are.
fn unix_path_moved(bytes: &[u8], paths: &Paths) -> Vec<u8> {
    const AF_UNIX: [u8; 2] = [1, 0];
    if bytes.len() < 3 || bytes[..2] != AF_UNIX || bytes[2] != b'/' {
        return bytes.to_vec();
    }
    let path = &bytes[2..];
    let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
    let moved = paths.map(&path[..end]);
    if moved.len() >= 108 {
        return bytes.to_vec();
    }
    let mut out = AF_UNIX.to_vec();
    out.extend_from_slice(&moved);
    out.push(0);
    out
}

/// The recorded bytes of argument `arg`'s buffer of kind `what`.
fn buffer(call: &Call, what: Memory, arg: usize) -> Option<&[u8]> {
    call.buffers
        .iter()
        .find(|b| b.what == what && b.arg == arg)
        .map(|b| b.bytes.as_slice())
}

/// System call `nr` with `args`: its result, minus the error number for
/// an error.
fn raw(nr: u64, args: [u64; 6]) -> i64 {
    // SAFETY: every pointer in `args` points into a buffer the caller
    // keeps alive across the call and sized as the call's count argument
    // says (or 4 KiB for a structure); descriptors are the replay's own,
    // translated from the record, never weft's.
    let r = unsafe {
        libc::syscall(
            nr as libc::c_long,
            args[0],
            args[1],
            args[2],
            args[3],
            args[4],
            args[5],
        )
    };
    if r == -1 {
        -(std::io::Error::last_os_error().raw_os_error().unwrap_or(0) as i64)
    } else {
        r
    }
}

/// The recorded call made descriptor `result` in the replay: it stands for
/// the recorded one; if the recorded call failed, the replay's is closed.
fn adopt(fds: &Mutex<Fds>, call: &Call, result: i64) {
    if result < 0 {
        return;
    }
    match call.exit.map(|e| e.result).filter(|&r| r >= 0) {
        Some(recorded) => {
            let mut t = fds.lock().expect("no replay thread panics holding it");
            if let Some(old) = t.map.insert(recorded as i32, result as i32) {
                if old != result as i32 {
                    raw(3, [old as u64, 0, 0, 0, 0, 0]);
                }
            }
        }
        None => {
            raw(3, [result as u64, 0, 0, 0, 0, 0]);
        }
    }
}

fn close(call: &Call, fds: &Mutex<Fds>) -> Issued {
    let fd = call.args[0] as i32;
    let mut t = fds.lock().expect("no replay thread panics holding it");
    match t.map.remove(&fd) {
        Some(real) => Issued::Made(raw(3, [real as u64, 0, 0, 0, 0, 0])),
        None if fd < 0 => Issued::Made(EBADF),
        None => unknown(call),
    }
}

/// `pipe`, `pipe2`, `socketpair`: the two recorded descriptors (in the
/// buffer the kernel filled) stand for the replay's.
fn pair(call: &Call, fds: &Mutex<Fds>) -> Issued {
    let mut made = [0i32; 2];
    let ptr = made.as_mut_ptr() as u64;
    let result = match call.nr {
        22 => raw(293, [ptr, 0, 0, 0, 0, 0]),
        293 => raw(293, [ptr, call.args[1], 0, 0, 0, 0]),
        _ => raw(53, [call.args[0], call.args[1], call.args[2], ptr, 0, 0]),
    };
    let recorded = call
        .buffers
        .iter()
        .find(|b| b.what == Memory::Filled && b.bytes.len() == 8)
        .map(|b| {
            [0, 4].map(|i| i32::from_le_bytes(b.bytes[i..i + 4].try_into().expect("4 bytes")))
        });
    if result == 0 {
        let mut t = fds.lock().expect("no replay thread panics holding it");
        match recorded {
            Some(r) => {
                t.map.insert(r[0], made[0]);
                t.map.insert(r[1], made[1]);
            }
            None => {
                raw(3, [made[0] as u64, 0, 0, 0, 0, 0]);
                raw(3, [made[1] as u64, 0, 0, 0, 0, 0]);
            }
        }
    }
    Issued::Made(result)
}

/// `dup2`, `dup3`: the recorded target descriptor stands for a new one.
fn dup_to(call: &Call, fds: &Mutex<Fds>) -> Issued {
    let (old, new) = (call.args[0] as i32, call.args[1] as i32);
    let Some(real) = fds.lock().expect("unpoisoned").map.get(&old).copied() else {
        return unknown(call);
    };
    if old == new {
        return Issued::Made(new as i64);
    }
    let cmd = match call.nr == 292 && call.args[2] & O_CLOEXEC != 0 {
        true => 1030, // F_DUPFD_CLOEXEC
        false => 0,   // F_DUPFD
    };
    let made = raw(72, [real as u64, cmd, 0, 0, 0, 0]);
    if made >= 0 {
        let mut t = fds.lock().expect("no replay thread panics holding it");
        if let Some(gone) = t.map.insert(new, made as i32) {
            raw(3, [gone as u64, 0, 0, 0, 0, 0]);
        }
        return Issued::Made(new as i64);
    }
    Issued::Made(made)
}

/// `fcntl`: duplicates adopt their result; `F_GETFD`, `F_SETFD`,
/// `F_GETFL`, `F_SETFL` are made on the translated descriptor; the rest
/// (locks, leases, pipe sizes) are not made.
fn fcntl(call: &Call, fds: &Mutex<Fds>) -> Issued {
    let fd = call.args[0] as i32;
    let Some(real) = fds.lock().expect("unpoisoned").map.get(&fd).copied() else {
        return unknown(call);
    };
    match call.args[1] {
        0 | 1030 => {
            let made = raw(72, [real as u64, call.args[1], 0, 0, 0, 0]);
            adopt(fds, call, made);
            Issued::Made(made)
        }
        1..=4 => Issued::Made(raw(72, [real as u64, call.args[1], call.args[2], 0, 0, 0])),
        _ => Issued::Skipped(NO_MEMORY),
    }
}

/// `ioctl(fd, FIONBIO, &on)` on the translated descriptor, with the `int`
/// the record holds.
fn fionbio(call: &Call, fds: &Mutex<Fds>) -> Issued {
    let fd = call.args[0] as i32;
    let Some(real) = fds.lock().expect("unpoisoned").map.get(&fd).copied() else {
        return unknown(call);
    };
    let sent = call
        .buffers
        .iter()
        .find(|b| b.what == Memory::Sent && b.arg == 2)
        .and_then(|b| Some(i32::from_le_bytes(b.bytes.get(..4)?.try_into().ok()?)));
    let Some(mut on) = sent else {
        return Issued::Skipped(NO_MEMORY);
    };
    let at = std::ptr::addr_of_mut!(on) as u64;
    Issued::Made(raw(16, [real as u64, FIONBIO, at, 0, 0, 0]))
}

/// An `execve` that succeeded closes the close-on-exec descriptors.
fn close_on_exec(fds: &Mutex<Fds>) {
    let mut t = fds.lock().expect("no replay thread panics holding it");
    t.map.retain(|_, real| {
        let flags = raw(72, [*real as u64, 1, 0, 0, 0, 0]); // F_GETFD
        if flags >= 0 && flags & 1 != 0 {
            raw(3, [*real as u64, 0, 0, 0, 0, 0]);
            return false;
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_syscalls::{Buffer, Return};

    fn call(nr: u64, args: &[u64], result: i64, buffers: Vec<Buffer>) -> Call {
        Call {
            tid: 1,
            ring: 1,
            entry_tsc: 0,
            user_ns: None,
            loader: false,
            nr,
            vdso: false,
            args: std::array::from_fn(|i| args.get(i).copied().unwrap_or(0)),
            exit: Some(Return {
                tsc: Some(1),
                result,
            }),
            buffers,
        }
    }

    fn bytes(what: Memory, arg: usize, b: &[u8]) -> Buffer {
        Buffer {
            what,
            arg,
            bytes: b.to_vec(),
            truncated: false,
        }
    }

    /// A file written, read back and removed through recorded descriptor
    /// numbers that are not the replay's; a pipe's ends translated.
    #[test]
    fn calls_are_made_again_through_translated_descriptors() {
        let dir = std::env::temp_dir().join(format!("weft-issue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sandbox = Paths::for_tests(&dir);
        let fds = Mutex::new(Fds::default());
        let path = b"/f".to_vec();
        let at = (-100i64) as u64;
        let open = call(
            257,
            &[at, 1, 0o102, 0o644],
            7,
            vec![bytes(Memory::Path, 1, &path)],
        );
        assert_eq!(
            issue(&open, &fds, &sandbox, 0),
            Issued::Made(fds.lock().unwrap().map[&7] as i64)
        );
        let write = call(1, &[7, 1, 5], 5, vec![bytes(Memory::Sent, 1, b"hello")]);
        assert_eq!(issue(&write, &fds, &sandbox, 0), Issued::Made(5));
        assert_eq!(std::fs::read(dir.join("f")).unwrap(), b"hello");
        let pread = call(17, &[7, 1, 64, 1], 4, vec![]);
        assert_eq!(issue(&pread, &fds, &sandbox, 0), Issued::Made(4));
        assert_eq!(
            issue(&call(3, &[7], 0, vec![]), &fds, &sandbox, 0),
            Issued::Made(0)
        );
        assert_eq!(
            issue(&call(0, &[7, 1, 4], 4, vec![]), &fds, &sandbox, 0),
            Issued::Skipped(NO_DESCRIPTOR)
        );
        let unlink = call(87, &[1], 0, vec![bytes(Memory::Path, 0, &path)]);
        assert_eq!(issue(&unlink, &fds, &sandbox, 0), Issued::Made(0));
        assert!(!dir.join("f").exists());
        let fds_bytes = [40i32.to_le_bytes(), 41i32.to_le_bytes()].concat();
        let pipe = call(293, &[1, 0], 0, vec![bytes(Memory::Filled, 0, &fds_bytes)]);
        assert_eq!(issue(&pipe, &fds, &sandbox, 0), Issued::Made(0));
        let w = call(1, &[41, 1, 3], 3, vec![bytes(Memory::Sent, 1, b"abc")]);
        assert_eq!(issue(&w, &fds, &sandbox, 0), Issued::Made(3));
        assert_eq!(
            issue(&call(0, &[40, 1, 16], 3, vec![]), &fds, &sandbox, 0),
            Issued::Made(3)
        );
        // ioctl(FIONBIO, [1]) makes the pipe's end non-blocking (an empty
        // pipe's read fails at once then, as the recorded one did).
        let nonblocking = call(
            16,
            &[40, FIONBIO, 1],
            0,
            vec![bytes(Memory::Sent, 2, &1i32.to_le_bytes())],
        );
        assert_eq!(issue(&nonblocking, &fds, &sandbox, 0), Issued::Made(0));
        let Issued::Made(flags) = issue(&call(72, &[40, 3], 0, vec![]), &fds, &sandbox, 0) else {
            panic!("F_GETFL is made");
        };
        assert_ne!(flags & 0o4000, 0, "O_NONBLOCK in {flags:o}");
        assert_eq!(
            issue(
                &call(9, &[0, 4096, 3, 0x22], 0x1000, vec![]),
                &fds,
                &sandbox,
                0
            ),
            Issued::Skipped(NOT_FILES)
        );
        for fd in [40, 41] {
            close(&call(3, &[fd], 0, vec![]), &fds);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
