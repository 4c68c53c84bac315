//! What the kernel writes into the caller's memory, per call: which
//! argument holds the buffer and how many bytes it wrote there, as the
//! return probe copies them (the kernel keeps every argument register but
//! `rcx` and `r11` across the call, so they are still there after it).

use weft_plan::{BinOp, Expr};

/// How many bytes a call wrote into its buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// As many as the result says (`read`, `getdents64`).
    Result,
    /// As many as the result says, no more than argument `.0` (`recvfrom`
    /// with `MSG_TRUNC` returns the datagram's length, past its buffer).
    ResultWithin(usize),
    /// The result times this many (`epoll_wait`'s events).
    ResultTimes(u64),
    /// This many when the call succeeded with 0 (`fstat`, `pipe2`).
    OnZero(u64),
    /// This many when the result is above 0 (`wait4`'s status).
    OnPositive(u64),
    /// This many when a signal's handler cut the call short (`EINTR`:
    /// `nanosleep`'s remaining time).
    OnInterrupted(u64),
    /// Argument `.0` times `.1` when the call did not fail (`poll`'s
    /// array of `nfds` entries of 8 bytes, whose `revents` it filled).
    ArgTimes(usize, u64),
    /// The bytes of a descriptor set of as many descriptors as argument
    /// `.0` (an `int`) says, in whole 8-byte words, as the kernel copies
    /// it back, when the call did not fail (`select`'s read set).
    FdSet(usize),
}

/// A call's buffer: its argument (0 to 5) and the bytes written there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Writes {
    /// The argument holding the buffer's address.
    pub arg: usize,
    /// How many bytes the kernel wrote.
    pub count: Count,
}

/// The argument registers in encoding order (`Expr::Reg`): `rdi`, `rsi`,
/// `rdx`, `r10`, `r8`, `r9`.
pub(crate) const ARGUMENT_REGISTERS: [u8; 6] = [7, 6, 2, 10, 8, 9];

/// The calls whose buffers are recorded (x86-64 numbers). `recvmsg`,
/// `readv` and `ioctl`, whose buffers are behind other structures or
/// depend on the request, are not yet.
const TABLE: &[(u64, usize, Count)] = &[
    (0, 1, Count::Result),              // read
    (4, 1, Count::OnZero(144)),         // stat
    (7, 0, Count::ArgTimes(1, 8)),      // poll
    (13, 2, Count::OnZero(32)),         // rt_sigaction's old action
    (14, 2, Count::OnZero(8)),          // rt_sigprocmask's old set
    (36, 1, Count::OnZero(32)),         // getitimer
    (127, 0, Count::OnZero(8)),         // rt_sigpending
    (38, 2, Count::OnZero(32)),         // setitimer's old value
    (5, 1, Count::OnZero(144)),         // fstat
    (6, 1, Count::OnZero(144)),         // lstat
    (17, 1, Count::Result),             // pread64
    (22, 0, Count::OnZero(8)),          // pipe
    (23, 1, Count::FdSet(0)),           // select's read set
    (45, 1, Count::ResultWithin(2)),    // recvfrom
    (53, 3, Count::OnZero(8)),          // socketpair
    (61, 1, Count::OnPositive(4)),      // wait4
    (63, 0, Count::OnZero(390)),        // uname
    (79, 0, Count::Result),             // getcwd
    (89, 1, Count::Result),             // readlink
    (96, 0, Count::OnZero(16)),         // gettimeofday
    (97, 1, Count::OnZero(16)),         // getrlimit
    (99, 0, Count::OnZero(112)),        // sysinfo
    (191, 2, Count::Result),            // getxattr
    (192, 2, Count::Result),            // lgetxattr
    (193, 2, Count::Result),            // fgetxattr
    (194, 1, Count::Result),            // listxattr
    (195, 1, Count::Result),            // llistxattr
    (196, 1, Count::Result),            // flistxattr
    (35, 1, Count::OnInterrupted(16)),  // nanosleep's remaining time
    (201, 0, Count::OnPositive(8)),     // time
    (204, 2, Count::Result),            // sched_getaffinity
    (217, 1, Count::Result),            // getdents64
    (228, 1, Count::OnZero(16)),        // clock_gettime
    (229, 1, Count::OnZero(16)),        // clock_getres
    (230, 3, Count::OnInterrupted(16)), // clock_nanosleep's remaining time
    (232, 1, Count::ResultTimes(12)),   // epoll_wait
    (262, 2, Count::OnZero(144)),       // newfstatat
    (267, 2, Count::Result),            // readlinkat
    (281, 1, Count::ResultTimes(12)),   // epoll_pwait
    (441, 1, Count::ResultTimes(12)),   // epoll_pwait2
    (271, 0, Count::ArgTimes(1, 8)),    // ppoll
    (270, 1, Count::FdSet(0)),          // pselect6's read set
    (293, 0, Count::OnZero(8)),         // pipe2
    (302, 3, Count::OnZero(16)),        // prlimit64
    (309, 0, Count::OnZero(4)),         // getcpu
    (318, 0, Count::Result),            // getrandom
    (332, 4, Count::OnZero(256)),       // statx
];

