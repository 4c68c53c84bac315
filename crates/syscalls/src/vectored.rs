//! The memory a call reaches through another structure, as its return
//! records it: the `iovec` arrays of `readv`, `writev` and their `p...v`
//! forms, with the bytes gathered through them; `recvmsg` and `sendmsg`'s
//! `msghdr` (its data, the peer's address, the control messages and the
//! flags the kernel set); and what an `ioctl` fills or reads for the
//! requests that say how much (`TCGETS`, `TIOCGWINSZ`, `FIONREAD`,
//! `TCSETS`, `TIOCSWINSZ`, ...); and `getsockopt`'s value, as long as
//! the length it writes back behind its last argument.
//!
//! As for the other calls (see `crate::return_values`), only memory the
//! kernel itself read or wrote is copied: an `iovec` array once the call
//! did not fail, a `msghdr`'s fields once `recvmsg` or `sendmsg`
//! returned a count (the kernel read the whole header), an `ioctl`'s
//! argument once it returned 0.

use crate::writes::ARGUMENT_REGISTERS;
use weft_plan::{Allocate, BinOp, EventInfo, Exhausted, Expr, PointKind, Primitive};
use weft_plan::{Resolved, Strings};

/// A return record's values, their names and which are bytes.
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub values: Vec<Expr>,
    pub names: Vec<String>,
    pub strings: Strings,
}

impl Record {
    /// A record of the result alone.
    pub fn result() -> Record {
        Record {
            values: vec![Expr::Reg(0)],
            names: vec!["result".to_string()],
            strings: Strings::NONE,
        }
    }

    /// The record as an event of kind `kind` at `at` (its id given by
    /// `alloc`), written by the primitive returned.
    pub fn emit(
        self,
        at: &Resolved<'_>,
        kind: PointKind,
        alloc: &mut dyn Allocate,
    ) -> Result<Primitive, Exhausted> {
        let id = alloc.event(EventInfo {
            module: at.module.to_string(),
            function: at.function.to_string(),
            kind,
            args: self.values.len() as u8,
            strings: self.strings.mask,
            binary: self.strings.sized,
            names: self.names,
        })?;
        Ok(Primitive::Emit(id, self.values, self.strings))
    }

    /// Adds a string value (a NUL-terminated path).
    pub fn string(&mut self, name: String, address: Expr) {
        self.strings.mask |= 1 << self.values.len();
        self.values.push(address);
        self.names.push(name);
    }

    /// Adds the bytes at `address`, `count` of them (none when 0 or less).
    pub fn sized(&mut self, name: String, address: Expr, count: Expr) {
        let at = self.values.len();
        self.strings.mask |= 1 << at;
        self.strings.sized |= 1 << at;
        self.values.extend([address, count]);
        self.names.extend([name, "count".to_string()]);
    }

    /// Adds the bytes the `entries` entries of the `iovec` array at
    /// `array` hold, `count` of them from the first on.
    fn gathered(&mut self, name: String, array: Expr, count: Expr, entries: Expr) {
        let at = self.values.len();
        self.sized(name, array, count);
        self.strings.gathered |= 1 << at;
        self.values.push(entries);
        self.names.push("entries".to_string());
    }

    /// Adds a plain value.
    pub fn plain(&mut self, name: &str, value: Expr) {
        self.values.push(value);
        self.names.push(name.to_string());
    }
}

/// `rax`, the result, after the call.
fn result() -> Expr {
    Expr::Reg(0)
}

/// Argument `k`'s register.
fn arg(k: usize) -> Expr {
    Expr::Reg(ARGUMENT_REGISTERS[k])
}

/// `value` when the call did not fail, else 0.
fn unless_failed(value: Expr) -> Expr {
    Expr::bin(
        BinOp::Mul,
        value,
        Expr::bin(BinOp::Ge, result(), Expr::Const(0)),
    )
}

/// Bytes of a `struct iovec`.
const IOVEC: i64 = 16;

