//! Metric definitions: a base metric (how to compute it for the whole
//! program) and resource constraints (how to restrict it to a focus), as in
//! Paradyn. A constraint keeps a per-thread counter that is positive while
//! its resource is active ("inside F"). The base metric's primitives are
//! guarded by a conjunction of the constraints' predicates.

use crate::request::{MetricKind, MetricRequest, ThreadFocus};
use crate::Result;
use weft_plan::{Action, Allocate, BinOp, Expr, Guarded, PointSpec, Primitive};

/// Where a metric's value is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readout {
    /// A process-wide counter.
    Counter(u64),
    /// A per-thread counter, summed or per thread.
    ThreadCounter(u64),
    /// A per-thread wall timer, summed or per thread.
    Timer(u64),
    /// A per-thread CPU timer (on the per-thread CPU clock, in
    /// nanoseconds), summed or per thread.
    CpuTimer(u64),
}

/// What to insert for one request, and how to read it.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Probes, in the order they must run at shared points.
    pub specs: Vec<PointSpec>,
    /// Where the value comes from.
    pub readout: Readout,
    /// The instrumented functions, each with its cost model and the inline
    /// counter of its calls (the rate that perturbation scales with).
    pub functions: Vec<FunctionCost>,
}

/// How much one call of an instrumented function costs.
#[derive(Debug, Clone)]
pub struct FunctionCost {
    /// The function pattern.
    pub pattern: String,
    /// Primitives run per call.
    pub per_call: PerCall,
    /// A counter of its calls.
    pub rate_counter: u64,
}

/// The primitives one call runs, for [`Costs`](crate::Costs).
#[derive(Debug, Clone, Copy, Default)]
pub struct PerCall {
    /// Trampolines entered (entry, exit).
    pub trampolines: u32,
    /// Inline counters.
    pub counters: u32,
    /// Mini-trampolines called.
    pub minis: u32,
    /// addCounter/addThreadCounter by an expression, in minis.
    pub adds: u32,
    /// Predicates evaluated.
    pub predicates: u32,
    /// startTimer/stopTimer pairs.
    pub timer_pairs: u32,
}

impl PerCall {
    /// Nanoseconds per call with these costs.
    pub fn ns(&self, c: &crate::Costs) -> f64 {
        self.trampolines as f64 * c.trampoline
            + self.counters as f64 * c.counter
            + self.minis as f64 * c.mini
            + self.adds as f64 * c.add_expr
            + self.predicates as f64 * c.predicate
            + self.timer_pairs as f64 * c.timer_pair
    }
}

/// A [`FunctionCost`] whose calls still need a counter of their own.
const NEEDS_RATE_COUNTER: u64 = u64::MAX;

/// The functions whose time is lock waiting.
const LOCK_FUNCTIONS: [&str; 9] = [
    "pthread_mutex_lock",
    "pthread_mutex_timedlock",
    "pthread_mutex_clocklock",
    "pthread_rwlock_rdlock",
    "pthread_rwlock_wrlock",
    "pthread_rwlock_timedrdlock",
    "pthread_rwlock_timedwrlock",
    "pthread_spin_lock",
    "sem_wait",
];

fn and(guards: &[Expr]) -> Option<Expr> {
    guards
        .iter()
        .cloned()
        .reduce(|a, b| Expr::bin(BinOp::And, a, b))
}

fn program(predicate: Option<Expr>, primitive: Primitive) -> Action {
    Action::Program(vec![Guarded {
        predicate,
        primitive,
    }])
}

