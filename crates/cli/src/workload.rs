//! Whole workloads: every process weft measures, with the processes they
//! create and the programs they exec, each image its own part of the
//! report. `weft run` and `weft attach --follow` follow fork, vfork, clone
//! of processes and exec through `weft_workload::Follower`, which stops a
//! new process, or a new image, before its first instruction; weft then
//! gives it its instrumentation and lets it go on (docs/workloads.md).

use crate::requests::{Perturbation, Requests};
use crate::run::{is_gone, report_load, report_pending};
use crate::{output, ProbeArgs};
use anyhow::Result;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use weft_live::{Prepared, Session};
use weft_process::{ExitWatch, Tracee};
use weft_workload::{Event, Follower};

mod holds;
mod images;

pub use holds::{note_sole_hold, note_workload_start, SOLE_HOLDS, WORKLOAD_START};

/// How long a new process may take to stop for weft.
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The longest weft waits for the workload's library loads before it
/// looks at its events again, while following. The follower's thread
/// wakes weft at each event (`weft_workload::Wake`); this bounds the wait
/// should a wake-up be missed, since a new process waits stopped until
/// weft sees it.
const FOLLOW_SLICE: Duration = Duration::from_millis(20);

/// One image of one process: its session and requests.
pub struct Member {
    pub pid: i32,
    pub command: String,
    pub session: Session,
    pub req: Requests,
    pub perturbation: Perturbation,
    /// Tells when the process is gone (`None` for weft's own child, which
    /// weft waits for).
    pub watch: Option<ExitWatch>,
    /// Its process exited, or replaced this image (exec).
    pub done: bool,
    /// Says when the process runs exec, where the workload is not
    /// followed.
    pub exec: Option<crate::run::ExecNotice>,
    /// The image runs through its dynamic loader, recorded from its first
    /// instruction, while weft does other work: its libraries are
    /// instrumented when the loader's hook says they are there
    /// (`Workload::libraries_loaded`). Holds what was placed before.
    pub starting: Option<weft_live::AddReport>,
    /// How many times rewriting the image's busy system call sites failed
    /// (see [`Workload::serve`]): at two, weft stops trying.
    pub rewrites_failed: u8,
    /// When weft began with this image.
    pub since: std::time::Instant,
    /// Where settling the image stands (see [`Workload::serve`]).
    pub settle: Settle,
}

/// Where settling an image stands: its calls taken off Syscall User
/// Dispatch once every site is rewritten (`weft_live::Session::settle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// Not tried yet, or to be tried again.
    Waiting,
    /// Tried this many times without settling; the last reason.
    Failed(u8, String),
    /// Settled, or given up.
    Over,
}

/// Times weft tries to settle an image before it gives up.
const SETTLE_TRIES: u8 = 3;

/// How long the program's writers may wait for room in their rings while
/// weft settles the program (a stop of some 100 ms in a release build).
const SETTLING_HOLD: Duration = Duration::from_secs(30);

impl Member {
    /// Settles the image once weft has been with it `after` and it has
    /// made `calls` calls (see [`Settle`]), unless it is not dispatched or
    /// settling failed
    /// [`SETTLE_TRIES`] times; tried again `after` later when it failed.
    fn try_settle(&mut self, after: Duration, calls: u64, verbose: bool) -> Result<()> {
        let tries = match &self.settle {
            Settle::Over => return Ok(()),
            Settle::Waiting => 0,
            Settle::Failed(n, _) => *n,
        };
        if !self.session.dispatching() || self.session.settled() {
            self.settle = Settle::Over;
            return Ok(());
        }
        // Not before its libraries are instrumented (`Member::starting`),
        // nor before it has made `calls` calls (while settling is under
        // way, it has).
        let busy = tries > 0 || self.req.events_of(self.pid) >= calls;
        if self.since.elapsed() < after || self.starting.is_some() || !busy {
            return Ok(());
        }
        // The rings drained first; their writers wait for weft rather
        // than drop while it settles (a debug build prepares for seconds).
        self.req.tick(&self.session);
        self.req.hold_writers_for(&self.session, SETTLING_HOLD);
        match self.session.settle(&self.req.specs) {
            Ok(weft_live::Settled::Done(report)) => {
                self.settle = Settle::Over;
                if verbose {
                    say!(
                        "weft: process {}: settled: every system call site rewritten ({} in \
                         the last stop), Syscall User Dispatch off",
                        self.pid,
                        report.probes
                    );
                }
                self.req.note_settled(self.pid);
                self.req.describe_trace(&self.session)?;
            }
            // More sites to rewrite: at the next turn, without waiting.
            Ok(weft_live::Settled::Partly(_)) => {
                let now = std::time::Instant::now();
                self.since = now.checked_sub(after).unwrap_or(now);
                self.req.describe_trace(&self.session)?;
            }
            Ok(weft_live::Settled::NotYet(why)) => self.settle_failed(tries, why),
            Err(e) if is_gone(&e) => self.finish(),
            Err(e) => self.settle_failed(tries, e.to_string()),
        }
        Ok(())
    }

