//! The live view of `weft attach`: when standard error is a terminal, a
//! block of lines redrawn every second with each metric's value and rate.

use crate::requests::Requests;
use std::collections::HashMap;
use std::io::Write;
use std::time::{Duration, Instant};

/// Redraws the metrics block in place.
pub struct LiveView {
    enabled: bool,
    pid: i32,
    started: Instant,
    last: Instant,
    lines: usize,
    previous: HashMap<u64, f64>,
}

impl LiveView {
    /// A view that draws only if standard error is a terminal and there are metrics.
    pub fn new(pid: i32, req: &Requests) -> LiveView {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        LiveView {
            enabled: tty && !req.sampler.is_empty(),
            pid,
            started: Instant::now(),
            last: Instant::now(),
            lines: 0,
            previous: HashMap::new(),
        }
    }

    /// Something else was printed (a command and its answer): draw the
    /// next block below instead of over it.
    pub fn interrupted(&mut self) {
        self.lines = 0;
    }

    /// Redraws if a second has passed.
    pub fn tick(&mut self, req: &Requests) {
        if !self.enabled || self.last.elapsed() < Duration::from_secs(1) {
            return;
        }
        let dt = self.last.elapsed().as_secs_f64();
        self.last = Instant::now();
        let mut out = String::new();
        if self.lines > 0 {
            // Back to the top of the previous block, and clear it.
            out.push_str(&format!("\x1b[{}F\x1b[J", self.lines));
        }
        let rows = req.sampler.list();
        out.push_str(&format!(
            "weft: process {} for {:.0} s — type 'add METRIC:FOCUS', 'remove ID' or 'list'; Ctrl-C detaches\n",
            self.pid,
            self.started.elapsed().as_secs_f64()
        ));
        out.push_str(&format!(
            "{:>4}  {:<44}  {:>16}  {:>14}\n",
            "ID", "METRIC:FOCUS", "VALUE", "RATE /s"
        ));
        for (tag, text, value, active) in &rows {
            let rate = (value - self.previous.get(tag).copied().unwrap_or(0.0)) / dt;
            self.previous.insert(*tag, *value);
            let rate = if *active {
                format!("{rate:.3}")
            } else {
                "removed".into()
            };
            out.push_str(&format!(
                "{tag:>4}  {text:<44}  {value:>16.6}  {rate:>14}\n"
            ));
        }
        self.lines = rows.len() + 2;
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(out.as_bytes());
        let _ = err.flush();
    }
}
