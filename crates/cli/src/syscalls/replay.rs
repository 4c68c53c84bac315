//! `weft syscalls replay`: the recorded calls made again in a sandbox
//! (`weft_replay`), with the dependencies `deps` finds, and the report:
//! elapsed times, results that differ, calls not made again.

use anyhow::Result;
use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use weft_replay::{Outcome, Plan, Report};
use weft_syscalls::deps::Mode;
use weft_syscalls::Call;

/// The configuration a replay ran under, for the report.
struct Configuration {
    /// `memory.max 64 MiB, 50% of a CPU, caches dropped`, or empty.
    words: String,
    /// The control group's peak memory use, where the kernel says.
    peak: Option<u64>,
}

/// What the command line asks of a replay.
pub struct Request<'a> {
    pub mode: Mode,
    pub root: Option<&'a Path>,
    pub stall: std::time::Duration,
    pub json: bool,
    pub limits: super::LimitArgs,
}

/// Replays `calls`; the exit status (1 if a result differs or the replay
/// stalled).
pub fn replay(
    meta: &weft_events::Meta,
    calls: &[Call],
    known: &HashMap<i32, i32>,
    request: Request<'_>,
) -> Result<i32> {
    let resources = weft_syscalls::fds::resolve(calls, known);
    let edges = weft_syscalls::deps::edges(calls, &resources, request.mode);
    let plan = Plan::new(calls, &resources.process, &edges, meta.ticks_per_ns);
    let needed = weft_replay::sandbox::needed(calls, &resources);
    let start = std::env::current_dir()?;
    let line = |k: usize| {
        format!(
            "{}/{} {}",
            resources.process[k],
            calls[k].tid,
            weft_syscalls::strace_line(&calls[k])
        )
    };
    let sandbox = match request.root {
        Some(root) => weft_replay::sandbox::Sandbox::given(root, &needed, &start, &line)?,
        None => {
            let (sandbox, missing) = weft_replay::sandbox::Sandbox::make(&needed, &start)?;
            if let Some(first) = missing.first() {
                say!(
                    "weft: {} file(s) the workload read are not on this machine (first: {}, read by {}): \
                     the calls on them will differ; relative paths are taken from where you run replay",
                    missing.len(),
                    first.path,
                    line(first.call)
                );
            }
            sandbox
        }
    };
    let group = request
        .limits
        .prepare(&format!("weft-replay-{}", std::process::id()))?;
    // Each replay process holds the anonymous memory its recorded process
    // held: a limit reclaims a program's pages of files (its code) but
    // cannot reclaim these, without swap.
    let resident: HashMap<i32, (u64, u64)> = (meta.resident.iter())
        .map(|(&pid, r)| (pid, (r.anon, r.private)))
        .collect();
    let report = weft_replay::replay(
        calls,
        &plan,
        &sandbox,
        weft_replay::Options {
            stall: request.stall,
            group: group.as_ref(),
            stop: Some(crate::signals::stop_flag()),
            resident: &resident,
        },
    )?;
    let under = Configuration {
        words: request.limits.describe(),
        peak: group.as_ref().and_then(|g| g.peak_memory()),
    };
    // Calls whose result differs, or that read other bytes, but for those
    // on what the replay cannot give again: the workload's standard
    // streams (/dev/null in the replay), /dev, /proc and /sys.
    let mut outside = vec![false; calls.len()];
    for op in &resources.ops {
        let r = &resources.resources[op.resource];
        let machine = ["/dev/", "/proc/", "/sys/"]
            .iter()
            .any(|p| r.name.starts_with(p));
        if r.kind == weft_syscalls::fds::Kind::Inherited || machine {
            outside[op.call] = true;
        }
    }
    // Reads of a pipe or a connection that took bytes past what the
    // record holds of a write (4,096 bytes): the replay wrote zeros there.
    let unrecorded = weft_syscalls::known::reads_of_unrecorded_bytes(calls, &resources);
    let mut not_compared = 0;
    let differ: Vec<(usize, i64, bool)> = report
        .outcomes
        .iter()
        .enumerate()
        .filter(|&(k, _)| !outside[k])
        .filter_map(|(k, o)| match *o {
            Outcome::Made(r) if !weft_replay::agrees(&calls[k], r) => Some((k, r, false)),
            Outcome::OtherBytes(_) if unrecorded.contains(&k) => {
                not_compared += 1;
                None
            }
            Outcome::OtherBytes(r) => Some((k, r, true)),
            _ => None,
        })
        .collect();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match request.json {
        true => json(&mut out, calls, &report, &differ, &under)?,
        false => text(
            &mut out,
            calls,
            &plan,
            &edges,
            &report,
            &differ,
            &line,
            request.mode,
            &under,
        )?,
    }
    out.flush()?;
    if outside.iter().any(|&o| o) && !request.json {
        say!("weft: calls on the standard streams (/dev/null in the replay), /dev, /proc and /sys are not compared");
    }
    if not_compared > 0 && !request.json {
        say!(
            "weft: {not_compared} read(s) of a pipe or a socket took bytes the record does not \
             hold (a write's past its first {}), which the replay wrote as zeros: their bytes \
             are not compared",
            weft_syscalls::DATA_MAX
        );
    }
    if crate::signals::stop_requested() {
        return Ok(130);
    }
    let failed = !differ.is_empty() || report.stalled.is_some();
    Ok(i32::from(failed))
}

