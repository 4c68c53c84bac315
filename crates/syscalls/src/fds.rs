//! The resources a workload's calls operate on (files, pipes, sockets), as
//! a simulation of each process's descriptor table and of the open file
//! descriptions behind it works them out from the recorded calls alone:
//! `openat` makes a description of the path it opened, `pipe2` and
//! `socketpair` one per end of a new pipe or socket pair, `dup`, `fcntl`'s
//! `F_DUPFD` and `fork` share one, `close`, `close_range` and an `execve`
//! of a close-on-exec descriptor let go of it. Each call that uses a
//! descriptor or names a path becomes an [`Op`] on its resource: a read or
//! a write of it, through which description, moving that description's
//! offset or not.
//!
//! What the record cannot prove: the identity of two paths that name one
//! inode (links, symlinks, bind mounts: paths are resolved as text, `..`
//! lexically), what the workload's first process inherited (its
//! descriptors 0 to 2 are three resources of their own, `stdin`,
//! `stdout`, `stderr`, even when they are one terminal), the directory it
//! started in (relative paths stay relative to it: `./name`), and which
//! accepted socket a `connect` reached (each socket is a resource of its
//! own; a socket pair is one).

use crate::Call;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// A kind of resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A file or directory, by its path.
    File,
    /// A pipe, by the call that made it.
    Pipe,
    /// A socket (or a socket pair), by the call that made it.
    Socket,
    /// A descriptor the workload had when the record began.
    Inherited,
    /// A process's table of descriptors (`descriptors of PID`): the
    /// kernel gives a new descriptor the lowest free number, so calls of
    /// a process's threads that take a number or free one keep their
    /// order ([`takes_or_frees`]), or a rerun's `openat` gets another
    /// number than recorded.
    Descriptors,
}

/// Whether `call`, which returned `result`, took a descriptor number
/// (its result, or the number `dup2` and `dup3` name) or freed one:
/// `open`, `creat`, `openat`, `openat2`, `dup`, `dup2`, `dup3`, `fcntl`'s
/// `F_DUPFD` and `F_DUPFD_CLOEXEC`, `pipe`, `pipe2`, `socket`,
/// `socketpair`, `accept`, `accept4`, `epoll_create`, `epoll_create1`,
/// `eventfd`, `eventfd2`, `signalfd`, `signalfd4`, `timerfd_create`,
/// `inotify_init`, `inotify_init1`, `memfd_create`, `userfaultfd`,
/// `pidfd_open`, `pidfd_getfd`, `close`, `close_range`. (Descriptors
/// passed with `recvmsg` are not among them.)
fn takes_or_frees(call: &Call, result: i64) -> bool {
    const CALLS: [u64; 29] = [
        2, 85, 257, 437, 32, 33, 292, 22, 293, 41, 53, 43, 288, 213, 291, 284, 290, 282, 289, 283,
        253, 294, 319, 323, 434, 438, 3, 436, 72,
    ];
    const F_DUPFD: u64 = 0;
    const F_DUPFD_CLOEXEC: u64 = 1030;
    result >= 0
        && CALLS.contains(&call.nr)
        && (call.nr != 72 || matches!(call.args[1], F_DUPFD | F_DUPFD_CLOEXEC))
}

/// Something calls of different threads order themselves on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// What it is.
    pub kind: Kind,
    /// Its name: the path, `pipe:N`, `socket:N` (`N` counts from 1 in
    /// the order they were made), `stdout` or `fd:N of PID`.
    pub name: String,
}

/// How an operation uses its resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads it and changes nothing (`stat`, `pread64`, a file's `read`).
    Read,
    /// Changes it (`write`, `unlink`, `ftruncate`; on a pipe or a socket
    /// also `read`, which takes the data out, and `close`, which the
    /// other end sees).
    Write,
}

