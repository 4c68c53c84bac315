//! The watchdog: a small process that resumes the processes the follower
//! stopped for weft if weft dies before it resumes them (`kill -9`, a
//! crash). Without it, a process stopped for weft would stay stopped for
//! good, and with it the workload.
//!
//! weft forks it when the follower loads. It keeps two descriptors: the
//! read end of a pipe whose write end only weft holds, and the follower's
//! `held` map (the processes stopped and not yet resumed). It closes
//! every other one, so that it keeps neither the BPF programs attached
//! nor weft's output open, and leaves weft's session, so that a Ctrl-C on
//! the terminal does not reach it. It then blocks reading the pipe:
//!
//! * a byte: weft is done and has resumed everything; it exits;
//! * end of file: weft is gone (the kernel closed the write end, and the
//!   programs were detached with weft's descriptors); it sends `SIGCONT`
//!   to every process still in `held`, again a few times over a second
//!   (for a stop the program made as weft died), and exits.
//!
//! All unsafe code of the crate is here. The child of `fork` only makes
//! system calls (async-signal-safe), on memory prepared before the fork.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// The running watchdog, told to exit quietly when dropped.
#[derive(Debug)]
pub(crate) struct Watchdog {
    pid: i32,
    done: Option<OwnedFd>,
}

/// Where the child keeps its two descriptors.
const PIPE_FD: RawFd = 3;
const MAP_FD: RawFd = 4;

impl Watchdog {
    /// Forks the watchdog of the `held` map `map`.
    pub(crate) fn start(map: RawFd) -> std::io::Result<Watchdog> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned here.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child runs `watch`, which makes system calls only,
        // on values copied before the fork, and never returns.
        match unsafe { libc::fork() } {
            -1 => Err(std::io::Error::last_os_error()),
            0 => watch(read.as_raw_fd(), write.as_raw_fd(), map),
            pid => {
                drop(read);
                Ok(Watchdog {
                    pid,
                    done: Some(write),
                })
            }
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            // SAFETY: writes one byte from a live buffer to a descriptor we own.
            unsafe { libc::write(done.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        }
        // Reaped so that no zombie stays (bounded: it exits on the byte).
        let mut status = 0;
        // SAFETY: waits for our own child; status is a live int.
        unsafe { libc::waitpid(self.pid, &mut status, 0) };
    }
}

/// The child: keeps the pipe and the map, waits, resumes if weft died.
fn watch(read: RawFd, write: RawFd, map: RawFd) -> ! {
    // SAFETY: system calls only, on integers, static C strings and stack
    // buffers; `_exit` ends the child without running weft's code.
    unsafe {
        libc::close(write);
        // Above every descriptor the two targets might be, then onto them.
        let pipe = libc::fcntl(read, libc::F_DUPFD, 64);
        let held = libc::fcntl(map, libc::F_DUPFD, 64);
        if pipe < 0 || held < 0 {
            libc::_exit(1);
        }
        libc::dup2(pipe, PIPE_FD);
        libc::dup2(held, MAP_FD);
        let devnull = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        for fd in 0..3 {
            libc::dup2(devnull, fd);
        }
        libc::syscall(libc::SYS_close_range, MAP_FD + 1, u32::MAX, 0);
        // weft's signal handlers are weft's code: the watchdog takes the
        // default actions.
        for sig in 1..32 {
            libc::signal(sig, libc::SIG_DFL);
        }
        libc::setsid();
        libc::prctl(libc::PR_SET_NAME, c"weft-watchdog".as_ptr());
        let mut byte = 0u8;
        loop {
            match libc::read(PIPE_FD, (&mut byte as *mut u8).cast(), 1) {
                1 => libc::_exit(0),
                0 => break,
                _ if *libc::__errno_location() == libc::EINTR => continue,
                _ => libc::_exit(1),
            }
        }
        // A stop may still come after the first sweep: the kernel lets go
        // of the follower's program a little after weft's descriptors
        // close, and a signal the program sent is delivered a little
        // after it sent it. A process it stops meanwhile is in `held`
        // too: sweep again for about a second (1 run in 6 of the test
        // under load left one stopped with a single sweep).
        for ms in SWEEPS_AFTER_MS {
            let pause = libc::timespec {
                tv_sec: 0,
                tv_nsec: ms * 1_000_000,
            };
            libc::nanosleep(&pause, std::ptr::null_mut());
            resume_held(MAP_FD);
        }
        libc::_exit(0)
    }
}

/// The pauses (ms) before each of the watchdog's sweeps after weft died.
const SWEEPS_AFTER_MS: [libc::c_long; 6] = [0, 10, 40, 100, 250, 600];

/// Sends `SIGCONT` to every process in the `held` map (keys: u32 tgids).
///
/// # Safety
/// Only system calls; `map` is a BPF hash map of u32 keys.
unsafe fn resume_held(map: RawFd) {
    // `union bpf_attr` for BPF_MAP_GET_NEXT_KEY: map_fd (u32), padding,
    // key (u64 pointer, 0 for the first), next_key (u64 pointer), flags.
    #[repr(C)]
    struct NextKey {
        map_fd: u32,
        pad: u32,
        key: u64,
        next_key: u64,
        flags: u64,
    }
    const BPF_MAP_GET_NEXT_KEY: libc::c_long = 4;
    let mut key: u32 = 0;
    let mut next: u32 = 0;
    let mut first = true;
    // At most as many keys as the map holds, whatever happens meanwhile.
    for _ in 0..65536 {
        let mut attr = NextKey {
            map_fd: map as u32,
            pad: 0,
            key: if first { 0 } else { &key as *const u32 as u64 },
            next_key: &mut next as *mut u32 as u64,
            flags: 0,
        };
        // SAFETY: attr and the key buffers live across the call.
        let r = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_MAP_GET_NEXT_KEY,
                &mut attr as *mut NextKey,
                std::mem::size_of::<NextKey>() as u32,
            )
        };
        if r != 0 {
            return;
        }
        // SAFETY: kill has no memory arguments.
        unsafe { libc::kill(next as i32, libc::SIGCONT) };
        key = next;
        first = false;
    }
}
