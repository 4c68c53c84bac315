//! When each traced thread ran, and where its witness stream was then:
//! BPF programs at `sched_switch` and at system call entry and exit
//! (`src/bpf/schedule.bpf.c`) write a record ([`weft_abi::schedule`]) for
//! every thread of the processes weft names ([`Recorder::trace`]), with
//! the buffer and offset its cursor had reached. `weft regen
//! --interleave` orders the pieces of every thread's stream between such
//! records by time.
//!
//! Loading needs BPF privileges (CAP_BPF and CAP_PERFMON, or root) and a
//! kernel with BTF; without them [`Recorder::load`] says why, and a trace
//! has no schedule.

use libbpf_rs::{MapCore, MapFlags};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

/// The BPF object compiled by `build.rs`.
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/schedule.bpf.o"));

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused the programs or their maps (no privilege, no
    /// BTF, BPF disabled).
    #[error("the schedule needs BPF ({step}: {reason})")]
    Unavailable {
        /// What was being done.
        step: &'static str,
        /// The kernel's or libbpf's answer.
        reason: String,
    },
    /// A map could not be read or changed.
    #[error("{what}: {reason}")]
    Map {
        /// What was being done.
        what: &'static str,
        /// The kernel's answer.
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

/// Where a process's witness buffers lie in its address space (see
/// `weft_paths::pool`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolAt {
    /// Buffer 0.
    pub first_buffer: u64,
    /// From one buffer to the next.
    pub stride: u64,
    /// Descriptor 0.
    pub descriptors: u64,
    /// Buffers handed to threads.
    pub buffers: u64,
}

impl PoolAt {
    fn to_bytes(self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, v) in [
            self.first_buffer,
            self.stride,
            self.descriptors,
            self.buffers,
        ]
        .into_iter()
        .enumerate()
        {
            b[8 * i..8 * i + 8].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }
}

/// The loaded, attached programs. Dropping it detaches them.
pub struct Recorder {
    ring: libbpf_rs::RingBuffer<'static>,
    taken: Rc<RefCell<Vec<u8>>>,
    _links: Vec<libbpf_rs::Link>,
    object: libbpf_rs::Object,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder")
            .field("taken", &self.taken.borrow().len())
            .finish()
    }
}

/// The programs loaded and attached, their records not read yet. It can
/// be made on another thread (loading takes the kernel some 10 ms of
/// verifying and BTF), then become a [`Recorder`].
pub struct Loaded {
    object: libbpf_rs::Object,
    links: Vec<libbpf_rs::Link>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("links", &self.links.len())
            .finish()
    }
}

impl Loaded {
    /// Loads and attaches the programs; no process is traced yet.
    pub fn load() -> Result<Loaded> {
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
        Ok(Loaded { object, links })
    }
}

impl Recorder {
    /// Loads and attaches the programs; no process is traced yet.
    pub fn load() -> Result<Recorder> {
        Recorder::reading(Loaded::load()?)
    }

    /// Starts reading the records of programs already loaded.
    pub fn reading(loaded: Loaded) -> Result<Recorder> {
        let Loaded { object, links } = loaded;
        let taken: Rc<RefCell<Vec<u8>>> = Rc::default();
        let sink = Rc::clone(&taken);
        let records = object
            .maps()
            .find(|m| m.name() == "records")
            .ok_or_else(|| Error::Unavailable {
                step: "finding the record ring",
                reason: "the BPF object has no map `records`".into(),
            })?;
        let mut builder = libbpf_rs::RingBufferBuilder::new();
        builder
            .add(&records, move |bytes| {
                sink.borrow_mut().extend_from_slice(bytes);
                0
            })
            .map_err(unavailable("reading the record ring"))?;
        let ring = builder
            .build()
            .map_err(unavailable("reading the record ring"))?;
        Ok(Recorder {
            ring,
            taken,
            _links: links,
            object,
        })
    }

    /// Records the threads of process `pid`, whose buffers lie at `pool`.
    pub fn trace(&self, pid: i32, pool: PoolAt) -> Result<()> {
        let map = self.map("traced")?;
        map.update(&(pid as u32).to_ne_bytes(), &pool.to_bytes(), MapFlags::ANY)
            .map_err(|e| Error::Map {
                what: "adding a process to the schedule",
                reason: e.to_string(),
            })
    }

    /// Stops recording process `pid` (it exited, or its image is gone).
    pub fn forget(&self, pid: i32) {
        if let Ok(map) = self.map("traced") {
            let _ = map.delete(&(pid as u32).to_ne_bytes());
        }
    }

    /// The records written since the last call, waiting up to `timeout`
    /// for the first; whole records of [`weft_abi::schedule::SIZE`] bytes.
    pub fn take(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        self.ring.poll(timeout).map_err(|e| Error::Map {
            what: "reading the schedule's records",
            reason: e.to_string(),
        })?;
        Ok(std::mem::take(&mut *self.taken.borrow_mut()))
    }

    /// Records the ring had no room for.
    pub fn dropped(&self) -> u64 {
        self.map("dropped")
            .ok()
            .and_then(|m| m.lookup(&0u32.to_ne_bytes(), MapFlags::ANY).ok().flatten())
            .and_then(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
            .unwrap_or(0)
    }

    fn map(&self, name: &'static str) -> Result<libbpf_rs::Map<'_>> {
        self.object
            .maps()
            .find(|m| m.name() == name)
            .ok_or_else(|| Error::Map {
                what: name,
                reason: "the BPF object has no such map".into(),
            })
    }
}

#[cfg(test)]
mod tests;