/// One call's use of one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Op {
    /// The call (its index in the calls given to [`resolve`]).
    pub call: usize,
    /// The resource (its index in [`Resources::resources`]).
    pub resource: usize,
    /// Read or write.
    pub access: Access,
    /// The open file description it went through, if any (by number).
    pub description: Option<usize>,
    /// It used or moved that description's offset (`read`, `write`,
    /// `lseek`, `getdents64`; not `pread64`).
    pub offset: bool,
    /// It would not wait: its description was non-blocking then
    /// (`O_NONBLOCK`, `SOCK_NONBLOCK`, `fcntl`'s `F_SETFL`, `FIONBIO`), or
    /// the call said `MSG_DONTWAIT`. A blocking read of a pipe or a socket
    /// waits for its bytes by itself.
    pub nonblocking: bool,
}

/// The resources of a workload and its calls' operations on them.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// Every resource, in the order first used.
    pub resources: Vec<Resource>,
    /// Every operation, in the calls' order.
    pub ops: Vec<Op>,
    /// The process each call belongs to, by call.
    pub process: Vec<i32>,
    /// Calls that use a descriptor or a path whose resource the record
    /// does not say: a path not recorded (a call made through `syscall()`),
    /// a descriptor the simulation does not know.
    pub unresolved: Vec<usize>,
}

/// An open file description: what it is open on and how.
#[derive(Debug, Clone, Copy)]
struct Description {
    resource: usize,
    /// Its calls do not wait (`O_NONBLOCK`).
    nonblocking: bool,
}

/// One process's descriptor table: descriptor to (description,
/// close-on-exec).
type Table = BTreeMap<i32, (usize, bool)>;

const AT_FDCWD: i32 = -100;
const O_CREAT: u64 = 0o100;
const O_TRUNC: u64 = 0o1000;
const O_CLOEXEC: u64 = 0o2000000;
/// `O_NONBLOCK`, and `SOCK_NONBLOCK` (the same bit).
const O_NONBLOCK: u64 = 0o4000;
/// `MSG_DONTWAIT`.
const MSG_DONTWAIT: u64 = 0x40;
/// `ioctl`'s `FIONBIO`.
const FIONBIO: u64 = 0x5421;
/// `exit_group`: the process ends, its descriptors closed.
pub(crate) const EXIT_GROUP: u64 = 231;
const CLONE_THREAD: u64 = 0x10000;
const MAP_ANONYMOUS: u64 = 0x20;
const EBADF: i64 = -9;
const EINPROGRESS: i64 = -115;

/// Works out the resources of `calls` (in the order they were made, as
/// [`crate::calls`] gives them). `known` says which process a thread
/// belongs to where the trace knows it; a thread it does not know is the
/// process its creating call made (a thread of its creator's for a
/// `clone` with `CLONE_THREAD`), or a process of its own.
pub fn resolve(calls: &[Call], known: &HashMap<i32, i32>) -> Resources {
    let mut sim = Simulation {
        out: Resources::default(),
        descriptions: Vec::new(),
        tables: HashMap::new(),
        cwd: HashMap::new(),
        names: HashMap::new(),
        made: (0, 0),
        bound: HashMap::new(),
        pending: HashMap::new(),
        passing: HashMap::new(),
        epolls: HashMap::new(),
    };
    let mut process_of: HashMap<i32, i32> = known.clone();
    for (k, call) in calls.iter().enumerate() {
        let pid = *process_of.entry(call.tid).or_insert(call.tid);
        sim.out.process.push(pid);
        if !sim.tables.contains_key(&pid) {
            sim.start(pid);
        }
        let Some(result) = call.exit.map(|e| e.result) else {
            // No return: only what it named before the kernel ran it.
            sim.paths(k, call, pid);
            if call.nr == EXIT_GROUP {
                sim.exit(k, pid);
            }
            // A write that never returned (its SIGPIPE ended it, or it
            // was blocked when the record ended) still went to its
            // descriptor's resource (`crate::deps`' broken pipes).
            if matches!(call.nr, 1 | 18 | 20 | 44 | 46) {
                sim.fd_op(k, call, pid, call.args[0] as i32, Access::Write, true);
            }
            // A read a signal's handler took the thread out of, or blocked
            // when the record ended: which resource it waited on (input
            // from outside the workload, `crate::reexec`'s left calls).
            if matches!(call.nr, 0 | 17 | 19 | 295 | 327 | 45 | 47 | 299) {
                sim.fd_op(k, call, pid, call.args[0] as i32, Access::Read, false);
            }
            continue;
        };
        if matches!(call.nr, 56 | 57 | 58 | 435) && result > 0 {
            let child = result as i32;
            let thread = call.nr == 56 && call.args[0] & CLONE_THREAD != 0
                || known.get(&child) == Some(&pid);
            let child_pid = if thread { pid } else { child };
            process_of.entry(child).or_insert(child_pid);
            if !thread && !sim.tables.contains_key(&child) {
                let table = sim.tables[&pid].clone();
                let cwd = sim.cwd.get(&pid).cloned().unwrap_or_else(|| ".".into());
                sim.tables.insert(child, table);
                sim.cwd.insert(child, cwd);
                sim.fork_epolls(pid, child);
            }
        }
        sim.call(k, call, pid, result);
        if takes_or_frees(call, result) {
            let table = sim.resource(Kind::Descriptors, format!("descriptors of {pid}"));
            sim.op(k, table, Access::Write, None);
        }
    }
    sim.out
}

