//! Sessions: probes requested by the user, the sites spliced for them, and
//! the episodes that apply and remove them.
//!
//! A *probe* is what the user asked for ("count calls of `work`"): one
//! counter. A *site* is one spliced instruction point; an exit probe has a
//! site per `ret` or tail call. Probes that land on the same point share a
//! site whose trampoline runs all their snippets (KernInst's compound code
//! patch).
//!
//! Work is split so the target is stopped as briefly as possible:
//! [`Session::prepare`] reads maps and files and analyses code while the
//! target runs; [`Session::apply`] chooses splice windows (it needs the
//! threads' pcs), writes trampolines into shared memory and splices.

mod loads;
pub(crate) mod rich;

use crate::module::Module;
use crate::shared::SharedMemory;
use crate::text::TextBatch;
use crate::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use weft_code::{FunctionCode, RegSet};
use weft_image::{near_misses, Function, Pattern};
use weft_patch::mini::{mini_trampoline, ThreadTable};
use weft_patch::region::{ring, threads, trap_table, Layout};
use weft_patch::{
    choose_splice, trap, PointSnippet, Snippet, SpliceChoice, SpliceContext, SpliceMethod,
    SpliceRecord, Trampoline, Unsafe, INT3,
};
use weft_plan::{
    Action, Allocate, EventInfo, Exhausted, Expr, Guarded, PointKind, PointSpec, Primitive,
    Resolved,
};
use weft_process::{ProcessMemory, RemoteAddr, Tracee};

const COUNTERS: u64 = 1 << 20;
const TRAPS: u64 = 1 << 16;
const CODE_AREA: u64 = 8 << 20;
const MAX_CLUSTERS: u64 = 16;
/// Distance every byte of a cluster keeps from every byte of its modules.
const REACH: u64 = (1 << 31) - (32 << 20);
const SIGTRAP: i32 = 5;

/// One spliced site, for reports and `--verbose`.
#[derive(Debug, Clone)]
pub struct PointInfo {
    /// Module file name.
    pub module: String,
    /// Function (and `+0xOFF` for an instruction point).
    pub function: String,
    /// Kind of probe.
    pub kind: PointKind,
    /// The instruction point.
    pub addr: u64,
    /// Jump or trap.
    pub method: SpliceMethod,
    /// Overwritten (jump) or relocated (trap) bytes.
    pub window: (u64, u64),
    /// Why a trap was needed.
    pub why_trap: Option<String>,
    /// Whether the trampoline saves flags or registers.
    pub saves_state: bool,
    /// Whether it is currently spliced.
    pub active: bool,
    /// Whether the trampoline runs a relocated copy of the whole function.
    pub relocated_function: bool,
    /// The point whose splice this one rides on, if it lies inside it.
    pub shares_splice_of: Option<u64>,
}

/// A point weft could not instrument, and why.
#[derive(Debug, Clone)]
pub struct SkippedPoint {
    /// Module.
    pub module: String,
    /// Function.
    pub function: String,
    /// Why.
    pub why: String,
}

/// What [`Session::apply`] did.
#[derive(Debug, Default, Clone)]
pub struct AddReport {
    /// New probes.
    pub probes: usize,
    /// New sites spliced with `jmp`.
    pub jumps: usize,
    /// New sites spliced with a `jmp rel8` to a springboard.
    pub springboards: usize,
    /// New sites spliced with `int3`.
    pub traps: usize,
    /// Points passed over.
    pub skipped: Vec<SkippedPoint>,
}

/// A counted probe and its current value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Count {
    /// Module file name.
    pub module: String,
    /// Function, or `NAME+0xOFF`.
    pub function: String,
    /// Kind.
    pub kind: PointKind,
    /// The count.
    pub calls: u64,
}

/// Probes resolved and analysed, ready to apply.
#[derive(Debug)]
pub struct Prepared {
    items: Vec<PreparedProbe>,
    skipped: Vec<SkippedPoint>,
    /// Module-qualified patterns whose module is not loaded (yet).
    pub pending: Vec<String>,
}

impl Prepared {
    /// Number of probes to apply.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[derive(Debug)]
struct PreparedProbe {
    module: usize,
    function_addr: u64,
    display: String,
    kind: PointKind,
    action: Action,
    tag: u64,
    points: Vec<u64>,
    code: FunctionCode,
    after_end: Vec<u8>,
}

#[derive(Debug)]
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

#[derive(Debug)]
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
    /// The library-load hook at ld.so's `_dl_debug_state`, not a probe.
    hook: bool,
    /// For a springboard splice: the `jmp rel32` written into the springboard.
    board: Option<SpliceRecord>,
}

#[derive(Debug, Clone, Copy)]
struct Cluster {
    data: u64,
    code: u64,
    code_offset: u64,
    used: u64,
    mapped: bool,
}

impl Cluster {
    fn range(&self) -> (u64, u64) {
        (self.data, self.code + CODE_AREA)
    }

    fn reaches(&self, lo: u64, hi: u64) -> bool {
        let (s, e) = self.range();
        e.max(hi) - s.min(lo) < REACH
    }
}

#[derive(Debug, Clone, Copy)]
struct TrapHandler {
    cluster: usize,
    installed: bool,
}

/// weft's instrumentation of one process.
#[derive(Debug)]
pub struct Session {
    pid: i32,
    shm: SharedMemory,
    layout: Layout,
    modules: Vec<Module>,
    clusters: Vec<Cluster>,
    probes: Vec<Probe>,
    sites: Vec<Site>,
    site_at: BTreeMap<u64, usize>,
    /// The bytes each live site claims, by start: (end, site). Never overlapping.
    spans: BTreeMap<u64, (u64, usize)>,
    probe_keys: std::collections::HashSet<(usize, u64, PointKind)>,
    /// The last library-load generation weft has handled.
    loads_acked: u32,
    next_counter: u64,
    next_timer: u64,
    events: Vec<EventInfo>,
    next_thread_counter: u64,
    trap: Option<TrapHandler>,
    /// Descriptors of the rich event sites weft has enabled (runtime addresses).
    enabled_sites: Vec<u64>,
    /// The ring function (see `mini::ring_function`), once placed.
    ring_function: Option<u64>,
    /// Whether rich events were ever enabled: weft's memory then stays
    /// mapped after detach, since a thread may be writing an event into it.
    rich_used: bool,
    /// Event timestamps: 0 for the TSC, else the target's vDSO clock_gettime.
    clock_gettime: u64,
    /// `--trace event:PROVIDER:NAME` requests (globs), also for libraries
    /// loaded later.
    event_requests: Vec<(String, String)>,
    /// Their strings' and byte arrays' cap.
    event_cap: u16,
    /// Where the C library keeps a thread's id (see
    /// `ThreadTable::tid_offset`), found at the first `apply`; 0 if unknown.
    tid_offset: Option<u32>,
}

impl Session {
    /// A session for the process `pid`; nothing is changed in it yet.
    pub fn new(pid: i32) -> Result<Session> {
        Session::with_ring_size(pid, ring::DEFAULT_DATA)
    }

