//! Which calls operate on what, for the descriptor simulation: the calls
//! that use the descriptor in their first argument (and how), those that
//! take data out of a pipe or a socket, and those that name paths.

use super::Access;

/// Calls that operate on the descriptor in their first argument: number,
/// access, and whether they use the description's offset.
pub(super) const FD_OPS: &[(u64, Access, bool)] = &[
    (0, Access::Read, true),     // read
    (1, Access::Write, true),    // write
    (5, Access::Read, false),    // fstat
    (8, Access::Read, true),     // lseek
    (16, Access::Read, false),   // ioctl
    (17, Access::Read, false),   // pread64
    (18, Access::Write, false),  // pwrite64
    (19, Access::Read, true),    // readv
    (20, Access::Write, true),   // writev
    (42, Access::Write, false),  // connect
    (44, Access::Write, false),  // sendto
    (45, Access::Read, false),   // recvfrom
    (46, Access::Write, false),  // sendmsg
    (47, Access::Read, false),   // recvmsg
    (48, Access::Write, false),  // shutdown
    (49, Access::Write, false),  // bind
    (50, Access::Write, false),  // listen
    (51, Access::Read, false),   // getsockname
    (52, Access::Read, false),   // getpeername
    (54, Access::Write, false),  // setsockopt
    (55, Access::Read, false),   // getsockopt
    (73, Access::Write, false),  // flock
    (74, Access::Write, false),  // fsync
    (75, Access::Write, false),  // fdatasync
    (77, Access::Write, false),  // ftruncate
    (78, Access::Read, true),    // getdents
    (81, Access::Read, false),   // fchdir
    (91, Access::Write, false),  // fchmod
    (93, Access::Write, false),  // fchown
    (138, Access::Read, false),  // fstatfs
    (190, Access::Write, false), // fsetxattr
    (193, Access::Read, false),  // fgetxattr
    (196, Access::Read, false),  // flistxattr
    (199, Access::Write, false), // fremovexattr
    (217, Access::Read, true),   // getdents64
    (221, Access::Read, false),  // fadvise64
    (285, Access::Write, false), // fallocate
    (295, Access::Read, false),  // preadv
    (296, Access::Write, false), // pwritev
    (327, Access::Read, false),  // preadv2
    (328, Access::Write, false), // pwritev2
];

/// Calls that take data out of a pipe or a socket they read (`read`,
/// `recvmsg`, `splice` from it, ...).
pub(super) const TAKES_DATA: &[u64] = &[0, 19, 40, 45, 47, 275, 276, 295, 326, 327];

/// A path argument: its argument, the argument holding its directory
/// descriptor, its access, and whether it makes or removes a name.
pub(super) type PathArg = (usize, Option<usize>, Access, bool);

/// Calls that name paths: number, then per path its argument, the
/// argument holding its directory descriptor (if any), its access, and
/// whether it also changes the directory that holds it (makes or removes
/// a name there).
pub(super) const PATH_OPS: &[(u64, &[PathArg])] = &[
    (4, &[(0, None, Access::Read, false)]),   // stat
    (6, &[(0, None, Access::Read, false)]),   // lstat
    (21, &[(0, None, Access::Read, false)]),  // access
    (59, &[(0, None, Access::Read, false)]),  // execve
    (76, &[(0, None, Access::Write, false)]), // truncate
    (80, &[(0, None, Access::Read, false)]),  // chdir
    (
        82,
        &[
            (0, None, Access::Write, true),
            (1, None, Access::Write, true),
        ],
    ), // rename
    (83, &[(0, None, Access::Write, true)]),  // mkdir
    (84, &[(0, None, Access::Write, true)]),  // rmdir
    (
        86,
        &[
            (0, None, Access::Write, false),
            (1, None, Access::Write, true),
        ],
    ), // link
    (88, &[(1, None, Access::Write, true)]),  // symlink
    (87, &[(0, None, Access::Write, true)]),  // unlink
    (89, &[(0, None, Access::Read, false)]),  // readlink
    (90, &[(0, None, Access::Write, false)]), // chmod
    (92, &[(0, None, Access::Write, false)]), // chown
    (94, &[(0, None, Access::Write, false)]), // lchown
    (133, &[(0, None, Access::Write, true)]), // mknod
    (137, &[(0, None, Access::Read, false)]), // statfs
    (258, &[(1, Some(0), Access::Write, true)]), // mkdirat
    (259, &[(1, Some(0), Access::Write, true)]), // mknodat
    (260, &[(1, Some(0), Access::Write, false)]), // fchownat
    (262, &[(1, Some(0), Access::Read, false)]), // newfstatat
    (263, &[(1, Some(0), Access::Write, true)]), // unlinkat
    (
        264,
        &[
            (1, Some(0), Access::Write, true),
            (3, Some(2), Access::Write, true),
        ],
    ), // renameat
    (
        265,
        &[
            (1, Some(0), Access::Write, false),
            (3, Some(2), Access::Write, true),
        ],
    ), // linkat
    (266, &[(2, Some(1), Access::Write, true)]), // symlinkat
    (267, &[(1, Some(0), Access::Read, false)]), // readlinkat
    (268, &[(1, Some(0), Access::Write, false)]), // fchmodat
    (269, &[(1, Some(0), Access::Read, false)]), // faccessat
    (280, &[(1, Some(0), Access::Write, false)]), // utimensat
    (
        316,
        &[
            (1, Some(0), Access::Write, true),
            (3, Some(2), Access::Write, true),
        ],
    ), // renameat2
    (322, &[(1, Some(0), Access::Read, false)]), // execveat
    (332, &[(1, Some(0), Access::Read, false)]), // statx
    (439, &[(1, Some(0), Access::Read, false)]), // faccessat2
];
