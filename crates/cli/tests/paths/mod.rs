//! Abstract execution (`--paths`, `weft regen`): the instructions weft
//! regenerates from a run's witnesses equal, one for one and in order,
//! those QEMU's user-mode emulator executes for the same program and
//! input (`qemu-x86_64 -singlestep -d exec,nochain`: one log line per
//! instruction), restricted to the functions weft traced.

mod data;
mod errors;
mod memory;
mod programs;
mod signals;
mod workloads;

use crate::support::*;
use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

/// The instruction addresses (ELF virtual addresses) of the traced
/// functions, read from the trace's table; with `only`, of those
/// functions only.
fn traced_instructions(trace: &Path, only: Option<&[&str]>) -> HashSet<u64> {
    instructions_of_functions(trace, |f| {
        only.is_none_or(|names| names.contains(&f["name"].as_str().unwrap()))
    })
}

/// The instruction addresses of the table's functions that `keep` accepts.
fn instructions_of_functions(
    trace: &Path,
    keep: impl Fn(&serde_json::Value) -> bool,
) -> HashSet<u64> {
    let meta = read_json(&trace.join("paths.json"));
    let mut out = HashSet::new();
    for f in meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| keep(f))
    {
        for b in f["blocks"].as_array().unwrap() {
            let start = b["start"].as_u64().unwrap();
            for o in b["insns"].as_array().unwrap() {
                out.insert(start + o.as_u64().unwrap());
            }
        }
    }
    out
}

/// Lowest virtual address of an executable segment of `elf`.
fn text_vaddr(elf: &Path) -> u64 {
    let out = std::process::Command::new("readelf")
        .arg("-lW")
        .arg(elf)
        .output()
        .expect("readelf runs");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .map(str::split_whitespace)
        .filter_map(|mut w| {
            let words: Vec<&str> = w.by_ref().collect();
            (words.first() == Some(&"LOAD") && words[words.len() - 2].contains('E'))
                .then(|| hex(words[2]).unwrap())
        })
        .min()
        .expect("an executable segment")
}

/// The instructions QEMU ran of `keep`, in order, from the first
/// instruction at `from` on (if given).
fn qemu_instructions(
    program: &Path,
    args: &[&str],
    keep: &HashSet<u64>,
    from: Option<u64>,
    dir: &Path,
) -> Vec<u64> {
    let log = dir.join("qemu.log");
    let out = run(
        std::process::Command::new("qemu-x86_64")
            .args(["-singlestep", "-d", "exec,nochain,page", "-D"])
            .arg(&log)
            .arg(program)
            .args(args),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "qemu: {}", out.stderr);
    qemu_log_instructions(&log, program, keep, from)
}

/// The instructions of `keep` in a QEMU log of `program`
/// (`-d exec,nochain,page`), in order, from the first at `from` on (if
/// given); the log is removed.
fn qemu_log_instructions(
    log: &Path,
    program: &Path,
    keep: &HashSet<u64>,
    from: Option<u64>,
) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap();
    let start_code = text
        .lines()
        .find_map(|l| l.strip_prefix("start_code"))
        .and_then(|v| hex(v.trim()))
        .expect("qemu -d page prints start_code");
    let bias = start_code - text_vaddr(program);
    let mut started = from.is_none();
    let mut pcs = Vec::new();
    for l in text.lines().filter(|l| l.starts_with("Trace ")) {
        // Trace 0: 0x7f.. [00000000/0000004000001149/...]
        let Some(pc) = l
            .split('/')
            .nth(1)
            .and_then(|p| u64::from_str_radix(p, 16).ok())
        else {
            continue;
        };
        let pc = pc - bias;
        started |= Some(pc) == from;
        if started && keep.contains(&pc) {
            pcs.push(pc);
        }
    }
    let _ = std::fs::remove_file(log);
    pcs
}

