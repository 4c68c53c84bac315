//! The measurement requests of the command line: `--count`, `--count-exits`
//! and `--metric`, turned into probes and a sampler.

use crate::ProbeArgs;
use anyhow::{bail, Result};
use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};
use weft_live::Session;
use weft_metrics::{perturbation, Costs, FunctionCost, MetricRequest, Sampler};
use weft_plan::PointSpec;

/// Probes to insert and the sampler that reads the metrics among them.
pub struct Requests {
    /// Every probe, counts first, then each metric's in its order.
    pub specs: Vec<PointSpec>,
    /// Samples the metrics.
    pub sampler: Sampler,
    /// The instrumented functions and what a call of each costs.
    pub costs: Vec<FunctionCost>,
    definitions: weft_metrics::Definitions,
    next_tag: u64,
    /// Drains the rings and writes the events (when tracing); shared by
    /// the requests of every process of a followed workload, which write
    /// one trace.
    recorder: Option<Rc<RefCell<weft_events::Recorder>>>,
    /// Semaphores of traced USDT probes (runtime addresses).
    pub semaphores: Vec<weft_process::RemoteAddr>,
    /// Rich event sites to enable (`--trace event:...`).
    pub event_sites: Vec<weft_live::EventSite>,
    /// `usdt:` requests that matched a probe of this process.
    pub matched_usdt: Vec<String>,
    /// `usdt:` requests that matched none, with the message saying so (in
    /// a workload, where another process may have the probe).
    pub unmatched_usdt: Vec<(String, String)>,
    tracing: bool,
    ticks_per_ns: f64,
    /// Block mode: how far ahead of each drain writers may wait (TSC ticks).
    ring_wait: Option<u64>,
    /// Event timestamps are CLOCK_MONOTONIC nanoseconds, not TSC ticks.
    monotonic: bool,
    /// Where the events go (`--events-out`).
    events_out: Option<std::path::PathBuf>,
    /// Flight mode: how many dumps were written (into DIR/dump-N).
    flight: Option<u32>,
    start_tsc: u64,
    /// CLOCK_REALTIME (ns since the epoch) when the clock read `start_tsc`.
    start_realtime_ns: u64,
    started: Instant,
    /// When the trace this process's events go into began: the workload's
    /// first traced process's start (the summary's "s of tracing").
    trace_started: Instant,
    next_sample: Instant,
    /// Whether loading the per-thread CPU clock was tried (at the first
    /// `cpu_time` request).
    cpu_clock_tried: bool,
    /// Re-execution's feed (`--reexec-feed`), mapped into each process.
    pub feed: Option<std::path::PathBuf>,
    /// `--paths`: the functions whose paths are recorded, and the trace;
    /// shared by the requests of every process of the workload.
    pub paths: Option<Rc<RefCell<crate::paths::PathsRun>>>,
}

