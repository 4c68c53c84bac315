//! Applying: a prepared plan's probes become sites, their trampolines are
//! built in patch memory, and the splices are written, in that order, into
//! the stopped process.

use super::place::{Placed, Stopped};
use super::prepare::PreparedProbe;
use super::unwind::CODE_BYTES;
use super::*;
use std::sync::Arc;
use weft_patch::unwind::{Frame, Rule};
use weft_patch::{PointSnippet, Replaces, Snippet, Trampoline, INT3};
use weft_plan::{Allocate, Resolved};

/// glibc blocks every signal for a few microseconds at a time (creating a
/// thread, forking, spawning); a thread stopped in such a window would make
/// every `int3` splice impossible, since the kernel kills a thread that hits
/// an int3 with SIGTRAP blocked. While some thread blocks SIGTRAP, the
/// program runs on (untraced) for 1, 2, 4, ... 32 ms and is stopped again; a
/// thread that still blocks it then keeps it blocked on purpose.
fn wait_out_brief_signal_blocks(tracee: &mut Tracee) -> Result<()> {
    for round in 0..6 {
        let blocked = tracee
            .threads()
            .into_iter()
            .any(|tid| tracee.signal_blocked(tid, weft_abi::signal::SIGTRAP));
        if !blocked {
            break;
        }
        tracee.let_run_untraced(std::time::Duration::from_millis(1 << round))?;
    }
    Ok(())
}

/// Why a site could not be built.
pub(super) enum SiteError {
    /// Its points are passed over; the rest goes on.
    Skip(SkipReason),
    /// The episode fails.
    Fatal(Error),
}

impl Session {
    /// Splices prepared probes into the stopped process.
    pub fn apply(&mut self, tracee: &mut Tracee, prepared: Prepared) -> Result<AddReport> {
        self.adopt(tracee)?;
        // Before the program has a thread pointer of its own, neither can
        // be read from it (`startup.rs`).
        if self.tid_offset.is_none() && !self.in_startup() {
            self.tid_offset = Some(self.find_tid_offset(tracee));
        }
        if self.cpu_source.is_none() {
            let source = self.find_cpu_source(tracee);
            self.cpu_source = Some(match source {
                weft_patch::lanes::CpuSource::Rseq { .. } if self.in_startup() => {
                    weft_patch::lanes::CpuSource::None
                }
                other => other,
            });
        }
        self.ensure_cpu_clock(tracee)?;
        let (rebuilds, items): (Vec<_>, Vec<_>) = prepared
            .items
            .into_iter()
            .partition(|i| matches!(i.action, Action::Rebuild(_)));
        let prepared = Prepared { items, ..prepared };
        let mut report = AddReport {
            skipped: prepared.skipped,
            ..AddReport::default()
        };
        if !prepared.items.is_empty() {
            wait_out_brief_signal_blocks(tracee)?;
        }
        let mut dirty: Vec<usize> = Vec::new();
        // Exit probes follow their calls on the return stacks (see
        // `returns.rs`). Their hooks first: they may hook the unwinding
        // functions, which changes the code the threads run.
        let mut hooks: Vec<Option<usize>> = Vec::with_capacity(prepared.items.len());
        for item in &prepared.items {
            // A vDSO function calls nothing that could unwind it: its exits
            // are its returns.
            let follows = !self.modules[item.module].is_vdso();
            hooks.push(if item.kind == PointKind::Exit && follows {
                let (module, function) = (item.module, item.function_addr);
                self.return_hook_for(tracee, module, function, item.arm_return)?
            } else {
                None
            });
        }
        let mut threads = Stopped::new(tracee, self.pid)?;
        let mut touched_hooks = Vec::new();
        for (item, hook) in prepared.items.into_iter().zip(hooks) {
            let Some(probe_id) = self.add_probe(&item)? else {
                continue;
            };
            report.probes += 1;
            if let Some(h) = hook {
                self.probes[probe_id].returns = Some(h);
                self.returns.hooks[h].exits.push(probe_id);
                self.place_return_entry(&mut threads, &item, h, &mut dirty)?;
                touched_hooks.push(h);
            }
            // Where the call's return to its caller is hooked, an indirect
            // jump weft could not resolve is no exit: it is as likely a
            // `switch` or a computed goto inside the function (gzip's option
            // loop, Python's opcode dispatch) as a tail call, and the hooked
            // return sees the call end either way.
            let returns_hooked = hook.is_some_and(|h| self.returns.hooks[h].arm);
            for part in &item.parts {
                let mut liveness: Option<weft_code::Liveness> = None;
                for &point in &part.points {
                    if returns_hooked
                        && item.kind == PointKind::Exit
                        && part.code.instruction_at(point).is_some_and(|i| {
                            i.flow_control() == iced_x86::FlowControl::IndirectBranch
                        })
                    {
                        continue;
                    }
                    // Counting clobbers the flags (and rax, which a
                    // trampoline saves when it may be live): a short
                    // forward scan usually proves the flags dead, sparing
                    // the whole-function analysis; registers are then
                    // recorded as all live.
                    let flags = RegSet(weft_code::STATUS_FLAGS);
                    let live =
                        if weft_code::flags_dead_by_scan(&part.code, point, flags) == Some(true) {
                            RegSet::ALL - flags
                        } else {
                            liveness
                                .get_or_insert_with(|| part.code.liveness())
                                .live_before(point)
                                .unwrap_or(RegSet::ALL)
                        };
                    match self.place(&mut threads, &item, part, point, probe_id, live)? {
                        Placed::Site(s) => dirty.push(s),
                        Placed::Skipped(why) => report.skipped.push(SkippedPoint {
                            module: self.modules[item.module].name.clone(),
                            function: item.display.clone(),
                            why,
                        }),
                        Placed::Nowhere => {}
                    }
                }
            }
        }
        // Exit routines before any splice: a call hooked at its entry
        // returns through its function's routine.
        touched_hooks.sort_unstable();
        touched_hooks.dedup();
        for h in touched_hooks {
            self.rebuild_exit_routine(h)?;
        }
        self.write_sites(tracee, dirty, &mut report)?;
        self.install_sigaction_hook(tracee)?;
        self.hook_fde_finders(tracee)?;
        self.apply_rebuilds(tracee, rebuilds, &mut report)?;
        Ok(report)
    }

