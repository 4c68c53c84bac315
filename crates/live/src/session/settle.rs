//! Settling a process: every `syscall` site rewritten, then Syscall User
//! Dispatch turned off.
//!
//! With dispatch on, the kernel takes every system call of the thread,
//! even one made from the range it runs, through its slow path (the
//! dispatch check, then the exit work): some 33 ns a call on this
//! project's machines (bench/RESULTS.md, session 31), more than weft's own
//! code adds. So once a process has run a while, weft *settles* it, in
//! one stop: it rewrites every site it has not (the C library's rarely
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

/// Why a process did not settle, or what settling did.
#[derive(Debug)]
pub enum Settled {
    /// Dispatch is off now; the sites rewritten in the stop.
    Done(AddReport),
    /// Not now: the reason, in words.
    NotYet(String),
}

impl Session {
    /// Whether the process is settled (see the module's comment).
    pub fn settled(&self) -> bool {
        self.dispatch.as_ref().is_some_and(|d| d.settled)
    }

    /// Settles the process (see the module's comment) with the probes of
    /// `specs`, in one stop; says why not when it cannot.
    pub fn settle(&mut self, specs: &[PointSpec]) -> Result<Settled> {
        let not_yet = |why: String| Ok(Settled::NotYet(why));
        let Some(d) = self.dispatch.as_ref().filter(|d| d.on && !d.settled) else {
            return not_yet("its calls are not dispatched".into());
        };
        let cluster = self.clusters[d.cluster];
        if let Some(why) = self.unsettleable(&cluster) {
            return not_yet(why);
        }
        if let Some(d) = &mut self.dispatch {
            d.settling = true;
        }
        let prepared = self.prepare_modules(specs, 0, false, &[]);
        if let Some(d) = &mut self.dispatch {
            d.settling = false;
        }
        let mut prepared = prepared?;
        if let Some(s) = prepared.skipped.first() {
            return not_yet(format!(
                "{}:{} is not rewritten ({})",
                s.module, s.function, s.why
            ));
        }
        // Every site, to check after; those rewritten already are left as
        // they are.
        let sites: Vec<(u64, Option<u64>)> = (prepared.items.iter())
            .filter(|item| item.kind == PointKind::Syscall)
            .map(|item| (item.parts[0].points[0], item.syscall))
            .collect();
        prepared
            .items
            .retain(|item| !self.site_at.contains_key(&item.parts[0].points[0]));
        let mut tracee = Tracee::attach(self.pid)?;
        let report = self.apply(&mut tracee, prepared)?;
        // A site left as it was (a thread inside the bytes its splice
        // needs): not now.
        for &(site, nr) in &sites {
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

    /// Why the process cannot settle, if it cannot: code dispatch alone
    /// would see.
    fn unsettleable(&self, cluster: &Cluster) -> Option<String> {
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
            if !cluster.reaches(module.lo, module.hi) {
                return Some(format!(
                    "{} is out of the dispatch cluster's reach",
                    module.name
                ));
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