impl Requests {
    /// Parses the requests and plans the metrics (allocating their
    /// counters and timers in `session`), with the user's metric
    /// `definitions` (see [`definitions`]); traced events go to `events`
    /// (see [`events_dir`]).
    pub fn build(
        args: &ProbeArgs,
        session: &mut Session,
        events: Option<weft_events::TraceDir>,
        definitions: weft_metrics::Definitions,
    ) -> Result<Requests> {
        let mut specs = Vec::new();
        for p in &args.count {
            specs.push(PointSpec::parse(p)?);
        }
        for p in &args.count_exits {
            specs.push(PointSpec::exits(p)?);
        }
        let mut semaphores = Vec::new();
        let mut matched_usdt = Vec::new();
        let mut unmatched_usdt = Vec::new();
        let mut event_sites = Vec::new();
        let mut waits_for_events = false;
        for t in &args.trace {
            if let Some(what) = t.strip_prefix("usdt:") {
                session.refresh_modules()?;
                match weft_events::usdt_specs(session.modules(), what, args.string_max) {
                    Ok((s, sems)) => {
                        specs.extend(s);
                        semaphores.extend(sems);
                        matched_usdt.push(t.clone());
                    }
                    // Another program of the workload may have the probe.
                    Err(weft_events::Error::NoUsdtProbe(why)) if session.is_part_of_workload() => {
                        unmatched_usdt.push((t.clone(), format!("bad trace request {why}")));
                        waits_for_events = true;
                    }
                    Err(e) => return Err(e.into()),
                }
            } else if t == "syscalls" || t.starts_with("syscalls:") {
                let pattern = t.strip_prefix("syscalls:").unwrap_or("*:*");
                specs.extend(weft_syscalls::capture_specs(pattern)?);
            } else if let Some(what) = t.strip_prefix("event:") {
                let (provider, name) = weft_events::event_request(what)?;
                let sites = session.trace_event_sites(provider, name, args.string_max)?;
                if sites.is_empty() {
                    let loaded = session.event_sites()?;
                    say!("weft: {}", weft_events::pending_note(&loaded, what));
                }
                event_sites.extend(sites);
                waits_for_events = true;
            } else {
                specs.extend(weft_events::trace_specs(
                    t,
                    args.trace_args,
                    args.string_max,
                )?);
            }
        }
        let paths = crate::paths::PathsRun::shared(args)?;
        if let Some(p) = &paths {
            specs.extend(p.borrow().specs(session)?);
        }
        // Measured once per weft: every process of a workload runs on the
        // same clock.
        let ticks_per_ns = weft_live::clock::ticks_per_ns();
        let tracing = !args.trace.is_empty();
        let clock = weft_events::ClockChoice::from(args.clock)
            .resolve(weft_live::clock::tsc_is_invariant());
        let monotonic = tracing && clock.kind == weft_events::ClockKind::Monotonic;
        if monotonic {
            session.use_monotonic_clock()?;
        }
        if let (true, Some(note)) = (tracing, clock.note) {
            say!("weft: {note}");
        }
        // Two requests may name the same site: enable it once.
        event_sites.sort_by_key(|s| s.addr);
        event_sites.dedup_by_key(|s| s.addr);
        let sampler = Sampler::new(
            session.pid(),
            ticks_per_ns,
            args.interval.as_nanos() as u64,
            args.buckets as usize,
        );
        // Time zero, and where it is in wall-clock time (the CTF clock's
        // offset, so that babeltrace2 shows the time of day).
        let (start_tsc, start_realtime_ns) = if monotonic {
            weft_live::clock::paired_with_realtime(weft_live::clock::monotonic_ns)
        } else {
            weft_live::clock::paired_with_realtime(weft_live::clock::tsc)
        };
        let mut req = Requests {
            specs,
            sampler,
            costs: Vec::new(),
            definitions,
            next_tag: 1,
            recorder: None,
            semaphores,
            event_sites,
            matched_usdt,
            unmatched_usdt,
            tracing: !args.trace.is_empty(),
            ticks_per_ns,
            ring_wait: (args.ring_mode == crate::RingMode::Block && !args.trace.is_empty())
                .then_some((ticks_per_ns * 1e9) as u64),
            events_out: args.events_out.clone(),
            flight: None,
            start_tsc,
            start_realtime_ns,
            monotonic,
            started: Instant::now(),
            trace_started: Instant::now(),
            next_sample: Instant::now(),
            cpu_clock_tried: false,
            feed: None,
            paths,
        };
        if args.ring_mode == crate::RingMode::Flight && req.tracing {
            if events.is_none() {
                bail!(
                    "--ring-mode flight keeps events in the rings until weft dumps them: give \
                     --events-out DIR (dumps go to DIR/dump-N on SIGUSR2, and to DIR at the end)"
                );
            };
            req.flight = Some(0);
            session.set_ring_overwrite(true);
            crate::signals::catch_dump_requests();
        }
        if req.tracing {
            let mut recorder = weft_events::Recorder::new(events);
            recorder.streams_only(args.streams_only);
            // What `replay` makes each replay process hold.
            let syscalls = args
                .trace
                .iter()
                .any(|t| t == "syscalls" || t.starts_with("syscalls:"));
            recorder.sample_resident(syscalls);
            req.recorder = Some(Rc::new(RefCell::new(recorder)));
        }
        req.hold_writers(session);
        let syscalls = args
            .trace
            .iter()
            .any(|t| t == "syscalls" || t.starts_with("syscalls:"));
        if syscalls {
            req.cpu_clock_tried = true;
            req.load_cpu_clock(
                session,
                "system calls are recorded without each thread's user CPU time between them \
                 (a replay spins the wall-clock time instead)",
            )?;
        }
        for m in &args.metric {
            req.add_metric(m, session)?;
        }
        if let Some(feed) = &args.reexec_feed {
            req.specs.extend(weft_syscalls::reexec::feed_specs("*:*")?);
            req.feed = Some(feed.clone());
        }
        if req.specs.is_empty() && !waits_for_events {
            bail!(
                "nothing to measure: give --count PATTERN (for example --count main) or --metric NAME:FOCUS \
                 (for example --metric wall_time:fn=main)"
            );
        }
        Ok(req)
    }