    /// Records the probe of a prepared item, its action expanded for the
    /// point it resolved to and its counter allocated; `None` when the same
    /// count is already in place, or the expansion has nothing to do.
    pub(super) fn add_probe(&mut self, item: &PreparedProbe) -> Result<Option<usize>> {
        let action = match &item.action {
            Action::Expand(expand) => {
                let module = self.modules[item.module].name.clone();
                let mut points = item.parts.iter().flat_map(|p| &p.points);
                let addr = match (points.next(), points.next()) {
                    (Some(&p), None) => Some(p),
                    _ => None,
                };
                let at = Resolved {
                    module: &module,
                    function: &item.display,
                    kind: item.kind,
                    syscall: item.syscall,
                    addr,
                };
                let program = expand.expand(&at, self)?;
                // Nothing to do here (a vDSO function that stands for no
                // call; the return of a call its entry's program makes):
                // no probe, no splice.
                if program.is_empty() {
                    return Ok(None);
                }
                Action::Program(program)
            }
            other => other.clone(),
        };
        let counter = match action {
            // Expanded into a program just above; rebuilt functions are
            // applied apart (`rebuilt.rs`).
            Action::Program(_) | Action::Expand(_) | Action::Rebuild(_) => None,
            Action::Count => {
                let key = (item.module, item.function_addr, item.kind);
                if let Some(&counter) = self.probe_keys.get(&key) {
                    // The same code counted already (memmove and memcpy
                    // leading to one implementation): a row of its own
                    // under this name, reading the same counter, and
                    // nothing more to splice.
                    let named = self
                        .probes
                        .iter()
                        .any(|p| p.counter == Some(counter) && p.display == item.display);
                    if !named {
                        self.probes.push(Probe {
                            module: item.module,
                            display: item.display.clone(),
                            kind: item.kind,
                            action: Action::Count,
                            counter: Some(counter),
                            tag: item.tag,
                            live: true,
                            skipped: None,
                            hook: None,
                            returns: None,
                        });
                    }
                    return Ok(None);
                }
                let counter = self.counter()?;
                self.probe_keys.insert(key, counter);
                Some(counter)
            }
        };
        self.probes.push(Probe {
            module: item.module,
            display: item.display.clone(),
            kind: item.kind,
            action,
            counter,
            tag: item.tag,
            live: true,
            skipped: None,
            hook: None,
            returns: None,
        });
        Ok(Some(self.probes.len() - 1))
    }