    fn settle_failed(&mut self, tries: u8, why: String) {
        self.since = std::time::Instant::now();
        self.settle = match tries + 1 >= SETTLE_TRIES {
            true => {
                say!(
                    "weft: process {} ({}) stays under Syscall User Dispatch, some 30 ns a \
                     call slower: it could not be settled ({why})",
                    self.pid,
                    self.command
                );
                Settle::Over
            }
            false => Settle::Failed(tries + 1, why),
        };
    }

    /// A new image of a process weft follows, watched for its end; with
    /// what was placed before its libraries if it runs through its loader
    /// on its own (see [`Member::starting`]).
    fn followed(
        pid: i32,
        command: String,
        session: Session,
        req: Requests,
        starting: Option<weft_live::AddReport>,
    ) -> Result<Member> {
        let perturbation = Perturbation::new(&req)?;
        Ok(Member {
            pid,
            command,
            session,
            req,
            perturbation,
            watch: ExitWatch::new(pid).ok(),
            done: false,
            exec: None,
            starting,
            rewrites_failed: 0,
            since: std::time::Instant::now(),
            settle: Settle::Waiting,
        })
    }

    /// This image is over: its last sample is taken now, while a zombie's
    /// `/proc` entries remain.
    pub fn finish(&mut self) {
        if !self.done {
            self.done = true;
            self.req.sampler.sample(&self.session);
            // Its pidfd is no longer needed (a long build has many images).
            self.watch = None;
        }
    }
}

/// The processes weft measures, and the follower that tells of new ones.
pub struct Workload {
    pub members: Vec<Member>,
    follower: Option<Follower>,
    definitions: weft_metrics::Definitions,
    /// Patterns that matched in some image.
    matched: BTreeSet<String>,
    /// Patterns that matched nothing in an image, with the names near
    /// them in the images that lack them.
    unmatched: BTreeMap<String, Vec<String>>,
    /// `usdt:` requests that matched no probe in an image, with the first
    /// message saying so.
    unmatched_usdt: BTreeMap<String, String>,
    /// Processes of the workload that share their parent's memory (vfork
    /// children before they exec): their counts are their parent's.
    sharing: BTreeSet<i32>,
    /// The event ids of every session, shared so that the workload's one
    /// trace never gives an id two meanings.
    event_ids: Arc<weft_live::EventIds>,
    /// No longer following: new images are let go uninstrumented.
    stopping: bool,
    /// What was said already, not to repeat it for every image.
    said: BTreeSet<String>,
}

impl Workload {
    /// A workload of the processes to come, followed if `follow` and the
    /// kernel lets weft load its follower (else weft says why, once).
    pub fn new(follow: bool, definitions: weft_metrics::Definitions) -> Workload {
        let follower = if follow {
            match nested_pid_namespace().map_or_else(Follower::load, |why| {
                Err(weft_workload::Error::Unavailable {
                    step: "following processes",
                    reason: why,
                })
            }) {
                Ok(f) => Some(f),
                Err(e) => {
                    say!(
                        "weft: measuring one process only, not its children or the programs \
                         it execs: {e}"
                    );
                    None
                }
            }
        } else {
            None
        };
        Workload {
            members: Vec::new(),
            follower,
            definitions,
            matched: BTreeSet::new(),
            unmatched: BTreeMap::new(),
            unmatched_usdt: BTreeMap::new(),
            sharing: BTreeSet::new(),
            event_ids: Arc::default(),
            stopping: false,
            said: BTreeSet::new(),
        }
    }

    /// Stops following: no process is stopped for weft from now on, and
    /// those that were are let go (a forked child with its own copy of
    /// weft's memory, so that taking the probes out of every live member
    /// leaves none behind; a new image uninstrumented).
    pub fn stop_following(&mut self, args: &ProbeArgs) -> Result<()> {
        let Some(follower) = &mut self.follower else {
            return Ok(());
        };
        follower.stop();
        self.stopping = true;
        self.handle_events(args)
    }