/// `weft regen DIR --insns`, as addresses.
fn regenerated(trace: &Path) -> Vec<u64> {
    let out = run(
        weft().arg("regen").arg("--insns").arg(trace),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft regen: {}", out.stderr);
    out.stdout
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| hex(l.rsplit('+').next().unwrap()).unwrap())
        .collect()
}

/// Asserts two instruction traces are equal, showing where they part.
/// QEMU single-steps a `rep`-prefixed instruction once per iteration, so
/// runs of one address count once on both sides.
fn assert_same_trace(qemu: &[u64], weft: &[u64], context: &str) {
    let once = |t: &[u64]| {
        let mut t = t.to_vec();
        t.dedup();
        t
    };
    let (qemu, weft) = (&once(qemu)[..], &once(weft)[..]);
    if qemu == weft {
        return;
    }
    let at = qemu
        .iter()
        .zip(weft)
        .position(|(a, b)| a != b)
        .unwrap_or(qemu.len().min(weft.len()));
    let show = |t: &[u64]| {
        t[at.saturating_sub(4)..(at + 4).min(t.len())]
            .iter()
            .map(|a| format!("{a:#x}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    panic!(
        "{context}: regenerated {} instructions, QEMU ran {}; first difference at {at}:\n qemu: {}\n weft: {}",
        weft.len(),
        qemu.len(),
        show(qemu),
        show(weft)
    );
}

/// `weft run --no-follow --paths all [EXTRA...] --paths-out TRACE -- PROGRAM ARGS...`.
fn paths_run(trace: &Path, extra: &[&str], program: &Path, args: &[&str]) -> Finished {
    run(
        weft()
            .args(["run", "--no-follow", "--paths", "all"])
            .args(extra)
            .arg("--paths-out")
            .arg(trace)
            .arg("--")
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    )
}

fn have_qemu() -> bool {
    if have("qemu-x86_64") {
        return true;
    }
    skip("qemu-x86_64 is not installed (apt-get install qemu-user)");
    false
}

/// `weft regen --insns` of a workload: per process image's command, the
/// instructions of its own module (named `module`), stream by stream.
fn regenerated_by_command(trace: &Path) -> Vec<(String, Vec<(String, u64)>)> {
    let out = run(
        weft().arg("regen").arg("--insns").arg(trace),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft regen: {}", out.stderr);
    let mut streams: Vec<(String, Vec<(String, u64)>)> = Vec::new();
    for l in out.stdout.lines() {
        if let Some(rest) = l.strip_prefix("# thread ") {
            let command = rest.rsplit('(').next().unwrap().trim_end_matches(')');
            streams.push((command.to_string(), Vec::new()));
        } else if let Some((module, at)) = l.rsplit_once('+') {
            let last = streams.last_mut().expect("a stream header first");
            last.1.push((module.to_string(), hex(at).unwrap()));
        }
    }
    streams
}

/// The instruction addresses of the traced functions of `module`.
fn traced_instructions_of(trace: &Path, module: &str) -> HashSet<u64> {
    instructions_of_functions(trace, |f| f["module"] == module)
}

/// Per thread (its tid, as `weft regen` heads its stream), how many times
/// the regenerated trace enters the traced function `name`.
fn regenerated_calls(trace: &Path, name: &str) -> std::collections::BTreeMap<String, u64> {
    let meta = read_json(&trace.join("paths.json"));
    let function = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == name)
        .unwrap_or_else(|| panic!("{name} traced"));
    let entry = format!(
        "{}+{:#x}",
        function["module"].as_str().unwrap(),
        function["vaddr"].as_u64().unwrap()
    );
    let regen = run(weft().arg("regen").arg(trace), Duration::from_secs(120));
    assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
    let mut calls = std::collections::BTreeMap::new();
    let mut thread = String::new();
    for line in regen.stdout.lines() {
        if let Some(rest) = line.strip_prefix("# thread ") {
            thread = rest.split_whitespace().next().unwrap().to_string();
        } else if line == entry {
            *calls.entry(thread.clone()).or_default() += 1;
        }
    }
    calls
}
