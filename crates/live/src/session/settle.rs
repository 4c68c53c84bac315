//! Settling a process: every `syscall` site rewritten, then Syscall User
//! Dispatch turned off.
//!
//! With dispatch on, the kernel takes every system call of the thread,
//! even one made from the range it runs, through its slow path (the
//! dispatch check, then the exit work): some 33 ns a call on this
//! project's machines (bench/RESULTS.md, session 31), more than weft's own
//! code adds. So once a process has run a while, weft *settles* it: it
//! rewrites every site it has not (the C library's rarely
//! reached ones, the loader's), hands the calls that install a signal
//! mask or action to the SIGSYS handler from their rewritten sites
//! (`Primitive::ThroughHandler`: the handler must still see them), and
//! turns dispatch off in every thread. A process settles only when
//! nothing would be left for dispatch to catch: no executable memory but
//! its modules and weft's, no `syscall` bytes outside the functions weft
//! decodes but the C library's signal return (`rt_sigreturn`, never
//! rewritten), every module in reach of the dispatch cluster, every site
//! rewritten. From then on, libraries loaded later have every site
//! rewritten as they come (as without dispatch), new threads and forked
//! children leave dispatch off (`sync::DISPATCH_SETTLED`), and code the
//! program generates at run time is not seen (docs/syscalls.md,
//! "Settled processes").

use super::prepare::PreparedProbe;
use super::*;
use weft_patch::region::sync;
use weft_plan::{Guarded, Primitive};

/// Calls whose sites hand them to the SIGSYS handler in a settled
/// process: those that install a signal mask or action (see
/// `weft_patch::dispatch`).
const THROUGH_HANDLER: [u64; 7] = [13, 14, 130, 270, 271, 281, 441];

/// `rt_sigreturn`: its site (the C library's signal return) is never
/// rewritten.
const RT_SIGRETURN: u64 = 15;

/// `mov rax, 15` (`48 c7 c0 0f 00 00 00`), which a signal return's
/// `syscall` follows.
const MOV_RAX_15: [u8; 7] = [0x48, 0xc7, 0xc0, 0x0f, 0, 0, 0];

/// Sites settling rewrites in one stop at most.
const SITES_A_STOP: usize = 128;

/// Settling under way, a batch a stop: the probes not placed yet, and
/// every `syscall` site (and its call's number, if known) to check once
/// they all are.
#[derive(Debug)]
pub(super) struct Pending {
    items: Vec<PreparedProbe>,
    sites: Vec<(u64, Option<u64>)>,
}

/// The `syscall` instruction a system call point belongs to.
fn site_of(item: &PreparedProbe) -> u64 {
    item.parts[0].points[0] - 2 * u64::from(item.kind == PointKind::AfterSyscall)
}

/// Why a process did not settle, or what settling did.
#[derive(Debug)]
pub enum Settled {
    /// Dispatch is off now; the sites rewritten in the stop.
    Done(AddReport),
    /// A batch of sites rewritten in a stop, more to come: call again.
    Partly(AddReport),
    /// Not now: the reason, in words.
    NotYet(String),
}

impl Session {
    /// Whether the process is settled (see the module's comment).
    pub fn settled(&self) -> bool {
        self.dispatch.as_ref().is_some_and(|d| d.settled)
    }

    /// Settles the process (see the module's comment) with the probes of
    /// `specs`; says why not when it cannot. Each call rewrites at most
    /// [`SITES_A_STOP`] sites in a stop of the process, and says so
    /// ([`Settled::Partly`]) while more are left; the one that finds none
    /// left checks them all and turns dispatch off.
    pub fn settle(&mut self, specs: &[PointSpec]) -> Result<Settled> {
        let not_yet = |why: String| Ok(Settled::NotYet(why));
        if !self.dispatch.as_ref().is_some_and(|d| d.on && !d.settled) {
            return not_yet("its calls are not dispatched".into());
        }
        let mut pending = match self.settle_pending.take() {
            Some(pending) => pending,
            None => {
                if let Some(why) = self.unsettleable() {
                    return not_yet(why);
                }
                match self.prepare_settling(specs)? {
                    Ok(pending) => pending,
                    Err(why) => return not_yet(why),
                }
            }
        };
        // At most a batch of sites a stop (their trampolines are assembled
        // in it): the program waits a fraction as long each time.
        let mut batch = std::collections::BTreeSet::new();
        let mut now = Vec::new();
        let mut later = Vec::new();
        for item in pending.items.drain(..) {
            let site = site_of(&item);
            if batch.len() < SITES_A_STOP {
                batch.insert(site);
            }
            match batch.contains(&site) {
                true => now.push(item),
                false => later.push(item),
            }
        }
        pending.items = later;
        let prepared = Prepared {
            items: now,
            skipped: Vec::new(),
            pending: Vec::new(),
            notes: Vec::new(),
            unmatched: Vec::new(),
            matched: Vec::new(),
        };
        let mut tracee = Tracee::attach(self.pid)?;
        let report = self.apply(&mut tracee, prepared)?;
        if !pending.items.is_empty() {
            tracee.detach()?;
            self.settle_pending = Some(pending);
            return Ok(Settled::Partly(report));
        }
        // Code the program made meanwhile, or a site left as it was (a
        // thread inside the bytes its splice needs): not now.
        if let Some(why) = self.unsettleable() {
            tracee.detach()?;
            return not_yet(why);
        }
        for &(site, nr) in &pending.sites {
            let mut bytes = [0u8; 2];
            let read = tracee.memory().read(RemoteAddr(site), &mut bytes);
            if read.is_ok() && bytes == [0x0f, 0x05] && nr != Some(RT_SIGRETURN) {
                tracee.detach()?;
                return not_yet(format!("the site at {site:#x} is not rewritten yet"));
            }
        }
        let sync_at = self.layout.header.sync_offset;
        self.shm.store_u64(sync_at + sync::DISPATCH_SETTLED, 1);
        let off = weft_process::DispatchConfig::default();
        for tid in tracee.threads() {
            tracee.set_dispatch(tid, &off)?;
        }
        tracee.detach()?;
        if let Some(d) = &mut self.dispatch {
            d.settled = true;
        }
        Ok(Settled::Done(report))
    }

