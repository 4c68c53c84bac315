//! Event tracing: what to trace, draining the per-thread rings, and the
//! formats events are written in.
//!
//! `--trace fn:PATTERN` records an event at each entry of the matching
//! functions (first N arguments) and at each exit (return value), written
//! by trampolines into lock-free per-thread rings in shared memory (see
//! `weft_patch::region::ring`). A [`Recorder`] drains the rings from weft
//! and writes the records as they are into CTF streams while tracing. An
//! events directory holds `ctf/` (CTF 1.8, for babeltrace2 and Trace
//! Compass), and, derived from it at the end, `meta.json`, `events.jsonl`
//! (one event per line) and `trace.json` (Chrome/Perfetto trace event
//! format, entries and exits as `B`/`E` durations). Every file and
//! directory weft writes is created private and never through a link
//! (`files`, `trace_dir`), and a stream left by a killed weft is read up to
//! its last whole packet (`stream`). A directory is read back in time
//! order with bounded memory (`read`), once its `meta.json` and
//! `ctf/metadata` are found whole and in agreement (`check`).

mod check;
mod ctf;
mod error;
mod expand;
mod files;
mod mode;
mod read;
mod record;
mod rich;
mod shown;
mod store;
mod stream;
mod trace_dir;
mod usdt;

pub use check::repair_metadata;
pub use error::{Error, Refusal, Result};
pub use expand::{FunctionEvents, ProbeEvent};
pub use files::create_output;
pub use mode::{ChosenClock, ClockChoice, ClockKind, RingMode};
pub use read::{Damage, TraceReader};
pub use record::Recorder;
pub use rich::{event_request, pending_note};
pub use shown::{shown_values, Shown};
pub use store::{Exec, Loader, Meta, Resident, TextLines, TraceClock};
pub use stream::{repair_dir, Repair};
pub use trace_dir::TraceDir;
pub use usdt::{operand, usdt_specs};

use weft_plan::{PointSpec, Strings};

/// Splits `SPEC@arg1/s,arg3/s` into the spec and the values to record as
/// strings (uftrace's notation; `argN` alone is an integer, as by default).
/// Returns the spec, the string mask and the highest argument named.
pub fn split_string_args(request: &str) -> Result<(&str, u16, u8)> {
    let Some((spec, list)) = request.rsplit_once('@') else {
        return Ok((request, 0, 0));
    };
    let mut mask = 0u16;
    let mut highest = 0u8;
    for item in list.split(',') {
        let (arg, format) = item.split_once('/').unwrap_or((item, ""));
        let n: u8 = arg
            .strip_prefix("arg")
            .and_then(|n| n.parse().ok())
            .filter(|n| (1..=weft_live::ring::MAX_ARGS as u8).contains(n))
            .ok_or_else(|| {
                Error::BadRequest(format!(
                    "'{request}': '{item}' is not argN or argN/s with N from 1 to {}",
                    weft_live::ring::MAX_ARGS
                ))
            })?;
        match format {
            "s" => mask |= 1 << (n - 1),
            "" | "d" => {}
            other => {
                return Err(Error::BadRequest(format!(
                    "'{request}': format '/{other}' of {arg} is not s (string) or d (integer)"
                )))
            }
        }
        highest = highest.max(n);
    }
    Ok((spec, mask, highest))
}

/// The probes for one `--trace` request: `fn:PATTERN` (entries and exits)
/// or `entry:PATTERN` (entries only), optionally with `@arg1/s,...` naming
/// the arguments recorded as strings (at most `string_max` bytes each).
pub fn trace_specs(request: &str, args: u8, string_max: u16) -> Result<Vec<PointSpec>> {
    let (spec, mask, highest) = split_string_args(request)?;
    let Some((kind, what)) = spec.split_once(':') else {
        return Err(Error::BadRequest(format!("'{request}': write fn:PATTERN")));
    };
    match kind {
        "fn" | "entry" => {
            if highest > 6 {
                return Err(Error::BadRequest(format!(
                    "'{request}': functions have their arguments 1 to 6 traced (registers)"
                )));
            }
            let strings = Strings {
                mask,
                cap: string_max,
                sized: 0,
                gathered: 0,
            };
            let entry = PointSpec::parse(what)?
                .with_action(FunctionEvents::action(args.max(highest).min(6), strings));
            if kind == "entry" {
                return Ok(vec![entry]);
            }
            let exit =
                PointSpec::exits(what)?.with_action(FunctionEvents::action(0, Strings::NONE));
            Ok(vec![entry, exit])
        }
        "usdt" | "event" => Err(Error::BadRequest(format!(
            "'{request}': USDT probes and rich events are resolved against a process's modules"
        ))),
        other => Err(Error::BadRequest(format!(
            "'{request}': unknown kind '{other}' (fn:PATTERN, entry:PATTERN, usdt:PROVIDER:NAME \
             or event:PROVIDER:NAME)"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_arguments_use_uftrace_notation() {
        assert_eq!(split_string_args("fn:open").unwrap(), ("fn:open", 0, 0));
        assert_eq!(
            split_string_args("usdt:python:function__entry@arg1/s,arg2/s").unwrap(),
            ("usdt:python:function__entry", 0b11, 2)
        );
        assert_eq!(
            split_string_args("fn:libc.so.6:openat@arg2/s,arg3").unwrap(),
            ("fn:libc.so.6:openat", 0b10, 3)
        );
        for bad in ["fn:f@arg0/s", "fn:f@arg13/s", "fn:f@x/s", "fn:f@arg1/q"] {
            assert!(split_string_args(bad).is_err(), "{bad}");
        }
        let specs = trace_specs("fn:f@arg3/s", 1, 64).unwrap();
        let mut ids = weft_plan::Tally::default();
        let weft_plan::Action::Expand(entry) = &specs[0].action else {
            panic!("a trace expands per function: {:?}", specs[0].action)
        };
        let at = weft_plan::Resolved {
            module: "m",
            function: "f",
            kind: weft_plan::PointKind::Entry,
            syscall: None,
            addr: None,
        };
        entry.expand(&at, &mut ids).unwrap();
        assert_eq!((ids.events[0].args, ids.events[0].strings), (3, 0b100));
        assert!(trace_specs("fn:f@arg7/s", 1, 64).is_err());
    }
}