/// The simulation's state.
struct Simulation {
    out: Resources,
    descriptions: Vec<Description>,
    tables: HashMap<i32, Table>,
    /// Each process's working directory (`.`: where the workload began).
    cwd: HashMap<i32, String>,
    /// Resources by name.
    names: HashMap<(Kind, String), usize>,
    /// Pipes and sockets made so far.
    made: (u32, u32),
    /// The address each socket resource was bound to (see [`address`]).
    bound: HashMap<usize, String>,
    /// Per address, connections one side made that the other has not
    /// taken yet: (accepted, waiting for their `connect`; connected,
    /// waiting for their `accept`), oldest first.
    pending: HashMap<String, (VecDeque<usize>, VecDeque<usize>)>,
    /// Per socket, the descriptions passed with `SCM_RIGHTS` not yet
    /// received, with the end each went through ([`passing`]).
    passing: HashMap<usize, VecDeque<passing::Passed>>,
    /// Per process and epoll descriptor, the description each registered
    /// event data stands for ([`epoll`]).
    epolls: HashMap<(i32, i32), HashMap<u64, usize>>,
}

impl Simulation {
    /// A process the record did not see made: the workload's first, or
    /// one attached to. Its descriptors 0 to 2 are the workload's
    /// standard streams.
    fn start(&mut self, pid: i32) {
        let mut table = Table::new();
        for (fd, name) in ["stdin", "stdout", "stderr"].into_iter().enumerate() {
            let resource = self.resource(Kind::Inherited, name.to_string());
            table.insert(fd as i32, (self.describe(resource), false));
        }
        self.tables.insert(pid, table);
        self.cwd.insert(pid, ".".into());
    }

    /// Process `pid` ends with call `k` (`exit_group`): the kernel closes
    /// its descriptors, which the other end of a pipe or a socket sees (a
    /// writer's `EPIPE` once no reader is left).
    fn exit(&mut self, k: usize, pid: i32) {
        let Some(table) = self.tables.get_mut(&pid) else {
            return;
        };
        let held: Vec<usize> = std::mem::take(table)
            .into_values()
            .map(|(d, _)| d)
            .collect();
        for d in held {
            let r = self.descriptions[d].resource;
            if matches!(self.out.resources[r].kind, Kind::Pipe | Kind::Socket) {
                self.op(k, r, Access::Write, Some((d, false)));
            }
        }
    }

    /// The resource named so, made if new.
    fn resource(&mut self, kind: Kind, name: String) -> usize {
        let next = self.out.resources.len();
        *self.names.entry((kind, name.clone())).or_insert_with(|| {
            self.out.resources.push(Resource { kind, name });
            next
        })
    }

    /// A new open file description of `resource`.
    fn describe(&mut self, resource: usize) -> usize {
        self.descriptions.push(Description {
            resource,
            nonblocking: false,
        });
        self.descriptions.len() - 1
    }