/// Plans a request: allocates its counters and timers from `alloc` (the
/// applier) and
/// returns the probes to insert.
pub fn plan(req: &MetricRequest, alloc: &mut dyn Allocate) -> Result<Plan> {
    if let Some(def) = &req.definition {
        return plan_defined(req, def, alloc);
    }
    let qualify = |f: &str| match &req.focus.module {
        Some(m) if !f.contains(':') => format!("{m}:{f}"),
        _ => f.to_string(),
    };
    let functions: Vec<String> = match (&req.focus.function, req.kind) {
        (Some(f), _) => vec![qualify(f)],
        (None, _) => LOCK_FUNCTIONS
            .iter()
            .map(|f| qualify(&format!("libc.so.6:{f}")))
            .collect(),
    };
    let mut specs = Vec::new();
    let mut exit_constraints = Vec::new();
    let mut costs: Vec<FunctionCost> = inside_cost(req);
    // Guards that hold for the whole call (checked at the start and at the
    // stop), and those on the arguments (at the entry only).
    let (stable, at_entry) = focus_guards(req, alloc, &mut specs, &mut exit_constraints)?;
    let per_thread = req.focus.thread == ThreadFocus::Each;
    let guards = at_entry.len() as u32;
    let readout = match req.kind {
        MetricKind::Defined => {
            return Err(crate::Error::BadRequest {
                request: req.text.clone(),
                why: "no definition for this metric".into(),
            })
        }
        MetricKind::Calls | MetricKind::SumArg => {
            let value = match req.kind {
                MetricKind::SumArg => Expr::Arg(req.focus.arg.unwrap_or(1)),
                _ => Expr::Const(1),
            };
            let (primitive, readout) = if per_thread {
                let k = alloc.thread_counter()?;
                (
                    Primitive::AddThreadCounter(k, value),
                    Readout::ThreadCounter(k),
                )
            } else {
                let c = alloc.counter()?;
                (Primitive::AddCounter(c, value), Readout::Counter(c))
            };
            for f in &functions {
                specs.push(
                    PointSpec::parse(f)?.with_action(program(and(&at_entry), primitive.clone())),
                );
            }
            let inline = guards == 0 && !per_thread && req.kind == MetricKind::Calls;
            let per_call = if inline {
                PerCall {
                    trampolines: 1,
                    counters: 1,
                    ..PerCall::default()
                }
            } else {
                PerCall {
                    trampolines: 1,
                    minis: 1,
                    adds: 1,
                    predicates: guards,
                    ..PerCall::default()
                }
            };
            // An unguarded process-wide call count is its own rate counter.
            let rate_counter = match readout {
                Readout::Counter(c) if inline => c,
                _ => NEEDS_RATE_COUNTER,
            };
            costs.extend(functions.iter().map(|f| FunctionCost {
                pattern: f.clone(),
                per_call,
                rate_counter,
            }));
            readout
        }
        MetricKind::WallTime
        | MetricKind::CpuTime
        | MetricKind::Concurrency
        | MetricKind::LockWait => {
            let t = alloc.timer()?;
            // CPU time from the per-thread CPU clock where the process can
            // map it; else a wall timer, which the sampler turns into an
            // estimate of CPU time.
            let on_cpu_clock = req.kind == MetricKind::CpuTime && alloc.cpu_clock();
            let (start, stop) = if on_cpu_clock {
                (Primitive::StartCpuTimer(t), Primitive::StopCpuTimer(t))
            } else {
                (Primitive::StartTimer(t), Primitive::StopTimer(t))
            };
            for f in &functions {
                specs
                    .push(PointSpec::parse(f)?.with_action(program(and(&at_entry), start.clone())));
            }
            for f in &functions {
                specs.push(PointSpec::exits(f)?.with_action(program(and(&stable), stop.clone())));
            }
            let per_call = PerCall {
                trampolines: 2,
                timer_pairs: 1,
                predicates: guards + stable.len() as u32,
                ..PerCall::default()
            };
            costs.extend(functions.iter().map(|f| FunctionCost {
                pattern: f.clone(),
                per_call,
                rate_counter: NEEDS_RATE_COUNTER,
            }));
            if on_cpu_clock {
                Readout::CpuTimer(t)
            } else {
                Readout::Timer(t)
            }
        }
    };
    specs.extend(exit_constraints);
    count_calls(alloc, &mut costs, &mut specs)?;
    Ok(Plan {
        specs,
        readout,
        functions: costs,
    })
}

/// Counts the calls of every instrumented function still without a rate
/// counter (inline, about 1 ns), for the observed perturbation.
fn count_calls(
    alloc: &mut dyn Allocate,
    costs: &mut [FunctionCost],
    specs: &mut Vec<PointSpec>,
) -> Result<()> {
    for c in costs
        .iter_mut()
        .filter(|c| c.rate_counter == NEEDS_RATE_COUNTER)
    {
        c.rate_counter = alloc.counter()?;
        specs.push(PointSpec::parse(&c.pattern)?.with_action(program(
            None,
            Primitive::AddCounter(c.rate_counter, Expr::Const(1)),
        )));
    }
    Ok(())
}

/// The guards a focus puts on every primitive: those that hold for the
/// whole call (checked at exits too) and those on the arguments (entries only).
fn focus_guards(
    req: &MetricRequest,
    alloc: &mut dyn Allocate,
    specs: &mut Vec<PointSpec>,
    exits: &mut Vec<PointSpec>,
) -> Result<(Vec<Expr>, Vec<Expr>)> {
    let mut stable = Vec::new();
    if let Some(inside) = &req.focus.inside {
        let k = alloc.thread_counter()?;
        specs.push(PointSpec::parse(inside)?.with_action(program(
            None,
            Primitive::AddThreadCounter(k, Expr::Const(1)),
        )));
        exits.push(PointSpec::exits(inside)?.with_action(program(
            None,
            Primitive::AddThreadCounter(k, Expr::Const(-1)),
        )));
        stable.push(Expr::bin(BinOp::Gt, Expr::ThreadCounter(k), Expr::Const(0)));
    }
    if let ThreadFocus::Tid(tid) = req.focus.thread {
        stable.push(Expr::bin(BinOp::Eq, Expr::Tid, Expr::Const(tid as i64)));
    }
    let mut at_entry = stable.clone();
    if let Some((_, e)) = &req.focus.predicate {
        at_entry.push(e.clone());
    }
    Ok((stable, at_entry))
}