    /// A session whose threads' event rings hold `ring_data` bytes each
    /// (a power of two from `ring::MIN_DATA` to `ring::MAX_DATA`).
    pub fn with_ring_size(pid: i32, ring_data: u64) -> Result<Session> {
        if !ring_data.is_power_of_two() || !(ring::MIN_DATA..=ring::MAX_DATA).contains(&ring_data) {
            return Err(Error::BadRingSize(ring_data));
        }
        let layout = Layout::new(COUNTERS, TRAPS, ring_data);
        let shm = SharedMemory::create((layout.size + MAX_CLUSTERS * CODE_AREA) as usize)?;
        shm.write(0, &layout.header_bytes());
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
            probe_keys: std::collections::HashSet::new(),
            loads_acked: 0,
            next_counter: 0,
            next_timer: 0,
            events: Vec::new(),
            next_thread_counter: 0,
            trap: None,
            enabled_sites: Vec::new(),
            ring_function: None,
            rich_used: false,
            clock_gettime: 0,
            event_requests: Vec::new(),
            event_cap: 128,
            tid_offset: None,
        })
    }

    /// The process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Modules known so far.
    pub fn modules(&self) -> &[Module] {
        &self.modules
    }

    /// Looks for modules mapped since the last call (libraries loaded by
    /// dlopen); returns how many are new.
    pub fn refresh_modules(&mut self) -> Result<usize> {
        let maps = weft_process::maps::read(self.pid)?;
        let known: Vec<PathBuf> = self.modules.iter().map(|m| m.path.clone()).collect();
        let new = Module::discover(self.pid, &maps, &known)?;
        let n = new.len();
        self.modules.extend(new);
        Ok(n)
    }

    /// Resolves patterns against the modules and analyses the matched
    /// functions. The target may be running. A pattern that matches
    /// nothing is an error naming near misses.
    pub fn prepare(&mut self, specs: &[PointSpec]) -> Result<Prepared> {
        self.refresh_modules()?;
        self.prepare_modules(specs, 0, true)
    }

    /// Resolves patterns against modules `first..`; with `require_match`, a
    /// pattern matching nothing there is an error.
    fn prepare_modules(
        &mut self,
        specs: &[PointSpec],
        first: usize,
        require_match: bool,
    ) -> Result<Prepared> {
        let mut items = Vec::new();
        let mut skipped = Vec::new();
        let mut pending = Vec::new();
        for spec in specs {
            let before = items.len() + skipped.len();
            for (mi, module) in self.modules.iter().enumerate().skip(first) {
                if !spec.pattern.matches_module(&module.name) {
                    continue;
                }
                for f in module.image.functions() {
                    // Report the function under the name the pattern matched.
                    let matched = if spec
                        .pattern
                        .matches_function(&f.name, f.demangled.as_deref())
                    {
                        f.display_name()
                    } else if let Some(a) = f
                        .aliases
                        .iter()
                        .find(|a| spec.pattern.matches_function(a, None))
                    {
                        a.as_str()
                    } else {
                        continue;
                    };
                    match prepare_probe(mi, module, f, matched, spec.kind) {
                        Ok(mut item) => {
                            item.action = spec.action.clone();
                            item.tag = spec.tag;
                            items.push(item)
                        }
                        Err(why) => skipped.push(SkippedPoint {
                            module: module.name.clone(),
                            function: f.display_name().to_string(),
                            why,
                        }),
                    }
                }
            }
            if require_match && items.len() + skipped.len() == before {
                let module_loaded = self
                    .modules
                    .iter()
                    .any(|m| spec.pattern.matches_module(&m.name));
                if spec.pattern.module.is_some() && !module_loaded {
                    // Like a pending breakpoint: the library may be loaded later.
                    pending.push(spec.pattern.to_string());
                    continue;
                }
                return Err(self.no_match(&spec.pattern));
            }
            if let (PointKind::Instruction(off), Some(s)) = (spec.kind, skipped.last()) {
                if items.len() == before && s.why.starts_with("not an instruction boundary") {
                    return Err(Error::NotABoundary {
                        function: s.function.clone(),
                        offset: off,
                        near: s.why.clone(),
                    });
                }
            }
        }
        // Analyse the module-wide branch targets now, while the target runs.
        for item in &items {
            let _ = self.modules[item.module].branch_targets();
        }
        Ok(Prepared {
            items,
            skipped,
            pending,
        })
    }

    fn no_match(&self, pattern: &Pattern) -> Error {
        let modules: Vec<&Module> = self
            .modules
            .iter()
            .filter(|m| pattern.matches_module(&m.name))
            .collect();
        let near = if modules.is_empty() {
            near_misses(
                pattern.module.as_deref().unwrap_or(""),
                self.modules.iter().map(|m| m.name.as_str()),
                5,
            )
        } else {
            let names = modules
                .iter()
                .flat_map(|m| m.image.functions().iter().map(|f| f.name.as_str()));
            near_misses(&pattern.function, names, 5)
        };
        Error::NoMatch {
            pattern: pattern.to_string(),
            near,
        }
    }

    /// Splices prepared probes into the stopped process.
    pub fn apply(&mut self, tracee: &mut Tracee, prepared: Prepared) -> Result<AddReport> {
        if self.tid_offset.is_none() {
            self.tid_offset = Some(self.find_tid_offset(tracee));
        }
        let mut report = AddReport {
            skipped: prepared.skipped,
            ..AddReport::default()
        };
        let pcs: Vec<u64> = tracee
            .thread_pcs()?
            .into_iter()
            .map(|(_, pc)| pc.0)
            .collect();
        let mut dirty: Vec<usize> = Vec::new();
        // Words on the threads' stacks (return addresses among them), read
        // only if some function needs relocating.
        let mut stacks: Option<Vec<u64>> = None;
        for item in prepared.items {
            let action = match &item.action {
                Action::Expand(expand) => {
                    let module = self.modules[item.module].name.clone();
                    let at = Resolved {
                        module: &module,
                        function: &item.display,
                        kind: item.kind,
                    };
                    Action::Program(expand.expand(&at, self)?)
                }
                other => other.clone(),
            };
            let counter = match action {
                // Expanded into a program just above.
                Action::Program(_) | Action::Expand(_) => None,
                Action::Count => {
                    if !self
                        .probe_keys
                        .insert((item.module, item.function_addr, item.kind))
                    {
                        continue;
                    }
                    Some(self.counter()?)
                }
            };
            let probe_id = self.probes.len();
            self.probes.push(Probe {
                module: item.module,
                display: item.display.clone(),
                kind: item.kind,
                action,
                counter,
                tag: item.tag,
                live: true,
            });
            report.probes += 1;
            let mut liveness: Option<weft_code::Liveness> = None;
            let on_branch_in = item.kind != PointKind::Entry;
            for &point in &item.points {
                // Counting clobbers only the flags: a short forward scan
                // usually proves them dead, sparing the whole-function
                // analysis; registers are then recorded as all live.
                let flags = RegSet(weft_code::STATUS_FLAGS);
                let live = if weft_code::flags_dead_by_scan(&item.code, point, flags) == Some(true)
                {
                    RegSet::ALL - flags
                } else {
                    liveness
                        .get_or_insert_with(|| item.code.liveness())
                        .live_before(point)
                        .unwrap_or(RegSet::ALL)
                };
                let joined = self
                    .site_at
                    .get(&point)
                    .copied()
                    .or_else(|| self.site_containing(point));
                if let Some(s) = joined {
                    self.add_point_to_site(s, point, probe_id, live, on_branch_in);
                    self.site_at.insert(point, s);
                    dirty.push(s);
                    continue;
                }
                if let Some(why) = self.blocked_by_other_site(point) {
                    report.skipped.push(SkippedPoint {
                        module: self.modules[item.module].name.clone(),
                        function: item.display.clone(),
                        why,
                    });
                    continue;
                }
                let module = &self.modules[item.module];
                let ctx = SpliceContext {
                    func: &item.code,
                    targets: module.branch_targets(),
                    thread_pcs: &pcs,
                    after_end: &item.after_end,
                };
                let mut choice = match choose_splice(&ctx, point) {
                    Some(Ok(c)) => c,
                    Some(Err(why)) => {
                        report.skipped.push(SkippedPoint {
                            module: module.name.clone(),
                            function: item.display.clone(),
                            why: why.to_string(),
                        });
                        continue;
                    }
                    None => continue,
                };
                if choice.method == SpliceMethod::Jump
                    && self.overlaps_active(choice.start, choice.end)
                {
                    let k = item.code.index_of(point).expect("point is a boundary");
                    let insn = item.code.instructions()[k];
                    choice = SpliceChoice {
                        method: SpliceMethod::Trap,
                        point,
                        start: point,
                        end: insn.next_ip(),
                        displaced: vec![insn],
                        why_trap: Some(Unsafe::BranchTargetInside(point)),
                    };
                }
                let loop_head_entry =
                    item.kind == PointKind::Entry && item.code.internal_targets().contains(&point);
                if loop_head_entry && self.overlaps_active(point + 1, item.code.end()) {
                    report.skipped.push(SkippedPoint {
                        module: self.modules[item.module].name.clone(),
                        function: item.display.clone(),
                        why: "its entry is a loop head, so its trampoline must run a relocated copy of \
                              the function, which would bypass the points already spliced inside it"
                            .into(),
                    });
                    continue;
                }
                let mut whole_function = loop_head_entry.then(|| item.code.clone());
                if whole_function.is_none()
                    && item.kind == PointKind::Entry
                    && matches!(choice.why_trap, Some(Unsafe::BranchTargetInside(_)))
                    && !self.overlaps_active(point, item.code.end())
                {
                    // A branch target inside the entry's five bytes: a relocated
                    // copy of the whole function needs no window of its own.
                    if stacks.is_none() {
                        stacks = Some(stack_words(tracee, self.pid)?);
                    }
                    let module = &self.modules[item.module];
                    let stacks = stacks.as_deref().unwrap_or(&[]);
                    if let Some(c) =
                        relocation_window(&item.code, point, module.branch_targets(), &pcs, stacks)
                    {
                        choice = c;
                        whole_function = Some(item.code.clone());
                    }
                }
                if whole_function.is_none()
                    && choice.method == SpliceMethod::Trap
                    && matches!(
                        choice.why_trap,
                        Some(Unsafe::TooShort) | Some(Unsafe::BranchTargetInside(_))
                    )
                {
                    if let Some(short) = self.springboard_choice(&item, point, &pcs) {
                        choice = short;
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
                        probes: vec![probe_id],
                        live,
                        on_branch_in,
                        pending: true,
                    }],
                    record: None,
                    entry: 0,
                    saves_state: false,
                    active: false,
                    whole_function,
                    hook: false,
                    board: None,
                });
                self.site_at.insert(point, s);
                dirty.push(s);
            }
        }
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
        if let Some(&first_trap) = to_write
            .iter()
            .find(|&&s| self.sites[s].choice.method == SpliceMethod::Trap)
        {
            let ci = self.ensure_cluster(tracee, self.sites[first_trap].module)?;
            self.install_trap_handler(tracee, ci)?;
        }
        let newly: Vec<bool> = to_write.iter().map(|&s| !self.sites[s].active).collect();
        for &s in &to_write {
            let site = &mut self.sites[s];
            if site.choice.method == SpliceMethod::Trap {
                site.active = true;
            }
        }
        self.write_trap_table();
        for (&s, new) in to_write.iter().zip(newly) {
            let site = &mut self.sites[s];
            if let Some(board) = &site.board {
                text.write(tracee.memory(), board.addr, &board.new)?;
            }
            let record = site.record.as_ref().expect("built");
            text.write(tracee.memory(), record.addr, &record.new)?;
            if new {
                match site.choice.method {
                    SpliceMethod::Jump => report.jumps += 1,
                    SpliceMethod::Springboard(_) => report.springboards += 1,
                    SpliceMethod::Trap => report.traps += 1,
                }
            }
            site.active = true;
            for sp in site.points.iter_mut() {
                sp.pending = false;
            }
        }
        text.flush(tracee.memory())?;
        Ok(report)
    }

    /// Adds a probe at `point` to site `s`, before the instruction at `point`.
    fn add_point_to_site(
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
    fn site_containing(&self, point: u64) -> Option<usize> {
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

    /// Builds (or rebuilds) the trampoline of a site and its splice record.
    fn build_site(
        &mut self,
        tracee: &mut Tracee,
        text: &mut TextBatch,
        s: usize,
    ) -> Result<(), SiteError> {
        let module = self.sites[s].module;
        let ci = self
            .ensure_cluster(tracee, module)
            .map_err(SiteError::Fatal)?;
        let cluster = self.clusters[ci];
        let mut snippets: Vec<PointSnippet> = Vec::new();
        for sp in self.sites[s].points.clone() {
            let mut parts: Vec<Snippet> = Vec::new();
            for &p in &sp.probes {
                let probe = &self.probes[p];
                match (&probe.action, probe.counter) {
                    (Action::Count, Some(c)) => {
                        parts.push(Snippet::count(cluster.data + self.layout.counter(c)))
                    }
                    (Action::Program(program), _) => {
                        let program = self.resolve_program(program, &cluster);
                        // An unguarded constant addCounter needs no mini-trampoline.
                        if let [Guarded {
                            predicate: None,
                            primitive: Primitive::AddCounter(addr, Expr::Const(k)),
                        }] = program.as_slice()
                        {
                            if let Ok(k) = i32::try_from(*k) {
                                parts.push(Snippet::add(*addr, k));
                                continue;
                            }
                        }
                        let mini = self.place_mini(ci, &program).map_err(SiteError::Fatal)?;
                        parts.push(if weft_plan::reads_point_registers(&program) {
                            Snippet::call_mini_fixed_frame(mini)
                        } else {
                            Snippet::call_mini(mini)
                        });
                    }
                    // Expansions are stored as programs; counts always have a counter.
                    (Action::Count, None) | (Action::Expand(_), _) => {}
                }
            }
            snippets.push(PointSnippet {
                point: sp.point,
                snippet: Snippet::concat(&parts),
                live: sp.live,
                on_branch_in: sp.on_branch_in,
            });
        }
        let cluster = self.clusters[ci];
        let site = &self.sites[s];
        let at = cluster.code + cluster.used;
        let tramp = match &site.whole_function {
            Some(func) => Trampoline::build_relocated_function(at, func, &site.choice, &snippets),
            None => Trampoline::build(at, &site.choice, &snippets),
        }
        .map_err(|e| SiteError::Skip(e.to_string()))?;
        let mut tramp = tramp;
        if site.hook {
            // The handshake runs first, then the regular trampoline.
            let hook_at = (at + tramp.bytes.len() as u64).next_multiple_of(16);
            let sync = cluster.data + self.layout.header.sync_offset;
            let code = weft_patch::load_hook::hook_code(hook_at, sync, tramp.entry)
                .map_err(|e| SiteError::Skip(e.to_string()))?;
            tramp.bytes.resize((hook_at - at) as usize, INT3);
            tramp.bytes.extend(code);
            tramp.entry = hook_at;
        }
        let used = (cluster.used + tramp.bytes.len() as u64).next_multiple_of(16);
        if used > CODE_AREA {
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
                let in_file = self.modules[module].bytes_at_runtime(addr, len);
                if in_file != Some(in_memory.as_slice()) {
                    return Err(SiteError::Skip(
                        "code in memory differs from the file (patched by another tool, or relocated text)".into(),
                    ));
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
                if self.modules[module].bytes_at_runtime(b, len) != Some(in_memory.as_slice()) {
                    return Err(SiteError::Skip(
                        "springboard padding differs from the file".into(),
                    ));
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
                    .ok_or_else(|| {
                        SiteError::Skip(format!(
                            "trampoline at {:#x} is out of jmp reach",
                            tramp.entry
                        ))
                    })?,
            ),
            None => None,
        };
        let record = site.choice.record(&original, tramp.entry).ok_or_else(|| {
            SiteError::Skip(format!(
                "trampoline at {:#x} is out of jmp reach",
                tramp.entry
            ))
        })?;
        self.shm
            .write(cluster.code_offset + cluster.used, &tramp.bytes);
        self.clusters[ci].used = used;
        let site = &mut self.sites[s];
        site.record = Some(record);
        site.board = board;
        site.entry = tramp.entry;
        site.saves_state = tramp.saves_state;
        Ok(())
    }

    /// Rewrites the trap table from the active trap sites.
    fn write_trap_table(&mut self) {
        let entries: Vec<(u64, u64)> = self
            .sites
            .iter()
            .filter(|s| s.active && s.choice.method == SpliceMethod::Trap)
            .map(|s| (s.choice.point, s.entry))
            .collect();
        let base = self.layout.header.trap_offset;
        let count = entries.len() as u64;
        // Shrink the count first so the handler never reads a half-written entry.
        self.shm.store_u64(base + trap_table::COUNT, 0);
        self.shm
            .write(base + trap_table::ENTRIES, &trap::table_entries(entries));
        self.shm.store_u64(base + trap_table::COUNT, count);
    }

    /// A springboard splice for `point`, when a two-byte window is safe and
    /// unused padding lies within a `jmp rel8` of it.
    fn springboard_choice(
        &self,
        item: &PreparedProbe,
        point: u64,
        pcs: &[u64],
    ) -> Option<SpliceChoice> {
        let module = &self.modules[item.module];
        let ctx = SpliceContext {
            func: &item.code,
            targets: module.branch_targets(),
            thread_pcs: pcs,
            after_end: &item.after_end,
        };
        let mut short = weft_patch::choose_short_window(&ctx, point)?;
        if self.overlaps_active(short.start, short.end) {
            return None;
        }
        let from = short.start + weft_patch::SHORT_JMP_LEN;
        let lo = from.saturating_sub(weft_patch::SHORT_JMP_BACKWARD);
        let hi = from + weft_patch::SHORT_JMP_FORWARD;
        let runs = module.padding_runs();
        let first = runs.partition_point(|&(_, end)| end <= lo);
        for &(start, end) in runs[first..].iter().take_while(|&&(start, _)| start <= hi) {
            let mut b = start.max(lo);
            while b + weft_patch::JMP_LEN <= end && b <= hi {
                let claimed = self.overlaps_active(b, b + weft_patch::JMP_LEN)
                    || (b < short.end && short.start < b + weft_patch::JMP_LEN);
                if !claimed {
                    short.method = SpliceMethod::Springboard(b);
                    return Some(short);
                }
                b += 1;
            }
        }
        None
    }

    /// The live site whose claimed bytes include `addr`.
    fn span_at(&self, addr: u64) -> Option<usize> {
        let (_, &(end, site)) = self.spans.range(..=addr).next_back()?;
        (addr < end).then_some(site)
    }

    /// Why `point` cannot get a site of its own, if another site is in the way.
    fn blocked_by_other_site(&self, point: u64) -> Option<String> {
        let s = &self.sites[self.span_at(point)?];
        if s.whole_function.is_some() {
            return Some(format!(
                "{point:#x} is inside a function whose entry probe runs a relocated copy of it"
            ));
        }
        (point != s.choice.start).then(|| {
            format!(
                "{point:#x} is inside the splice of another point ({:#x})",
                s.choice.point
            )
        })
    }

    /// Whether any live site claims a byte of `[start, end)`.
    fn overlaps_active(&self, start: u64, end: u64) -> bool {
        start < end
            && self
                .spans
                .range(..end)
                .next_back()
                .is_some_and(|(_, &(e, _))| e > start)
    }
}

enum SiteError {
    Skip(String),
    Fatal(Error),
}

/// A jump window at an entry `point` for a trampoline that runs a relocated
/// copy of the whole function, when that is safe although branch targets
/// lie inside the window: the function has no jump tables or other indirect
/// jumps (which would lead back into the original body), only its own
/// branches reach into the window, and no thread is inside the function or
/// will return into it.
fn relocation_window(
    code: &FunctionCode,
    point: u64,
    targets: &weft_code::BranchTargets,
    pcs: &[u64],
    stack_words: &[u64],
) -> Option<SpliceChoice> {
    if !code.jump_tables().is_empty() || code.has_unresolved_indirect_jump() {
        return None;
    }
    let insns = code.instructions();
    let k = code.index_of(point)?;
    if insns[k..].iter().any(|i| {
        weft_patch::can_relocate(i).is_some()
            && !matches!(
                i.flow_control(),
                iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
            )
    }) {
        return None;
    }
    let mut end = point;
    let mut displaced = Vec::new();
    for i in &insns[k..] {
        if end >= point + weft_patch::JMP_LEN {
            break;
        }
        if i.ip() != end {
            return None;
        }
        end = i.next_ip();
        displaced.push(*i);
    }
    if end < point + weft_patch::JMP_LEN {
        return None;
    }
    let internal = code.internal_targets();
    if (point + 1..end).any(|a| targets.contains(a) && !internal.contains(&a)) {
        return None;
    }
    let inside = |a: u64| a >= code.start() && a < code.end();
    if pcs
        .iter()
        .any(|&pc| inside(pc) && pc != point && pc != code.start())
    {
        return None;
    }
    let from = stack_words.partition_point(|&w| w < code.start());
    if stack_words.get(from).is_some_and(|&w| w < code.end()) {
        return None;
    }
    Some(SpliceChoice {
        method: SpliceMethod::Jump,
        point,
        start: point,
        end,
        displaced,
        why_trap: None,
    })
}

/// Every 8-byte word between each thread's stack pointer and the end of its
/// stack mapping (at most 1 MiB each), sorted: a superset of the return
/// addresses on the stacks.
fn stack_words(tracee: &Tracee, pid: i32) -> Result<Vec<u64>> {
    let maps = weft_process::maps::read(pid)?;
    let mut words = Vec::new();
    for tid in tracee.threads() {
        let rsp = tracee.registers(tid)?.rsp;
        let Some(stack) = maps.iter().find(|m| rsp >= m.start.0 && rsp < m.end.0) else {
            continue;
        };
        let len = (stack.end.0 - rsp).min(1 << 20) as usize;
        if let Ok(bytes) = tracee.memory().read_vec(RemoteAddr(rsp), len) {
            words.extend(
                bytes
                    .chunks_exact(8)
                    .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes"))),
            );
        }
    }
    words.sort_unstable();
    words.dedup();
    Ok(words)
}

/// Resolves one function into a prepared probe, or says why not.
fn prepare_probe(
    mi: usize,
    module: &Module,
    f: &Function,
    name: &str,
    kind: PointKind,
) -> Result<PreparedProbe, String> {
    if f.ifunc {
        return Err(
            "an IFUNC resolver (the implementation chosen at run time is another function)".into(),
        );
    }
    let code = module
        .function_code(f)
        .ok_or("its bytes are not in the file")?;
    let insns = code.instructions();
    if insns.is_empty() {
        return Err("no decodable instruction".into());
    }
    let start = code.start();
    let (points, display) = match kind {
        PointKind::Entry => {
            let first = &insns[0];
            let p = if first.code() == iced_x86::Code::Endbr64 && insns.len() > 1 {
                insns[1].ip()
            } else {
                start
            };
            (vec![p], name.to_string())
        }
        PointKind::Exit => {
            let exits = code.exits();
            if exits.is_empty() {
                return Err("no ret or tail call (the function never returns)".into());
            }
            (exits, name.to_string())
        }
        PointKind::Instruction(off) => {
            let p = start + off;
            if code.index_of(p).is_none() {
                let before = insns
                    .iter()
                    .rev()
                    .find(|i| i.ip() < p)
                    .map(|i| i.ip() - start);
                let after = insns.iter().find(|i| i.ip() > p).map(|i| i.ip() - start);
                let fmt = |o: Option<u64>| o.map_or("none".to_string(), |o| format!("+{o:#x}"));
                return Err(format!(
                    "not an instruction boundary; nearest: {} and {}",
                    fmt(before),
                    fmt(after)
                ));
            }
            (vec![p], format!("{name}+{off:#x}"))
        }
    };
    Ok(PreparedProbe {
        module: mi,
        function_addr: f.addr,
        display,
        kind,
        action: Action::Count,
        tag: 0,
        points,
        after_end: module.bytes_after(f).to_vec(),
        code,
    })
}

impl Session {
    /// A cluster (patch memory next to the module) that reaches `module`,
    /// mapping a new one when none does.
    fn ensure_cluster(&mut self, tracee: &mut Tracee, module: usize) -> Result<usize> {
        let (lo, hi) = (self.modules[module].lo, self.modules[module].hi);
        if let Some(i) = self
            .clusters
            .iter()
            .position(|c| c.mapped && c.reaches(lo, hi))
        {
            return Ok(i);
        }
        let index = self.clusters.len() as u64;
        if index >= MAX_CLUSTERS {
            return Err(Error::Full {
                what: "clusters of patch memory",
            });
        }
        let maps = weft_process::maps::read(self.pid)?;
        let size = self.layout.size + CODE_AREA;
        let addr =
            weft_process::maps::free_range_near(&maps, lo, hi, size, REACH).ok_or_else(|| {
                Error::NoRoom {
                    module: self.modules[module].name.clone(),
                }
            })?;
        let fd = self.open_shared_in_target(tracee)?;
        let mapped = (|| -> Result<()> {
            let data = tracee.remote_mmap(
                Some(RemoteAddr(addr)),
                self.layout.size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )?;
            let code = tracee.remote_mmap(
                Some(RemoteAddr(addr + self.layout.size)),
                CODE_AREA,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_SHARED,
                fd,
                self.layout.size + index * CODE_AREA,
            )?;
            if data.0 != addr || code.0 != addr + self.layout.size {
                return Err(Error::NoRoom {
                    module: self.modules[module].name.clone(),
                });
            }
            Ok(())
        })();
        tracee.remote_close(fd)?;
        mapped?;
        self.clusters.push(Cluster {
            data: addr,
            code: addr + self.layout.size,
            code_offset: self.layout.size + index * CODE_AREA,
            used: 0,
            mapped: true,
        });
        if self.clusters.len() == 1 {
            // A trampoline-free gadget for later remote system calls: `syscall; int3`.
            let at = self.alloc_code(0, &[0x0f, 0x05, 0xcc])?;
            tracee.set_syscall_gadget(RemoteAddr(at));
        }
        Ok(self.clusters.len() - 1)
    }

    /// Places bytes in a cluster's code area; returns their target address.
    fn alloc_code(&mut self, ci: usize, bytes: &[u8]) -> Result<u64> {
        let c = &mut self.clusters[ci];
        let at = c.code + c.used;
        let used = (c.used + bytes.len() as u64).next_multiple_of(16);
        if used > CODE_AREA {
            return Err(Error::Full {
                what: "trampoline code area",
            });
        }
        self.shm.write(c.code_offset + c.used, bytes);
        c.used = used;
        Ok(at)
    }

    /// Opens the shared file inside the target and returns the target's fd.
    fn open_shared_in_target(&mut self, tracee: &mut Tracee) -> Result<i32> {
        let first = !self.clusters.iter().any(|c| c.mapped);
        match self.try_open_in_target(tracee) {
            Ok(fd) => Ok(fd),
            Err(Error::Process(weft_process::Error::RemoteSyscall { source, .. }))
                if first
                    && matches!(
                        source.raw_os_error(),
                        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ENOENT)
                    ) =>
            {
                // The target (another user, or another pid namespace) cannot open
                // weft's /proc/PID/fd: share a /dev/shm file it owns instead.
                let (uid, gid) = weft_process::process_ids(self.pid)?;
                let shm = SharedMemory::create_in_dev_shm(self.shm.size(), uid, gid)?;
                shm.write(0, &self.layout.header_bytes());
                self.shm = shm;
                self.try_open_in_target(tracee)
            }
            Err(e) => Err(e),
        }
    }

    fn try_open_in_target(&mut self, tracee: &mut Tracee) -> Result<i32> {
        let mut path = self.shm.target_path().as_bytes().to_vec();
        path.push(0);
        if let Some(c) = self.clusters.iter().find(|c| c.mapped) {
            let scratch = self.layout.header.scratch_offset;
            self.shm.write(scratch, &path);
            return Ok(
                tracee.remote_open(RemoteAddr(c.data + scratch), libc::O_RDWR | libc::O_CLOEXEC)?
            );
        }
        let page = tracee.remote_mmap(
            None,
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        let opened = tracee
            .memory()
            .write(page, &path)
            .map_err(Error::from)
            .and_then(|_| {
                tracee
                    .remote_open(page, libc::O_RDWR | libc::O_CLOEXEC)
                    .map_err(Error::from)
            });
        tracee.remote_munmap(page, 4096)?;
        opened
    }

    /// Generates and installs weft's SIGTRAP handler (once).
    fn install_trap_handler(&mut self, tracee: &mut Tracee, ci: usize) -> Result<()> {
        if self.trap.is_some_and(|t| t.installed) {
            return Ok(());
        }
        let base = self.layout.header.trap_offset;
        let cluster = self.clusters[ci];
        let at = cluster.code + cluster.used;
        let code = trap::handler_code(at, cluster.data + base)?;
        let placed = self.alloc_code(ci, &code.bytes)?;
        debug_assert_eq!(placed, at);
        self.shm.write(
            base + trap_table::NEW_ACTION,
            &trap::kernel_sigaction(code.handler, trap::HANDLER_FLAGS, code.restorer, 0),
        );
        self.shm.write(
            base + trap_table::DEFAULT_ACTION,
            &trap::kernel_sigaction(0, trap::RESTORER_FLAG, code.restorer, 0),
        );
        tracee.remote_sigaction(
            SIGTRAP,
            RemoteAddr(cluster.data + base + trap_table::NEW_ACTION),
            RemoteAddr(cluster.data + base + trap_table::OLD_ACTION),
        )?;
        self.trap = Some(TrapHandler {
            cluster: ci,
            installed: true,
        });
        Ok(())
    }

    /// Removes every splice, restoring the original bytes, and takes weft's
    /// memory out of the target when no thread can still be using it.
    /// Returns what was left behind, if anything, for the user to know.
    pub fn remove_all(&mut self, tracee: &mut Tracee) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        let mut removed_traps = Vec::new();
        self.release_all_loaders();
        self.disable_event_sites(tracee)?;
        let mut text = TextBatch::new(self.pid)?;
        let mem = tracee.memory();
        for site in self.sites.iter_mut().filter(|s| s.active) {
            let record = site.record.as_ref().expect("active sites have records");
            let mut restore = |r: &SpliceRecord, notes: &mut Vec<String>| -> Result<()> {
                match text.read(mem, r.addr, r.new.len()) {
                    Ok(bytes) if bytes == r.new => text.write(mem, r.addr, &r.old),
                    Ok(_) => {
                        notes.push(format!(
                            "code at {:#x} changed since weft spliced it; left as it is",
                            r.addr
                        ));
                        Ok(())
                    }
                    Err(Error::Process(e)) if e.is_gone() => Err(Error::Process(e)),
                    Err(_) => {
                        notes.push(format!(
                            "code at {:#x} is no longer mapped (library unloaded?)",
                            r.addr
                        ));
                        Ok(())
                    }
                }
            };
            restore(record, &mut notes)?;
            if let Some(board) = &site.board {
                restore(board, &mut notes)?;
            }
            if site.choice.method == SpliceMethod::Trap {
                removed_traps.push(site.choice.point);
            }
            site.active = false;
        }
        text.flush(mem)?;
        self.site_at.clear();
        self.spans.clear();
        self.write_trap_table();
        if self.trap.is_some_and(|t| t.installed) {
            // A thread that hit a removed int3 and is about to take SIGTRAP:
            // drop the signal and back it up to re-execute the original byte.
            let mut queued = false;
            for tid in tracee.threads() {
                if tracee.pending_signals(tid).contains(&SIGTRAP) {
                    let mut regs = tracee.registers(tid)?;
                    if removed_traps.contains(&(regs.rip.wrapping_sub(1))) {
                        regs.rip -= 1;
                        tracee.set_registers(tid, &regs)?;
                        tracee.discard_signal(tid, SIGTRAP);
                    }
                }
                queued |= tracee.signal_queued(tid, SIGTRAP);
            }
            if queued {
                notes.push(
                    "a SIGTRAP is still queued: weft's handler stays installed to absorb it".into(),
                );
            } else {
                let t = self.trap.expect("checked");
                let c = self.clusters[t.cluster];
                let old =
                    RemoteAddr(c.data + self.layout.header.trap_offset + trap_table::OLD_ACTION);
                tracee.remote_sigaction(SIGTRAP, old, RemoteAddr(0))?;
                self.trap = Some(TrapHandler {
                    installed: false,
                    ..t
                });
            }
        }
        self.unmap_clusters(tracee, &mut notes)?;
        Ok(notes)
    }

    /// Unmaps weft's memory from the target unless a thread's pc, or a
    /// word near the top of its stack (a signal frame's saved pc), points
    /// into it.
    fn unmap_clusters(&mut self, tracee: &mut Tracee, notes: &mut Vec<String>) -> Result<()> {
        if self.trap.is_some_and(|t| t.installed) {
            return Ok(());
        }
        if self.rich_used {
            notes.push(
                "rich events were traced: weft's memory stays mapped in the target, since a \
                 thread may still be writing an event into it"
                    .into(),
            );
            return Ok(());
        }
        let ranges: Vec<(u64, u64)> = self
            .clusters
            .iter()
            .filter(|c| c.mapped)
            .map(|c| c.range())
            .collect();
        if ranges.is_empty() {
            return Ok(());
        }
        // The splices are gone, so a thread inside a trampoline leaves it
        // within nanoseconds of running again: let them run briefly.
        const ATTEMPTS: u32 = 50;
        for attempt in 1..=ATTEMPTS {
            match self.memory_in_use(tracee, &ranges)? {
                None => break,
                Some(why) if attempt == ATTEMPTS => {
                    notes.push(format!("{why}; weft's memory stays mapped in the target"));
                    return Ok(());
                }
                Some(_) => {
                    tracee.let_run(std::time::Duration::from_micros(200 * u64::from(attempt)))?
                }
            }
        }
        // The syscall gadget lives in the first cluster: make remote calls borrow bytes again.
        tracee.clear_syscall_gadget();
        for c in self.clusters.iter_mut().filter(|c| c.mapped) {
            tracee.remote_munmap(RemoteAddr(c.data), self.layout.size)?;
            tracee.remote_munmap(RemoteAddr(c.code), CODE_AREA)?;
            c.mapped = false;
        }
        Ok(())
    }

    /// Why weft's memory may still be in use: a thread's pc in it, or a word
    /// near the top of a thread's stack (a signal frame's saved pc) pointing into it.
    fn memory_in_use(&self, tracee: &Tracee, ranges: &[(u64, u64)]) -> Result<Option<String>> {
        let inside = |v: u64| ranges.iter().any(|&(s, e)| v >= s && v < e);
        let maps = weft_process::maps::read(self.pid)?;
        for tid in tracee.threads() {
            let regs = tracee.registers(tid)?;
            if inside(regs.rip) {
                return Ok(Some(format!("thread {tid} is inside weft's code")));
            }
            let Some(stack) = maps
                .iter()
                .find(|m| regs.rsp >= m.start.0 && regs.rsp < m.end.0)
            else {
                continue;
            };
            let len = (stack.end.0 - regs.rsp).min(64 << 10) as usize;
            if let Ok(bytes) = tracee.memory().read_vec(RemoteAddr(regs.rsp), len) {
                if bytes
                    .chunks_exact(8)
                    .any(|w| inside(u64::from_le_bytes(w.try_into().expect("8 bytes"))))
                {
                    return Ok(Some(format!("thread {tid}'s stack refers to weft's code")));
                }
            }
        }
        Ok(None)
    }

    /// The current value of every probe.
    pub fn counts(&self) -> Vec<Count> {
        self.probes
            .iter()
            .filter_map(|p| {
                Some(Count {
                    module: self.modules[p.module].name.clone(),
                    function: p.display.clone(),
                    kind: p.kind,
                    calls: self.shm.load_u64(self.layout.counter(p.counter?)),
                })
            })
            .collect()
    }

    /// Every spliced point, for `--verbose`: one row per point of each site.
    pub fn points(&self) -> Vec<PointInfo> {
        let mut out = Vec::new();
        for s in self.sites.iter().filter(|s| s.record.is_some()) {
            for sp in &s.points {
                let p = &self.probes[sp.probes[0]];
                out.push(PointInfo {
                    module: self.modules[s.module].name.clone(),
                    function: p.display.clone(),
                    kind: p.kind,
                    addr: sp.point,
                    method: s.choice.method,
                    window: (s.choice.start, s.choice.end),
                    why_trap: s.choice.why_trap.map(|w| w.to_string()),
                    saves_state: s.saves_state,
                    active: s.active,
                    relocated_function: s.whole_function.is_some(),
                    shares_splice_of: (sp.point != s.choice.point).then_some(s.choice.point),
                });
            }
        }
        out
    }

    /// Runtime address ranges of weft's memory in the target (data, code) per cluster.
    pub fn mapped_ranges(&self) -> Vec<(u64, u64)> {
        self.clusters
            .iter()
            .filter(|c| c.mapped)
            .map(|c| c.range())
            .collect()
    }
}

/// The resources of probe plans, in the shared region.
impl Allocate for Session {
    fn counter(&mut self) -> Result<u64, Exhausted> {
        let c = self.next_counter;
        if c >= self.layout.header.counters_capacity {
            return Err(Exhausted { what: "counters" });
        }
        self.next_counter += 1;
        self.shm.store_u64(self.layout.counter(c), 0);
        Ok(c)
    }

    fn timer(&mut self) -> Result<u64, Exhausted> {
        let t = self.next_timer;
        if t >= threads::TIMERS {
            return Err(Exhausted { what: "timers" });
        }
        self.next_timer += 1;
        Ok(t)
    }

    fn thread_counter(&mut self) -> Result<u64, Exhausted> {
        let c = self.next_thread_counter;
        if c >= threads::COUNTERS {
            return Err(Exhausted {
                what: "per-thread counters",
            });
        }
        self.next_thread_counter += 1;
        Ok(c)
    }

    fn event(&mut self, info: EventInfo) -> Result<u32, Exhausted> {
        self.events.push(info);
        Ok(self.events.len() as u32 - 1)
    }
}

/// Counter and timer readout.
impl Session {
    /// The value of a process-wide counter.
    pub fn counter_value(&self, index: u64) -> u64 {
        self.shm.load_u64(self.layout.counter(index))
    }

    /// Every thread's reading of a wall timer, in TSC ticks, taken
    /// consistently (under each timer's sequence number) at `now` ticks.
    pub fn timer_readings(&self, timer: u64, now: u64) -> Vec<ThreadReading> {
        let mut out = Vec::new();
        for slot in self.claimed_slots() {
            let block = self.layout.thread_block(slot);
            let at = block + threads::timer(timer);
            let reading = loop {
                let seq = self.shm.load_u64(at + threads::TIMER_SEQ);
                let count = self.shm.load_u64(at + threads::TIMER_COUNT);
                let start = self.shm.load_u64(at + threads::TIMER_START);
                let total = self.shm.load_u64(at + threads::TIMER_TOTAL);
                if seq.is_multiple_of(2) && seq == self.shm.load_u64(at + threads::TIMER_SEQ) {
                    let running = count > 0 && now > start;
                    break (total + if running { now - start } else { 0 }, count > 0);
                }
                std::hint::spin_loop();
            };
            out.push(ThreadReading {
                tid: self.shm.load_u64(block + threads::TID) as i32,
                value: reading.0,
                inside: reading.1,
            });
        }
        out
    }

    /// Every thread's value of a per-thread counter.
    pub fn thread_counter_readings(&self, counter: u64) -> Vec<ThreadReading> {
        self.claimed_slots()
            .map(|slot| {
                let block = self.layout.thread_block(slot);
                let value = self.shm.load_u64(block + threads::counter(counter));
                ThreadReading {
                    tid: self.shm.load_u64(block + threads::TID) as i32,
                    value,
                    inside: value != 0,
                }
            })
            .collect()
    }

    /// Counter indices in a program replaced by their addresses in a cluster's view.
    fn resolve_program(&self, program: &[Guarded], cluster: &Cluster) -> Vec<Guarded> {
        let base = cluster.data + self.layout.header.counters_offset;
        let addr = |i: u64| base + i * 8;
        fn expr(e: &Expr, addr: &dyn Fn(u64) -> u64) -> Expr {
            match e {
                Expr::Counter(i) => Expr::Counter(addr(*i)),
                Expr::Bin(op, a, b) => Expr::bin(*op, expr(a, addr), expr(b, addr)),
                other => other.clone(),
            }
        }
        program
            .iter()
            .map(|g| Guarded {
                predicate: g.predicate.as_ref().map(|p| expr(p, &addr)),
                primitive: match &g.primitive {
                    Primitive::SetCounter(i, e) => Primitive::SetCounter(addr(*i), expr(e, &addr)),
                    Primitive::AddCounter(i, e) => Primitive::AddCounter(addr(*i), expr(e, &addr)),
                    Primitive::SubCounter(i, e) => Primitive::SubCounter(addr(*i), expr(e, &addr)),
                    Primitive::AddThreadCounter(n, e) => {
                        Primitive::AddThreadCounter(*n, expr(e, &addr))
                    }
                    Primitive::Emit(id, args, strings) => Primitive::Emit(
                        *id,
                        args.iter().map(|e| expr(e, &addr)).collect(),
                        *strings,
                    ),
                    other => other.clone(),
                },
            })
            .collect()
    }

    /// Generates a mini-trampoline in a cluster's code area; returns its address.
    fn place_mini(&mut self, ci: usize, program: &[Guarded]) -> Result<u64> {
        let c = self.clusters[ci];
        let at = c.code + c.used;
        let code = mini_trampoline(at, self.thread_table(ci), program)?;
        self.alloc_code(ci, &code)
    }

    /// Where the thread table and the ring-mode words are, as cluster `ci`'s
    /// code sees them.
    fn thread_table(&self, ci: usize) -> ThreadTable {
        let c = self.clusters[ci];
        ThreadTable {
            addr: c.data + self.layout.header.threads_offset,
            slots: self.layout.header.thread_slots,
            ring_wait_until: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::RING_WAIT_UNTIL,
            ring_overwrite: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::RING_OVERWRITE,
            ring_data: self.layout.header.ring_data,
            no_slot: c.data + self.layout.header.sync_offset + weft_patch::region::sync::NO_SLOT,
            clock_gettime: self.clock_gettime,
            tid_offset: self.tid_offset.unwrap_or(0),
        }
    }

    /// The offset from the thread pointer at which every thread of the
    /// stopped process finds its own id (glibc's `struct pthread::tid`), or
    /// 0 when there is none: the first such offset past the thread
    /// pointer's own words (the TCB's self pointers).
    fn find_tid_offset(&self, tracee: &Tracee) -> u32 {
        const FROM: usize = 0x10;
        const TO: usize = 0x400;
        let mut common: Option<Vec<usize>> = None;
        for tid in tracee.threads() {
            let Ok(regs) = tracee.registers(tid) else {
                return 0;
            };
            let Ok(bytes) = tracee.memory().read_vec(RemoteAddr(regs.fs_base), TO) else {
                return 0;
            };
            let here: Vec<usize> = (FROM..TO)
                .step_by(4)
                .filter(|&o| bytes[o..o + 4] == tid.to_le_bytes())
                .collect();
            common = Some(match common {
                None => here,
                Some(c) => c.into_iter().filter(|o| here.contains(o)).collect(),
            });
        }
        common
            .and_then(|c| c.first().copied())
            .map_or(0, |o| o as u32)
    }

    /// Event timestamps from CLOCK_MONOTONIC (nanoseconds, through the
    /// target's vDSO) instead of the TSC, for probes placed from now on.
    pub fn use_monotonic_clock(&mut self) -> Result<()> {
        self.clock_gettime = crate::clock::vdso_clock_gettime(self.pid)?;
        Ok(())
    }
}

/// One thread's value of a timer or per-thread counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadReading {
    /// The thread (as recorded when it first ran instrumentation).
    pub tid: i32,
    /// TSC ticks for a timer; the value for a counter.
    pub value: u64,
    /// Whether the timer is running (the thread is inside) / the counter is non-zero.
    pub inside: bool,
}

