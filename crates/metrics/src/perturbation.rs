//! Perturbation, predicted before inserting and observed after (Paradyn's
//! cost model): each instrumented function's calls per second times what
//! its instrumentation costs per call, as a percentage of one CPU.

use crate::{Costs, FunctionCost, Result};
use std::time::{Duration, Instant};
use weft_live::Session;
use weft_plan::{Action, Allocate, Expr, Guarded, PointSpec, Primitive};

/// Percent of one CPU that `functions`' instrumentation takes at the given
/// call rates (calls per second, by function).
pub fn percent(
    functions: &[FunctionCost],
    costs: &Costs,
    rate: impl Fn(&FunctionCost) -> f64,
) -> f64 {
    functions
        .iter()
        .map(|f| rate(f) * f.per_call.ns(costs))
        .sum::<f64>()
        / 1e9
        * 100.0
}

/// Calls per second of each function pattern, counted in process `pid`
/// over `window` (with a short attach of its own, and inline counters only).
pub fn measure_rates(pid: i32, patterns: &[String], window: Duration) -> Result<Vec<f64>> {
    let mut session = Session::new(pid)?;
    let mut specs = Vec::new();
    let mut counters = Vec::new();
    for p in patterns {
        let c = session.counter()?;
        counters.push(c);
        let count = Guarded {
            predicate: None,
            primitive: Primitive::AddCounter(c, Expr::Const(1)),
        };
        specs.push(PointSpec::parse(p)?.with_action(Action::Program(vec![count])));
    }
    let prepared = session.prepare(&specs)?;
    let mut tracee = weft_process::Tracee::attach(pid).map_err(weft_live::Error::from)?;
    session.apply(&mut tracee, prepared)?;
    tracee.detach().map_err(weft_live::Error::from)?;
    let started = Instant::now();
    std::thread::sleep(window);
    let elapsed = started.elapsed().as_secs_f64();
    let mut tracee = weft_process::Tracee::attach(pid).map_err(weft_live::Error::from)?;
    session.remove_all(&mut tracee)?;
    tracee.detach().map_err(weft_live::Error::from)?;
    Ok(counters
        .iter()
        .map(|&c| session.counter_value(c) as f64 / elapsed)
        .collect())
}

/// A prediction: the total and each function's share.
#[derive(Debug, Clone)]
pub struct Prediction {
    /// Percent of one CPU.
    pub percent: f64,
    /// Each function: its pattern, calls per second, ns per call.
    pub functions: Vec<(String, f64, f64)>,
}

impl Prediction {
    /// The function that costs the most, if any.
    pub fn worst(&self) -> Option<&(String, f64, f64)> {
        self.functions
            .iter()
            .max_by(|a, b| (a.1 * a.2).total_cmp(&(b.1 * b.2)))
    }
}

/// Predicts the perturbation of `functions` in process `pid` from call
/// rates measured there for a moment; `None` when there is nothing to
/// predict (no metric).
pub fn predict(pid: i32, functions: &[FunctionCost], costs: &Costs) -> Result<Prediction> {
    let mut patterns: Vec<String> = functions.iter().map(|f| f.pattern.clone()).collect();
    patterns.sort();
    patterns.dedup();
    let rates = measure_rates(pid, &patterns, Duration::from_millis(200))?;
    let rate_of = |f: &FunctionCost| patterns.binary_search(&f.pattern).map_or(0.0, |i| rates[i]);
    Ok(Prediction {
        percent: percent(functions, costs, rate_of),
        functions: functions
            .iter()
            .map(|f| (f.pattern.clone(), rate_of(f), f.per_call.ns(costs)))
            .collect(),
    })
}

/// The perturbation observed in `session` over `elapsed`, from the calls
/// its rate counters counted.
pub fn observed(
    functions: &[FunctionCost],
    costs: &Costs,
    session: &Session,
    elapsed: Duration,
) -> f64 {
    let elapsed = elapsed.as_secs_f64().max(1e-9);
    percent(functions, costs, |f| {
        session.counter_value(f.rate_counter) as f64 / elapsed
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PerCall;

    #[test]
    fn percent_of_one_cpu() {
        let costs = Costs {
            trampoline: 2.0,
            counter: 1.0,
            mini: 10.0,
            add_expr: 0.0,
            predicate: 0.0,
            timer_pair: 0.0,
        };
        let f = |pattern: &str, per_call| FunctionCost {
            pattern: pattern.into(),
            per_call,
            rate_counter: 0,
        };
        let functions = [
            f(
                "a",
                PerCall {
                    trampolines: 1,
                    counters: 1,
                    ..PerCall::default()
                },
            ),
            f(
                "b",
                PerCall {
                    minis: 1,
                    ..PerCall::default()
                },
            ),
        ];
        // 1e6 calls/s of a at 3 ns and 1e5 of b at 10 ns: 4 ms per second.
        let rate = |f: &FunctionCost| if f.pattern == "a" { 1e6 } else { 1e5 };
        assert!((percent(&functions, &costs, rate) - 0.4).abs() < 1e-9);
    }
}
