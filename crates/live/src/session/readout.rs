//! Resources of probe plans, handed out from the shared region (the
//! [`Allocate`] implementation), and read back: counts, process-wide and
//! per-thread counters, wall timers, and the spliced points.

use super::*;
use weft_plan::{Allocate, Exhausted};

/// The resources of probe plans, in the shared region.
impl Allocate for Session {
    fn counter(&mut self) -> Result<u64, Exhausted> {
        let c = self.given.counters;
        if c >= self.layout.header.counters_capacity {
            return Err(Exhausted { what: "counters" });
        }
        self.given.counters += 1;
        for lane in 0..self.layout.header.counter_lanes {
            self.shm.store_u64(self.layout.counter_lane(c, lane), 0);
        }
        Ok(c)
    }

    fn cpu_clock(&self) -> bool {
        self.cpu_clock.is_some()
    }

    fn timer(&mut self) -> Result<u64, Exhausted> {
        let t = self.given.timers;
        if t >= threads::TIMERS {
            return Err(Exhausted { what: "timers" });
        }
        self.given.timers += 1;
        Ok(t)
    }

    fn user_timer(&mut self) -> Result<u64, Exhausted> {
        if let Some(t) = self.given.user_timer {
            return Ok(t);
        }
        let t = self.timer()?;
        self.given.user_timer = Some(t);
        Ok(t)
    }

    fn feed(&mut self) -> Result<(u64, u64), Exhausted> {
        if let Some(f) = self.given.feed {
            return Ok(f);
        }
        let base = self.counter()?;
        let state = self.thread_counter()?;
        for _ in 1..5 {
            self.thread_counter()?;
        }
        self.given.feed = Some((base, state));
        Ok((base, state))
    }

    fn call_buffer(&mut self) -> Result<(u64, u64), Exhausted> {
        if let Some(n) = self.given.call_buffer {
            return Ok(n);
        }
        let n = (self.thread_counter()?, self.thread_counter()?);
        self.given.call_buffer = Some(n);
        Ok(n)
    }

    fn call_number(&mut self) -> Result<(u64, u64), Exhausted> {
        if let Some(n) = self.given.call_number {
            return Ok(n);
        }
        let n = (self.thread_counter()?, self.thread_counter()?);
        self.given.call_number = Some(n);
        Ok(n)
    }

    fn thread_counter(&mut self) -> Result<u64, Exhausted> {
        let c = self.given.thread_counters;
        if c >= threads::COUNTERS {
            return Err(Exhausted {
                what: "per-thread counters",
            });
        }
        self.given.thread_counters += 1;
        Ok(c)
    }

    fn event(&mut self, info: EventInfo) -> Result<u32, Exhausted> {
        if self.layout.header.ring_data == 0 {
            return Err(Exhausted {
                what: "event rings (this session was created without them)",
            });
        }
        let id = match &self.given.shared_ids {
            Some(ids) => ids.id_of(&info),
            None => self.given.events.len() as u32,
        };
        self.given.events.push((id, info));
        Ok(id)
    }
}

/// Readout.
impl Session {
    /// The current value of every probe.
    pub fn counts(&self) -> Vec<Count> {
        self.probes
            .iter()
            .filter_map(|p| {
                Some(Count {
                    module: self.modules[p.module].name.clone(),
                    function: p.display.clone(),
                    kind: p.kind,
                    calls: self.counter_value(p.counter?),
                    not_measured: p.skipped.as_ref().map(ToString::to_string),
                })
            })
            .collect()
    }

    /// Why the probes tagged `tag` at function entries were all passed
    /// over, if they were (every probe, for a request without entry
    /// probes): a metric whose calls are never seen to start measured
    /// nothing, even if its exits were spliced.
    pub fn tag_not_measured(&self, tag: u64) -> Option<String> {
        let tagged: Vec<&Probe> = self.probes.iter().filter(|p| p.tag == tag).collect();
        let entries: Vec<&Probe> = tagged
            .iter()
            .copied()
            .filter(|p| p.kind == PointKind::Entry)
            .collect();
        let decisive = if entries.is_empty() { tagged } else { entries };
        let mut why = None;
        for p in decisive {
            why = Some(p.skipped.as_ref()?.to_string());
        }
        why
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
                    why_trap: s.choice.why_trap,
                    saves_state: s.saves_state,
                    active: s.active,
                    relocated_function: s.whole_function.is_some(),
                    shares_splice_of: (sp.point != s.choice.point).then_some(s.choice.point),
                });
            }
        }
        out
    }

    /// The value of a process-wide counter.
    pub fn counter_value(&self, index: u64) -> u64 {
        // The sum of its lanes (wrapping, as a counter that went below 0
        // in one lane and above in another does).
        (0..self.layout.header.counter_lanes).fold(0u64, |sum, lane| {
            sum.wrapping_add(self.shm.load_u64(self.layout.counter_lane(index, lane)))
        })
    }

    /// Every thread's reading of a wall timer, in TSC ticks, taken
    /// consistently (under each timer's sequence number) at `now` ticks.
    pub fn timer_readings(&self, timer: u64, now: u64) -> Vec<ThreadReading> {
        self.readings_of(timer, |_| Some(now))
    }

    /// Every thread's reading of timer `timer`, a running one adding the
    /// time since its start by its clock's reading now (`now_of`, given
    /// the thread's block; `None`: the running part is unknown).
    pub(super) fn readings_of(
        &self,
        timer: u64,
        now_of: impl Fn(u64) -> Option<u64>,
    ) -> Vec<ThreadReading> {
        let mut out = Vec::new();
        for slot in self.claimed_slots() {
            let block = self.layout.thread_block(slot);
            let at = block + threads::timer(timer);
            let now = now_of(block);
            let reading = loop {
                let seq = self.shm.load_u64(at + threads::TIMER_SEQ);
                let count = self.shm.load_u64(at + threads::TIMER_COUNT);
                let start = self.shm.load_u64(at + threads::TIMER_START);
                let total = self.shm.load_u64(at + threads::TIMER_TOTAL);
                if seq.is_multiple_of(2) && seq == self.shm.load_u64(at + threads::TIMER_SEQ) {
                    let running = match now {
                        Some(now) if count > 0 && now > start => now - start,
                        _ => 0,
                    };
                    break (total + running, count > 0);
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

    /// The thread slots some thread has claimed (retired ones included).
    pub(super) fn claimed_slots(&self) -> impl Iterator<Item = u64> + '_ {
        (0..self.layout.header.thread_slots).filter(|&slot| {
            self.shm
                .load_u64(self.layout.header.threads_offset + slot * 8)
                != 0
        })
    }
}