    /// Whether new processes and images are followed.
    pub fn following(&self) -> bool {
        self.follower.is_some()
    }

    /// Follows process `pid` from now on: its children and its execs.
    /// Call it while weft still holds the process, so that no fork falls
    /// between its instrumentation and its following.
    pub fn follow(&self, pid: i32) -> Result<()> {
        if let Some(f) = &self.follower {
            f.follow(pid)?;
        }
        Ok(())
    }

    /// Adds `pid` (already instrumented and followed, as `member`) to the
    /// workload.
    pub fn add(&mut self, member: Member) {
        self.members.push(member);
    }

    /// A session for `pid` as a part of this workload.
    pub fn session_for(&self, pid: i32, args: &ProbeArgs) -> Result<Session> {
        let mut session = crate::requests::session_for(pid, args)?;
        if self.following() {
            session.part_of_workload();
            if !args.trace.is_empty() {
                session.share_event_ids(Arc::clone(&self.event_ids));
            }
        }
        Ok(session)
    }

    /// Notes which patterns and `usdt:` requests matched in an image, and
    /// says the notes of its preparation.
    pub fn note_prepared(&mut self, prepared: &Prepared, req: &Requests) {
        // Each pending pattern and note once for the whole workload.
        let pending: Vec<String> = (prepared.pending.iter())
            .filter(|p| self.said.insert(format!("pending {p}")))
            .cloned()
            .collect();
        let notes: Vec<String> = (prepared.notes.iter())
            .filter(|n| self.said.insert(format!("note {n}")))
            .cloned()
            .collect();
        report_pending(&pending, &notes);
        self.matched.extend(req.matched_usdt.iter().cloned());
        for (request, why) in &req.unmatched_usdt {
            self.unmatched_usdt
                .entry(request.clone())
                .or_insert_with(|| why.clone());
        }
        let specs = &req.specs;
        for s in specs {
            let pattern = s.pattern.to_string();
            let missed = prepared.unmatched.iter().any(|(p, _)| *p == pattern)
                || prepared.pending.contains(&pattern);
            if !missed {
                self.matched.insert(pattern);
            }
        }
        for (pattern, near) in &prepared.unmatched {
            let kept = self.unmatched.entry(pattern.clone()).or_default();
            for n in near {
                if !kept.contains(n) {
                    kept.push(n.clone());
                }
            }
        }
    }

    /// Whether some pattern matched in some image.
    pub fn matched_any(&self) -> bool {
        !self.matched.is_empty()
    }

