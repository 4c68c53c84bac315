//! Sessions: the live applier. A session carries probe plans out in one
//! running process: it resolves their points, splices trampolines for
//! them, reads back what they measured and takes them out again.
//!
//! A *probe* is one request's action in one function ("count calls of
//! `work`"). A *site* is one spliced instruction point; an exit probe has a
//! site per `ret` or tail call. Probes that land on the same point share a
//! site whose trampoline runs all their snippets (KernInst's compound code
//! patch).
//!
//! Work is split so the target is stopped as briefly as possible, and the
//! files follow that split:
//!
//! | file | role | target |
//! |---|---|---|
//! | `prepare.rs` | resolve patterns, analyse code | running |
//! | `place.rs` | choose each point's splice (window, springboard, trap) | stopped |
//! | `apply.rs` | build trampolines, write the splices | stopped |
//! | `clusters.rs` | patch memory next to the modules, mini-trampolines | stopped |
//! | `traps.rs` | the in-process SIGTRAP handler and its table | stopped |
//! | `remove.rs` | taking probes out again (one `restore`) | stopped |
//! | `journal.rs` | every change to the program listed, for undoing a dead weft's | stopped |
//! | `leftovers.rs` | regions an earlier weft left behind, or a dead weft's, reclaimed | stopped |
//! | `stacks.rs` | the threads' stacks and their thread-id offset | stopped |
//! | `loads.rs` | libraries loaded later (the `_dl_debug_state` hook) | both |
//! | `rich.rs` | rich event sites (`WEFT_EVENT`) | stopped |
//! | `readout.rs` | resources of plans (`Allocate`), counters and timers read back | running |
//! | `rings.rs` | the ring consumer: draining and decoding events | running |
//! | `returns.rs` | exits at the return to the caller, past tail calls | stopped |
//! | `fork.rs` | a forked child's own region and session | stopped |

mod apply;
mod clusters;
mod cpu_clock;
mod dispatch;
mod feed;
mod fork;
mod journal;
mod leftovers;
mod loads;
mod place;
mod prepare;
mod readout;
mod rebuilt;
mod remove;
mod report;
mod returns;
pub(crate) mod rich;
mod rings;
mod settle;
mod stacks;
mod startup;
mod traps;
mod unwind;

pub(crate) use prepare::is_split_part;
pub use prepare::Prepared;
pub use report::{AddReport, Count, PointInfo, SkipReason, SkippedPoint, ThreadReading};
pub use rings::{decode_records, from_hex, to_hex, EventIds, EventRecord, RawRecords};
pub use settle::Settled;

use crate::module::Module;
use crate::shared::SharedMemory;
use crate::text::{Splice, TextBatch};
use crate::{Error, Result};
use clusters::Cluster;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use traps::TrapHandler;
use weft_code::{FunctionCode, RegSet};
use weft_image::FileAddr;
use weft_patch::region::{ring, threads, trap_table, Layout};
use weft_patch::{SpliceChoice, SpliceContext, SpliceMethod, SpliceRecord};
use weft_plan::{Action, EventInfo, PointKind, PointSpec};

use weft_process::{ProcessMemory, RemoteAddr, Tracee};

const COUNTERS: u64 = 1 << 16;
const TRAPS: u64 = 1 << 16;
const CODE_AREA: u64 = 256 << 20;
const MAX_CLUSTERS: u64 = 16;
/// Distance every byte of a cluster keeps from every byte of its modules.
const REACH: u64 = (1 << 31) - (32 << 20);

#[derive(Debug, Clone)]
struct Probe {
    module: usize,
    display: String,
    kind: PointKind,
    action: Action,
    /// The probe's own counter (for [`Action::Count`]).
    counter: Option<u64>,
    tag: u64,
    /// Still spliced (false once removed with its tag).
    live: bool,
    /// Why its point was passed over when it was applied, if it was.
    skipped: Option<SkipReason>,
    /// At a function's entry: follows its calls for return hook `h` (see
    /// `returns.rs`), instead of running an action; the point's other
    /// probes join its mini-trampoline.
    hook: Option<usize>,
    /// An exit probe whose function's calls are followed (return hook
    /// `h`): it runs in the function's guarded exits and exit routines.
    returns: Option<usize>,
}