/// The cost of an `inside=` constraint: a per-thread counter at the entry and exits.
fn inside_cost(req: &MetricRequest) -> Vec<FunctionCost> {
    req.focus
        .inside
        .iter()
        .map(|inside| FunctionCost {
            pattern: inside.clone(),
            per_call: PerCall {
                trampolines: 2,
                minis: 2,
                adds: 2,
                ..PerCall::default()
            },
            rate_counter: NEEDS_RATE_COUNTER,
        })
        .collect()
}

fn remap(e: &Expr, counters: &[u64]) -> Expr {
    match e {
        Expr::Counter(i) => Expr::Counter(counters[*i as usize]),
        Expr::Bin(op, a, b) => Expr::bin(*op, remap(a, counters), remap(b, counters)),
        other => other.clone(),
    }
}

/// Plans a user-defined metric: its counters and timers get global
/// indices, `$fn` becomes the focus's function, and the focus's guards are
/// added to every primitive.
fn plan_defined(
    req: &MetricRequest,
    def: &crate::Definition,
    alloc: &mut dyn Allocate,
) -> Result<Plan> {
    let counters: Vec<u64> = def
        .counters
        .iter()
        .map(|_| alloc.counter())
        .collect::<Result<_, _>>()?;
    let timers: Vec<u64> = def
        .timers
        .iter()
        .map(|_| alloc.timer())
        .collect::<Result<_, _>>()?;
    let mut specs = Vec::new();
    let mut exit_constraints = Vec::new();
    let (stable, at_entry) = focus_guards(req, alloc, &mut specs, &mut exit_constraints)?;
    let function = req.focus.function.clone().unwrap_or_default();
    let mut costs: Vec<FunctionCost> = inside_cost(req);
    for p in &def.points {
        let pattern = p.pattern.replace("$fn", &function);
        let guards = if p.at_exit { &stable } else { &at_entry };
        let actions: Vec<Guarded> = p
            .actions
            .iter()
            .map(|g| {
                let mut all: Vec<Expr> = guards.clone();
                all.extend(g.predicate.iter().map(|e| remap(e, &counters)));
                let primitive = match &g.primitive {
                    Primitive::SetCounter(c, e) => {
                        Primitive::SetCounter(counters[*c as usize], remap(e, &counters))
                    }
                    Primitive::AddCounter(c, e) => {
                        Primitive::AddCounter(counters[*c as usize], remap(e, &counters))
                    }
                    Primitive::SubCounter(c, e) => {
                        Primitive::SubCounter(counters[*c as usize], remap(e, &counters))
                    }
                    Primitive::StartTimer(t) => Primitive::StartTimer(timers[*t as usize]),
                    Primitive::StopTimer(t) => Primitive::StopTimer(timers[*t as usize]),
                    Primitive::StartCpuTimer(t) => Primitive::StartCpuTimer(timers[*t as usize]),
                    Primitive::StopCpuTimer(t) => Primitive::StopCpuTimer(timers[*t as usize]),
                    other => other.clone(),
                };
                Guarded {
                    predicate: and(&all),
                    primitive,
                }
            })
            .collect();
        let timer_ops = actions
            .iter()
            .filter(|g| {
                matches!(
                    g.primitive,
                    Primitive::StartTimer(_)
                        | Primitive::StopTimer(_)
                        | Primitive::StartCpuTimer(_)
                        | Primitive::StopCpuTimer(_)
                )
            })
            .count() as u32;
        let per_call = PerCall {
            trampolines: 1,
            minis: 1,
            adds: actions.len() as u32 - timer_ops,
            predicates: actions.iter().filter(|g| g.predicate.is_some()).count() as u32,
            timer_pairs: timer_ops.div_ceil(2),
            ..PerCall::default()
        };
        let spec = if p.at_exit {
            PointSpec::exits(&pattern)?
        } else {
            PointSpec::parse(&pattern)?
        };
        specs.push(spec.with_action(Action::Program(actions)));
        match costs.iter_mut().find(|c| c.pattern == pattern) {
            Some(c) => {
                c.per_call.trampolines += per_call.trampolines;
                c.per_call.minis += per_call.minis;
                c.per_call.adds += per_call.adds;
                c.per_call.predicates += per_call.predicates;
                c.per_call.timer_pairs += per_call.timer_pairs;
            }
            None => costs.push(FunctionCost {
                pattern,
                per_call,
                rate_counter: NEEDS_RATE_COUNTER,
            }),
        }
    }
    specs.extend(exit_constraints);
    count_calls(alloc, &mut costs, &mut specs)?;
    let readout = match def.value {
        crate::Value::Counter(i) => Readout::Counter(counters[i]),
        crate::Value::Timer(i) => Readout::Timer(timers[i]),
    };
    Ok(Plan {
        specs,
        readout,
        functions: costs,
    })
}
