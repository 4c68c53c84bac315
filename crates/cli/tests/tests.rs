//! weft's integration tests: real processes, real splices, ground truth
//! from the targets' own tallies and from independent tools.

mod attaching;
mod counting;
mod cpu_time;
mod docs;
mod endurance;
mod errors;
mod inspecting;
mod killed;
mod loading;
mod metrics;
mod paths;
mod real_programs;
mod signals;
mod support;
mod symlink_race;
mod syscalls;
mod tail_calls;
mod tracing;
mod workloads;
