//! Event tracing: every event recorded once with exact payloads, in each
//! thread's order; the Chrome JSON pairs entries with exits; `weft events`
//! and babeltrace2 print them all. By theme: function entries and exits,
//! string arguments, USDT probes, rich events written by the program, the
//! ring modes, the clock, real programs (python, postgres), and the files
//! weft writes: private, never through a link, readable after a crash.

mod clock;
mod files;
mod functions;
mod reading;
mod real_programs;
mod rich;
mod rings;
mod strings;
mod usdt;