    /// The same requests for `pid`, a child the measured process forked,
    /// whose session is a copy of this one's (same counters, timers and
    /// event ids), with nothing sampled yet; its events go to the same
    /// trace.
    pub fn for_child(&self, pid: i32) -> Requests {
        Requests {
            specs: self.specs.clone(),
            sampler: self.sampler.for_child(pid),
            costs: self.costs.clone(),
            definitions: self.definitions.clone(),
            next_tag: self.next_tag,
            recorder: self.recorder.clone(),
            semaphores: self.semaphores.clone(),
            event_sites: self.event_sites.clone(),
            matched_usdt: self.matched_usdt.clone(),
            unmatched_usdt: self.unmatched_usdt.clone(),
            tracing: self.tracing,
            ticks_per_ns: self.ticks_per_ns,
            ring_wait: self.ring_wait,
            events_out: self.events_out.clone(),
            flight: None,
            start_tsc: self.start_tsc,
            start_realtime_ns: self.start_realtime_ns,
            monotonic: self.monotonic,
            started: Instant::now(),
            trace_started: self.trace_started,
            next_sample: Instant::now(),
            cpu_clock_tried: self.cpu_clock_tried,
            feed: self.feed.clone(),
            paths: self.paths.clone(),
        }
    }

    /// Maps re-execution's feed into the process, once its probes are
    /// placed; with `first`, the pid of the rerun's first process, which
    /// follows the record's first thread (written into the feed first).
    pub fn map_feed(
        &self,
        session: &mut Session,
        tracee: &mut weft_process::Tracee,
        first: Option<i32>,
    ) -> Result<()> {
        let Some(path) = &self.feed else {
            return Ok(());
        };
        let mut bytes = std::fs::read(path)?;
        if let Some(pid) = first {
            weft_syscalls::reexec::name_first_process(&mut bytes, pid);
            std::fs::write(path, &bytes)?;
        }
        session.map_feed(tracee, path, bytes.len() as u64)?;
        Ok(())
    }

    /// Notes in the trace that process `pid` exec'd `path` (found now),
    /// with its arguments: the `execve` that did it has no return to say
    /// so.
    pub fn note_exec(&self, pid: i32, path: String) {
        if let Some(r) = &self.recorder {
            let now = self.now();
            let arguments = weft_process::exec_arguments(pid);
            r.borrow_mut().note_exec(pid, now, path, arguments);
        }
    }

    /// Notes in the trace that signal `signal` killed process `pid`, which
    /// weft reaped: its parent's `wait4`, which would say so, is not in it.
    pub fn note_killed(&self, pid: i32, signal: i32) {
        if let Some(r) = &self.recorder {
            r.borrow_mut().note_killed(pid, signal);
        }
    }

    /// Notes in the trace that the program's signal deliveries are in it
    /// (`weft_abi::delivery`).
    pub fn note_deliveries(&self) {
        if let Some(r) = &self.recorder {
            r.borrow_mut().note_deliveries();
        }
    }

    /// Notes in the trace where process `pid`'s new image has its dynamic
    /// loader (found now), for the calls weft's SIGSYS handler records.
    pub fn note_loader(&self, pid: i32, (lo, hi): (u64, u64)) {
        if let Some(r) = &self.recorder {
            r.borrow_mut().note_loader(pid, self.now(), lo, hi);
        }
    }

