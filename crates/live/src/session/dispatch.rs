//! Syscall User Dispatch in a live process (`weft_patch::dispatch`): the
//! dispatch module mapped next to the start-up cluster, the SIGSYS
//! handler placed in that cluster's code area, dispatch turned on for
//! every thread, and the probes of other modules' `syscall` sites left
//! out but for the calls that make threads and processes.
//!
//! Rewriting every `syscall` instruction of a new image (over a thousand,
//! most in the C library) took 60 to 70 ms per `exec`; with dispatch on,
//! a call is recorded from the site it was made at without any site
//! being rewritten first. Only `clone`, `clone3`, `fork` and `vfork` are
//! rewritten at once wherever the dispatch cluster reaches: a thread or a
//! process sharing its creator's memory cannot be made from a signal
//! handler, and their probes turn dispatch on in the child
//! (`Primitive::EnableDispatch`). Other sites are rewritten once the
//! handler's list of the sites it made calls for shows them busy
//! ([`Session::rewrite_busy_sites`]), in a stop of the process.

use super::*;
use weft_abi::mman;
use weft_image::Function;
use weft_patch::dispatch as d;
use weft_patch::region::{sync, trap_table as tt};

/// A session whose process's calls go to weft's SIGSYS handler.
#[derive(Debug, Clone)]
pub(super) struct Dispatch {
    /// The cluster whose code area is the range whose calls run.
    pub(super) cluster: usize,
    /// The dispatch module's index among the modules.
    pub(super) module: usize,
    /// Whether the handler is installed and dispatch on.
    pub(super) on: bool,
    /// The handler's count of calls when weft last looked
    /// (`sync::DISPATCH_SEEN_HEAD`).
    seen: u64,
    /// Per site, the dispatched calls weft saw made there.
    calls: HashMap<u64, u32>,
    /// Sites rewritten since (or found not worth it): never again.
    done: std::collections::HashSet<u64>,
    /// While a batch of busy sites is prepared: those sites, the only
    /// ones probed then.
    batch: Option<std::collections::HashSet<u64>>,
    /// While every site is prepared to settle the process (`settle.rs`).
    pub(super) settling: bool,
    /// Once the process is settled: every site rewritten, dispatch off.
    pub(super) settled: bool,
}

/// Dispatched calls weft sees made at one site before it rewrites the
/// site: a call through the handler costs one or two microseconds more
/// than through a rewritten site, a rewrite a stop of the process of a
/// few milliseconds (bench/RESULTS.md).
const BUSY: u32 = 256;

/// Calls seen at a busy site weft could not rewrite before it tries again.
const RETRY_AFTER: u32 = 32;

/// Calls never rewritten under dispatch: the handler takes SIGSYS out of
/// the signal masks they install (and `rt_sigreturn` is made on the
/// program's frame), which a rewritten site would not.
const STAY_DISPATCHED: [u64; 8] = [13, 14, 15, 130, 270, 271, 281, 441];

/// `mov eax, imm32` for the calls that make threads and processes: a
/// function holding none of them has no site to rewrite under dispatch.
const MAKE_TASK_MOVES: [[u8; 5]; 4] = [
    [0xb8, 56, 0, 0, 0],
    [0xb8, 57, 0, 0, 0],
    [0xb8, 58, 0, 0, 0],
    [0xb8, 0xb3, 0x01, 0, 0],
];

/// The calls that make threads and processes.
const MAKE_TASKS: [u64; 4] = [56, 57, 58, 435];