/// `readv`, `preadv`, `preadv2` (filled) and `writev`, `pwritev`,
/// `pwritev2` (sent): the calls that take an `iovec` array (argument 1,
/// its entries argument 2).
fn vectored(nr: u64) -> Option<&'static str> {
    match nr {
        19 | 295 | 327 => Some("data"),
        20 | 296 | 328 => Some("sent"),
        _ => None,
    }
}

/// A field of the `msghdr` at argument 1 (`rsi`).
fn field(offset: i64, size: u8) -> Expr {
    Expr::Load {
        base: Some(ARGUMENT_REGISTERS[1]),
        index: None,
        disp: offset,
        size,
        signed: false,
    }
}

/// `struct msghdr`'s fields (x86-64): the address and its length, the
/// `iovec` array and its entries, the control messages and their
/// length, the flags.
const MSG_NAME: i64 = 0;
const MSG_NAMELEN: i64 = 8;
const MSG_IOV: i64 = 16;
const MSG_IOVLEN: i64 = 24;
const MSG_CONTROL: i64 = 32;
const MSG_CONTROLLEN: i64 = 40;
const MSG_FLAGS: i64 = 48;

/// The longest socket address (`struct sockaddr_storage`).
const SOCKADDR_MAX: i64 = 128;

/// The smaller of `value` and `most`.
fn min(value: Expr, most: i64) -> Expr {
    // most + (value - most) * (value < most)
    Expr::bin(
        BinOp::Add,
        Expr::Const(most),
        Expr::bin(
            BinOp::Mul,
            Expr::bin(BinOp::Sub, value.clone(), Expr::Const(most)),
            Expr::bin(BinOp::Lt, value, Expr::Const(most)),
        ),
    )
}

/// `sendmsg` and `recvmsg`.
const SENDMSG: u64 = 46;
const RECVMSG: u64 = 47;
/// `ioctl`.
const IOCTL: u64 = 16;
/// `getsockopt`, and the most of an option's value it records (`TCP_INFO`
/// is some 250 bytes).
const GETSOCKOPT: u64 = 55;
const OPTION_MAX: i64 = 256;
/// `EFAULT`: a pointer the kernel could not follow.
const EFAULT: i64 = 14;

/// The `ioctl` requests whose buffer (argument 2) this records, and the
/// bytes the kernel fills there when the call returns 0: `TCGETS` (the
/// kernel's `struct termios`), `TIOCGPGRP` (a process group), `TIOCGWINSZ`
/// (`struct winsize`), `FIONREAD` (an `int`), `TIOCGPTN` (a pty's number).
pub(crate) const IOCTL_FILLS: [(u64, i64); 5] = [
    (0x5401, 36),
    (0x540f, 4),
    (0x5413, 8),
    (0x541b, 4),
    (0x8004_5430, 4),
];

/// The `ioctl` requests whose argument (argument 2) the kernel reads,
/// and how many bytes: `TCSETS`, `TCSETSW`, `TCSETSF` (a `struct
/// termios`), `TIOCSPGRP`, `TIOCSWINSZ`, `FIONBIO`, `TIOCSPTLCK`.
pub(crate) const IOCTL_READS: [(u64, i64); 7] = [
    (0x5402, 36),
    (0x5403, 36),
    (0x5404, 36),
    (0x5410, 4),
    (0x5414, 8),
    (0x5421, 4),
    (0x4004_5431, 4),
];

/// The calls that fill a socket address at an argument, its length
/// behind another (the buffer's on the way in, the address's own on the
/// way out): `accept`, `accept4`, `getsockname`, `getpeername` (arguments
/// 1 and 2) and `recvfrom` (4 and 5, after its data).
const ACCEPT: u64 = 43;
const ACCEPT4: u64 = 288;
const GETSOCKNAME: u64 = 51;
const GETPEERNAME: u64 = 52;
const RECVFROM: u64 = 45;

