//! The only part of weft that touches a live process: ptrace, `/proc`, remote
//! system calls and thread control.
//!
//! Everything above this crate (images, code analysis, patch planning) works
//! on bytes and is testable without a process. This crate owns:
//!
//! * [`Tracee`]: a process whose threads weft has stopped ("the world is
//!   stopped"), created by [`Tracee::launch`] or [`Tracee::attach`]; it
//!   tracks threads created while it holds the process and detaches on drop.
//! * [`ProcessMemory`]: reading and writing target memory through
//!   `/proc/PID/mem`, with a local-buffer implementation for tests.
//! * Remote system calls ([`Tracee::remote_syscall`]) used to map patch
//!   memory next to a module and to install signal handlers.
//! * [`maps`]: `/proc/PID/maps` parsing, [`ExitWatch`]: a pidfd that tells
//!   when a process has gone; [`wait_stopped`] and [`resume_stopped`] for a
//!   process stopped by a signal (a new process of a followed workload).
//!
//! Design constraint: weft holds ptrace only while it changes the target
//! ("patching episodes"). Between episodes the target runs untraced, so
//! signals and traps it takes never round-trip through weft.
//!
//! ```no_run
//! use weft_process::{Tracee, ProcessMemory, RemoteAddr};
//! let tracee = Tracee::attach(1234)?;       // every thread stopped
//! let mut word = [0u8; 8];
//! tracee.memory().read(RemoteAddr(0x401000), &mut word)?;
//! drop(tracee);                             // every thread resumed
//! # Ok::<(), weft_process::Error>(())
//! ```

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("weft supports x86-64 Linux only");

mod addr;
mod auxv;
mod call_stub;
mod error;
pub mod failpoint;
mod launch;
pub mod maps;
mod memory;
mod remote;
mod sys;
mod tracee;
mod watch;

pub use addr::RemoteAddr;
pub use auxv::Auxv;
pub use call_stub::{CallArea, LEN as CALL_STUB_LEN};
pub use error::{Error, Result};
pub use launch::LaunchSpec;
pub use maps::MapEntry;
pub use memory::{LocalMemory, ProcMemory, ProcessMemory};
pub use sys::{DispatchConfig, Registers, RseqConfig};
pub use tracee::{child_has_exited, killed_by, wait_child_exit, StopReason, Tracee};
pub use watch::ExitWatch;

/// Path of `/proc/PID/...` for a process.
pub fn proc_path(pid: i32, what: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(format!("/proc/{pid}/{what}"))
}

/// The executable of a process as the kernel sees it (`/proc/PID/exe`).
pub fn exe_path(pid: i32) -> Result<std::path::PathBuf> {
    std::fs::read_link(proc_path(pid, "exe")).map_err(|e| {
        if error::errno(&e) == Some(nix::errno::Errno::ENOENT) && is_alive(pid) {
            Error::NoExecutable(pid)
        } else {
            Error::from_proc_io(pid, e)
        }
    })
}

/// Whether the process runs a 64-bit program: the class byte of its
/// executable's ELF header (`/proc/PID/exe`). `None` if it cannot be read
/// or is no ELF file.
pub fn runs_64_bit(pid: i32) -> Option<bool> {
    use std::io::Read;
    let mut head = [0u8; 5];
    std::fs::File::open(proc_path(pid, "exe"))
        .and_then(|mut f| f.read_exact(&mut head))
        .ok()?;
    match (&head[..4] == b"\x7fELF", head[4]) {
        (true, 1) => Some(false),
        (true, 2) => Some(true),
        _ => None,
    }
}

/// The process's command name (`/proc/PID/comm`, the program's file name cut
/// to 15 bytes); readable while the process is a zombie too. It changes
/// when the process runs exec.
pub fn command_name(pid: i32) -> Result<String> {
    std::fs::read_to_string(proc_path(pid, "comm"))
        .map(|s| s.trim_end().to_string())
        .map_err(|e| Error::from_proc_io(pid, e))
}

/// A path inside the process's own root (`/proc/PID/root/PATH`), so that a
/// file named in its maps is opened even from another mount namespace.
pub fn path_in_root(pid: i32, path: &std::path::Path) -> std::path::PathBuf {
    let mut p = proc_path(pid, "root");
    p.push(path.strip_prefix("/").unwrap_or(path));
    p
}

