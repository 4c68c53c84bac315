//! Metric runs: `weft run --metric ... --format json --output FILE`, and
//! reading the metrics it wrote.

use super::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A finished `weft run --metric ...` that succeeded.
pub struct Measured {
    pub out: Finished,
    /// The JSON weft wrote; its directory is the test's scratch directory.
    pub json: PathBuf,
    /// Its `metrics` rows.
    pub rows: Vec<serde_json::Value>,
}

impl Measured {
    /// The target's tallies.
    pub fn tallies(&self) -> BTreeMap<String, u64> {
        tallies(&self.out.stdout)
    }

    /// The value of `metric` with `focus` (see `metric_value`).
    pub fn value(&self, metric: &str, focus: &str) -> f64 {
        metric_value(&self.rows, metric, focus)
    }

    /// The first row of `metric`.
    pub fn row(&self, metric: &str) -> &serde_json::Value {
        self.rows
            .iter()
            .find(|r| r["metric"] == metric)
            .unwrap_or_else(|| panic!("{metric} in {:?}", self.rows))
    }
}

/// Runs `PROGRAM ARGS` under `weft run --metric M... EXTRA --format json
/// --output SCRATCH/metrics.json`, in the scratch directory `name`, at most
/// 60 s, and checks that it succeeded.
pub fn metric_run(
    name: &str,
    metrics: &[&str],
    extra: &[&str],
    program: impl AsRef<OsStr>,
    args: &[&str],
) -> Measured {
    let json = scratch(name).join("metrics.json");
    let mut cmd = weft();
    cmd.arg("run");
    for m in metrics {
        cmd.args(["--metric", m]);
    }
    cmd.args(extra)
        .args(["--format", "json", "--output"])
        .arg(&json)
        .arg("--")
        .arg(program)
        .args(args);
    let out = run(&mut cmd, Duration::from_secs(60));
    assert_eq!(out.status, 0, "{}", out.stderr);
    let rows = read_metrics(&json);
    Measured { out, json, rows }
}

/// The values of a metric row's histogram, bucket by bucket.
pub fn histogram(row: &serde_json::Value) -> Vec<f64> {
    row["histogram"]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// The `metrics` rows of weft's JSON.
pub fn read_metrics(json: &Path) -> Vec<serde_json::Value> {
    read_json(json)["metrics"].as_array().unwrap().clone()
}

/// The value of the row of `metric` with `focus`.
pub fn metric_value(rows: &[serde_json::Value], metric: &str, focus: &str) -> f64 {
    rows.iter()
        .find(|r| r["metric"] == metric && r["focus"] == focus)
        .unwrap_or_else(|| panic!("{metric}:{focus} in {rows:?}"))["value"]
        .as_f64()
        .unwrap()
}
