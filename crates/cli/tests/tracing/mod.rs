//! Event tracing: every event recorded once with exact payloads, in each
//! thread's order; the Chrome JSON pairs entries with exits; `weft events`
//! and babeltrace2 print them all. By theme: function entries and exits,
//! string arguments, USDT probes, rich events written by the program, the
//! ring modes, the clock, and real programs (python, postgres).

mod clock;
mod functions;
mod real_programs;
mod rich;
mod rings;
mod strings;
mod usdt;