    /// Builds the trampolines of the sites touched by this episode, then
    /// the trap table, then writes the splices.
    pub(super) fn write_sites(
        &mut self,
        tracee: &mut Tracee,
        mut dirty: Vec<usize>,
        report: &mut AddReport,
    ) -> Result<()> {
        dirty.sort_unstable();
        dirty.dedup();
        // Trampolines first, then the trap table, then the splices.
        let mut to_write = Vec::new();
        let mut text = TextBatch::new(self.pid)?;
        for &s in &dirty {
            match self.build_site(tracee, &mut text, s) {
                Ok(()) => to_write.push(s),
                Err(SiteError::Skip(why)) => {
                    let site = &mut self.sites[s];
                    for sp in site.points.iter().filter(|sp| sp.pending) {
                        report.skipped.push(SkippedPoint {
                            module: self.modules[site.module].name.clone(),
                            function: self.probes[sp.probes[0]].display.clone(),
                            why: why.clone(),
                        });
                        for &p in &sp.probes {
                            self.probes[p].skipped = Some(why.clone());
                        }
                    }
                    if site.active {
                        // Keep the working splice; drop only what this call added.
                        let dropped: Vec<u64> = site
                            .points
                            .iter()
                            .filter(|sp| sp.pending)
                            .map(|sp| sp.point)
                            .collect();
                        site.points.retain(|sp| !sp.pending);
                        for p in dropped {
                            if !site.points.iter().any(|sp| sp.point == p) {
                                self.site_at.remove(&p);
                            }
                        }
                    } else {
                        self.site_at.retain(|_, v| *v != s);
                        self.spans.retain(|_, (_, v)| *v != s);
                    }
                }
                Err(SiteError::Fatal(e)) => return Err(e),
            }
        }
        // Every splice passes through an int3 while it is written (see
        // `TextBatch::poke_in_phases`), so the handler is in place and the
        // table lists every site with its new trampoline before any byte.
        if let Some(&first) = to_write.first() {
            let ci = self.ensure_cluster(tracee, self.sites[first].module)?;
            self.install_trap_handler(tracee, ci)?;
        }
        let newly: Vec<bool> = to_write.iter().map(|&s| !self.sites[s].active).collect();
        for &s in &to_write {
            self.sites[s].active = true;
        }
        self.write_trap_table();
        let mut splices = Vec::new();
        for (&s, new) in to_write.iter().zip(newly) {
            let site = &mut self.sites[s];
            for r in site.board.iter().chain(site.record.iter()) {
                splices.push(Splice {
                    addr: r.addr,
                    bytes: r.new.clone(),
                    paired: site.board.is_some(),
                });
            }
            if new {
                match site.choice.method {
                    SpliceMethod::Jump => report.jumps += 1,
                    SpliceMethod::Springboard(_) => report.springboards += 1,
                    SpliceMethod::Trap => report.traps += 1,
                }
            }
            for sp in site.points.iter_mut() {
                sp.pending = false;
            }
        }
        text.poke_in_phases(tracee.memory(), &splices)?;
        Ok(())
    }

    /// Places the code of site `s`'s function from its point on (the
    /// displaced instructions, then a jump back past them) in cluster
    /// `ci`'s code area, for a program that calls the function
    /// (`Primitive::CallFunction`); returns where it begins.
    fn place_continuation(&mut self, ci: usize, s: usize) -> Result<u64, SiteError> {
        let site = &self.sites[s];
        if site.whole_function.is_some() {
            return Err(SiteError::Skip(SkipReason::Trampoline(Arc::new(
                weft_patch::Error::NotRelocatable {
                    addr: site.choice.point,
                    why: "a function called by a probe is not copied whole",
                },
            ))));
        }
        let c = self.clusters[ci];
        let code = Trampoline::build(c.code + c.used, &site.choice, &[])
            .map_err(|e| SiteError::Skip(SkipReason::Trampoline(Arc::new(e))))?;
        let at = self.alloc_code(ci, &code.bytes).map_err(SiteError::Fatal)?;
        debug_assert_eq!(at, code.addr);
        Ok(code.entry)
    }

