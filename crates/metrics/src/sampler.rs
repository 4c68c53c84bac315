//! Sampling: read every metric's cumulative value from shared memory at
//! each interval, and put the increment into its time histogram.
//!
//! CPU time comes from CPU timers on the per-thread CPU clock
//! (`weft_vclock`), exact, where the kernel lets weft load its BPF
//! program. Where it does not, weft estimates CPU time while sampling, and
//! the result says it is approximate. For each thread it reads the
//! CPU time the kernel accounted to the thread since the last sample (from
//! `/proc`). It multiplies that by the fraction of the interval the thread
//! spent inside the focus, which the exact per-thread wall timer gives. A
//! thread that spins inside gets all its CPU; a thread that sleeps inside
//! gets almost none.

use crate::define::{Plan, Readout};
use crate::request::{MetricKind, MetricRequest, ThreadFocus};
use crate::TimeHistogram;
use std::collections::HashMap;
use std::sync::Arc;
use weft_live::{clock, Session, ThreadReading};
use weft_vclock::VirtualClock;

/// One thread's value of a per-thread metric.
#[derive(Debug, Clone, PartialEq)]
pub struct ThreadValue {
    /// The thread.
    pub tid: i32,
    /// Its value, in the metric's unit.
    pub value: f64,
}

/// A metric's final value and history.
#[derive(Debug, Clone)]
pub struct MetricResult {
    /// The metric's name.
    pub metric: String,
    /// The focus as written.
    pub focus: String,
    /// The value over the whole run, in `unit`.
    pub value: f64,
    /// The unit.
    pub unit: String,
    /// Increments per bucket, in `unit` (for concurrency: average threads per bucket).
    pub histogram: TimeHistogram,
    /// Per-thread values, for `thread=each`.
    pub threads: Option<Vec<ThreadValue>>,
    /// Why the value is an estimate, if it is (`cpu_time` sampled from
    /// `/proc` because the per-thread CPU clock was not available).
    pub approximate: Option<String>,
    /// Why nothing was measured, if every point of the metric was passed
    /// over (its value then reads 0 without meaning it).
    pub not_measured: Option<String>,
}

struct Entry {
    /// The request's tag (its id for `remove`).
    tag: u64,
    /// False once removed: its value is frozen.
    active: bool,
    request: MetricRequest,
    plan: Plan,
    histogram: TimeHistogram,
    last: f64,
    /// For cpu_time: per thread, (CPU ns, timer ticks) at the last sample.
    cpu_last: HashMap<i32, (u64, u64)>,
    /// For cpu_time: per thread, CPU seconds attributed so far.
    cpu_inside: HashMap<i32, f64>,
    /// When its probes went live (see [`Sampler::live_from_now`]): the
    /// time concurrency averages over starts there.
    since_tsc: u64,
    /// Whether it has been sampled since it went live.
    sampled: bool,
}

/// Samples metrics into histograms.
pub struct Sampler {
    pid: i32,
    ticks_per_ns: f64,
    start_tsc: u64,
    last_tsc: u64,
    last_ns: u64,
    bucket_ns: u64,
    buckets: usize,
    entries: Vec<Entry>,
    /// The per-thread CPU clock, for CPU timers still running.
    cpu_clock: Option<Arc<VirtualClock>>,
    /// Why CPU time is sampled, when it is.
    cpu_sampled_because: String,
}

impl Sampler {
    /// A sampler for process `pid`, starting now, with `buckets` buckets of `interval_ns`.
    pub fn new(pid: i32, ticks_per_ns: f64, interval_ns: u64, buckets: usize) -> Sampler {
        let now = clock::tsc();
        Sampler {
            pid,
            ticks_per_ns,
            start_tsc: now,
            last_tsc: now,
            last_ns: 0,
            bucket_ns: interval_ns.max(1_000),
            buckets,
            entries: Vec::new(),
            cpu_clock: None,
            cpu_sampled_because: "the per-thread CPU clock was not loaded".into(),
        }
    }

    /// A sampler of the same metrics for `pid`, a child the sampled
    /// process forked (whose session has the same counters and timers),
    /// with nothing sampled yet: its time starts now.
    pub fn for_child(&self, pid: i32) -> Sampler {
        let mut child = Sampler::new(pid, self.ticks_per_ns, self.bucket_ns, self.buckets);
        child.cpu_clock = self.cpu_clock.clone();
        child.cpu_sampled_because = self.cpu_sampled_because.clone();
        for e in &self.entries {
            child.add(e.tag, e.request.clone(), e.plan.clone());
            if let Some(c) = child.entries.last_mut() {
                c.active = e.active;
            }
        }
        child
    }