    /// Notes in the trace that weft lets process `pid`'s new image run its
    /// own code now.
    pub fn note_ready(&self, pid: i32) {
        if let Some(r) = &self.recorder {
            r.borrow_mut().note_ready(pid, self.now());
        }
    }

    /// Events recorded so far of process `pid` (0 when not tracing).
    pub fn events_of(&self, pid: i32) -> u64 {
        self.recorder
            .as_ref()
            .map_or(0, |r| r.borrow().events_of(pid))
    }

    /// Notes in the trace that weft settled process `pid`'s image now.
    pub fn note_settled(&self, pid: i32) {
        if let Some(r) = &self.recorder {
            r.borrow_mut().note_settled(pid, self.now());
        }
    }

    /// The trace's clock now.
    fn now(&self) -> u64 {
        if self.monotonic {
            weft_live::clock::monotonic_ns()
        } else {
            weft_live::clock::tsc()
        }
    }

    /// Writes this process's events into the trace of `other` (another
    /// process of the same workload) instead of a trace of its own.
    pub fn trace_into(&mut self, other: &Requests) {
        if self.recorder.is_some() {
            self.recorder = other.recorder.clone();
            self.trace_started = other.trace_started;
        }
        if self.paths.is_some() {
            self.paths = other.paths.clone();
        }
    }

    /// Plans one more metric request (its probes tagged with a new id);
    /// returns the id and the probes to insert.
    pub fn add_metric(
        &mut self,
        text: &str,
        session: &mut Session,
    ) -> Result<(u64, Vec<PointSpec>)> {
        let request = MetricRequest::parse_with(text, &self.definitions)?;
        if let Some(p) = request.focus.process {
            if p != session.pid() {
                bail!(
                    "{text}: process={p} is not the process weft is measuring ({})",
                    session.pid()
                );
            }
        }
        if request.kind == weft_metrics::MetricKind::CpuTime && !self.cpu_clock_tried {
            self.cpu_clock_tried = true;
            self.load_cpu_clock(session, "cpu_time is approximate (sampled from /proc)")?;
        }
        let tag = self.next_tag;
        let plan = weft_metrics::plan(&request, session)?;
        let specs: Vec<PointSpec> = plan.specs.iter().map(|s| s.clone().with_tag(tag)).collect();
        self.next_tag += 1;
        self.specs.extend(specs.iter().cloned());
        self.costs.extend(plan.functions.iter().cloned());
        self.sampler.add(tag, request, plan);
        Ok((tag, specs))
    }

    /// Loads the per-thread CPU clock for `cpu_time` (exact) and the
    /// system call recorder's user time, or says why not after `without`
    /// (CPU time will be sampled, approximate). `WEFT_CPU_CLOCK=off` (a
    /// test switch) samples without trying.
    fn load_cpu_clock(&mut self, session: &mut Session, without: &str) -> Result<()> {
        let why = if std::env::var_os("WEFT_CPU_CLOCK").is_some_and(|v| v == "off") {
            "WEFT_CPU_CLOCK=off".to_string()
        } else if let Some(obstacle) = session.cpu_clock_obstacle() {
            obstacle
        } else {
            match shared_cpu_clock() {
                Ok(clock) => {
                    session.set_cpu_clock(clock.map_fd(), clock.conversion())?;
                    self.sampler.use_cpu_clock(clock);
                    return Ok(());
                }
                Err(e) => e.to_string(),
            }
        };
        say!("weft: {without}: {why}");
        self.sampler.cpu_time_sampled_because(why);
        Ok(())
    }

    /// Forgets the probes of a removed metric (so libraries loaded later do not get them).
    pub fn forget(&mut self, tag: u64) {
        self.specs.retain(|s| s.tag != tag);
    }

