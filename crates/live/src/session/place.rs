//! Placing: the splice each new point gets. A point inside a live site
//! joins its trampoline; otherwise the plain choice (`jmp` over a window,
//! or `int3`) is refined by the placement policy of `weft_patch::place`:
//! a trap where the window would overlap another splice, a relocated copy
//! of a function whose entry bytes hold branch targets, a springboard
//! where five bytes are not safe. The session keeps the bytes each live
//! site claims (its span) so no two splices overlap.

use super::prepare::{Part, PreparedProbe};
use super::*;
use weft_patch::{choose_splice, place as policy, Unsafe};

/// The stopped threads, as placing needs them during one episode.
pub(super) struct Stopped<'t> {
    tracee: &'t Tracee,
    pid: i32,
    /// Their pcs.
    pub(super) pcs: Vec<u64>,
    /// The words on their stacks, read the first time a function needs
    /// relocating.
    stacks: Option<Vec<u64>>,
}

impl<'t> Stopped<'t> {
    /// The threads of `tracee`.
    pub(super) fn new(tracee: &'t Tracee, pid: i32) -> Result<Stopped<'t>> {
        Ok(Stopped {
            tracee,
            pid,
            pcs: stacks::thread_pcs(tracee)?,
            stacks: None,
        })
    }

    /// A thread that blocks SIGTRAP, if any.
    fn sigtrap_blocker(&self) -> Option<i32> {
        self.tracee
            .threads()
            .into_iter()
            .find(|&tid| self.tracee.signal_blocked(tid, weft_abi::signal::SIGTRAP))
    }

    fn stack_words(&mut self) -> Result<&[u64]> {
        if self.stacks.is_none() {
            self.stacks = Some(stacks::stack_words(self.tracee, self.pid, 1 << 20)?);
        }
        Ok(self.stacks.as_deref().unwrap_or_default())
    }
}

/// Where a new point went.
pub(super) enum Placed {
    /// Into this site (new, or joined), to be built.
    Site(usize),
    /// Nowhere, for this reason.
    Skipped(SkipReason),
    /// Nowhere: not an instruction boundary, or not relocatable at all.
    Nowhere,
}

impl Session {
    /// Places `probe` at `point` of a prepared function: joins a live site
    /// or creates one, choosing its splice.
    pub(super) fn place(
        &mut self,
        threads: &mut Stopped<'_>,
        item: &PreparedProbe,
        part: &Part,
        point: u64,
        probe: usize,
        live: RegSet,
    ) -> Result<Placed> {
        let on_branch_in = item.kind != PointKind::Entry;
        let joined = self
            .site_at
            .get(&point)
            .copied()
            .or_else(|| self.site_containing(point));
        if let Some(s) = joined {
            self.add_point_to_site(s, point, probe, live, on_branch_in);
            self.site_at.insert(point, s);
            return Ok(Placed::Site(s));
        }
        if let Some(why) = self.blocked_by_other_site(point) {
            return Ok(Placed::Skipped(why));
        }
        let ctx = self.splice_context(item, part, &threads.pcs);
        let mut choice = match choose_splice(&ctx, point) {
            Some(Ok(c)) => c,
            Some(Err(why)) => return Ok(Placed::Skipped(SkipReason::Unsafe(why))),
            None => return Ok(Placed::Nowhere),
        };
        if choice.method == SpliceMethod::Jump && self.overlaps_active(choice.start, choice.end) {
            choice = policy::trap_fallback(&part.code, point).expect("point is a boundary");
        }
        let loop_head_entry =
            item.kind == PointKind::Entry && part.code.internal_targets().contains(&point);
        if loop_head_entry && self.overlaps_active(point + 1, part.code.end()) {
            return Ok(Placed::Skipped(SkipReason::LoopHeadOverSplices));
        }
        let mut whole_function = loop_head_entry.then(|| part.code.clone());
        if whole_function.is_none()
            && item.kind == PointKind::Entry
            && matches!(choice.why_trap, Some(Unsafe::BranchTargetInside(_)))
            && !self.overlaps_active(point, part.code.end())
        {
            // A branch target inside the entry's five bytes: a relocated
            // copy of the whole function needs no window of its own.
            let targets = self.modules[item.module].branch_targets();
            let pcs = threads.pcs.clone();
            let stacks = threads.stack_words()?;
            if let Some(c) = policy::relocation_window(&part.code, point, targets, &pcs, stacks) {
                choice = c;
                whole_function = Some(part.code.clone());
            }
        }
        if whole_function.is_none()
            && choice.method == SpliceMethod::Trap
            && matches!(
                choice.why_trap,
                Some(Unsafe::TooShort) | Some(Unsafe::BranchTargetInside(_))
            )
        {
            let ctx = self.splice_context(item, part, &threads.pcs);
            let claimed =
                |start, end| self.overlaps_active(start, end) || self.rebuilt_covers(start, end);
            if let Some(short) = policy::springboard(
                &ctx,
                point,
                self.modules[item.module].padding_runs(),
                &claimed,
            ) {
                choice = short;
            }
        }
        if self.force_int3 && whole_function.is_none() && choice.method != SpliceMethod::Trap {
            choice = policy::trap_fallback(&part.code, point).expect("point is a boundary");
            choice.why_trap = Some(Unsafe::Forced);
        }
        if whole_function.is_none() && choice.method == SpliceMethod::Trap {
            if let Some(tid) = threads.sigtrap_blocker() {
                // The kernel forces an int3's SIGTRAP on a thread that
                // blocks it by resetting the action to the default: death.
                let forced = choice.why_trap == Some(Unsafe::Forced);
                return Ok(Placed::Skipped(SkipReason::SigtrapBlocked { tid, forced }));
            }
        }
        let s = self.sites.len();
        let span = match (&whole_function, choice.method) {
            (Some(f), _) => (choice.start, f.end()),
            (None, SpliceMethod::Trap) => (point, point + 1),
            (None, _) => (choice.start, choice.end),
        };
        self.spans.insert(span.0, (span.1, s));
        if let SpliceMethod::Springboard(board) = choice.method {
            self.spans.insert(board, (board + weft_patch::JMP_LEN, s));
        }
        self.sites.push(Site {
            module: item.module,
            choice,
            points: vec![SitePoint {
                point,
                probes: vec![probe],
                live,
                on_branch_in,
                pending: true,
            }],
            record: None,
            entry: 0,
            saves_state: false,
            active: false,
            whole_function,
            hook: None,
            board: None,
        });
        self.site_at.insert(point, s);
        Ok(Placed::Site(s))
    }