    /// The per-thread CPU clock CPU timers run on, if they do.
    pub fn cpu_clock(&self) -> Option<&Arc<VirtualClock>> {
        self.cpu_clock.as_ref()
    }

    /// CPU timers read running ones on `clock`.
    pub fn use_cpu_clock(&mut self, clock: Arc<VirtualClock>) {
        self.cpu_clock = Some(clock);
    }

    /// Says why `cpu_time` is sampled (the per-thread CPU clock could not
    /// be loaded or mapped): its results carry the reason.
    pub fn cpu_time_sampled_because(&mut self, why: String) {
        self.cpu_sampled_because = why;
    }

    fn cpu_timer_readings(&self, session: &Session, timer: u64) -> Vec<ThreadReading> {
        session.cpu_timer_readings(timer, |entry| {
            self.cpu_clock.as_ref().map(|c| c.read_other(entry))
        })
    }

    /// Adds a planned metric under `tag`.
    pub fn add(&mut self, tag: u64, request: MetricRequest, plan: Plan) {
        self.entries.push(Entry {
            tag,
            active: true,
            request,
            plan,
            histogram: TimeHistogram::new(self.bucket_ns, self.buckets),
            last: 0.0,
            cpu_last: HashMap::new(),
            cpu_inside: HashMap::new(),
            since_tsc: clock::tsc(),
            sampled: false,
        });
    }

    /// The probes of the metrics not sampled yet are in place from now on:
    /// their time starts here, not when they were planned (planning,
    /// analysing and splicing take a while, and `concurrency` averages
    /// over the time measured). Before the first sample, the histograms'
    /// clock starts here too.
    pub fn live_from_now(&mut self) {
        let now = clock::tsc();
        if self.entries.iter().all(|e| !e.sampled) {
            self.start_tsc = now;
            self.last_tsc = now;
            self.last_ns = 0;
        }
        for e in self.entries.iter_mut().filter(|e| !e.sampled) {
            e.since_tsc = now;
        }
    }

    /// Whether there is anything to sample.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How long until the next sample is due (the histograms' current bucket width).
    pub fn interval(&self) -> std::time::Duration {
        let ns = self
            .entries
            .iter()
            .map(|e| e.histogram.bucket_ns())
            .min()
            .unwrap_or(self.bucket_ns);
        std::time::Duration::from_nanos(ns)
    }

    fn seconds(&self, ticks: u64) -> f64 {
        ticks as f64 / self.ticks_per_ns / 1e9
    }

    /// Takes a sample now.
    pub fn sample(&mut self, session: &Session) {
        let now = clock::tsc();
        let at_ns = ((now - self.start_tsc) as f64 / self.ticks_per_ns) as u64;
        let interval_s = self.seconds(now - self.last_tsc).max(1e-9);
        let from_ns = self.last_ns;
        self.last_tsc = now;
        self.last_ns = at_ns;
        let (pid, ticks_per_ns) = (self.pid, self.ticks_per_ns);
        let clock = self.cpu_clock.clone();
        let cpu_readings = |session: &Session, t: u64| {
            session.cpu_timer_readings(t, |entry| clock.as_ref().map(|c| c.read_other(entry)))
        };
        for e in self.entries.iter_mut().filter(|e| e.active) {
            e.sampled = true;
            let cumulative = match (e.request.kind, e.plan.readout) {
                (MetricKind::CpuTime, Readout::Timer(t)) => {
                    for r in session.timer_readings(t, now) {
                        let Some(cpu) = weft_process::thread_cpu_ns(pid, r.tid) else {
                            continue;
                        };
                        let (cpu0, ticks0) = *e.cpu_last.entry(r.tid).or_insert((cpu, r.value));
                        let inside_s = (r.value.saturating_sub(ticks0)) as f64 / ticks_per_ns / 1e9;
                        let fraction = (inside_s / interval_s).clamp(0.0, 1.0);
                        *e.cpu_inside.entry(r.tid).or_insert(0.0) +=
                            cpu.saturating_sub(cpu0) as f64 / 1e9 * fraction;
                        e.cpu_last.insert(r.tid, (cpu, r.value));
                    }
                    e.cpu_inside.values().sum()
                }
                (_, Readout::CpuTimer(t)) => {
                    cpu_readings(session, t)
                        .iter()
                        .map(|r| r.value as f64)
                        .sum::<f64>()
                        / 1e9
                }
                (_, Readout::Counter(c)) => session.counter_value(c) as i64 as f64,
                (_, Readout::ThreadCounter(k)) => session
                    .thread_counter_readings(k)
                    .iter()
                    .map(|r| r.value as i64 as f64)
                    .sum(),
                (_, Readout::Timer(t)) => {
                    session
                        .timer_readings(t, now)
                        .iter()
                        .map(|r| r.value as f64)
                        .sum::<f64>()
                        / ticks_per_ns
                        / 1e9
                }
            };
            e.histogram
                .add_interval(from_ns, at_ns, cumulative - e.last);
            e.last = cumulative;
        }
    }