/// Probes run before one instruction of a site.
#[derive(Debug, Clone)]
struct SitePoint {
    point: u64,
    probes: Vec<usize>,
    live: RegSet,
    /// Whether branches into a relocated function also run these probes.
    on_branch_in: bool,
    /// Added in the current `apply`, not yet written to the target.
    pending: bool,
}

#[derive(Debug, Clone)]
struct Site {
    module: usize,
    choice: SpliceChoice,
    /// The site's points in address order; the first is the one its splice was chosen for.
    points: Vec<SitePoint>,
    record: Option<SpliceRecord>,
    entry: u64,
    saves_state: bool,
    active: bool,
    /// The function, when its entry is also a loop head and the trampoline
    /// runs a relocated copy of it (so back-edges do not count as calls).
    whole_function: Option<FunctionCode>,
    /// Not a probe but one of weft's own hooks.
    hook: Option<Hook>,
    /// For a springboard splice: the `jmp rel32` written into the springboard.
    board: Option<SpliceRecord>,
}

/// weft's own code spliced into the program, beside the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hook {
    /// At ld.so's `_dl_debug_state`: libraries loaded later
    /// (`weft_patch::load_hook`).
    Loads,
    /// At the C library's `sigaction` while weft's SIGTRAP handler is
    /// installed (`weft_patch::sigaction_hook`), with the address of its
    /// `__restore_rt`.
    Sigaction { restore_rt: u64 },
    /// At a function that leaves frames without returning through them
    /// (`weft_patch::mini::returns::UnwindHook`).
    Unwind(weft_patch::mini::returns::UnwindHook),
    /// At libgcc's `_Unwind_Find_FDE`: finds the unwind entries of weft's
    /// code (`weft_patch::unwind`).
    FindFde,
}

/// The resources handed to probe plans so far, each the next free index.
#[derive(Debug, Default, Clone)]
struct Given {
    counters: u64,
    timers: u64,
    thread_counters: u64,
    /// The timer of user code between system calls, once given
    /// ([`weft_plan::Allocate::user_timer`]).
    user_timer: Option<u64>,
    /// Re-execution's feed state, once given
    /// ([`weft_plan::Allocate::feed`]).
    feed: Option<(u64, u64)>,
    /// The vDSO calls' buffer and stack pointer counters, once given
    /// ([`weft_plan::Allocate::call_buffer`]).
    call_buffer: Option<(u64, u64)>,
    /// The number and stack pointer counters of calls whose site does not
    /// say the number, once given ([`weft_plan::Allocate::call_number`]).
    call_number: Option<(u64, u64)>,
    /// Every event id given and its meaning, in the order given.
    events: Vec<(u32, EventInfo)>,
    /// Where event ids come from when sessions share them (a workload's
    /// trace); else they number from 0.
    shared_ids: Option<std::sync::Arc<EventIds>>,
}