/// Removing some probes while the rest stay.
impl Session {
    /// Removes every live probe with `tag` from the stopped process. Sites
    /// left without probes get their original bytes back; the others are
    /// rebuilt without the removed probes. Trampolines stay mapped (a
    /// thread may still be inside one); their space is not reused. Returns
    /// how many probes were removed.
    pub fn remove_tagged(&mut self, tracee: &mut Tracee, tag: u64) -> Result<usize> {
        let gone: Vec<usize> = self
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.live && p.tag == tag)
            .map(|(i, _)| i)
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        for &p in &gone {
            self.probes[p].live = false;
        }
        let mut text = TextBatch::new(self.pid)?;
        let mut rebuilt = Vec::new();
        for s in 0..self.sites.len() {
            let site = &mut self.sites[s];
            if !site.active
                || site.hook
                || !site
                    .points
                    .iter()
                    .any(|sp| sp.probes.iter().any(|p| gone.contains(p)))
            {
                continue;
            }
            for sp in site.points.iter_mut() {
                sp.probes.retain(|p| !gone.contains(p));
            }
            let emptied: Vec<u64> = site
                .points
                .iter()
                .filter(|sp| sp.probes.is_empty())
                .map(|sp| sp.point)
                .collect();
            site.points.retain(|sp| !sp.probes.is_empty());
            for point in emptied {
                if !site.points.iter().any(|sp| sp.point == point) {
                    self.site_at.remove(&point);
                }
            }
            if site.points.is_empty() {
                // Nothing left here: put the original bytes back.
                let mem = tracee.memory();
                for r in site.board.iter().chain(site.record.iter()) {
                    if text.read(mem, r.addr, r.new.len())? == r.new {
                        text.write(mem, r.addr, &r.old)?;
                    }
                }
                site.active = false;
                self.site_at.retain(|_, v| *v != s);
                self.spans.retain(|_, (_, v)| *v != s);
            } else {
                rebuilt.push(s);
            }
        }
        for s in rebuilt {
            match self.build_site(tracee, &mut text, s) {
                Ok(()) => {
                    let site = &self.sites[s];
                    let mem = tracee.memory();
                    if let Some(b) = &site.board {
                        text.write(mem, b.addr, &b.new)?;
                    }
                    let r = site.record.as_ref().expect("built");
                    text.write(mem, r.addr, &r.new)?;
                }
                Err(SiteError::Fatal(e)) => return Err(e),
                Err(SiteError::Skip(why)) => return Err(Error::Rebuild(why)),
            }
        }
        self.write_trap_table();
        text.flush(tracee.memory())?;
        Ok(gone.len())
    }
}

