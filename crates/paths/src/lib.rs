//! Abstract execution, after qpt (Larus and Ball; the multi-tasking paper
//! in `shared/papers/abstract-execution-multitasking-1994.txt`): a traced
//! function records only *witnesses*, small numbers written on a few of
//! its control-flow edges, and its whole path is regenerated offline from
//! them and its CFG.
//!
//! This crate is the planning, with no process and no machine code:
//!
//! * [`witness`]: which edges of a function's CFG carry witnesses
//!   ([`witness::place`]), and the regeneration of a path from the
//!   witnesses it wrote ([`witness::Plan::regenerate`]);
//! * [`regen`]: a thread's whole stream regenerated, and [`interleave`]:
//!   the threads' streams cut and ordered by the schedule.

pub mod data;
pub mod handler;
pub mod instrument;
pub mod interleave;
pub mod link;
pub mod pool;
pub mod rebuild;
pub mod record;
pub mod regen;
pub mod trace_dir;
pub mod witness;
