//! Metrics: Paradyn's data-collection model on weft's splicing engine.
//!
//! A request names a metric and a *focus*, such as `wall_time:fn=work` or
//! `calls:fn=write,inside=flush_log`. The metric's definition turns the
//! request into probes: points plus mini-trampoline programs of guarded
//! primitives. The focus's constraints add per-thread counters and
//! predicates, for example "only while this thread is inside `flush_log`".
//! A [`Sampler`] reads counters and timers from shared memory, without
//! stopping the target. It accumulates the values into
//! [`TimeHistogram`]s, which double their bucket width when full.
//!
//! This crate never touches the process: it plans and it reads shared memory.

mod calibrate;
mod define;
mod error;
mod expr;
mod file;
mod histogram;
pub mod perturbation;
mod request;
mod sampler;

pub use calibrate::Costs;
pub use define::{plan, FunctionCost, PerCall, Plan, Readout};
pub use error::{Error, Result};
pub use expr::{parse_expr, parse_expr_with};
pub use file::{Definition, Definitions, PointDef, Value, MAX_DEFINITIONS_FILE};
pub use histogram::TimeHistogram;
pub use request::{Focus, MetricKind, MetricRequest, ThreadFocus};
pub use sampler::{MetricResult, Sampler, ThreadValue};
