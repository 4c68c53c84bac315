//! Which processes make up a workload, and the moments weft must act on a
//! new one: a process created by one of the workload (fork, vfork, clone
//! without `CLONE_THREAD`) and an image replaced (exec).
//!
//! A BPF program (`src/bpf/follow.bpf.c`) at the scheduler's
//! `sched_process_fork`, `sched_process_exec` and `sched_process_exit`
//! tracepoints keeps the set of the workload's processes in a map. It
//! sends a new child with memory of its own, and a process that has just
//! replaced its image, `SIGSTOP`, which the process takes before it runs
//! its first instruction; weft then changes it (ptrace, in an episode like
//! any other) and lets it go on with `weft_process::resume_stopped`. No process of
//! the workload is traced between these moments: signals and traps never
//! round-trip through weft, as `docs/workloads.md` explains.
//!
//! A child that shares its parent's memory (vfork, `posix_spawn`, clone
//! with `CLONE_VM`) is not stopped: it joins the workload, and its exec is
//! caught like any other.
//!
//! Loading the program needs BPF privileges (CAP_BPF and CAP_PERFMON, or
//! root) and a kernel with BTF and the `bpf_send_signal_task` kfunc
//! (Linux 6.13); without them [`Follower::load`] says why.

use libbpf_rs::{MapCore, MapFlags};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::{AsFd, AsRawFd};
use std::rc::Rc;
use std::time::Duration;

#[cfg(test)]
mod tests;
mod wake;
mod watchdog;

pub use wake::Wake;

/// The BPF object compiled by `build.rs`.
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/follow.bpf.o"));

const KIND_FORK: u32 = 1;
const KIND_EXEC: u32 = 2;
const KIND_EXIT: u32 = 3;
const SHARES_MEMORY: u32 = 1;
const NOT_STOPPED: u32 = 2;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused the program or its maps (no privilege, no BTF,
    /// a kernel without `bpf_send_signal_task`).
    #[error("following a workload needs BPF ({step}: {reason})")]
    Unavailable {
        /// What was being done.
        step: &'static str,
        /// The kernel's or libbpf's answer.
        reason: String,
    },
    /// Adding a process to the workload, or reading the events, failed.
    #[error("{what}: {reason}")]
    Map {
        /// What was being done.
        what: &'static str,
        /// libbpf's answer.
        reason: String,
    },
}

/// A result of this crate.
pub type Result<T> = std::result::Result<T, Error>;

fn unavailable(step: &'static str) -> impl Fn(libbpf_rs::Error) -> Error {
    move |e| Error::Unavailable {
        step,
        reason: e.to_string(),
    }
}

/// Something that happened to the workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// `parent` created the process `child`, which joined the workload.
    Forked {
        /// The creating process (its tgid).
        parent: i32,
        /// The thread that forked: the child's one thread is its copy.
        thread: i32,
        /// The new process.
        child: i32,
        /// The child shares its parent's memory (vfork, `CLONE_VM`): it
        /// was not stopped.
        shares_memory: bool,
        /// Whether it is stopped (or about to stop) for weft, which must
        /// then [`Follower::resume`] it.
        stopped: bool,
    },
    /// `pid` replaced its image; if `stopped`, it waits for weft before
    /// the new image's first instruction.
    Execed {
        /// The process (its tgid, which exec keeps).
        pid: i32,
        /// Whether it is stopped for weft.
        stopped: bool,
    },
    /// The process `pid` (its main thread) exited; it left the workload.
    Exited {
        /// The process.
        pid: i32,
    },
}

impl Event {
    /// Decodes one record of the program's ring (`struct event`: kind,
    /// pid, parent, flags, thread, padding, u32 each).
    fn parse(bytes: &[u8]) -> Option<Event> {
        let word = |i: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(
                bytes.get(i * 4..i * 4 + 4)?.try_into().ok()?,
            ))
        };
        let (kind, pid, parent, flags) = (word(0)?, word(1)? as i32, word(2)? as i32, word(3)?);
        match kind {
            KIND_FORK => Some(Event::Forked {
                parent,
                thread: word(4)? as i32,
                child: pid,
                shares_memory: flags & SHARES_MEMORY != 0,
                stopped: flags & (SHARES_MEMORY | NOT_STOPPED) == 0,
            }),
            KIND_EXEC => Some(Event::Execed {
                pid,
                stopped: flags & NOT_STOPPED == 0,
            }),
            KIND_EXIT => Some(Event::Exited { pid }),
            _ => None,
        }
    }
}

/// The loaded, attached follower. Dropping it detaches the programs: the
/// workload is no longer followed (processes already stopped for weft
/// must have been resumed).
pub struct Follower {
    ring: libbpf_rs::RingBuffer<'static>,
    /// Bumps a word at each new event (see [`Follower::news`]), started at
    /// the first call.
    wake: std::cell::OnceCell<Option<Wake>>,
    /// Resumes the processes stopped for weft if weft dies; told to go
    /// quietly when the follower is dropped.
    _watchdog: watchdog::Watchdog,
    queue: Rc<RefCell<VecDeque<Event>>>,
    links: Vec<libbpf_rs::Link>,
    object: libbpf_rs::Object,
}