/// One event drained from a thread's ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRecord {
    /// The thread that emitted it.
    pub tid: i32,
    /// TSC at emission.
    pub tsc: u64,
    /// The event id given to [`Primitive::Emit`].
    pub event: u32,
    /// Its values. A string value is the number of bytes copied, with
    /// `region::ring::STR_TRUNCATED` or `STR_NULL` set as they apply.
    pub args: Vec<u64>,
    /// The text of its string values, in order (lossy UTF-8; byte arrays
    /// in hex).
    pub strings: Vec<String>,
}

/// One thread's records as its ring holds them (see `region::ring`), one
/// after another.
#[derive(Debug, Clone, Copy)]
pub struct RawRecords<'a> {
    /// The thread that wrote them.
    pub tid: i32,
    /// Events the thread dropped so far (in flight mode: overwrote).
    pub dropped: u64,
    /// The records.
    pub bytes: &'a [u8],
}

/// Decodes records laid out as in a ring (see `region::ring`); `strings`
/// gives the masks of an event id's values that carry bytes and, among
/// them, the byte arrays (decoded as hex). Stops at a record that does not
/// fit in `bytes`.
pub fn decode_records(
    tid: i32,
    bytes: &[u8],
    strings: &dyn Fn(u32) -> (u16, u16),
    out: &mut Vec<EventRecord>,
) {
    use weft_patch::region::ring as r;
    let word = |at: usize| -> Option<u64> {
        Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
    };
    let mut at = 0usize;
    while let (Some(tsc), Some(id_and_shape)) = (word(at), word(at + r::R_EVENT as usize)) {
        let (nargs, text) = r::shape((id_and_shape >> 32) as u32);
        let size = r::record_size(nargs, text) as usize;
        if nargs > r::MAX_ARGS || at + size > bytes.len() {
            break;
        }
        let args: Vec<u64> = (0..nargs)
            .filter_map(|i| word(at + r::R_ARGS as usize + 8 * i))
            .collect();
        let event = id_and_shape as u32;
        let (mask, binary) = strings(event);
        let mut text_at = at + r::R_ARGS as usize + 8 * nargs;
        let mut texts = Vec::new();
        for (i, value) in args.iter().enumerate() {
            if mask & (1 << i) == 0 {
                continue;
            }
            let len = ((value & 0xffff_ffff) as usize).min(text as usize);
            let piece = bytes.get(text_at..text_at + len).unwrap_or_default();
            texts.push(if binary & (1 << i) != 0 {
                piece.iter().map(|b| format!("{b:02x}")).collect()
            } else {
                String::from_utf8_lossy(piece).into_owned()
            });
            text_at += len.div_ceil(8) * 8;
        }
        out.push(EventRecord {
            tid,
            tsc,
            event,
            args,
            strings: texts,
        });
        at += size;
    }
}

