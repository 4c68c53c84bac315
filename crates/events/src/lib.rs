//! Event tracing: what to trace, draining the per-thread rings, and the
//! formats events are written in.
//!
//! `--trace fn:PATTERN` records an event at each entry of the matching
//! functions (first N arguments) and at each exit (return value), written
//! by trampolines into lock-free per-thread rings in shared memory (see
//! `weft_patch::region::ring`). A [`Collector`] drains the rings from weft;
//! a full ring drops the event and counts it (discard mode). An events
//! directory holds `meta.json`, `events.jsonl` (one event per line),
//! `trace.json` (Chrome/Perfetto trace event format, entries and exits as
//! `B`/`E` durations) and `ctf/` (CTF 1.8, for babeltrace2 and Trace Compass).

mod collect;
mod ctf;
mod error;
mod store;
mod usdt;

pub use collect::Collector;
pub use ctf::write_ctf;
pub use error::{Error, Result};
pub use store::{read_dir, render_text, write_dir, Meta};
pub use usdt::{operand, usdt_specs};

use weft_live::{Action, PointSpec};

/// The probes for one `--trace` request: `fn:PATTERN` (entries and exits)
/// or `entry:PATTERN` (entries only).
pub fn trace_specs(request: &str, args: u8) -> Result<Vec<PointSpec>> {
    let Some((kind, what)) = request.split_once(':') else {
        return Err(Error::BadRequest(format!("'{request}': write fn:PATTERN")));
    };
    match kind {
        "fn" | "entry" => {
            let entry = PointSpec::parse(what)?.with_action(Action::Trace { args: args.min(6) });
            if kind == "entry" {
                return Ok(vec![entry]);
            }
            let exit = PointSpec::exits(what)?.with_action(Action::Trace { args: 0 });
            Ok(vec![entry, exit])
        }
        "usdt" => Err(Error::BadRequest(format!(
            "'{request}': USDT probes are resolved against a process's modules (usdt_specs)"
        ))),
        other => Err(Error::BadRequest(format!(
            "'{request}': unknown kind '{other}' (fn:PATTERN or entry:PATTERN)"
        ))),
    }
}