    /// Every site's probes for settling, while the process runs: those
    /// not placed yet, and every site to check at the end; or why the
    /// process cannot settle.
    fn prepare_settling(
        &mut self,
        specs: &[PointSpec],
    ) -> Result<std::result::Result<Pending, String>> {
        if let Some(d) = &mut self.dispatch {
            d.settling = true;
        }
        let prepared = self.prepare_modules(specs, 0, false, &[]);
        if let Some(d) = &mut self.dispatch {
            d.settling = false;
        }
        let prepared = prepared?;
        if let Some(s) = prepared.skipped.first() {
            return Ok(Err(format!(
                "{}:{} is not rewritten ({})",
                s.module, s.function, s.why
            )));
        }
        // A module with `syscall` instructions (not merely their bytes
        // inside other instructions, as python3's, perl's and bash's own
        // code has) the dispatch cluster does not reach: its sites would be
        // rewritten into another cluster, whose code the delivery stub
        // tells apart from the program's less well.
        let dispatch = self.dispatch.as_ref().map(|d| self.clusters[d.cluster]);
        for item in prepared
            .items
            .iter()
            .filter(|i| i.kind == PointKind::Syscall)
        {
            let module = &self.modules[item.module];
            if dispatch.is_some_and(|c| !c.reaches(module.lo, module.hi)) {
                return Ok(Err(format!(
                    "{} makes system calls out of the dispatch cluster's reach",
                    module.name
                )));
            }
        }
        let sites = (prepared.items.iter())
            .filter(|item| item.kind == PointKind::Syscall)
            .map(|item| (item.parts[0].points[0], item.syscall))
            .collect();
        // A site placed already is left as it is (the point after a call
        // its site's program makes has no probe of its own).
        let items = (prepared.items.into_iter())
            .filter(|item| !self.site_at.contains_key(&site_of(item)))
            .collect();
        Ok(Ok(Pending { items, sites }))
    }

    /// Why the process cannot settle, if it cannot: code dispatch alone
    /// would see.
    fn unsettleable(&self) -> Option<String> {
        let maps = match weft_process::maps::read(self.pid) {
            Ok(maps) => maps,
            Err(e) => return Some(e.to_string()),
        };
        let weft_code = |a: u64| {
            (self.clusters.iter()).any(|c| c.mapped && (c.data..c.code + CODE_AREA).contains(&a))
        };
        for m in maps.iter().filter(|m| m.exec && m.path != "[vsyscall]") {
            let (lo, hi) = (m.start.0, m.end.0);
            let module = (self.modules.iter()).any(|md| md.lo <= lo && hi <= md.hi);
            if !module && !weft_code(lo) {
                return Some(format!(
                    "it runs code weft has not read ({lo:#x}-{hi:#x} {})",
                    m.path
                ));
            }
        }
        for module in self.modules.iter().filter(|m| !m.is_vdso()) {
            let image = &module.image;
            if image.functions_with_syscall_bytes().next().is_none() {
                continue;
            }
            for at in image.syscall_bytes_outside_functions() {
                let before = at
                    .checked_sub(MOV_RAX_15.len() as u64)
                    .and_then(|b| image.bytes_at(weft_image::FileAddr(b), MOV_RAX_15.len()));
                if before != Some(&MOV_RAX_15[..]) {
                    return Some(format!(
                        "{} has `syscall` bytes outside its functions at {at:#x}",
                        module.name
                    ));
                }
            }
        }
        None
    }

    /// Whether the sites prepared now are those of a settled process (or
    /// one settling).
    pub(super) fn settled_sites(&self) -> bool {
        self.dispatch
            .as_ref()
            .is_some_and(|d| d.settling || d.settled)
    }

    /// While settling, or settled: what a `syscall` site's probe becomes.
    /// A call that installs a signal mask or action hands it to the SIGSYS
    /// handler, the signal return keeps its bytes, the point after such a
    /// site gets nothing; None drops the probe. (A site whose number is not
    /// known from its code, glibc's `syscall()`, is probed as any: a mask
    /// or an action installed through it is not the handler's.)
    pub(super) fn settled_probe(&self, mut item: PreparedProbe) -> Option<PreparedProbe> {
        // A site whose number its code does not say (glibc's `syscall()`)
        // keeps its probes, which read the number as the call is made.
        let Some(nr) = item.syscall else {
            return Some(item);
        };
        if nr == RT_SIGRETURN {
            return None;
        }
        if !THROUGH_HANDLER.contains(&nr) {
            return Some(item);
        }
        if item.kind == PointKind::AfterSyscall {
            return None;
        }
        item.action = Action::Program(vec![Guarded {
            predicate: None,
            primitive: Primitive::ThroughHandler { site: 0 },
        }]);
        Some(item)
    }
}