    /// Samples the metrics if an interval has passed; returns how long
    /// until the next sample is due.
    pub fn tick(&mut self, session: &Session) -> Duration {
        let mut busy = false;
        if let Some(paths) = &self.paths {
            paths.borrow_mut().drain();
        }
        if self.flight.is_some() {
            if crate::signals::take_dump_request() {
                self.dump(session);
            }
        } else if let Some(recorder) = &self.recorder {
            let fullest = recorder.borrow_mut().drain(session);
            self.hold_writers(session);
            // A ring a quarter full or more: drain again at once. Less
            // full, the writers are left alone for a while: a drain that
            // follows a writer closely takes the lines it is writing from
            // its core, and costs it more than the records.
            busy = fullest >= BUSY_DRAIN;
        }
        // A ring holds a few thousand events: drain often while tracing.
        let most = if busy {
            Duration::ZERO
        } else if (self.tracing && self.flight.is_none()) || self.paths.is_some() {
            Duration::from_millis(1)
        } else if self.flight.is_some() {
            // Only to notice SIGUSR2 soon.
            Duration::from_millis(10)
        } else {
            Duration::from_millis(50)
        };
        if self.sampler.is_empty() {
            return most;
        }
        let now = Instant::now();
        if now >= self.next_sample {
            self.sampler.sample(session);
            self.next_sample = now + self.sampler.interval();
        }
        self.next_sample
            .saturating_duration_since(Instant::now())
            .min(most)
    }
}

/// The metric definitions of `--metrics-file FILE` (none without it),
/// read before weft touches the target so that a wrong file is said first:
/// a file that is not a regular one (`/dev/zero`, a pipe) or holds more
/// than 1 MiB is refused without reading it (see
/// `weft_metrics::Definitions::load`).
pub fn definitions(args: &ProbeArgs) -> Result<weft_metrics::Definitions> {
    Ok(match &args.metrics_file {
        Some(path) => weft_metrics::Definitions::load(path)?,
        None => weft_metrics::Definitions::default(),
    })
}

/// The events directory of `--events-out DIR` when tracing, checked and
/// prepared before weft touches the target (see `TraceDir::prepare`: a
/// link, another user's directory or one holding anything but an earlier
/// weft trace is refused; `--force` replaces an earlier trace).
/// A session whose shared region holds what `args` ask for: event rings
/// of `--ring-size` only when something is traced, and `WEFT_SPLICE=int3`
/// (a test switch) forcing the trap splice everywhere.
pub fn session_for(pid: i32, args: &ProbeArgs) -> Result<Session> {
    let mut session = if args.trace.is_empty() {
        Session::new(pid)?
    } else {
        Session::with_ring_size(pid, args.ring_size)?
    };
    if std::env::var_os("WEFT_SPLICE").is_some_and(|v| v == "int3") {
        session.force_int3();
    }
    Ok(session)
}

pub fn events_dir(args: &ProbeArgs) -> Result<Option<weft_events::TraceDir>> {
    match &args.events_out {
        Some(dir) if !args.trace.is_empty() => {
            Ok(Some(weft_events::TraceDir::prepare(dir, args.force)?))
        }
        _ => Ok(None),
    }
}

/// What perturbation weft predicted and what it observed.
pub struct Perturbation {
    costs: Option<Costs>,
    predicted: Option<f64>,
}

impl Perturbation {
    /// Loads (or measures once) the primitive costs when metrics are requested.
    pub fn new(req: &Requests) -> Result<Perturbation> {
        let costs = if req.costs.is_empty() {
            None
        } else {
            Some(Costs::load_or_measure()?)
        };
        Ok(Perturbation {
            costs,
            predicted: None,
        })
    }