/// Whether this module records call `nr`'s memory.
pub(crate) fn covers(nr: u64) -> bool {
    vectored(nr).is_some()
        || [
            SENDMSG,
            RECVMSG,
            IOCTL,
            GETSOCKOPT,
            ACCEPT,
            ACCEPT4,
            GETSOCKNAME,
            GETPEERNAME,
            RECVFROM,
        ]
        .contains(&nr)
}

/// The records a return of call `nr` (one this module [`covers`])
/// writes, each with the condition it is written under: one for each
/// shape of the memory recorded, and the result alone otherwise.
pub(crate) fn records(nr: u64) -> Vec<(Option<Expr>, Record)> {
    let mut record = Record::result();
    if let Some(what) = vectored(nr) {
        record.gathered(format!("{what}:1"), arg(1), result(), arg(2));
        let array = Expr::bin(BinOp::Mul, arg(2), Expr::Const(IOVEC));
        record.sized("iov:1".to_string(), arg(1), unless_failed(array));
        return vec![(None, record)];
    }
    let succeeded = || Expr::bin(BinOp::Ge, result(), Expr::Const(0));
    let failed = || Expr::bin(BinOp::Lt, result(), Expr::Const(0));
    match nr {
        SENDMSG | RECVMSG => {
            let data = match nr {
                RECVMSG => "data:1",
                _ => "sent:1",
            };
            record.gathered(
                data.to_string(),
                field(MSG_IOV, 8),
                result(),
                field(MSG_IOVLEN, 8),
            );
            let array = Expr::bin(BinOp::Mul, field(MSG_IOVLEN, 8), Expr::Const(IOVEC));
            record.sized("iov:1".to_string(), field(MSG_IOV, 8), array);
            // The address's length `recvmsg` leaves is the address's own,
            // which a buffer too short for it got cut: no more than the
            // longest address a socket has.
            let name_length = match nr {
                RECVMSG => min(field(MSG_NAMELEN, 4), SOCKADDR_MAX),
                _ => field(MSG_NAMELEN, 4),
            };
            record.sized("addr:1".to_string(), field(MSG_NAME, 8), name_length);
            record.sized(
                "control:1".to_string(),
                field(MSG_CONTROL, 8),
                field(MSG_CONTROLLEN, 8),
            );
            if nr == RECVMSG {
                record.plain("flags:1", field(MSG_FLAGS, 4));
            }
            vec![
                (Some(succeeded()), record),
                (Some(failed()), Record::result()),
            ]
        }
        // The option's value, as long as the length the kernel wrote back
        // behind argument 4 says: read once the call returned 0, when the
        // kernel had read and written that length.
        GETSOCKOPT => {
            let length = Expr::Load {
                base: Some(ARGUMENT_REGISTERS[4]),
                index: None,
                disp: 0,
                size: 4,
                signed: false,
            };
            record.sized("data:3".to_string(), arg(3), min(length, OPTION_MAX));
            // A call that failed left the length as it was given (unless
            // its pointer was bad), which strace shows too.
            let mut given = Record::result();
            given.sized("data:4".to_string(), arg(4), Expr::Const(4));
            let returned = |op| Expr::bin(op, result(), Expr::Const(0));
            let fault = |op| Expr::bin(op, result(), Expr::Const(-EFAULT));
            vec![
                (Some(returned(BinOp::Eq)), record),
                (
                    Some(Expr::bin(BinOp::And, returned(BinOp::Ne), fault(BinOp::Ne))),
                    given,
                ),
                (Some(fault(BinOp::Eq)), Record::result()),
            ]
        }
        // The address as long as the length the kernel wrote back says
        // (the longest a socket has at most), read once the call
        // succeeded with both pointers given.
        ACCEPT | ACCEPT4 | GETSOCKNAME | GETPEERNAME | RECVFROM => {
            let (address, length) = match nr {
                RECVFROM => (4, 5),
                _ => (1, 2),
            };
            if let Some(data) = crate::writes::writes(nr) {
                let (at, count) = data.values();
                record.sized(format!("data:{}", data.arg), at, count);
            }
            let without = record.clone();
            let written = Expr::Load {
                base: Some(ARGUMENT_REGISTERS[length]),
                index: None,
                disp: 0,
                size: 4,
                signed: false,
            };
            record.sized(
                format!("data:{address}"),
                arg(address),
                min(written, SOCKADDR_MAX),
            );
            let given = |op, k| Expr::bin(op, arg(k), Expr::Const(0));
            let filled = Expr::bin(
                BinOp::And,
                succeeded(),
                Expr::bin(
                    BinOp::And,
                    given(BinOp::Ne, address),
                    given(BinOp::Ne, length),
                ),
            );
            let not_filled = Expr::bin(
                BinOp::Or,
                failed(),
                Expr::bin(
                    BinOp::Or,
                    given(BinOp::Eq, address),
                    given(BinOp::Eq, length),
                ),
            );
            vec![(Some(filled), record), (Some(not_filled), without)]
        }
        IOCTL => {
            let mut out = Vec::new();
            let mut other = None;
            let fills = IOCTL_FILLS.iter().map(|&(r, n)| (r, n, "data:2"));
            let reads = IOCTL_READS.iter().map(|&(r, n)| (r, n, "sent:2"));
            for (request, bytes, what) in fills.chain(reads) {
                let is = Expr::bin(BinOp::Eq, arg(1), Expr::Const(request as i64));
                let isnt = Expr::bin(BinOp::Ne, arg(1), Expr::Const(request as i64));
                other = Some(match other {
                    None => isnt,
                    Some(o) => Expr::bin(BinOp::And, o, isnt),
                });
                let mut r = Record::result();
                let on_zero = Expr::bin(
                    BinOp::Mul,
                    Expr::bin(BinOp::Eq, result(), Expr::Const(0)),
                    Expr::Const(bytes),
                );
                r.sized(what.to_string(), arg(2), on_zero);
                out.push((Some(is), r));
            }
            out.push((other, Record::result()));
            out
        }
        _ => vec![(None, record)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name;

    #[test]
    fn each_call_named_here_is_the_one_meant() {
        assert_eq!(name(19), "readv");
        assert_eq!(name(327), "preadv2");
        assert_eq!(name(20), "writev");
        assert_eq!(name(328), "pwritev2");
        assert_eq!(name(SENDMSG), "sendmsg");
        assert_eq!(name(RECVMSG), "recvmsg");
        assert_eq!(name(IOCTL), "ioctl");
        assert_eq!(name(ACCEPT), "accept");
        assert_eq!(name(ACCEPT4), "accept4");
        assert_eq!(name(GETSOCKNAME), "getsockname");
        assert_eq!(name(GETPEERNAME), "getpeername");
        assert_eq!(name(RECVFROM), "recvfrom");
    }

    #[test]
    fn a_vectored_call_gathers_its_bytes_and_keeps_its_array() {
        let vector = records(19);
        assert_eq!(vector.len(), 1);
        let r = &vector[0].1;
        assert_eq!(
            r.names,
            ["result", "data:1", "count", "entries", "iov:1", "count"]
        );
        assert_eq!(r.strings.mask, 0b10010);
        assert_eq!(r.strings.sized, 0b10010);
        assert_eq!(r.strings.gathered, 0b10);
    }

    #[test]
    fn a_message_is_read_only_once_the_call_returned_a_count() {
        let message = records(RECVMSG);
        assert_eq!(message.len(), 2);
        assert!(message[0].0.is_some() && message[1].0.is_some());
        assert_eq!(message[0].1.values.len(), 11);
        assert_eq!(message[1].1.names, ["result"]);
        assert_eq!(records(SENDMSG)[0].1.values.len(), 10);
    }

    /// `getsockopt`'s value is read only once the call returned 0 (the
    /// kernel read and wrote the length behind argument 4 then).
    #[test]
    fn an_option_is_read_as_long_as_its_length_says_once_the_call_returned_0() {
        assert_eq!(name(GETSOCKOPT), "getsockopt");
        let shapes = records(GETSOCKOPT);
        assert_eq!(shapes.len(), 3);
        assert_eq!(shapes[0].1.names, ["result", "data:3", "count"]);
        assert_eq!(
            shapes[0].0,
            Some(Expr::bin(BinOp::Eq, Expr::Reg(0), Expr::Const(0)))
        );
        // Failed: the length as given, unless its pointer was bad.
        assert_eq!(shapes[1].1.names, ["result", "data:4", "count"]);
        assert_eq!(shapes[2].1.names, ["result"]);
        assert_eq!(
            shapes[2].0,
            Some(Expr::bin(BinOp::Eq, Expr::Reg(0), Expr::Const(-EFAULT)))
        );
    }

    /// A socket address is read only when the call succeeded with both
    /// pointers given (its length is read behind the second): one shape
    /// or the other, never both.
    #[test]
    fn a_socket_address_is_read_only_when_the_call_filled_one() {
        fn eval(e: &Expr, regs: &[(u8, i64)]) -> i64 {
            match e {
                Expr::Const(k) => *k,
                Expr::Reg(r) => regs.iter().find(|(n, _)| n == r).map_or(0, |(_, v)| *v),
                Expr::Bin(op, a, b) => {
                    let (a, b) = (eval(a, regs), eval(b, regs));
                    i64::from(match op {
                        BinOp::Eq => a == b,
                        BinOp::Ne => a != b,
                        BinOp::Lt => a < b,
                        BinOp::Ge => a >= b,
                        BinOp::And => a != 0 && b != 0,
                        BinOp::Or => a != 0 || b != 0,
                        other => panic!("{other:?}"),
                    })
                }
                other => panic!("{other:?}"),
            }
        }
        for (nr, address, length, data) in [
            (ACCEPT, 1, 2, &[][..]),
            (ACCEPT4, 1, 2, &[][..]),
            (GETSOCKNAME, 1, 2, &[][..]),
            (GETPEERNAME, 1, 2, &[][..]),
            (RECVFROM, 4, 5, &["data:1", "count"][..]),
        ] {
            let shapes = records(nr);
            assert_eq!(shapes.len(), 2, "{}", name(nr));
            let mut filled = vec!["result"];
            filled.extend(data);
            let without = filled.clone();
            let at = format!("data:{address}");
            filled.extend([at.as_str(), "count"]);
            assert_eq!(shapes[0].1.names, filled);
            assert_eq!(shapes[1].1.names, without);
            for (result, pointer, length_pointer) in [
                (0, 0x1000, 0x2000),
                (5, 0x1000, 0x2000),
                (-22, 0x1000, 0x2000),
                (0, 0, 0x2000),
                (0, 0x1000, 0),
                (0, 0, 0),
            ] {
                let regs = [
                    (0, result),
                    (ARGUMENT_REGISTERS[address], pointer),
                    (ARGUMENT_REGISTERS[length], length_pointer),
                ];
                let chosen: Vec<bool> = shapes
                    .iter()
                    .map(|(p, _)| eval(p.as_ref().unwrap(), &regs) != 0)
                    .collect();
                let fills = result >= 0 && pointer != 0 && length_pointer != 0;
                assert_eq!(chosen, [fills, !fills], "{} {regs:?}", name(nr));
            }
        }
    }

    #[test]
    fn an_ioctl_records_a_buffer_for_the_requests_that_size_it() {
        let shapes = records(IOCTL);
        assert_eq!(shapes.len(), IOCTL_FILLS.len() + IOCTL_READS.len() + 1);
        assert!(shapes.iter().all(|(p, _)| p.is_some()));
        assert_eq!(shapes[0].1.names, ["result", "data:2", "count"]);
        assert_eq!(
            shapes[IOCTL_FILLS.len()].1.names,
            ["result", "sent:2", "count"]
        );
        assert_eq!(shapes.last().unwrap().1.names, ["result"]);
    }
}