    /// A new open file description of `resource`, non-blocking if
    /// `flags` (an `open` or `socket` flags argument) say so.
    fn describe_with(&mut self, resource: usize, flags: u64) -> usize {
        let d = self.describe(resource);
        self.descriptions[d].nonblocking = flags & O_NONBLOCK != 0;
        d
    }

    /// The description behind `fd` in `pid`'s table; one of a resource of
    /// its own for a descriptor the record never saw opened (attached).
    fn lookup(&mut self, pid: i32, fd: i32) -> Option<usize> {
        if fd < 0 {
            return None;
        }
        if let Some(&(d, _)) = self.tables.get(&pid).and_then(|t| t.get(&fd)) {
            return Some(d);
        }
        let resource = self.resource(Kind::Inherited, format!("fd:{fd} of {pid}"));
        let d = self.describe(resource);
        self.tables.entry(pid).or_default().insert(fd, (d, false));
        Some(d)
    }

    /// Records call `call`'s operation on `resource`, through description
    /// and offset `through`.
    fn op(&mut self, call: usize, resource: usize, access: Access, through: Option<(usize, bool)>) {
        self.out.ops.push(Op {
            call,
            resource,
            access,
            description: through.map(|t| t.0),
            offset: through.is_some_and(|t| t.1),
            nonblocking: through.is_some_and(|t| self.descriptions[t.0].nonblocking),
        });
    }

    /// Call `k`'s operation through descriptor `fd` in `pid`. On a pipe or
    /// a socket, a call of [`TAKES_DATA`] changes it, and no offset is
    /// involved.
    fn fd_op(&mut self, k: usize, call: &Call, pid: i32, fd: i32, access: Access, offset: bool) {
        let Some(d) = self.lookup(pid, fd) else {
            self.out.unresolved.push(k);
            return;
        };
        let resource = self.descriptions[d].resource;
        if matches!(self.out.resources[resource].kind, Kind::Pipe | Kind::Socket) {
            let access = match TAKES_DATA.contains(&call.nr) {
                true => Access::Write,
                false => access,
            };
            self.op(k, resource, access, Some((d, false)));
            // recvfrom, sendto (flags argument 3); recvmsg, sendmsg (2).
            let flags = match call.nr {
                44 | 45 => call.args[3],
                46 | 47 => call.args[2],
                _ => 0,
            };
            if flags & MSG_DONTWAIT != 0 {
                if let Some(op) = self.out.ops.last_mut() {
                    op.nonblocking = true;
                }
            }
        } else {
            self.op(k, resource, access, Some((d, offset)));
        }
    }

    /// The resource of a path argument, resolved against `dirfd` (or the
    /// working directory).
    fn path(&mut self, pid: i32, call: &Call, arg: usize, dirfd: Option<usize>) -> Option<String> {
        let text = call
            .buffers
            .iter()
            .find(|b| b.what == crate::Memory::Path && b.arg == arg)?;
        let text = String::from_utf8_lossy(&text.bytes).into_owned();
        let base = match dirfd.map(|a| call.args[a] as i32) {
            None | Some(AT_FDCWD) => self.cwd.get(&pid).cloned().unwrap_or_else(|| ".".into()),
            Some(fd) => {
                let d = self.lookup(pid, fd)?;
                self.out.resources[self.descriptions[d].resource]
                    .name
                    .clone()
            }
        };
        Some(join(&base, &text))
    }

    /// The operations of the paths `call` names.
    fn paths(&mut self, k: usize, call: &Call, pid: i32) {
        let Some(&(_, paths)) = PATH_OPS.iter().find(|(nr, _)| *nr == call.nr) else {
            return;
        };
        for &(arg, dirfd, access, in_directory) in paths {
            // An empty path with AT_EMPTY_PATH is the descriptor itself.
            let empty = call
                .buffers
                .iter()
                .any(|b| b.what == crate::Memory::Path && b.arg == arg && b.bytes.is_empty());
            if empty {
                if let Some(a) = dirfd {
                    self.fd_op(k, call, pid, call.args[a] as i32, access, false);
                    continue;
                }
            }
            let Some(path) = self.path(pid, call, arg, dirfd) else {
                self.out.unresolved.push(k);
                continue;
            };
            if in_directory {
                let parent = parent(&path);
                let r = self.resource(Kind::File, parent);
                self.op(k, r, Access::Write, None);
            }
            let r = self.resource(Kind::File, path);
            self.op(k, r, access, None);
        }
    }