    /// The error for a pattern that matched in no image at all, with the
    /// names nearest to it in any image.
    pub fn never_matched(&self) -> Option<String> {
        if let Some((_, why)) = self
            .unmatched_usdt
            .iter()
            .find(|(r, _)| !self.matched.contains(*r))
        {
            return Some(format!("{why}, nor in any other program of the workload"));
        }
        // Every pattern that matched nothing, in one line (the first alone
        // hid the others).
        let missed: Vec<(String, String)> = (self.unmatched.iter())
            .filter(|(p, _)| !self.matched.contains(*p))
            .map(|(pattern, near)| {
                let function = pattern
                    .rsplit_once(':')
                    .map_or(pattern.as_str(), |(_, f)| f);
                let near = weft_image::near_misses(function, near.iter().map(String::as_str), 5);
                let hint = if near.is_empty() {
                    String::new()
                } else {
                    format!(" (did you mean: {}?)", near.join(", "))
                };
                (pattern.clone(), hint)
            })
            .collect();
        match missed.as_slice() {
            [] => None,
            [(pattern, hint)] => Some(format!(
                "pattern '{pattern}' matches no function in any program of the workload{hint}"
            )),
            many => Some(format!(
                "patterns {} match no function in any program of the workload",
                many.iter()
                    .map(|(p, hint)| format!("'{p}'{hint}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
    }

    /// How many processes of the workload are still running: the live
    /// images, and the processes the follower knows that have no part yet
    /// (a child whose fork weft has not handled, a vfork child).
    pub fn outstanding(&mut self) -> usize {
        let live: BTreeSet<i32> = self.live().map(|m| m.pid).collect();
        let others = self.follower.as_ref().map_or(0, |f| {
            f.processes()
                .into_iter()
                .filter(|p| !live.contains(p) && weft_process::is_alive(*p))
                .count()
        });
        live.len() + others
    }

    /// The members whose image is still running.
    pub fn live(&mut self) -> impl Iterator<Item = &mut Member> {
        self.members.iter_mut().filter(|m| !m.done)
    }

    /// The live image of process `pid`.
    fn live_member(&mut self, pid: i32) -> Option<&mut Member> {
        self.members.iter_mut().find(|m| m.pid == pid && !m.done)
    }

    /// Whether process `pid` is the workload's only live one (weft holding
    /// it holds the whole workload).
    fn sole(&self, pid: i32) -> bool {
        let mut live = self.members.iter().filter(|m| !m.done);
        live.next().is_some_and(|m| m.pid == pid)
            && live.next().is_none()
            && self.sharing.is_empty()
    }

    /// Serves the workload for up to `step`: new processes and images,
    /// processes that ended, and every live image's library loads.
    pub fn serve(&mut self, args: &ProbeArgs, step: Duration) -> Result<()> {
        // Read before the events are: one sent after them changes it.
        let news = (self.follower.as_ref())
            .and_then(|f| f.news())
            .map(|w| w.load(std::sync::atomic::Ordering::SeqCst));
        self.handle_events(args)?;
        for m in self.members.iter_mut().filter(|m| !m.done) {
            if m.watch.as_ref().is_some_and(|w| w.wait(Duration::ZERO)) {
                m.finish();
            }
        }
        for m in (self.members.iter_mut()).filter(|m| !m.done && m.rewrites_failed < 2) {
            // Sites the SIGSYS handler makes many calls for: rewritten.
            match m.session.rewrite_busy_sites(&m.req.specs) {
                Ok(Some(report)) => {
                    if args.verbose {
                        say!(
                            "weft: process {}: {} busy system call site(s) rewritten ({} jmp, {} \
                             springboard and {} int3 splice(s))",
                            m.pid,
                            report.probes / 2,
                            report.jumps,
                            report.springboards,
                            report.traps
                        );
                    }
                    m.req.describe_trace(&m.session)?;
                }
                Ok(None) => {}
                Err(e) if is_gone(&e) => m.finish(),
                // A process that has just exec'd fails so (its old image's
                // code is gone) until its exec event, handled next, ends
                // this image: tried once more after it. Its calls go on
                // through the handler either way, and the record is whole.
                Err(e) => {
                    m.rewrites_failed += 1;
                    if m.rewrites_failed == 2 {
                        say!(
                            "weft: process {}: its busy system call sites are not rewritten \
                             ({e}); their calls go on through weft's SIGSYS handler, a \
                             microsecond or two slower each",
                            m.pid
                        );
                    }
                }
            }
        }
        if let Some((after, calls)) = args.settle_after.0 {
            for m in self.members.iter_mut().filter(|m| !m.done) {
                m.try_settle(after, calls, args.verbose)?;
            }
        }
        // Until a process waits in its load hook, the follower has news,
        // or the step is over.
        if !(self.members.iter()).any(|m| !m.done && m.session.loads_waiting()) {
            // The follower's first: past 128 words, the kernel's most, a
            // new process would wait for the timeout.
            let mut words: Vec<weft_live::Waited> = Vec::new();
            let word = self.follower.as_ref().and_then(|f| f.news());
            if let (Some(word), Some(unchanged)) = (word, news) {
                words.push(weft_live::Waited {
                    word,
                    unchanged,
                    shared: false,
                });
            }
            words.extend(
                (self.members.iter())
                    .filter(|m| !m.done)
                    .map(|m| m.session.load_word()),
            );
            let wait = match self.following() {
                true => step.min(FOLLOW_SLICE),
                false => step,
            };
            weft_live::wait_any(&words, wait);
        }
        for i in 0..self.members.len() {
            if self.members[i].done || !self.members[i].session.loads_waiting() {
                continue;
            }
            // A fork before this load is given its region first: its
            // copy of the session must not claim a library it never mapped.
            self.handle_events(args)?;
            let sole = self.sole(self.members[i].pid);
            let held_from = weft_live::clock::tsc();
            if self.members[i].starting.is_some() && !self.members[i].done {
                let mut m = self.members.remove(i);
                let outcome = self.libraries_loaded(args, &mut m);
                if sole {
                    note_sole_hold(held_from);
                }
                let gone = |e: &anyhow::Error| {
                    e.downcast_ref::<weft_live::Error>().is_some_and(is_gone)
                        || e.downcast_ref::<weft_process::Error>()
                            .is_some_and(|p| p.is_gone())
                };
                match outcome {
                    Ok(()) => {}
                    Err(e) if gone(&e) => m.finish(),
                    Err(e) => {
                        say!(
                            "weft: process {} ran exec; its libraries are not measured: {e:#}",
                            m.pid
                        );
                        m.session.release_loads();
                        m.starting = None;
                    }
                }
                self.members.insert(i, m);
                continue;
            }
            let m = &mut self.members[i];
            if !m.done {
                let handled = m.session.handle_loads(&m.req.specs);
                if sole {
                    note_sole_hold(held_from);
                }
                match handled {
                    Ok(Some(report)) => {
                        report_load(&report, args.verbose);
                        m.req.describe_trace(&m.session)?;
                    }
                    Ok(None) => {}
                    Err(e) if is_gone(&e) => m.finish(),
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Handles the events the follower has queued.
    fn handle_events(&mut self, args: &ProbeArgs) -> Result<()> {
        loop {
            let Some(follower) = &mut self.follower else {
                return Ok(());
            };
            let Some(event) = follower.next(Duration::ZERO)? else {
                return Ok(());
            };
            match event {
                Event::Forked {
                    parent,
                    thread,
                    child,
                    shares_memory,
                    stopped,
                } => self.forked(args, (parent, thread), child, shares_memory, stopped),
                Event::Execed { pid, stopped } => self.execed(args, pid, stopped),
                Event::Exited { pid } => {
                    self.sharing.remove(&pid);
                    if let Some(m) = self.live_member(pid) {
                        m.finish();
                    }
                }
            }
        }
    }

    /// A process of the workload created another.
    fn forked(
        &mut self,
        args: &ProbeArgs,
        (parent, thread): (i32, i32),
        child: i32,
        shares: bool,
        stopped: bool,
    ) {
        if let Some(paths) = self.live_member(parent).and_then(|p| p.req.paths.clone()) {
            paths.borrow_mut().forked(parent, child);
        }
        if shares {
            // Its calls before it execs are counted in its parent's memory.
            self.sharing.insert(child);
            return;
        }
        let outcome = match self.live_member(parent) {
            Some(p) if stopped => own_session(p, thread, child),
            Some(_) => Err(anyhow::anyhow!(
                "the kernel did not stop it for weft, so its calls are counted with its \
                 parent's"
            )),
            // A vfork child that forked before exec: it has no instrumentation
            // of its own to copy.
            None => Ok(None),
        };
        match outcome {
            Ok(Some(member)) => {
                if args.verbose {
                    say!("weft: process {parent} forked {child}; measuring it apart");
                }
                self.members.push(member);
            }
            Ok(None) => {}
            Err(e) => say!("weft: process {child} (forked by {parent}): {e:#}"),
        }
        if stopped {
            weft_process::failpoint::kill_at_place("fork");
            // Runs on, measured or not.
            self.resume(child);
        }
    }

    /// A process of the workload replaced its image.
    fn execed(&mut self, args: &ProbeArgs, pid: i32, stopped: bool) {
        self.sharing.remove(&pid);
        if let Some(m) = self.live_member(pid) {
            m.finish();
        }
        if self.stopping {
            if stopped {
                let _ = weft_process::wait_stopped(pid, STOP_WAIT);
                self.resume(pid);
            }
            return;
        }
        if !stopped {
            say!(
                "weft: process {pid} ran exec, and the kernel did not stop it for weft: its \
                 new program is not measured"
            );
            return;
        }
        let held_from = weft_live::clock::tsc();
        let instrumented = self.instrument_new_image(args, pid);
        if self.members.iter().all(|m| m.done || m.pid == pid) && self.sharing.is_empty() {
            note_sole_hold(held_from);
        }
        match instrumented {
            Ok(Some(member)) => self.members.push(member),
            Ok(None) => {}
            Err(e) => say!("weft: process {pid} ran exec; its new program is not measured: {e:#}"),
        }
        self.resume(pid);
    }

    /// Lets a process stopped for weft run on.
    fn resume(&self, pid: i32) {
        // Resumed first, then no longer the watchdog's: a weft dying in
        // between leaves it for the watchdog, which resumes it again.
        let _ = weft_process::resume_stopped(pid);
        if let Some(f) = &self.follower {
            f.released(pid);
        }
    }

    /// Completes the trace, writes the report and says a pattern that no
    /// program of the workload had, as the error of the run. A report of
    /// nothing at all is left out: the error says why.
    pub fn finish(&mut self, args: &ProbeArgs, out: Option<std::fs::File>) -> Result<()> {
        for m in &mut self.members {
            if m.done {
                m.req.record_calls_left_open(&m.session);
            }
            m.req.finish_tracing(&m.session)?;
        }
        let parts = self.parts();
        let never_matched = self.never_matched();
        if never_matched.is_none() || self.matched_any() {
            write_parts(args, out, parts)?;
        }
        match never_matched {
            Some(why) => Err(anyhow::anyhow!(why)),
            None => Ok(()),
        }
    }

    /// The report's parts, one per image, after the last samples.
    pub fn parts(&mut self) -> Vec<output::ProcessReport> {
        let several = self.members.len() > 1;
        // A library pattern is said once, if no image loaded its library.
        let mut never: Option<BTreeSet<String>> = None;
        for m in &self.members {
            let here: BTreeSet<String> = m.session.never_loaded(&m.req.specs).into_iter().collect();
            never = Some(match never {
                Some(n) => n.intersection(&here).cloned().collect(),
                None => here,
            });
        }
        let loaded: BTreeSet<String> = self
            .members
            .iter()
            .flat_map(|m| m.session.modules().iter().map(|module| module.name.clone()))
            .collect();
        for p in never.unwrap_or_default() {
            say!(
                "weft: '{p}' was never instrumented: no module it names was loaded{}",
                output::loaded_hint(&p, &loaded)
            );
        }
        let mut parts = Vec::new();
        for m in &mut self.members {
            if !m.done {
                m.req.sampler.sample(&m.session);
            }
            m.perturbation
                .report(&m.req, &m.session, several.then_some(m.pid));
            parts.push(output::ProcessReport {
                pid: m.pid,
                command: m.command.clone(),
                counts: m.session.counts(),
                metrics: m.req.sampler.results(&m.session),
                without_thread_slot: m.session.threads_without_slot(),
            });
        }
        parts
    }
}

/// Gives `child`, a fork of `parent`'s process stopped before its first
/// instruction, a region and a session of its own. `None` when it ended
/// meanwhile.
fn own_session(parent: &Member, thread: i32, child: i32) -> Result<Option<Member>> {
    match weft_process::wait_stopped(child, STOP_WAIT) {
        Ok(true) => {}
        Ok(false) => anyhow::bail!("it did not stop for weft within {STOP_WAIT:?}"),
        Err(e) if e.is_gone() => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let mut tracee = Tracee::attach(child)?;
    // The child's CPU clock counts from its first instruction.
    let cpu_entry = parent
        .req
        .sampler
        .cpu_clock()
        .and_then(|c| c.claim(child as u32));
    let session = parent.session.fork_child(&mut tracee, thread, cpu_entry)?;
    tracee.detach()?;
    let req = parent.req.for_child(child);
    req.describe_trace(&session)?;
    let perturbation = Perturbation::new(&req)?;
    Ok(Some(Member {
        pid: child,
        command: weft_process::command_name(child).unwrap_or_default(),
        session,
        req,
        perturbation,
        watch: ExitWatch::new(child).ok(),
        done: false,
        exec: None,
        starting: None,
        rewrites_failed: 0,
        since: std::time::Instant::now(),
        settle: Settle::Waiting,
    }))
}

/// Writes the report of `parts`: a single part as a plain report, several
/// as one section each and their total.
pub fn write_parts(
    args: &ProbeArgs,
    out: Option<std::fs::File>,
    mut parts: Vec<output::ProcessReport>,
) -> Result<()> {
    let (counts, metrics, without_thread_slot) = if let [only] = parts.as_mut_slice() {
        (
            std::mem::take(&mut only.counts),
            std::mem::take(&mut only.metrics),
            only.without_thread_slot,
        )
    } else {
        output::total(&parts)
    };
    output::write_report(
        args,
        out,
        &output::Report {
            counts: &counts,
            metrics: &metrics,
            without_thread_slot,
            processes: if parts.len() > 1 { &parts } else { &[] },
        },
    )
}

/// Why weft cannot follow from its pid namespace, if it cannot: the
/// follower compares the kernel's pids, which a nested namespace (a
/// container) numbers otherwise.
fn nested_pid_namespace() -> Option<String> {
    weft_process::in_nested_pid_namespace()
        .then(|| "weft runs in a nested pid namespace (a container)".to_string())
}