    /// Stops sampling the metric with `tag` (after a last sample); its value
    /// stays in the results. False if no active metric has that tag.
    pub fn remove(&mut self, session: &Session, tag: u64) -> bool {
        if !self.entries.iter().any(|e| e.tag == tag && e.active) {
            return false;
        }
        self.sample(session);
        for e in self.entries.iter_mut().filter(|e| e.tag == tag) {
            e.active = false;
        }
        true
    }

    /// (tag, request, current value, active) of every metric; for
    /// concurrency the value is the average number of threads so far.
    pub fn list(&self) -> Vec<(u64, String, f64, bool)> {
        self.entries
            .iter()
            .map(|e| {
                let value = if e.request.kind == MetricKind::Concurrency {
                    let elapsed = self.seconds(self.last_tsc.saturating_sub(e.since_tsc));
                    e.last / elapsed.max(1e-9)
                } else {
                    e.last
                };
                (e.tag, e.request.text.clone(), value, e.active)
            })
            .collect()
    }

    /// The results so far.
    pub fn results(&self, session: &Session) -> Vec<MetricResult> {
        let now = clock::tsc();
        self.entries
            .iter()
            .map(|e| {
                let kind = e.request.kind;
                let (value, histogram) = if kind == MetricKind::Concurrency {
                    // Time inside, summed over threads, per unit of time.
                    let mut h = e.histogram.clone();
                    let width = h.bucket_ns() as f64 / 1e9;
                    let averaged: Vec<f64> = h.values().iter().map(|v| v / width).collect();
                    h = TimeHistogram::from_values(h.bucket_ns(), self.buckets, averaged);
                    let elapsed_s = self.seconds(now.saturating_sub(e.since_tsc));
                    (e.last / elapsed_s.max(1e-9), h)
                } else {
                    (e.last, e.histogram.clone())
                };
                let threads = (e.request.focus.thread == ThreadFocus::Each)
                    .then(|| self.per_thread(session, e, now));
                MetricResult {
                    metric: e.request.name(),
                    focus: e.request.focus_text(),
                    // + 0.0: a timer that never ran reads 0, not -0.
                    value: value + 0.0,
                    unit: e.request.unit(),
                    histogram,
                    threads,
                    approximate: (kind == MetricKind::CpuTime
                        && !matches!(e.plan.readout, Readout::CpuTimer(_)))
                    .then(|| format!("sampled from /proc: {}", self.cpu_sampled_because)),
                    not_measured: session.tag_not_measured(e.tag),
                }
            })
            .collect()
    }

    fn per_thread(&self, session: &Session, e: &Entry, now: u64) -> Vec<ThreadValue> {
        let to_values = |readings: Vec<ThreadReading>, scale: f64| {
            readings
                .into_iter()
                .map(|r| ThreadValue {
                    tid: r.tid,
                    value: r.value as f64 * scale,
                })
                .collect()
        };
        match (e.request.kind, e.plan.readout) {
            (_, Readout::CpuTimer(t)) => to_values(self.cpu_timer_readings(session, t), 1e-9),
            (MetricKind::CpuTime, _) => {
                let mut v: Vec<ThreadValue> = e
                    .cpu_inside
                    .iter()
                    .map(|(&tid, &value)| ThreadValue { tid, value })
                    .collect();
                v.sort_by_key(|t| t.tid);
                v
            }
            (_, Readout::Timer(t)) => to_values(
                session.timer_readings(t, now),
                1.0 / self.ticks_per_ns / 1e9,
            ),
            (_, Readout::ThreadCounter(k)) => to_values(session.thread_counter_readings(k), 1.0),
            (_, Readout::Counter(_)) => vec![],
        }
    }
}