/// Thread ids of a process, from `/proc/PID/task`.
pub fn thread_ids(pid: i32) -> Result<Vec<i32>> {
    let dir = std::fs::read_dir(proc_path(pid, "task")).map_err(|e| Error::from_proc_io(pid, e))?;
    let mut tids: Vec<i32> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect();
    tids.sort_unstable();
    Ok(tids)
}

/// Whether thread `tid` of process `pid` still exists (and is not a zombie).
pub fn thread_is_alive(pid: i32, tid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next())
        })
        .is_some_and(|state| !matches!(state, 'Z' | 'X'))
}

/// Whether process `pid` maps a file with inode number `inode` (a shared
/// memory file it inherited, which an `exec` drops).
pub fn maps_inode(pid: i32, inode: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(proc_path(pid, "maps")) else {
        return false;
    };
    maps.lines().any(|l| {
        l.split_whitespace()
            .nth(4)
            .and_then(|i| i.parse::<u64>().ok())
            == Some(inode)
    })
}

/// Whether a process with this pid currently exists (and is not a zombie).
pub fn is_alive(pid: i32) -> bool {
    !matches!(state(pid), Some('Z') | Some('X') | None)
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T` when stopped by a
/// signal, `t` in a ptrace stop, `Z`...), `None` once it is gone.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    // The state follows the parenthesised command name, which may itself contain ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// Waits up to `limit` for process `pid` to be stopped by a signal (group
/// stop). `Ok(false)` when it did not stop in time;
/// [`Error::ProcessGone`] when it went away (or became a zombie).
pub fn wait_stopped(pid: i32, limit: std::time::Duration) -> Result<bool> {
    let deadline = std::time::Instant::now() + limit;
    let mut nap = std::time::Duration::from_micros(20);
    loop {
        match state(pid) {
            Some('T') => return Ok(true),
            // In a ptrace stop: another tool (strace -f, gdb) traces it
            // and holds its signals.
            Some('t') => return Err(Error::AlreadyTraced(pid)),
            None | Some('Z') | Some('X') => return Err(Error::ProcessGone(pid)),
            _ if std::time::Instant::now() >= deadline => return Ok(false),
            _ => {}
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(std::time::Duration::from_millis(1));
    }
}

/// Lets a process stopped by a signal run on (`SIGCONT`). It must have
/// taken its stop already ([`wait_stopped`]): a `SIGCONT` cancels a
/// `SIGSTOP` still pending, not one being delivered. A process that went
/// away meanwhile is not an error.
pub fn resume_stopped(pid: i32) -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    match kill(nix::unistd::Pid::from_raw(pid), Signal::SIGCONT) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(Error::Io {
            what: format!("resuming process {pid} (SIGCONT)"),
            source: e.into(),
        }),
    }
}

/// When a living process started: field 22 of `/proc/PID/stat`, in clock
/// ticks since boot. `None` once it is gone or a zombie. With the pid it
/// names one process for good: a pid reused later has another start.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(proc_path(pid, "stat")).ok()?;
    // Fields after the parenthesised command name, which may contain ')'.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // rest[0] is field 3 (the state); field 22 is rest[19].
    if matches!(rest.first(), Some(&"Z") | Some(&"X")) {
        return None;
    }
    rest.get(19)?.parse().ok()
}

/// The arguments process `pid`'s image was started with
/// (`/proc/PID/cmdline`, as `execve` gave them, read before the image
/// runs) and how many environment variables (`/proc/PID/environ`, if
/// readable): what
/// strace shows of an `execve` that succeeded. Arguments that are not
/// UTF-8 are read lossily.
pub fn exec_arguments(pid: i32) -> Option<(Vec<String>, Option<usize>)> {
    // Each string ends in a NUL: none is no string, one NUL an empty one.
    let split = |bytes: &[u8]| -> Vec<String> {
        match bytes.strip_suffix(&[0]) {
            None => Vec::new(),
            Some(strings) => strings
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect(),
        }
    };
    let argv = split(&std::fs::read(proc_path(pid, "cmdline")).ok()?);
    let vars = std::fs::read(proc_path(pid, "environ"))
        .ok()
        .map(|e| split(&e).len());
    Some((argv, vars))
}

/// What a process holds resident, in bytes (`/proc/PID/smaps_rollup`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resident {
    /// Its anonymous pages, those it shares with other processes (a
    /// forked child's it has not written since, its parent's) in full
    /// (`Anonymous`).
    pub anon: u64,
    /// The pages only it has written (`Private_Dirty`): a forked child's
    /// own memory, which its parent does not also hold.
    pub private: u64,
    /// Its pages of files, each as its share among the processes that map
    /// it (`Pss_File`).
    pub file: u64,
}

/// Process `pid`'s resident memory now; `None` for a process that is gone
/// or has no memory of its own left (a zombie).
pub fn resident(pid: i32) -> Option<Resident> {
    let rollup = std::fs::read_to_string(proc_path(pid, "smaps_rollup")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = rollup.lines().find(|l| l.starts_with(key))?;
        line[key.len()..]
            .trim()
            .strip_suffix("kB")?
            .trim()
            .parse::<u64>()
            .ok()
    };
    Some(Resident {
        anon: kib("Anonymous:")? * 1024,
        private: kib("Private_Dirty:")? * 1024,
        file: kib("Pss_File:")? * 1024,
    })
}

/// The value of environment variable `name` in process `pid` as it
/// started (`/proc/PID/environ`), `None` when it is not set there.
pub fn environ_var(pid: i32, name: &str) -> Option<String> {
    let environ = std::fs::read(proc_path(pid, "environ")).ok()?;
    environ.split(|&b| b == 0).find_map(|entry| {
        let entry = std::str::from_utf8(entry).ok()?;
        let (key, value) = entry.split_once('=')?;
        (key == name).then(|| value.to_string())
    })
}

/// The inode of a process's pid namespace (`/proc/PID/ns/pid`), which
/// says in which namespace its pids are to be read.
pub fn pid_namespace(pid: i32) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(proc_path(pid, "ns/pid"))
        .ok()
        .map(|m| m.ino())
}

/// Writes dirty pages out and empties the kernel's page cache, dentries
/// and inodes (`/proc/sys/vm/drop_caches`): where a cold-cache run
/// starts. Needs root.
pub fn drop_caches() -> std::io::Result<()> {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3")
}

/// Time the hypervisor stole from this machine's CPUs so far, in ns (the
/// `steal` column of `/proc/stat`, in clock ticks; 0 where it is not
/// accounted). A clock that reads the TSC counts it, where the kernel's
/// CPU clocks do not (docs/cpu-clock.md): tests comparing the two allow it.
pub fn stolen_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let ticks: u64 = stat
        .lines()
        .next()
        .and_then(|cpu| cpu.split_whitespace().nth(8))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    ticks * 1_000_000_000 / hz
}

/// Raises weft's soft limit of open files to its hard limit: following a
/// workload keeps a few descriptors per process (its region, a pidfd)
/// and a build may start hundreds. A program weft starts gets the limit
/// weft had ([`Tracee::launch`] puts it back).
pub fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if let (Some(current), true) = (limit.current, limit.current < limit.maximum) {
        tracee::ORIGINAL_OPEN_FILES.store(current, std::sync::atomic::Ordering::Relaxed);
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}

/// Whether weft itself runs in a pid namespace below the initial one (a
/// container): `NSpid` in `/proc/self/status` then lists more than one pid.
pub fn in_nested_pid_namespace() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let pids = status.lines().find_map(|l| l.strip_prefix("NSpid:"))?;
            Some(pids.split_whitespace().count() > 1)
        })
        .unwrap_or(false)
}

/// Whether process `pid` is in weft's own pid namespace (so that weft's
/// pid means weft to it).
pub fn same_pid_namespace(pid: i32) -> bool {
    let ns = |p: std::path::PathBuf| std::fs::read_link(p).ok();
    let theirs = ns(proc_path(pid, "ns/pid"));
    theirs.is_some() && theirs == ns("/proc/self/ns/pid".into())
}

/// Effective user and group ids of a process (from `/proc/PID/status`).
pub fn process_ids(pid: i32) -> Result<(u32, u32)> {
    let status = std::fs::read_to_string(proc_path(pid, "status"))
        .map_err(|e| Error::from_proc_io(pid, e))?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("Uid:"), field("Gid:")))
}

/// CPU time a thread has used, in nanoseconds (the first field of
/// `/proc/PID/task/TID/schedstat`), or `None` once it is gone.
pub fn thread_cpu_ns(pid: i32, tid: i32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The kernel's feature flags for the first CPU (`flags` in `/proc/cpuinfo`),
/// or an empty list where it cannot be read.
pub fn cpu_flags() -> Vec<String> {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("flags"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, flags)| flags.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Bytes this process may still take before the kernel must reclaim
/// more than page cache, or kill: the machine's `MemAvailable`
/// (`/proc/meminfo`), or less where a control group this process is in
/// limits it: the group's limit less its anonymous memory (page cache
/// the group holds is reclaimed for it), for its group and each group
/// above it, in cgroup v2 (`memory.max`, `anon` of `memory.stat`) or the
/// v1 memory hierarchy (`memory.limit_in_bytes`, `total_rss`). `None`
/// where `/proc/meminfo` cannot be read.
pub fn memory_available() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let mut available = kib * 1024;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in own.lines() {
        // `0::/PATH` (v2) or `N:memory:/PATH` (v1).
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (Some(controllers), Some(path)) = (controllers, path) else {
            continue;
        };
        let (root, limit, stat, anon) = match controllers {
            "" => ("/sys/fs/cgroup", "memory.max", "memory.stat", "anon"),
            c if c.split(',').any(|c| c == "memory") => (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.stat",
                "total_rss",
            ),
            _ => continue,
        };
        let root = std::path::Path::new(root);
        let mut group = root.join(path.trim_start_matches('/'));
        loop {
            let max = std::fs::read_to_string(group.join(limit))
                .ok()
                .and_then(|t| t.trim().parse::<u64>().ok());
            let used = std::fs::read_to_string(group.join(stat))
                .ok()
                .and_then(|t| {
                    t.lines()
                        .find_map(|l| l.strip_prefix(anon)?.strip_prefix(' '))?
                        .trim()
                        .parse::<u64>()
                        .ok()
                });
            if let (Some(max), Some(used)) = (max, used) {
                available = available.min(max.saturating_sub(used));
            }
            if group == root || !group.pop() {
                break;
            }
        }
    }
    Some(available)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 16 MiB written here more is 16 MiB more anonymous memory resident,
    /// and private. (Another test's child, forked meanwhile, shares this
    /// process's pages until it execs: tried a few times.)
    /// Never more than the machine has available.
    #[test]
    fn memory_available_is_within_the_machines() {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        let total: u64 = meminfo
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|t| t.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("MemTotal");
        let available = memory_available().expect("/proc/meminfo is readable");
        assert!(
            available > 0 && available <= total * 1024,
            "{available} of {total} KiB"
        );
    }

    #[test]
    fn resident_memory_grows_by_what_the_process_writes() {
        let me = std::process::id() as i32;
        let grew = (0..10).any(|_| {
            let before = resident(me).expect("weft's own memory");
            assert!(before.file > 0, "its code is file pages");
            let block = vec![1u8; 16 << 20];
            let after = resident(me).expect("weft's own memory");
            drop(std::hint::black_box(block));
            after.anon >= before.anon + (15 << 20) && after.private >= before.private + (15 << 20)
        });
        assert!(grew, "16 MiB written did not show");
        assert_eq!(resident(i32::MAX), None);
    }

    #[test]
    fn start_time_names_a_living_process() {
        let me = std::process::id() as i32;
        let start = start_time(me).expect("weft's own start time");
        assert_eq!(start_time(me), Some(start));
        // Ticks since boot: no later than the uptime.
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((start as f64) <= uptime * 100.0 + 1.0, "{start}");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id() as i32;
        child.wait().unwrap();
        assert_eq!(start_time(pid), None);
    }

    #[test]
    fn a_process_and_its_child_share_a_pid_namespace() {
        let me = std::process::id() as i32;
        let ns = pid_namespace(me).expect("weft's pid namespace");
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert_eq!(pid_namespace(child.id() as i32), Some(ns));
        // Ended by its pid; another test of this process that waits for any
        // child (a tracee's `waitpid(-1)`) may be the one that reaps it.
        let _ = child.kill();
        let _ = child.wait();
    }
}