    /// Predicts from call rates measured in the running process for a
    /// moment, and refuses above `max` percent of one CPU.
    pub fn predict(
        &mut self,
        req: &Requests,
        pid: i32,
        max: Option<f64>,
        verbose: bool,
    ) -> Result<()> {
        let Some(costs) = &self.costs else {
            return Ok(());
        };
        let prediction = perturbation::predict(pid, &req.costs, costs)?;
        let predicted = prediction.percent;
        if verbose || max.is_some() {
            say!("weft: predicted perturbation: {predicted:.3}% of one CPU");
        }
        if verbose {
            for (pattern, rate, ns) in &prediction.functions {
                say!("weft:   {pattern}: {rate:.0} calls/s x {ns:.1} ns");
            }
        }
        if let Some(max) = max {
            if predicted > max {
                let worst = prediction
                    .worst()
                    .map(|(pattern, rate, _)| {
                        format!(" (most of it from {pattern}: {rate:.0} calls/s)")
                    })
                    .unwrap_or_default();
                bail!("predicted perturbation {predicted:.2}% of one CPU exceeds --max-overhead {max}%{worst}; nothing was inserted");
            }
        }
        self.predicted = Some(predicted);
        Ok(())
    }

    /// Prints predicted against observed, naming the process when weft
    /// measures several (`of`).
    pub fn report(&self, req: &Requests, session: &Session, of: Option<i32>) {
        let Some(costs) = &self.costs else { return };
        let observed = perturbation::observed(&req.costs, costs, session, req.started.elapsed());
        let of = of.map_or(String::new(), |pid| format!(" of process {pid}"));
        match self.predicted {
            Some(p) => say!(
                "weft: perturbation{of}: predicted {p:.3}%, observed {observed:.3}% of one CPU"
            ),
            None => say!("weft: perturbation{of}: {observed:.3}% of one CPU (observed)"),
        }
    }
}

/// The per-thread CPU clock, loaded once for the processes of a workload
/// that start within 10 s of each other while any of them still uses it:
/// loading its BPF program and map for each process that execs took
/// several milliseconds of each exec. A process that starts later gets a
/// clock of its own, with a fresh calibration (its TSC rate drifts from
/// the kernel's clock as its calibration ages). The processes that share a
/// clock share its table of threads (65,536 entries; a thread that finds
/// none has no CPU timers, counted in the no-slot word).
fn shared_cpu_clock(
) -> std::result::Result<std::sync::Arc<weft_vclock::VirtualClock>, weft_vclock::Error> {
    const SHARED_FOR: Duration = Duration::from_secs(10);
    type Loaded = Option<(Instant, std::sync::Weak<weft_vclock::VirtualClock>)>;
    thread_local! {
        static LOADED: std::cell::RefCell<Loaded> = const { std::cell::RefCell::new(None) };
    }
    LOADED.with(|loaded| {
        if let Some((at, clock)) = &*loaded.borrow() {
            if let (true, Some(clock)) = (at.elapsed() < SHARED_FOR, clock.upgrade()) {
                return Ok(clock);
            }
        }
        let clock = std::sync::Arc::new(weft_vclock::VirtualClock::load()?);
        *loaded.borrow_mut() = Some((Instant::now(), std::sync::Arc::downgrade(&clock)));
        Ok(clock)
    })
}

/// How full a ring must be at a drain (a fraction of its size) for weft
/// to drain again without sleeping.
const BUSY_DRAIN: f64 = 0.25;

impl Requests {
    /// Block mode: lets writers wait for room until a second from now.
    fn hold_writers(&self, session: &Session) {
        if let Some(ticks) = self.ring_wait {
            session.set_ring_wait_until(weft_live::clock::tsc() + ticks);
        }
    }

    /// Block mode: lets writers wait for room for `long` from now, or the
    /// usual second if longer: for weft's work that does not drain
    /// (settling a process).
    pub fn hold_writers_for(&self, session: &Session, long: Duration) {
        if let Some(ticks) = self.ring_wait {
            let long = (long.as_secs_f64() * 1e9 * self.ticks_per_ns) as u64;
            session.set_ring_wait_until(weft_live::clock::tsc() + ticks.max(long));
        }
    }

    /// What writers do when their ring is full.
    fn ring_mode(&self) -> weft_events::RingMode {
        if self.flight.is_some() {
            weft_events::RingMode::Flight
        } else if self.ring_wait.is_some() {
            weft_events::RingMode::Block
        } else {
            weft_events::RingMode::Discard
        }
    }