/// weft's instrumentation of one process.
#[derive(Debug)]
pub struct Session {
    pid: i32,
    shm: SharedMemory,
    layout: Layout,
    modules: Vec<std::sync::Arc<Module>>,
    clusters: Vec<Cluster>,
    probes: Vec<Probe>,
    sites: Vec<Site>,
    site_at: BTreeMap<u64, usize>,
    /// The bytes each live site claims, by start: (end, site). Never overlapping.
    spans: BTreeMap<u64, (u64, usize)>,
    /// The counter of each counted (module, function, point kind).
    probe_keys: std::collections::HashMap<(usize, FileAddr, PointKind), u64>,
    /// The last library-load generation weft has handled.
    loads_acked: u32,
    /// What the plans' `Allocate` calls were given.
    given: Given,
    trap: Option<TrapHandler>,
    /// Signals whose actions an instrument keeps in the process's memory
    /// behind a handler of its own (see [`Session::keep_signal_action`]).
    kept_actions: Vec<weft_patch::sigaction_hook::Kept>,
    /// Event timestamps: 0 for the TSC, else the target's vDSO clock_gettime.
    clock_gettime: u64,
    /// Rich event sites asked for and enabled.
    rich: rich::RichSites,
    /// USDT semaphores weft raised (runtime addresses), lowered on removal.
    semaphores: Vec<RemoteAddr>,
    /// Where the C library keeps a thread's id (see
    /// `ThreadTable::tid_offset`), found at the first `apply`; 0 if unknown.
    tid_offset: Option<u32>,
    /// Where generated code learns its CPU (for the counters' lanes),
    /// found at the first `apply`.
    cpu_source: Option<weft_patch::lanes::CpuSource>,
    /// Words in code memory holding a counter's address, per (cluster,
    /// counter address), for inline counting in the CPU's lane.
    lane_literals: std::collections::HashMap<(usize, u64), u64>,
    /// Every new point gets an `int3` splice (see [`Session::force_int3`]).
    force_int3: bool,
    /// Whether the first episode has looked for regions earlier wefts left.
    looked_for_leftovers: bool,
    /// Functions whose exits run at their return (`returns.rs`).
    returns: returns::Returns,
    /// The per-thread CPU clock, if CPU timers may be placed (`cpu_clock.rs`).
    cpu_clock: Option<cpu_clock::CpuClock>,
    /// One process (or image) of a workload: a pattern that matches
    /// nothing here may match in another, so it is no error.
    part_of_workload: bool,
    /// Functions running from copies an instrument laid out, by start.
    rebuilt_at: BTreeMap<u64, rebuilt::RebuiltFunction>,
    /// What linking the copies wrote over the program's own code (the
    /// spliced jumps' targets, calls that run in place), with the bytes it
    /// replaced: put back before the jumps at detach.
    linked_text: Vec<(u64, Vec<u8>)>,
    /// Set when the session began at the program's first instruction
    /// (`startup.rs`).
    startup: Option<startup::Startup>,
    /// Set when the process's calls go to weft's SIGSYS handler
    /// (`dispatch.rs`).
    dispatch: Option<dispatch::Dispatch>,
    /// While settling goes a batch a stop (`settle.rs`): the probes
    /// prepared and not placed yet, and every site to check at the end.
    settle_pending: Option<settle::Pending>,
    /// Modules whose `_Unwind_Find_FDE` weft tried to hook (`unwind.rs`):
    /// one that could not be hooked is not tried again at every apply.
    fde_finders_tried: std::collections::BTreeSet<usize>,
}

impl Session {
    /// A session for the process `pid` that records no events (counters,
    /// timers and per-thread counters only: its shared region has no
    /// rings); nothing is changed in the process yet.
    pub fn new(pid: i32) -> Result<Session> {
        Session::create(pid, 0)
    }

    /// A session whose threads' event rings hold `ring_data` bytes each
    /// (a power of two from `ring::MIN_DATA` to `ring::MAX_DATA`). A ring's
    /// memory is taken only as its thread writes it: the region reserves
    /// address space for every thread slot, the kernel gives pages on
    /// first touch, so the memory used grows with the threads that record.
    pub fn with_ring_size(pid: i32, ring_data: u64) -> Result<Session> {
        if !ring_data.is_power_of_two() || !(ring::MIN_DATA..=ring::MAX_DATA).contains(&ring_data) {
            return Err(Error::BadRingSize(ring_data));
        }
        Session::create(pid, ring_data)
    }

