//! Counting runs: `weft run --count ... --format json --output FILE`, and
//! reading the counts it wrote.

use super::*;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A finished `weft run` that wrote its counts as JSON.
pub struct Counted {
    pub out: Finished,
    pub json: PathBuf,
}

impl Counted {
    /// The counts weft wrote.
    pub fn counts(&self) -> Vec<CountRow> {
        read_counts(&self.json)
    }

    /// The count of `function` at `point` (see `count_of`).
    pub fn count(&self, function: &str, point: &str) -> u64 {
        count_of(&self.counts(), function, point)
    }
}

/// Runs `PROGRAM ARGS` under `weft run WEFT_ARGS --format json --output
/// SCRATCH/counts.json`, in the scratch directory `name`, at most `limit`;
/// the caller checks weft's outcome.
pub fn count_run(
    name: &str,
    weft_args: &[&str],
    program: impl AsRef<OsStr>,
    args: &[&str],
    limit: Duration,
) -> Counted {
    let json = scratch(name).join("counts.json");
    let out = run(
        weft()
            .arg("run")
            .args(weft_args)
            .args(["--format", "json", "--output"])
            .arg(&json)
            .arg("--")
            .arg(program)
            .args(args),
        limit,
    );
    Counted { out, json }
}

/// One row of weft's JSON counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow {
    pub module: String,
    pub function: String,
    pub point: String,
    pub calls: u64,
}

/// Reads `{"counts": [...]}`.
pub fn read_counts(path: &Path) -> Vec<CountRow> {
    let v = read_json(path);
    v["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| CountRow {
            module: r["module"].as_str().unwrap().into(),
            function: r["function"].as_str().unwrap().into(),
            point: r["point"].as_str().unwrap().into(),
            calls: r["calls"].as_u64().unwrap(),
        })
        .collect()
}

/// The count of `function` at `point` ("entry", "exit", "instruction"), summed over modules.
pub fn count_of(rows: &[CountRow], function: &str, point: &str) -> u64 {
    let matching: Vec<&CountRow> = rows
        .iter()
        .filter(|r| r.function == function && r.point == point)
        .collect();
    assert!(
        !matching.is_empty(),
        "no count for {function} ({point}) in {rows:?}"
    );
    matching.iter().map(|r| r.calls).sum()
}