    /// The clock and mode events directories record.
    fn clock(&self) -> weft_events::TraceClock {
        weft_events::TraceClock {
            ticks_per_ns: if self.monotonic {
                1.0
            } else {
                self.ticks_per_ns
            },
            start_tsc: self.start_tsc,
            start_realtime_ns: self.start_realtime_ns,
            clock: if self.monotonic {
                weft_events::ClockKind::Monotonic
            } else {
                weft_events::ClockKind::Tsc
            },
            ring_mode: self.ring_mode(),
        }
    }

    /// Writes what the event ids mean into the events directory now (see
    /// `Recorder::describe`): after inserting probes, and after a library
    /// load added some.
    pub fn describe_trace(&self, session: &Session) -> Result<()> {
        if let Some(recorder) = &self.recorder {
            recorder.borrow_mut().describe(session, self.clock())?;
        }
        Ok(())
    }

    /// Flight mode: writes what the rings hold now to the next DIR/dump-N.
    fn dump(&mut self, session: &Session) {
        let clock = self.clock();
        let (Some(count), Some(shared)) = (&mut self.flight, &self.recorder) else {
            return;
        };
        let recorder = shared.borrow();
        let Some(base) = recorder.dir() else {
            return;
        };
        *count += 1;
        let written = base.dump(*count).and_then(|dir| {
            let path = dir.path().to_path_buf();
            let mut recorder = weft_events::Recorder::new(Some(dir));
            let events = recorder.snapshot(session);
            recorder.finish(session, clock).map(|_| (events, path))
        });
        match written {
            Ok((events, path)) => say!(
                "weft: dump {count}: {events} event(s) written to {} ({} overwritten so far)",
                path.display(),
                session.events_dropped()
            ),
            Err(e) => say!("weft: dump {count} failed: {e}"),
        }
    }

    /// At the end: drains the rings once more, completes the events
    /// directory if asked, and says what was traced.
    /// Records the calls the threads of a process that is gone still had
    /// open (`Session::record_calls_left_open`), before its last drain.
    pub fn record_calls_left_open(&self, session: &Session) {
        if self.recorder.is_some() && self.flight.is_none() {
            session.record_calls_left_open(self.now());
        }
    }

    pub fn finish_tracing(&mut self, session: &Session) -> Result<()> {
        // The requests of the workload's last process end the paths trace.
        if let Some(paths) = self.paths.take() {
            if let Ok(cell) = Rc::try_unwrap(paths) {
                say!("{}", cell.into_inner().finish(self.ticks_per_ns)?);
            }
        }
        let clock = self.clock();
        let Some(shared) = self.recorder.take() else {
            return Ok(());
        };
        if self.ring_wait.is_some() {
            // From here on a full ring drops: weft is about to stop draining.
            session.set_ring_wait_until(0);
        }
        if self.flight.is_some() {
            shared.borrow_mut().snapshot(session);
        } else {
            shared.borrow_mut().drain(session);
        }
        shared.borrow_mut().describe(session, clock)?;
        // The requests of the workload's last process complete the trace.
        let Ok(recorder) = Rc::try_unwrap(shared).map(RefCell::into_inner) else {
            return Ok(());
        };
        let events = recorder.events();
        let traced_for = self.trace_started.elapsed().as_secs_f64();
        let dropped = recorder.dropped();
        let lost = self.ring_mode().lost();
        if let Some(note) = crate::output::slot_note(session.threads_without_slot()) {
            say!("weft: {note}");
        }
        let derive = Instant::now();
        let derives = recorder.derives_files();
        match (recorder.finish(session, clock)?, &self.events_out) {
            (Some(_), Some(dir)) => say!(
                "weft: {events} event(s) written to {} ({dropped} {lost}); {:.2} s of tracing \
                 ({:.1} M events/s){}",
                dir.display(),
                traced_for,
                events as f64 / traced_for.max(1e-9) / 1e6,
                match derives {
                    true => format!(
                        ", then {:.2} s for events.jsonl and trace.json",
                        derive.elapsed().as_secs_f64()
                    ),
                    false => String::new(),
                }
            ),
            _ => say!(
                "weft: {events} event(s) traced ({dropped} {lost}); --events-out DIR keeps them"
            ),
        }
        Ok(())
    }
}
