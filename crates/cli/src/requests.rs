//! The measurement requests of the command line: `--count`, `--count-exits`
//! and `--metric`, turned into probes and a sampler.

use crate::ProbeArgs;
use anyhow::{bail, Result};
use std::time::{Duration, Instant};
use weft_live::{PointSpec, Session};
use weft_metrics::{MetricRequest, Sampler};

/// Probes to insert and the sampler that reads the metrics among them.
pub struct Requests {
    /// Every probe, counts first, then each metric's in its order.
    pub specs: Vec<PointSpec>,
    /// Samples the metrics.
    pub sampler: Sampler,
    next_sample: Instant,
}

impl Requests {
    /// Parses the requests and plans the metrics (allocating their
    /// counters and timers in `session`).
    pub fn build(args: &ProbeArgs, session: &mut Session) -> Result<Requests> {
        let mut specs = Vec::new();
        for p in &args.count {
            specs.push(PointSpec::parse(p)?);
        }
        for p in &args.count_exits {
            specs.push(PointSpec::exits(p)?);
        }
        let ticks_per_ns = weft_live::clock::calibrate(Duration::from_millis(20));
        let mut sampler = Sampler::new(
            session.pid(),
            ticks_per_ns,
            args.interval.as_nanos() as u64,
            args.buckets,
        );
        for m in &args.metric {
            let request = MetricRequest::parse(m)?;
            if let Some(p) = request.focus.process {
                if p != session.pid() {
                    bail!(
                        "{m}: process={p} is not the process weft is measuring ({})",
                        session.pid()
                    );
                }
            }
            let plan = weft_metrics::plan(&request, session)?;
            specs.extend(plan.specs.iter().cloned());
            sampler.add(request, plan);
        }
        if specs.is_empty() {
            bail!(
                "nothing to measure: give --count PATTERN (for example --count main) or --metric NAME:FOCUS \
                 (for example --metric wall_time:fn=main)"
            );
        }
        Ok(Requests {
            specs,
            sampler,
            next_sample: Instant::now(),
        })
    }

    /// Samples the metrics if an interval has passed; returns how long
    /// until the next sample is due.
    pub fn tick(&mut self, session: &Session) -> Duration {
        if self.sampler.is_empty() {
            return Duration::from_millis(50);
        }
        let now = Instant::now();
        if now >= self.next_sample {
            self.sampler.sample(session);
            self.next_sample = now + self.sampler.interval();
        }
        self.next_sample
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50))
    }
}