    fn create(pid: i32, ring_data: u64) -> Result<Session> {
        let layout = Layout::new(COUNTERS, TRAPS, ring_data);
        let shm = SharedMemory::create((layout.size + MAX_CLUSTERS * CODE_AREA) as usize)?;
        shm.write(0, &layout.header_bytes());
        journal::stamp_owner(&shm, &layout, pid);
        Ok(Session {
            pid,
            shm,
            layout,
            modules: vec![],
            clusters: vec![],
            probes: vec![],
            sites: vec![],
            site_at: BTreeMap::new(),
            spans: BTreeMap::new(),
            probe_keys: std::collections::HashMap::new(),
            loads_acked: 0,
            given: Given::default(),
            trap: None,
            kept_actions: Vec::new(),
            clock_gettime: 0,
            rich: rich::RichSites::default(),
            tid_offset: None,
            cpu_source: None,
            lane_literals: std::collections::HashMap::new(),
            semaphores: Vec::new(),
            force_int3: false,
            looked_for_leftovers: false,
            returns: returns::Returns::default(),
            cpu_clock: None,
            part_of_workload: false,
            rebuilt_at: BTreeMap::new(),
            linked_text: Vec::new(),
            startup: None,
            dispatch: None,
            settle_pending: None,
            fde_finders_tried: Default::default(),
        })
    }

    /// The process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Bytes of data in each thread's event ring (0 without rings).
    pub fn ring_size(&self) -> u64 {
        self.layout.header.ring_data
    }

    /// Modules known so far.
    pub fn modules(&self) -> &[std::sync::Arc<Module>] {
        &self.modules
    }

    /// Looks for modules mapped since the last call (libraries loaded by
    /// dlopen); returns how many are new.
    pub fn refresh_modules(&mut self) -> Result<usize> {
        let maps = weft_process::maps::read(self.pid)?;
        let known: Vec<PathBuf> = self.modules.iter().map(|m| m.path.clone()).collect();
        let new = Module::discover(self.pid, &maps, &known)?;
        let n = new.len();
        self.modules
            .extend(new.into_iter().map(std::sync::Arc::new));
        Ok(n)
    }

    /// Raises the u16 USDT semaphores at `addrs` in the stopped process, so
    /// the program computes its probes' arguments while they are traced;
    /// [`Session::remove_all`] lowers them again.
    pub fn raise_semaphores(&mut self, tracee: &Tracee, addrs: &[RemoteAddr]) -> Result<()> {
        // Raised, then listed in the journal: a weft dying in between
        // leaves a semaphore raised (probe arguments computed for nothing),
        // never one lowered that another tracer raised.
        for &addr in addrs {
            add_to_semaphore(tracee, addr, 1)?;
            self.semaphores.push(addr);
            self.write_journal();
        }
        Ok(())
    }

    /// Makes the session one process (or image) of a workload: a pattern
    /// that matches nothing in it is listed in [`Prepared::unmatched`]
    /// instead of being an error, since another process may have it.
    pub fn part_of_workload(&mut self) {
        self.part_of_workload = true;
    }

    /// Whether the session is one process (or image) of a workload.
    pub fn is_part_of_workload(&self) -> bool {
        self.part_of_workload
    }

    /// Gives every point placed from now on an `int3` splice where it
    /// would have had a `jmp` or a springboard (a relocated whole function
    /// keeps its `jmp`): a test switch for the trap path, which otherwise
    /// only odd code and busy threads reach.
    pub fn force_int3(&mut self) {
        self.force_int3 = true;
    }

    /// Event timestamps from CLOCK_MONOTONIC (nanoseconds, through the
    /// target's vDSO) instead of the TSC, for probes placed from now on.
    pub fn use_monotonic_clock(&mut self) -> Result<()> {
        self.clock_gettime = crate::clock::vdso_clock_gettime(self.pid)?;
        Ok(())
    }
}

/// Adds `delta` to the u16 semaphore at `addr`.
fn add_to_semaphore(tracee: &Tracee, addr: RemoteAddr, delta: i16) -> Result<()> {
    let mut b = [0u8; 2];
    tracee.memory().read(addr, &mut b)?;
    let v = u16::from_le_bytes(b).wrapping_add_signed(delta);
    tracee.memory().write(addr, &v.to_le_bytes())?;
    Ok(())
}