/// What call `nr` writes into the caller's memory, if this table knows.
pub fn writes(nr: u64) -> Option<Writes> {
    TABLE
        .iter()
        .find(|(n, _, _)| *n == nr)
        .map(|&(_, arg, count)| Writes { arg, count })
}

impl Writes {
    /// The buffer's address and byte count as the return probe computes
    /// them (`rax` holds the result there).
    pub(crate) fn values(self) -> (Expr, Expr) {
        self.values_at(Expr::Reg(ARGUMENT_REGISTERS[self.arg]))
    }

    /// [`Writes::values`] with the buffer's address given (a vDSO
    /// function's return no longer has its arguments in registers).
    pub(crate) fn values_at(self, address: Expr) -> (Expr, Expr) {
        let result = || Expr::Reg(0);
        let count = match self.count {
            Count::Result => result(),
            // result + (len - result) * (len < result)
            Count::ResultWithin(k) => {
                let len = || Expr::Reg(ARGUMENT_REGISTERS[k]);
                Expr::bin(
                    BinOp::Add,
                    result(),
                    Expr::bin(
                        BinOp::Mul,
                        Expr::bin(BinOp::Sub, len(), result()),
                        Expr::bin(BinOp::Lt, len(), result()),
                    ),
                )
            }
            Count::ResultTimes(n) => Expr::bin(BinOp::Mul, result(), Expr::Const(n as i64)),
            Count::OnZero(n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Eq, result(), Expr::Const(0)),
                Expr::Const(n as i64),
            ),
            Count::OnPositive(n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Gt, result(), Expr::Const(0)),
                Expr::Const(n as i64),
            ),
            Count::OnInterrupted(n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Eq, result(), Expr::Const(-4)),
                Expr::Const(n as i64),
            ),
            Count::ArgTimes(k, n) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Ge, result(), Expr::Const(0)),
                Expr::bin(
                    BinOp::Mul,
                    Expr::Reg(ARGUMENT_REGISTERS[k]),
                    Expr::Const(n as i64),
                ),
            ),
            // ((nfds + 63) / 64) * 8, the low 32 bits of the register.
            Count::FdSet(k) => Expr::bin(
                BinOp::Mul,
                Expr::bin(BinOp::Ge, result(), Expr::Const(0)),
                Expr::bin(
                    BinOp::Mul,
                    Expr::bin(
                        BinOp::Div,
                        Expr::bin(
                            BinOp::Add,
                            Expr::Narrow(Box::new(Expr::Reg(ARGUMENT_REGISTERS[k])), 4, true),
                            Expr::Const(63),
                        ),
                        Expr::Const(64),
                    ),
                    Expr::Const(8),
                ),
            ),
        };
        (address, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_call_once_with_a_real_argument() {
        for (k, (nr, arg, _)) in TABLE.iter().enumerate() {
            assert!(*arg < 6, "{nr}");
            assert!(TABLE[k + 1..].iter().all(|(n, _, _)| n != nr), "{nr} twice");
        }
        assert_eq!(crate::name(0), "read");
        assert_eq!(writes(0).map(|w| w.arg), Some(1));
        assert_eq!(crate::name(262), "newfstatat");
        assert_eq!(writes(262).map(|w| w.arg), Some(2));
        assert_eq!(crate::name(332), "statx");
        assert_eq!(writes(1), None, "write reads the caller's memory");
    }
}