    /// One returned call: its operations, then what it did to the table.
    fn call(&mut self, k: usize, call: &Call, pid: i32, result: i64) {
        let fd = |a: usize| call.args[a] as i32;
        if result == EBADF {
            return;
        }
        if let Some(&(_, access, offset)) = FD_OPS.iter().find(|(nr, _, _)| *nr == call.nr) {
            self.fd_op(k, call, pid, fd(0), access, offset);
        }
        self.paths(k, call, pid);
        match call.nr {
            // sendfile, splice, tee, copy_file_range: out, then in.
            40 => {
                self.fd_op(k, call, pid, fd(0), Access::Write, true);
                self.fd_op(k, call, pid, fd(1), Access::Read, true);
            }
            275 | 276 | 326 => {
                self.fd_op(k, call, pid, fd(2), Access::Write, true);
                self.fd_op(k, call, pid, fd(0), Access::Read, true);
            }
            // mmap of a file reads it.
            9 if call.args[3] & MAP_ANONYMOUS == 0 && (fd(4) >= 0) => {
                self.fd_op(k, call, pid, fd(4), Access::Read, false);
            }
            // poll, ppoll: each descriptor it found ready (`revents`).
            7 | 271 if result > 0 => {
                for fd in ready(call) {
                    self.fd_op(k, call, pid, fd, Access::Read, false);
                }
            }
            // select, pselect6: each descriptor of its read set.
            23 | 270 if result > 0 => {
                for fd in read::selected(call) {
                    self.fd_op(k, call, pid, fd, Access::Read, false);
                }
            }
            // epoll_ctl; epoll_wait, epoll_pwait, epoll_pwait2: each
            // description an event stands for.
            233 if result == 0 => self.epoll_ctl(pid, call),
            232 | 281 | 441 if result > 0 => self.epoll_ready(k, call, pid),
            _ => {}
        }
        // sendmsg, recvmsg: descriptors passed (`SCM_RIGHTS`).
        match call.nr {
            46 if result >= 0 => self.sent_rights(call, pid),
            47 if result >= 0 => self.received_rights(call, pid),
            _ => {}
        }
        // bind, listen, connect: operations on the address too (a
        // `connect` after the `listen` it needs); a connection joins the
        // client's socket with the socket the server accepts.
        if matches!(call.nr, 42 | 49 | 50)
            && (result == 0 || call.nr == 42 && result == EINPROGRESS)
        {
            self.socket_address(k, call, pid);
        }
        if result < 0 {
            // A failed open still looked the path up.
            let named = match call.nr {
                2 | 85 => self.path(pid, call, 0, None),
                257 | 437 => self.path(pid, call, 1, Some(0)),
                _ => return,
            };
            if let Some(path) = named {
                let r = self.resource(Kind::File, path);
                self.op(k, r, Access::Read, None);
            }
            return;
        }
        let new_fd = result as i32;
        match call.nr {
            // open, creat, openat, openat2
            2 | 85 | 257 | 437 => {
                let (arg, dirfd, flags) = match call.nr {
                    2 => (0, None, call.args[1]),
                    85 => (0, None, O_CREAT | O_TRUNC),
                    257 => (1, Some(0), call.args[2]),
                    _ => (1, Some(0), 0),
                };
                let Some(path) = self.path(pid, call, arg, dirfd) else {
                    self.out.unresolved.push(k);
                    return;
                };
                let r = self.resource(Kind::File, path.clone());
                let d = self.describe_with(r, flags);
                if flags & O_CREAT != 0 {
                    let dir = self.resource(Kind::File, parent(&path));
                    self.op(k, dir, Access::Write, None);
                }
                let access = match flags & (O_CREAT | O_TRUNC) {
                    0 => Access::Read,
                    _ => Access::Write,
                };
                self.op(k, r, access, Some((d, false)));
                self.install(pid, new_fd, d, flags & O_CLOEXEC != 0);
            }
            // pipe, pipe2, socketpair: the two descriptors the kernel wrote.
            22 | 293 | 53 => {
                let Some(fds) = call
                    .buffers
                    .iter()
                    .find(|b| b.what == crate::Memory::Filled && b.bytes.len() == 8)
                else {
                    self.out.unresolved.push(k);
                    return;
                };
                let pair = [0, 4]
                    .map(|i| i32::from_le_bytes(fds.bytes[i..i + 4].try_into().expect("4 bytes")));
                let (kind, flags) = match call.nr {
                    53 => (Kind::Socket, call.args[1]),
                    22 => (Kind::Pipe, 0),
                    _ => (Kind::Pipe, call.args[1]),
                };
                let name = self.made_name(kind);
                let r = self.resource(kind, name);
                for fd in pair {
                    let d = self.describe_with(r, flags);
                    self.install(pid, fd, d, flags & O_CLOEXEC != 0);
                }
            }
            // socket; accept and accept4 (a new connection, an operation
            // on the listening socket too)
            41 | 43 | 288 => {
                let r = match call.nr {
                    41 => {
                        let name = self.made_name(Kind::Socket);
                        self.resource(Kind::Socket, name)
                    }
                    _ => self.accepted(pid, fd(0)),
                };
                let flags = match call.nr {
                    41 => call.args[1],
                    288 => call.args[3],
                    _ => 0,
                };
                let d = self.describe_with(r, flags);
                if call.nr != 41 {
                    self.fd_op(k, call, pid, fd(0), Access::Write, false);
                }
                self.install(pid, new_fd, d, flags & O_CLOEXEC != 0);
            }
            // dup, dup2, dup3
            32 | 33 | 292 => {
                if let Some(d) = self.lookup(pid, fd(0)) {
                    let cloexec = call.nr == 292 && call.args[2] & O_CLOEXEC != 0;
                    self.install(pid, new_fd, d, cloexec);
                }
            }
            // fcntl: F_DUPFD, F_DUPFD_CLOEXEC, F_SETFD
            72 => match call.args[1] {
                0 | 1030 => {
                    if let Some(d) = self.lookup(pid, fd(0)) {
                        self.install(pid, new_fd, d, call.args[1] == 1030);
                    }
                }
                2 => {
                    if let Some(entry) = self.tables.get_mut(&pid).and_then(|t| t.get_mut(&fd(0))) {
                        entry.1 = call.args[2] & 1 != 0;
                    }
                }
                // F_SETFL: the description's O_NONBLOCK.
                4 => {
                    if let Some(d) = self.lookup(pid, fd(0)) {
                        self.descriptions[d].nonblocking = call.args[2] & O_NONBLOCK != 0;
                    }
                }
                _ => {}
            },
            // ioctl(FIONBIO, &int): the int the kernel read.
            16 if call.args[1] == FIONBIO => {
                let on = call
                    .buffers
                    .iter()
                    .find(|b| b.what == crate::Memory::Sent && b.arg == 2)
                    .and_then(|b| Some(i32::from_le_bytes(b.bytes.get(..4)?.try_into().ok()?)));
                if let (Some(on), Some(d)) = (on, self.lookup(pid, fd(0))) {
                    self.descriptions[d].nonblocking = on != 0;
                }
            }
            // close: the other end of a pipe or socket sees it.
            3 => {
                if let Some((d, _)) = self.tables.get_mut(&pid).and_then(|t| t.remove(&fd(0))) {
                    let r = self.descriptions[d].resource;
                    if matches!(self.out.resources[r].kind, Kind::Pipe | Kind::Socket) {
                        self.op(k, r, Access::Write, Some((d, false)));
                    }
                }
            }
            // close_range(first, last, flags): CLOSE_RANGE_CLOEXEC marks.
            436 => {
                let (first, last) = (call.args[0] as u32, call.args[1] as u32);
                if let Some(t) = self.tables.get_mut(&pid) {
                    let inside = |fd: &i32| (first..=last).contains(&(*fd as u32));
                    if call.args[2] & 4 != 0 {
                        t.iter_mut()
                            .filter(|(fd, _)| inside(fd))
                            .for_each(|(_, e)| e.1 = true);
                    } else {
                        t.retain(|fd, _| !inside(fd));
                    }
                }
            }
            // chdir, fchdir
            80 => {
                if let Some(path) = self.path(pid, call, 0, None) {
                    self.cwd.insert(pid, path);
                }
            }
            81 => {
                if let Some(d) = self.lookup(pid, fd(0)) {
                    let name = self.out.resources[self.descriptions[d].resource]
                        .name
                        .clone();
                    self.cwd.insert(pid, name);
                }
            }
            // execve, execveat: close-on-exec descriptors go.
            59 | 322 => {
                if let Some(t) = self.tables.get_mut(&pid) {
                    t.retain(|_, e| !e.1);
                }
            }
            _ => {}
        }
    }

