//! Tracing runs: `weft run --trace ... --events-out DIR`, and reading an
//! events directory: `meta.json`, `events.jsonl`, the Chrome `trace.json`,
//! `weft events DIR`, and babeltrace2 on its `ctf/`.

use super::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// A finished `weft run ... --events-out DIR` that succeeded.
pub struct Traced {
    pub out: Finished,
    /// The events directory.
    pub events: PathBuf,
}

/// Runs `PROGRAM ARGS` under `weft run WEFT_ARGS --events-out
/// SCRATCH/events`, in the scratch directory `name`, at most 120 s, and
/// checks that it succeeded.
pub fn trace_run(
    name: &str,
    weft_args: &[&str],
    program: impl AsRef<OsStr>,
    args: &[&str],
) -> Traced {
    let events = scratch(name).join("events");
    let program = program.as_ref();
    let out = run(
        weft()
            .arg("run")
            .args(weft_args)
            .arg("--events-out")
            .arg(&events)
            .arg("--")
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    );
    assert_eq!(
        out.status,
        0,
        "{}: {}",
        program.to_string_lossy(),
        out.stderr
    );
    Traced { out, events }
}

impl Traced {
    /// The target's tallies.
    pub fn tallies(&self) -> BTreeMap<String, u64> {
        tallies(&self.out.stdout)
    }

    /// `weft events DIR`.
    pub fn text(&self) -> String {
        events_text(&self.events)
    }

    /// `meta.json`.
    pub fn meta(&self) -> serde_json::Value {
        events_meta(&self.events)
    }

    /// The records of `events.jsonl`.
    pub fn records(&self) -> Vec<Record> {
        records(&self.events)
    }
}

/// What `weft events DIR` prints, checked to have succeeded.
pub fn events_text(events: &Path) -> String {
    let out = run(weft().arg("events").arg(events), Duration::from_secs(60));
    assert_eq!(out.status, 0, "{}", out.stderr);
    out.stdout
}

/// How many lines of `text` contain `needle`.
pub fn lines_with(text: &str, needle: &str) -> usize {
    lines_with_all(text, &[needle])
}

/// How many lines of `text` contain every one of `needles`.
pub fn lines_with_all(text: &str, needles: &[&str]) -> usize {
    text.lines()
        .filter(|l| needles.iter().all(|n| l.contains(n)))
        .count()
}

/// An events directory's `meta.json`.
pub fn events_meta(events: &Path) -> serde_json::Value {
    read_json(&events.join("meta.json"))
}

/// An events directory's Chrome/Perfetto `trace.json`.
pub fn chrome_trace(events: &Path) -> serde_json::Value {
    read_json(&events.join("trace.json"))
}

/// One line of `events.jsonl`, with its event's kind ("entry", "exit",
/// "probe") looked up in `meta.json`.
pub struct Record {
    pub kind: String,
    pub json: serde_json::Value,
}

impl Record {
    pub fn tid(&self) -> i64 {
        self.json["tid"].as_i64().unwrap()
    }

    /// The timestamp (`tsc`: ticks of the trace's clock).
    pub fn time(&self) -> u64 {
        self.json["tsc"].as_u64().unwrap()
    }

    /// Argument `i` (from 0) as recorded, an unsigned integer.
    pub fn arg(&self, i: usize) -> u64 {
        self.json["args"][i].as_u64().unwrap()
    }
}

/// The records of an events directory's `events.jsonl`, in file order.
pub fn records(events: &Path) -> Vec<Record> {
    let meta = events_meta(events);
    let kinds: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[2].as_str().unwrap().to_string())
        .collect();
    std::fs::read_to_string(events.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| {
            let json: serde_json::Value = serde_json::from_str(line).unwrap();
            let kind = kinds[json["event"].as_u64().unwrap() as usize].clone();
            Record { kind, json }
        })
        .collect()
}

/// What babeltrace2 (Debian's CTF reader) prints for an events directory's
/// `ctf/`, checked to have succeeded; None (after `skip`) if it is not
/// installed.
pub fn babeltrace(events: &Path) -> Option<String> {
    if !have("babeltrace2") {
        skip("babeltrace2 missing (bash scripts/install-deps.sh installs it)");
        return None;
    }
    let bt = run(
        Command::new("babeltrace2").arg(events.join("ctf")),
        Duration::from_secs(60),
    );
    assert_eq!(bt.status, 0, "{}", bt.stderr);
    Some(bt.stdout)
}