#[allow(clippy::too_many_arguments)]
fn text(
    out: &mut dyn Write,
    calls: &[Call],
    plan: &Plan,
    edges: &[weft_syscalls::deps::Edge],
    report: &Report,
    differ: &[(usize, i64, bool)],
    line: &dyn Fn(usize) -> String,
    mode: Mode,
    under: &Configuration,
) -> Result<()> {
    let made = report
        .outcomes
        .iter()
        .filter(|o| matches!(o, Outcome::Made(_) | Outcome::OtherBytes(_)))
        .count();
    let processes = plan
        .threads
        .iter()
        .map(|t| t.pid)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    let mode = match mode {
        Mode::Coarse => "coarse",
        Mode::Fine => "fine",
    };
    writeln!(
        out,
        "replayed {} of {} calls in {} processes, {} threads, waiting on {} dependencies ({mode})",
        made,
        calls.len(),
        processes,
        plan.threads.len(),
        edges.len()
    )?;
    match plan.user_time_calls {
        n if n == calls.len() => writeln!(
            out,
            "threads spin their recorded user CPU time between calls"
        )?,
        0 => writeln!(
            out,
            "threads spin the wall-clock time between calls (the record holds no user CPU time)"
        )?,
        n => writeln!(
            out,
            "threads spin their recorded user CPU time between calls ({n} of {} calls; wall-clock time for the rest)",
            calls.len()
        )?,
    }
    let (rec, rep) = (
        report.recorded_ns as f64 / 1e9,
        report.replayed_ns as f64 / 1e9,
    );
    if report.stalled.is_some() {
        writeln!(
            out,
            "elapsed: recorded {rec:.6} s; the replay was stopped, so it has no elapsed time"
        )?;
    } else {
        writeln!(
            out,
            "elapsed: recorded {rec:.6} s, replayed {rep:.6} s ({:.2}x)",
            rep / rec.max(1e-9)
        )?;
    }
    if !under.words.is_empty() && report.stalled.is_none() {
        let peak = under.peak.map_or(String::new(), |p| {
            format!(", peak memory {:.1} MiB", p as f64 / 1048576.0)
        });
        writeln!(out, "predicted under {}: {rep:.6} s{peak}", under.words)?;
    }
    writeln!(
        out,
        "results: {} as recorded, {} differ",
        made - differ.len(),
        differ.len()
    )?;
    for &(k, r, bytes) in differ.iter().take(10) {
        let other = if bytes { " (other bytes)" } else { "" };
        writeln!(out, "  {}, replayed {r}{other}", line(k))?;
    }
    if differ.len() > 10 {
        writeln!(out, "  ... {} more", differ.len() - 10)?;
    }
    if let Some(stalled) = &report.stalled {
        writeln!(out, "{stalled}")?;
    }
    if !report.skipped.is_empty() {
        writeln!(out, "not made again:")?;
        let mut rows: Vec<(&(String, &str), &usize)> = report.skipped.iter().collect();
        rows.sort_by_key(|(k, n)| (std::cmp::Reverse(**n), k.0.clone()));
        for ((name, why), n) in rows {
            writeln!(out, "  {n:>7}  {name:<18} {why}")?;
        }
    }
    Ok(())
}

fn json(
    out: &mut dyn Write,
    calls: &[Call],
    report: &Report,
    differ: &[(usize, i64, bool)],
    under: &Configuration,
) -> Result<()> {
    let per_call: Vec<serde_json::Value> = report
        .outcomes
        .iter()
        .zip(&report.times)
        .map(|(o, &(began, ended))| {
            let (outcome, result) = match *o {
                Outcome::Made(r) => ("made", Some(r)),
                Outcome::OtherBytes(r) => ("other bytes", Some(r)),
                Outcome::Skipped => ("skipped", None),
                Outcome::NotReached => ("not reached", None),
            };
            serde_json::json!({
                "outcome": outcome,
                "result": result,
                "began_s": began as f64 / 1e9,
                "ended_s": ended as f64 / 1e9,
            })
        })
        .collect();
    let doc = serde_json::json!({
        "recorded_s": report.recorded_ns as f64 / 1e9,
        "replayed_s": report.replayed_ns as f64 / 1e9,
        "made": report.outcomes.iter().filter(|o| matches!(o, Outcome::Made(_) | Outcome::OtherBytes(_))).count(),
        "differ": differ.iter().map(|&(k, r, bytes)| serde_json::json!({
            "call": k,
            "recorded": calls[k].exit.map(|e| e.result),
            "replayed": r,
            "other_bytes": bytes,
        })).collect::<Vec<_>>(),
        "skipped": report.skipped.iter().map(|((name, why), n)| serde_json::json!({
            "name": name, "why": why, "calls": n,
        })).collect::<Vec<_>>(),
        "stalled": report.stalled,
        "configuration": under.words,
        "peak_memory": under.peak,
        "calls": per_call,
    });
    writeln!(out, "{doc}")?;
    Ok(())
}