impl Session {
    /// At the program's first instruction, after
    /// [`begin_startup`](Session::begin_startup): maps the dispatch module
    /// next to the start-up cluster, for [`prepare`](Session::prepare) to
    /// probe like any module. From now on, `syscall` sites of other
    /// modules are probed only where they make threads or processes.
    /// [`enable_dispatch`](Session::enable_dispatch) turns it on once the
    /// probes are applied.
    pub fn begin_dispatch(&mut self, tracee: &mut Tracee) -> Result<()> {
        let Some(startup) = &self.startup else {
            return Ok(());
        };
        // A kernel before 6.4 has no ptrace access to the setting (and one
        // built without generic entry no dispatch): every site is rewritten.
        if tracee.dispatch(tracee.pid()).is_err() {
            return Ok(());
        }
        let tcb = startup.tcb;
        let Some(cluster) = self
            .clusters
            .iter()
            .position(|c| c.mapped && (c.data..c.code).contains(&tcb))
        else {
            return Ok(());
        };
        let (lo, hi) = self.clusters[cluster].range();
        let maps = weft_process::maps::read(self.pid)?;
        let addr = weft_process::maps::free_range_below(&maps, lo, hi, d::MODULE_SIZE, REACH)
            .ok_or_else(|| Error::NoRoom {
                module: d::MODULE_NAME.to_string(),
            })?;
        let mapped = tracee.remote_mmap(
            Some(RemoteAddr(addr)),
            d::MODULE_SIZE,
            mman::PROT_READ | mman::PROT_EXEC,
            mman::MAP_PRIVATE | mman::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        if mapped.0 != addr {
            return Err(Error::NoRoom {
                module: d::MODULE_NAME.to_string(),
            });
        }
        let bytes = d::module_image();
        tracee.memory().write(mapped, &bytes)?;
        let path = std::path::Path::new(d::MODULE_NAME);
        let image = weft_image::Image::from_bytes(path, bytes)?;
        let module = Module::generated(d::MODULE_NAME, image, addr, d::MODULE_SIZE);
        self.modules.push(std::sync::Arc::new(module));
        self.dispatch = Some(Dispatch {
            cluster,
            module: self.modules.len() - 1,
            on: false,
            seen: 0,
            calls: HashMap::new(),
            done: Default::default(),
            batch: None,
            settling: false,
            settled: false,
        });
        Ok(())
    }

    /// Installs the SIGSYS handler and turns dispatch on for every thread,
    /// once [`apply`](Session::apply) has spliced the dispatch function.
    /// False, with dispatch given up for the session, when it was not (its
    /// `syscall` would send the handler back to itself): every site is
    /// then probed from the next `prepare` on, as without dispatch.
    /// `signals` says what the handler's delivery stub does with the
    /// program's signal handlers (`weft_abi::delivery::OFF`, `RECORD`,
    /// `RERUN`).
    pub fn enable_dispatch(&mut self, tracee: &mut Tracee, signals: u64) -> Result<bool> {
        let Some(dispatch) = self.dispatch.clone() else {
            return Ok(false);
        };
        if dispatch.on {
            return Ok(true);
        }
        let function = self.modules[dispatch.module].bias + d::FUNCTION;
        let mut first = [0u8; 1];
        tracee.memory().read(RemoteAddr(function), &mut first)?;
        if first[0] != 0xe9 {
            self.dispatch = None;
            return Ok(false);
        }
        let ci = dispatch.cluster;
        let c = self.clusters[ci];
        let sync_at = self.layout.header.sync_offset;
        let sync_addr = c.data + sync_at;
        let at = c.code + c.used;
        let trap_table = c.data + self.layout.header.trap_offset;
        let handler = d::handler_code(at, sync_addr, function, trap_table)?;
        let code = handler.code;
        let placed = self.alloc_code(ci, &code.bytes)?;
        debug_assert_eq!(placed, at);
        self.shm
            .store_u64(sync_at + sync::DISPATCH_DIRECT, handler.direct);
        let table = sync_at + sync::DISPATCH_TABLE;
        self.shm.write(
            table + tt::NEW_ACTION,
            &weft_patch::trap::kernel_sigaction(code.handler, d::HANDLER_FLAGS, code.restorer, 0),
        );
        self.shm.write(
            table + tt::DEFAULT_ACTION,
            &weft_patch::trap::kernel_sigaction(
                0,
                weft_patch::trap::RESTORER_FLAG,
                code.restorer,
                0,
            ),
        );
        self.shm.store_u64(sync_at + sync::SIGNAL_MODE, signals);
        self.shm
            .store_u64(sync_at + sync::SIGNAL_OWNER, self.pid as u64);
        let header = &self.layout.header;
        let keys = c.data + header.threads_offset;
        self.shm.store_u64(sync_at + sync::SIGNAL_THREADS, keys);
        self.shm
            .store_u64(sync_at + sync::SIGNAL_SLOTS, header.thread_slots);
        let block = weft_patch::region::threads::block_size(header.ring_data);
        self.shm.store_u64(sync_at + sync::SIGNAL_BLOCK, block);
        self.shm.store_u64(sync_at + sync::DISPATCH_START, c.code);
        self.shm.store_u64(sync_at + sync::DISPATCH_LEN, CODE_AREA);
        self.write_unrecorded_ranges();
        tracee.remote_sigaction(
            d::SIGSYS,
            RemoteAddr(sync_addr + sync::DISPATCH_TABLE + tt::NEW_ACTION),
            RemoteAddr(sync_addr + sync::DISPATCH_TABLE + tt::OLD_ACTION),
        )?;
        // SIGTRAP's handler too, now: installing it later, for an `int3`
        // a busy site's splice needs, takes a remote call on a thread that
        // may be stopped with a dispatched call, which then makes that
        // call again from inside the bytes to splice.
        self.install_trap_handler(tracee, ci)?;
        let config = weft_process::DispatchConfig {
            mode: d::PR_SYS_DISPATCH_ON as u64,
            selector: 0,
            offset: c.code,
            len: CODE_AREA,
        };
        for tid in tracee.threads() {
            tracee.set_dispatch(tid, &config)?;
        }
        if let Some(dispatch) = &mut self.dispatch {
            dispatch.on = true;
        }
        Ok(true)
    }

    /// Whether the process's calls go to weft's SIGSYS handler.
    pub fn dispatching(&self) -> bool {
        self.dispatch.as_ref().is_some_and(|d| d.on)
    }

    /// Tells the handler the ranges whose calls it makes unrecorded: the
    /// code areas of every cluster but the dispatch one, and the vDSO.
    pub(super) fn write_unrecorded_ranges(&self) {
        let Some(dispatch) = &self.dispatch else {
            return;
        };
        let mut ranges: Vec<(u64, u64)> = (self.clusters.iter().enumerate())
            .filter(|&(i, c)| c.mapped && i != dispatch.cluster)
            .map(|(_, c)| (c.code, c.code + CODE_AREA))
            .collect();
        if let Some(vdso) = self.modules.iter().find(|m| m.is_vdso()) {
            ranges.push((vdso.lo, vdso.hi));
        }
        let at = self.layout.header.sync_offset + sync::UNRECORDED_RANGES;
        for k in 0..sync::UNRECORDED_RANGE_COUNT {
            let (start, end) = ranges.get(k as usize).copied().unwrap_or((0, 0));
            self.shm.store_u64(at + 16 * k, start);
            self.shm.store_u64(at + 16 * k + 8, end);
        }
    }

    /// Under dispatch, whether function `f` of module `mi` is worth
    /// decoding for its `syscall` sites: the dispatch module's is, and a
    /// function of a module the dispatch cluster reaches that makes
    /// threads or processes.
    pub(super) fn dispatch_wants(&self, mi: usize, f: &Function) -> bool {
        let Some(dispatch) = &self.dispatch else {
            return true;
        };
        let module = &self.modules[mi];
        if mi == dispatch.module {
            return dispatch.batch.is_none();
        }
        // Settling or settled: every site, as without dispatch, but the
        // vDSO's (its calls are made unrecorded, as the handler makes them).
        if dispatch.settling || dispatch.settled {
            return !module.is_vdso();
        }
        // A rewritten site runs its call in its cluster: the dispatch
        // cluster's range, or the handler again.
        if !self.clusters[dispatch.cluster].reaches(module.lo, module.hi) {
            return false;
        }
        if let Some(batch) = &dispatch.batch {
            let lo = module.runtime(f.addr).0;
            return (batch.iter()).any(|&after| (lo..lo + f.size).contains(&(after - 2)));
        }
        match module.image.bytes_at(f.addr, f.size as usize) {
            // Each `mov $nr, %eax` starts with 0xb8: memchr finds those
            // (every process looks at each of its C library's functions
            // that holds a `syscall`).
            Some(bytes) => memchr::memchr_iter(0xb8, bytes)
                .any(|i| MAKE_TASK_MOVES.iter().any(|m| bytes[i..].starts_with(m))),
            None => false,
        }
    }

    /// Under dispatch, whether the `syscall` instruction at `site` of
    /// module `mi`, making call `nr`, is probed (see
    /// [`dispatch_wants`](Self::dispatch_wants)).
    pub(super) fn dispatch_keeps(&self, mi: usize, site: u64, nr: Option<u64>) -> bool {
        match &self.dispatch {
            None => true,
            Some(d) if d.settling || d.settled => true,
            Some(d) => match &d.batch {
                Some(batch) => batch.contains(&(site + 2)),
                None if d.module == mi => true,
                None => nr.is_some_and(|nr| MAKE_TASKS.contains(&nr)),
            },
        }
    }

    /// Rewrites the sites whose calls the SIGSYS handler has been making
    /// often, with the probes of `specs`, in a stop of the process; None
    /// when there is none to rewrite. A site whose call is not known from
    /// its code, or installs a signal mask, stays dispatched.
    pub fn rewrite_busy_sites(&mut self, specs: &[PointSpec]) -> Result<Option<AddReport>> {
        let busy = self.busy_sites();
        if busy.is_empty() {
            return Ok(None);
        }
        if let Some(d) = &mut self.dispatch {
            d.done.extend(busy.iter().copied());
            d.batch = Some(busy.into_iter().collect());
        }
        let prepared = self.prepare_modules(specs, 0, false, &[]);
        if let Some(d) = &mut self.dispatch {
            d.batch = None;
        }
        let mut prepared = prepared?;
        prepared.items.retain(|item| {
            item.syscall
                .is_some_and(|nr| !STAY_DISPATCHED.contains(&nr))
        });
        prepared.skipped.clear();
        if prepared.items.is_empty() {
            return Ok(None);
        }
        let wanted: Vec<u64> = (prepared.items.iter())
            .filter(|item| item.kind == PointKind::Syscall)
            .map(|item| item.parts[0].points[0])
            .collect();
        let mut tracee = Tracee::attach(self.pid)?;
        let report = self.apply(&mut tracee, prepared)?;
        // A site left as it was (a thread was inside the bytes its splice
        // needs): tried again after some more calls.
        let mut left = Vec::new();
        for site in wanted {
            let mut bytes = [0u8; 2];
            if tracee.memory().read(RemoteAddr(site), &mut bytes).is_ok() && bytes == [0x0f, 0x05] {
                left.push(site + 2);
            }
        }
        tracee.detach()?;
        if let Some(d) = &mut self.dispatch {
            for after in left {
                d.done.remove(&after);
                d.calls.insert(after, BUSY - RETRY_AFTER);
            }
        }
        Ok(Some(report))
    }

    /// The sites the handler's list shows busy since weft last looked, and
    /// not rewritten yet.
    fn busy_sites(&mut self) -> Vec<u64> {
        let sync_at = self.layout.header.sync_offset;
        let head = self.shm.load_u64(sync_at + sync::DISPATCH_SEEN_HEAD);
        let Some(d) = self.dispatch.as_mut().filter(|d| d.on && !d.settled) else {
            return Vec::new();
        };
        let from = d.seen.max(head.saturating_sub(sync::DISPATCH_SEEN_COUNT));
        // The list holds the last calls only: each one there stands for as
        // many as were made since weft last looked, over the list's length
        // (so a busy site is found as soon however seldom weft looks).
        let weight = ((head - d.seen) / (head - from).max(1)).max(1) as u32;
        let mut busy = Vec::new();
        for k in from..head {
            let at = sync_at + sync::DISPATCH_SEEN + 8 * (k % sync::DISPATCH_SEEN_COUNT);
            let site = self.shm.load_u64(at);
            if site == 0 || d.done.contains(&site) || busy.contains(&site) {
                continue;
            }
            let n = d.calls.entry(site).or_default();
            *n = n.saturating_add(weight);
            if *n >= BUSY {
                busy.push(site);
            }
        }
        d.seen = head;
        busy
    }
}