    /// Builds (or rebuilds) the trampoline of a site and its splice record.
    pub(super) fn build_site(
        &mut self,
        tracee: &mut Tracee,
        text: &mut TextBatch,
        s: usize,
    ) -> Result<(), SiteError> {
        let module = self.sites[s].module;
        let ci = self
            .ensure_cluster(tracee, module)
            .map_err(SiteError::Fatal)?;
        let mut snippets: Vec<PointSnippet> = Vec::new();
        // Where weft's code makes a point's `syscall`, for the unwinder.
        let mut frames: Vec<Frame> = Vec::new();
        for sp in self.sites[s].points.clone() {
            // Each with what it does in place of the point's code.
            let mut parts: Vec<(Snippet, Replaces)> = Vec::new();
            // Where calls are followed (an entry with a return hook), the
            // point's other probes join its one mini-trampoline, so the
            // thread is looked up once; at a followed function's exits its
            // exit probes make one guarded mini-trampoline.
            let follow = sp.probes.iter().find_map(|&p| self.probes[p].hook);
            let mut merged: Vec<usize> = Vec::new();
            let mut guarded: Vec<(usize, Vec<usize>)> = Vec::new();
            for &p in &sp.probes {
                let probe = &self.probes[p];
                if probe.hook.is_some() {
                    continue;
                }
                if let Some(h) = probe.returns {
                    match guarded.iter_mut().find(|(g, _)| *g == h) {
                        Some((_, probes)) => probes.push(p),
                        None => guarded.push((h, vec![p])),
                    }
                } else if follow.is_some() {
                    merged.push(p);
                } else {
                    let replaces = replaces(&self.probes[p].action);
                    // A probe that calls its function calls it relocated.
                    let code = match replaces {
                        Replaces::Function => Some(self.place_continuation(ci, s)?),
                        _ => None,
                    };
                    if let Some(snippet) = self
                        .probe_snippet(ci, p, sp.live, code, sp.point, &mut frames)
                        .map_err(SiteError::Fatal)?
                    {
                        parts.push((snippet, replaces));
                    }
                }
            }
            if let Some(h) = follow {
                let extra = self.returns.hooks[h].follow();
                let snippet = self.follow_snippet(ci, &merged, extra, sp.live);
                parts.push((snippet.map_err(SiteError::Fatal)?, Replaces::Nothing));
            }
            for (h, probes) in guarded {
                let extra = weft_patch::mini::returns::Extra::GuardedExit {
                    stub: self.returns.hooks[h].stub(),
                };
                let snippet = self.follow_snippet(ci, &probes, extra, sp.live);
                parts.push((snippet.map_err(SiteError::Fatal)?, Replaces::Nothing));
            }
            // A snippet that clobbers nothing (a call with a fixed frame,
            // which finds the point's rsp at a known distance) stands
            // alone: bracketed with others' saves, its frame would move.
            let mut run: Vec<Snippet> = Vec::new();
            let end = (Snippet::concat(&[]), Replaces::Nothing);
            for (part, replaces) in parts.into_iter().chain([end]) {
                // A program that replaces the point's code needs its
                // registers: its snippet is a fixed frame's, alone.
                let alone = part.clobbers == RegSet::EMPTY || replaces != Replaces::Nothing;
                if alone && !run.is_empty() {
                    snippets.push(PointSnippet {
                        point: sp.point,
                        snippet: Snippet::concat(&std::mem::take(&mut run)),
                        live: sp.live,
                        on_branch_in: sp.on_branch_in,
                        replaces: Replaces::Nothing,
                    });
                }
                if alone {
                    if !part.instructions.is_empty() {
                        snippets.push(PointSnippet {
                            point: sp.point,
                            snippet: part,
                            live: sp.live,
                            on_branch_in: sp.on_branch_in,
                            replaces,
                        });
                    }
                } else {
                    run.push(part);
                }
            }
        }
        let cluster = self.clusters[ci];
        let site = &self.sites[s];
        let at = cluster.code + cluster.used;
        let tramp = match &site.whole_function {
            Some(func) => Trampoline::build_relocated_function(at, func, &site.choice, &snippets),
            None => Trampoline::build(at, &site.choice, &snippets),
        }
        .map_err(|e| SiteError::Skip(SkipReason::Trampoline(Arc::new(e))))?;
        let mut tramp = tramp;
        if let Some(hook) = site.hook {
            // The hook runs first, then the regular trampoline.
            let hook_at = (at + tramp.bytes.len() as u64).next_multiple_of(16);
            let code = match hook {
                Hook::Loads => {
                    let sync = cluster.data + self.layout.header.sync_offset;
                    weft_patch::load_hook::hook_code(hook_at, sync, tramp.entry)
                }
                Hook::Sigaction { restore_rt } => {
                    let kept = self.kept_signal_actions(cluster.data);
                    let unmasked = kept.iter().fold(0u64, |m, k| m | 1 << (k.signal - 1));
                    weft_patch::sigaction_hook::hook_code(
                        hook_at,
                        &kept,
                        unmasked,
                        restore_rt,
                        tramp.entry,
                    )
                }
                Hook::Unwind(kind) => weft_patch::mini::returns::unwind_hook(
                    hook_at,
                    self.thread_table(ci),
                    kind,
                    tramp.entry,
                ),
                Hook::FindFde => self.find_fde_hook(ci, hook_at, tramp.entry),
            }
            .map_err(|e| SiteError::Skip(SkipReason::Trampoline(Arc::new(e))))?;
            tramp.bytes.resize((hook_at - at) as usize, INT3);
            tramp.bytes.extend(code);
            tramp.entry = hook_at;
        }
        let used = (cluster.used + tramp.bytes.len() as u64).next_multiple_of(16);
        if used > CODE_BYTES {
            return Err(SiteError::Fatal(Error::Full {
                what: "trampoline code area",
            }));
        }
        let original = match &site.record {
            Some(r) => r.old.clone(),
            None => {
                let len = (site.choice.end - site.choice.start) as usize;
                let len = if site.choice.method == SpliceMethod::Trap {
                    1
                } else {
                    len
                };
                let addr = if site.choice.method == SpliceMethod::Trap {
                    site.choice.point
                } else {
                    site.choice.start
                };
                let in_memory = text
                    .read(tracee.memory(), addr, len)
                    .map_err(SiteError::Fatal)?;
                let in_file = self.modules[module].bytes_at_runtime(RemoteAddr(addr), len);
                if in_file != Some(in_memory.as_slice()) {
                    return Err(SiteError::Skip(SkipReason::CodeChanged));
                }
                in_memory
            }
        };
        let board = match site.choice.method {
            SpliceMethod::Springboard(b) if site.board.is_none() => {
                let len = weft_patch::JMP_LEN as usize;
                let in_memory = text
                    .read(tracee.memory(), b, len)
                    .map_err(SiteError::Fatal)?;
                let in_file = self.modules[module].bytes_at_runtime(RemoteAddr(b), len);
                if in_file != Some(in_memory.as_slice()) {
                    return Err(SiteError::Skip(SkipReason::PaddingChanged));
                }
                Some(in_memory)
            }
            SpliceMethod::Springboard(_) => site.board.as_ref().map(|r| r.old.clone()),
            _ => None,
        };
        let board = match board {
            Some(old) => Some(
                site.choice
                    .springboard_record(&old, tramp.entry)
                    .ok_or(SiteError::Skip(SkipReason::OutOfReach(tramp.entry)))?,
            ),
            None => None,
        };
        let record = site
            .choice
            .record(&original, tramp.entry)
            .ok_or(SiteError::Skip(SkipReason::OutOfReach(tramp.entry)))?;
        self.shm
            .write(cluster.code_offset + cluster.used, &tramp.bytes);
        self.clusters[ci].used = used;
        // The dispatch function's call is the SIGSYS handler's, made for
        // the program's `syscall` whose registers are in the signal frame.
        let dispatched = self.modules[module].name == weft_patch::dispatch::MODULE_NAME;
        frames.extend(
            tramp
                .relocated_syscalls
                .iter()
                .flat_map(|&(at, returns_to)| {
                    let rule = match dispatched {
                        true => Rule::Dispatched,
                        false => Rule::Point {
                            cfa_offset: 0,
                            returns_to,
                        },
                    };
                    Frame::at_syscall(at, rule)
                }),
        );
        self.add_unwind_frames(ci, &frames);
        let site = &mut self.sites[s];
        site.record = Some(record);
        site.board = board;
        site.entry = tramp.entry;
        site.saves_state = tramp.saves_state;
        Ok(())
    }
}

/// What a probe's program does in place of its point's code: make its
/// system call (`Primitive::MakeCall`, or the SIGSYS handler for it:
/// `Primitive::ThroughHandler`), call its function
/// (`Primitive::CallFunction`), or nothing.
fn replaces(action: &Action) -> Replaces {
    let Action::Program(program) = action else {
        return Replaces::Nothing;
    };
    program
        .iter()
        .find_map(|g| match g.primitive {
            weft_plan::Primitive::MakeCall { .. } | weft_plan::Primitive::ThroughHandler { .. } => {
                Some(Replaces::Syscall)
            }
            weft_plan::Primitive::CallFunction { .. } => Some(Replaces::Function),
            _ => None,
        })
        .unwrap_or(Replaces::Nothing)
}