    /// The address call `k` binds, listens on or connects to, and its
    /// operation there; a `connect` makes the connection resource its
    /// socket now stands for, shared with the `accept` that takes it.
    fn socket_address(&mut self, k: usize, call: &Call, pid: i32) {
        let fd = call.args[0] as i32;
        let Some(d) = self.lookup(pid, fd) else {
            return;
        };
        let socket = self.descriptions[d].resource;
        let named = match call.nr {
            50 => self.bound.get(&socket).cloned(),
            _ => call
                .buffers
                .iter()
                .find(|b| b.what == crate::Memory::Sent && b.arg == 1)
                .and_then(|b| {
                    let cwd = self.cwd.get(&pid).map_or(".", String::as_str);
                    address(&b.bytes, cwd)
                }),
        };
        let Some(named) = named else { return };
        let at = self.resource(Kind::Socket, format!("address {named}"));
        self.op(k, at, Access::Write, None);
        match call.nr {
            49 => {
                self.bound.insert(socket, named);
            }
            42 => {
                let (accepted, _) = self.pending.entry(named.clone()).or_default();
                let connection = match accepted.pop_front() {
                    Some(r) => r,
                    None => {
                        let r = self.connection(&named);
                        self.pending.entry(named).or_default().1.push_back(r);
                        r
                    }
                };
                self.descriptions[d].resource = connection;
            }
            _ => {}
        }
    }