    /// What the splicer knows around the points of a prepared function.
    fn splice_context<'a>(
        &'a self,
        item: &'a PreparedProbe,
        part: &'a Part,
        pcs: &'a [u64],
    ) -> SpliceContext<'a> {
        SpliceContext {
            func: &part.code,
            targets: self.modules[item.module].branch_targets(),
            thread_pcs: pcs,
            after_end: &part.after_end,
        }
    }

    /// Adds a probe at `point` to site `s`, before the instruction at `point`.
    pub(super) fn add_point_to_site(
        &mut self,
        s: usize,
        point: u64,
        probe: usize,
        live: RegSet,
        on_branch_in: bool,
    ) {
        let site = &mut self.sites[s];
        match site
            .points
            .iter_mut()
            .find(|sp| sp.point == point && sp.on_branch_in == on_branch_in)
        {
            Some(sp) => {
                sp.probes.push(probe);
                sp.pending = true;
            }
            None => {
                site.points.push(SitePoint {
                    point,
                    probes: vec![probe],
                    live,
                    on_branch_in,
                    pending: true,
                });
                let main = site.choice.point;
                site.points.sort_by_key(|sp| (sp.point != main, sp.point));
            }
        }
    }

    /// A live site whose trampoline already executes the instruction at
    /// `point` on every path: one of its displaced instructions, or an
    /// instruction of the function it relocated.
    pub(super) fn site_containing(&self, point: u64) -> Option<usize> {
        let i = self.span_at(point)?;
        let s = &self.sites[i];
        let inside = match &s.whole_function {
            Some(f) => point > s.choice.point && f.index_of(point).is_some(),
            None => {
                s.choice.method.is_window() && s.choice.displaced.iter().any(|d| d.ip() == point)
            }
        };
        inside.then_some(i)
    }

    /// The live site whose claimed bytes include `addr`.
    pub(super) fn span_at(&self, addr: u64) -> Option<usize> {
        let (_, &(end, site)) = self.spans.range(..=addr).next_back()?;
        (addr < end).then_some(site)
    }

    /// Why `point` cannot get a site of its own, if another site is in the way.
    pub(super) fn blocked_by_other_site(&self, point: u64) -> Option<SkipReason> {
        let s = &self.sites[self.span_at(point)?];
        if s.whole_function.is_some() {
            return Some(SkipReason::InsideRelocatedFunction(point));
        }
        (point != s.choice.start).then_some(SkipReason::InsideOtherSplice {
            point,
            splice: s.choice.point,
        })
    }

    /// Whether any live site claims a byte of `[start, end)`.
    pub(super) fn overlaps_active(&self, start: u64, end: u64) -> bool {
        start < end
            && self
                .spans
                .range(..end)
                .next_back()
                .is_some_and(|(_, &(e, _))| e > start)
    }
}