impl Drop for Follower {
    /// Detaches the programs, then lets go every process still stopped
    /// for weft (weft ends with an error, or a program run raced the
    /// detach), before the watchdog is told to go quietly.
    fn drop(&mut self) {
        self.links.clear();
        if let Some(held) = self.object.maps().find(|m| m.name() == "held") {
            for key in held.keys() {
                if let Some(pid) = key.get(..4).and_then(|k| k.try_into().ok()) {
                    // SAFETY: kill has no memory arguments; a process gone
                    // meanwhile makes it fail with ESRCH.
                    unsafe { libc::kill(i32::from_ne_bytes(pid), libc::SIGCONT) };
                }
            }
        }
    }
}

impl std::fmt::Debug for Follower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Follower")
            .field("queued", &self.queue.borrow().len())
            .finish()
    }
}

impl Follower {
    /// Loads and attaches the programs; no process is followed yet.
    pub fn load() -> Result<Follower> {
        libbpf_rs::set_print(None);
        let open = libbpf_rs::ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(unavailable("opening the BPF object"))?;
        let object = open
            .load()
            .map_err(unavailable("loading the BPF programs"))?;
        let mut links = Vec::new();
        for prog in object.progs_mut() {
            links.push(prog.attach().map_err(unavailable("attaching a program"))?);
        }
        let queue: Rc<RefCell<VecDeque<Event>>> = Rc::default();
        let sink = Rc::clone(&queue);
        let events = object
            .maps()
            .find(|m| m.name() == "events")
            .ok_or_else(|| Error::Unavailable {
                step: "finding the event ring",
                reason: "the BPF object has no map `events`".into(),
            })?;
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&events, move |bytes| {
                if let Some(e) = Event::parse(bytes) {
                    sink.borrow_mut().push_back(e);
                }
                0
            })
            .map_err(unavailable("reading the event ring"))?;
        let ring = builder
            .build()
            .map_err(unavailable("reading the event ring"))?;
        let held = object
            .maps()
            .find(|m| m.name() == "held")
            .ok_or_else(|| Error::Unavailable {
                step: "finding the map of stopped processes",
                reason: "the BPF object has no map `held`".into(),
            })?
            .as_fd()
            .as_raw_fd();
        let watchdog = watchdog::Watchdog::start(held).map_err(|e| Error::Map {
            what: "starting the watchdog that resumes stopped processes if weft dies",
            reason: e.to_string(),
        })?;
        Ok(Follower {
            ring,
            wake: std::cell::OnceCell::new(),
            _watchdog: watchdog,
            queue,
            links,
            object,
        })
    }

    /// Adds process `pid` to the workload: its children and its execs are
    /// followed from now on.
    pub fn follow(&self, pid: i32) -> Result<()> {
        let map = self
            .object
            .maps()
            .find(|m| m.name() == "followed")
            .ok_or_else(|| Error::Map {
                what: "finding the workload's map",
                reason: "the BPF object has no map `followed`".into(),
            })?;
        map.update(
            &(pid as u32).to_ne_bytes(),
            &1u32.to_ne_bytes(),
            MapFlags::ANY,
        )
        .map_err(|e| Error::Map {
            what: "adding a process to the workload",
            reason: e.to_string(),
        })
    }

    /// Notes that weft has resumed process `pid`, which the program
    /// stopped (see `weft_process::resume_stopped`): the watchdog no
    /// longer needs to.
    pub fn released(&self, pid: i32) {
        if let Some(map) = self.object.maps().find(|m| m.name() == "held") {
            let _ = map.delete(&(pid as u32).to_ne_bytes());
        }
    }

    /// The processes of the workload that have not exited (the map the
    /// program keeps, which drops a process when its main thread exits).
    pub fn processes(&self) -> Vec<i32> {
        let Some(map) = self.object.maps().find(|m| m.name() == "followed") else {
            return vec![];
        };
        map.keys()
            .filter_map(|k| Some(i32::from_ne_bytes(k.get(..4)?.try_into().ok()?)))
            .collect()
    }

    /// Stops following: the programs are detached, so no process is
    /// stopped for weft any more. The events already sent, among them
    /// processes stopped for weft, can still be read with
    /// [`next`](Self::next).
    pub fn stop(&mut self) {
        self.links.clear();
    }

    /// A word of weft's (a private futex) bumped whenever the kernel
    /// signals new events: wait on it, with other words, to wake for them
    /// (see `wake.rs`). Read its value before [`next`](Self::next) finds
    /// nothing, then wait for it to change.
    ///
    /// The thread starts at the first call, which must come after weft has
    /// started its program: a thread makes the C library handle SIGSETXID,
    /// and the program must start with the signal dispositions weft had.
    /// `None` if it cannot start (weft then looks at the events when its
    /// waits time out).
    pub fn news(&self) -> Option<&std::sync::atomic::AtomicU32> {
        self.wake
            .get_or_init(|| {
                let events = self.object.maps().find(|m| m.name() == "events")?;
                Wake::start(events.as_fd()).ok()
            })
            .as_ref()
            .map(Wake::word)
    }

    /// The next event, waiting up to `timeout` for one.
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Event>> {
        if let Some(e) = self.queue.borrow_mut().pop_front() {
            return Ok(Some(e));
        }
        self.ring.poll(timeout).map_err(|e| Error::Map {
            what: "reading the workload's events",
            reason: e.to_string(),
        })?;
        Ok(self.queue.borrow_mut().pop_front())
    }
}