/// Draining event rings (the consumer side; see `region::ring`).
impl Session {
    /// Block mode: a writer that finds its ring full waits until weft has
    /// made room or until the TSC reaches `tsc`; 0 selects discard mode.
    /// Call it again before `tsc` passes to keep writers waiting.
    pub fn set_ring_wait_until(&self, tsc: u64) {
        self.shm.store_u64(
            self.layout.header.sync_offset + weft_patch::region::sync::RING_WAIT_UNTIL,
            tsc,
        );
    }

    /// Flight mode on or off: with it, a writer that finds its ring full
    /// overwrites the oldest records instead of dropping the new one. Do
    /// not drain while it is on: read the rings with
    /// [`Session::snapshot_events`].
    pub fn set_ring_overwrite(&self, on: bool) {
        self.shm.store_u64(
            self.layout.header.sync_offset + weft_patch::region::sync::RING_OVERWRITE,
            u64::from(on),
        );
    }

    /// The thread slots some thread has claimed (retired ones included).
    fn claimed_slots(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.layout.header.thread_slots).filter(|&slot| {
            self.shm
                .load_u64(self.layout.header.threads_offset + slot * 8)
                != 0
        })
    }

    /// The claimed thread slots' rings: (ring offset, tid).
    fn claimed_rings(&self) -> impl Iterator<Item = (u64, i32)> + '_ {
        self.claimed_slots().map(|slot| {
            let block = self.layout.thread_block(slot);
            (
                block + threads::RING,
                self.shm.load_u64(block + threads::TID) as i32,
            )
        })
    }

    /// Moves every published record out of every thread's ring, in each
    /// thread's order, handing each thread's records to `take` as one
    /// contiguous run of bytes, and frees the space for the producers.
    pub fn drain_records(&self, take: &mut dyn FnMut(RawRecords<'_>)) {
        use weft_patch::region::ring as r;
        for (ring, tid) in self.claimed_rings() {
            let head = self.shm.load_u64(ring + r::HEAD);
            let tail = self.shm.load_u64(ring + r::TAIL);
            if head == tail {
                continue;
            }
            let data = ring + r::HEADER;
            let bytes = self.gather_records(tail, head, &|at, len| self.shm.read(data + at, len));
            // Only now may the producer reuse the space.
            self.shm.store_u64(ring + r::TAIL, head);
            take(RawRecords {
                tid,
                dropped: self.shm.load_u64(ring + r::DROPPED),
                bytes: &bytes,
            });
        }
    }

    /// Moves every published event out of every thread's ring, decoded, in
    /// each thread's order.
    pub fn drain_events(&self, out: &mut Vec<EventRecord>) {
        self.drain_records(&mut |raw| {
            decode_records(raw.tid, raw.bytes, &|e| self.string_mask(e), out)
        });
    }

    /// Which values of event `id`'s records carry bytes: (strings and byte
    /// arrays, byte arrays).
    pub fn string_mask(&self, id: u32) -> (u16, u16) {
        self.events
            .get(id as usize)
            .map_or((0, 0), |e| (e.strings, e.binary))
    }

    /// Flight mode: copies the records every ring holds now, in each
    /// thread's order, leaving the rings as they are. While it copies,
    /// writers whose ring is full drop new events (counted) instead of
    /// overwriting old ones, so that the copy is whole. A writer that was
    /// already overwriting finishes that record: it moves its tail past
    /// old records before it reuses their bytes, so after copying a ring
    /// weft reads the tail again and keeps only the records from there on.
    pub fn snapshot_records(&self, take: &mut dyn FnMut(RawRecords<'_>)) {
        use weft_patch::region::ring as r;
        let size = self.layout.header.ring_data;
        let overwrite = self.layout.header.sync_offset + weft_patch::region::sync::RING_OVERWRITE;
        let flight = self.shm.load_u64(overwrite);
        self.shm.store_u64(overwrite, 0);
        for (ring, tid) in self.claimed_rings() {
            let head = self.shm.load_u64(ring + r::HEAD);
            let tail = self.shm.load_u64(ring + r::TAIL);
            if head == tail {
                continue;
            }
            let copy = self.shm.read(ring + r::HEADER, (size + r::SLACK) as usize);
            let tail = tail.max(self.shm.load_u64(ring + r::TAIL));
            if head <= tail || head - tail > size {
                continue;
            }
            let bytes = self.gather_records(tail, head, &|at, len| {
                let at = at as usize;
                copy.get(at..at + len).map_or_else(Vec::new, <[u8]>::to_vec)
            });
            take(RawRecords {
                tid,
                dropped: self.shm.load_u64(ring + r::DROPPED),
                bytes: &bytes,
            });
        }
        self.shm.store_u64(overwrite, flight);
    }

    /// The bytes of the records between ring positions `from` and `to`,
    /// contiguous, reading the ring's data (offsets from its start) through
    /// `read`. Positions are contiguous in memory except where a record ran
    /// on into the slack: the next one starts at the beginning of the data.
    fn gather_records(&self, from: u64, to: u64, read: &dyn Fn(u64, usize) -> Vec<u8>) -> Vec<u8> {
        use weft_patch::region::ring as r;
        let mask = self.layout.header.ring_data - 1;
        let mut bytes = Vec::with_capacity((to - from) as usize);
        let mut run_start = from;
        let mut pos = from;
        while pos < to {
            let offset = pos & mask;
            let shape = read(offset + r::R_NARGS, 4);
            let Ok(shape) = <[u8; 4]>::try_from(shape.as_slice()) else {
                break;
            };
            let (nargs, text) = r::shape(u32::from_le_bytes(shape));
            pos += r::record_size(nargs.min(r::MAX_ARGS), text.min(r::MAX_TEXT));
            if pos >= to || (pos & mask) <= offset {
                // The end, or the next record starts back at the beginning.
                let start = run_start & mask;
                bytes.extend_from_slice(&read(start, (pos - run_start) as usize));
                run_start = pos;
            }
        }
        bytes
    }

    /// Events dropped so far because a ring was full (in flight mode: the
    /// oldest events overwritten).
    pub fn events_dropped(&self) -> u64 {
        use weft_patch::region::ring as r;
        self.claimed_rings()
            .map(|(ring, _)| self.shm.load_u64(ring + r::DROPPED))
            .sum::<u64>()
            + self.threads_without_slot()
    }

    /// Executions of per-thread instrumentation (events, timers) skipped
    /// because every thread slot was taken.
    pub fn threads_without_slot(&self) -> u64 {
        self.shm
            .load_u64(self.layout.header.sync_offset + weft_patch::region::sync::NO_SLOT)
    }
}

impl Session {
    /// The meaning of an event id, if the session gave it.
    pub fn event_info(&self, id: u32) -> Option<&EventInfo> {
        self.events.get(id as usize)
    }

    /// Every event id's meaning, indexed by id.
    pub fn events(&self) -> &[EventInfo] {
        &self.events
    }
}
