//! What a call reads from the program's memory that its return records:
//! the paths it names (strings) and the bytes it hands the kernel
//! (`write`'s buffer, as many as it wrote; `connect`'s address, as long as
//! its length argument says).

/// The arguments (0 to 5) of call `nr` that are NUL-terminated paths.
pub fn path_arguments(nr: u64) -> &'static [usize] {
    match nr {
        2 | 4 | 6 | 21 | 59 | 76 | 80 | 83 | 84 | 85 | 87 | 89 | 90 | 92 | 94 | 133 | 137 | 161
        | 165 | 166 => &[0], // open stat lstat access execve truncate chdir mkdir rmdir creat unlink readlink chmod chown lchown mknod statfs chroot mount umount2
        82 | 86 | 88 => &[0, 1],                      // rename link symlink
        188 | 189 | 191 | 192 | 197 | 198 => &[0, 1], // setxattr lsetxattr getxattr lgetxattr removexattr lremovexattr (path, name)
        194 | 195 => &[0],                            // listxattr llistxattr
        190 | 193 | 199 => &[1],                      // fsetxattr fgetxattr fremovexattr (name)
        257 | 258 | 259 | 260 | 262 | 263 | 267 | 268 | 269 | 280 | 322 | 332 | 437 | 439 => &[1], // openat mkdirat mknodat fchownat newfstatat unlinkat readlinkat fchmodat faccessat utimensat execveat statx openat2 faccessat2
        264 | 316 => &[1, 3], // renameat renameat2
        265 => &[1, 3],       // linkat
        266 => &[0, 2],       // symlinkat
        _ => &[],
    }
}

/// How many bytes of a buffer the kernel read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// As many as the result says (`write`: what it wrote).
    Result,
    /// As many as this argument says (`connect`'s address length),
    /// unless the call failed with `EFAULT`.
    Arg(usize),
    /// This many when the call returned 0 (`rt_sigprocmask`'s set, which
    /// the kernel reads only once its size argument is right).
    OnZero(u64),
    /// This many when the call returned 0 and argument `.0` is not `.1`
    /// (`epoll_ctl`'s event, which `EPOLL_CTL_DEL` does not read: a
    /// program may pass any address there, even one that is not mapped).
    OnZeroUnless(usize, u64, u64),
}

/// The buffers whose bytes call `nr` hands the kernel: the argument
/// holding each and how many bytes (`write`, `pwrite64`, `sendto`'s data
/// and address, `connect` and `bind`'s address, `setsockopt`'s value,
/// `rt_sigprocmask`'s new set, `rt_sigaction`'s new action).
pub fn sent_arguments(nr: u64) -> &'static [(usize, Sent)] {
    match nr {
        1 | 18 => &[(1, Sent::Result)],
        44 => &[(1, Sent::Result), (4, Sent::Arg(5))],
        42 | 49 => &[(1, Sent::Arg(2))],
        54 => &[(3, Sent::Arg(4))],
        // rt_sigprocmask's new set: the kernel refuses any size but 8
        // before it reads it.
        14 => &[(1, Sent::OnZero(8))],
        // setitimer's new value.
        38 => &[(1, Sent::OnZero(32))],
        // epoll_ctl's event (12 bytes: events, then the data a wait
        // gives back), unless EPOLL_CTL_DEL, which ignores it.
        233 => &[(3, Sent::OnZeroUnless(1, 2, 12))],
        // utimensat's two times (none: now).
        280 => &[(2, Sent::OnZero(32))],
        // rt_sigaction's new action (handler, flags, restorer and an
        // 8-byte mask: the kernel refuses any other size before it reads
        // it).
        13 => &[(1, Sent::OnZero(32))],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name;

    #[test]
    fn paths_are_the_arguments_strace_shows_as_strings() {
        for (call, args) in [
            ("openat", &[1][..]),
            ("execve", &[0]),
            ("renameat2", &[1, 3]),
            ("newfstatat", &[1]),
            ("symlinkat", &[0, 2]),
            ("read", &[]),
        ] {
            let nr = (0..500).find(|&n| name(n) == call).expect(call);
            assert_eq!(path_arguments(nr), args, "{call}");
        }
        assert_eq!(name(1), "write");
        assert_eq!(sent_arguments(1), [(1, Sent::Result)]);
        assert_eq!(name(44), "sendto");
        assert_eq!(name(42), "connect");
        assert_eq!(sent_arguments(42), [(1, Sent::Arg(2))]);
        assert_eq!(name(54), "setsockopt");
        assert_eq!(sent_arguments(54), [(3, Sent::Arg(4))]);
    }
}