    /// The resource of a connection `accept` takes on listening socket
    /// `fd`: the one a `connect` to its address made, or a new one that
    /// the next such `connect` will join.
    fn accepted(&mut self, pid: i32, fd: i32) -> usize {
        let named = self
            .lookup(pid, fd)
            .and_then(|d| self.bound.get(&self.descriptions[d].resource).cloned());
        let Some(named) = named else {
            let name = self.made_name(Kind::Socket);
            return self.resource(Kind::Socket, name);
        };
        let (_, connected) = self.pending.entry(named.clone()).or_default();
        if let Some(r) = connected.pop_front() {
            return r;
        }
        let r = self.connection(&named);
        self.pending.entry(named).or_default().0.push_back(r);
        r
    }

    /// A new connection to `named`.
    fn connection(&mut self, named: &str) -> usize {
        self.made.1 += 1;
        let name = format!("socket:{} (to {named})", self.made.1);
        self.resource(Kind::Socket, name)
    }

    /// `fd` now stands for description `d` in `pid`'s table.
    fn install(&mut self, pid: i32, fd: i32, d: usize, cloexec: bool) {
        self.tables.entry(pid).or_default().insert(fd, (d, cloexec));
    }

    /// The next pipe's or socket's name.
    fn made_name(&mut self, kind: Kind) -> String {
        match kind {
            Kind::Pipe => {
                self.made.0 += 1;
                format!("pipe:{}", self.made.0)
            }
            _ => {
                self.made.1 += 1;
                format!("socket:{}", self.made.1)
            }
        }
    }
}

mod epoll;
mod passing;
mod read;
mod tables;

use read::{address, join, parent, ready};
use tables::{FD_OPS, PATH_OPS, TAKES_DATA};
