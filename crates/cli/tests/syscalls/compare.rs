//! Reading strace's log and weft's `show` the same way: each as
//! (thread, call name, result) lines, and per thread its calls in
//! segments an `execve` ends.

use super::result;
use crate::support::*;
use std::path::Path;
use std::time::Duration;

/// Per thread, its calls as (name, result), in segments that each end
/// with an `execve`: from `lines` of `(thread, name, result)`. Results that
/// are process ids read `pid`.
pub(crate) fn segments(lines: &[(String, String, String)]) -> Vec<Vec<(String, String)>> {
    let mut threads: std::collections::BTreeMap<&str, Vec<Vec<(String, String)>>> =
        Default::default();
    for (tid, name, result) in lines {
        let segments = threads.entry(tid).or_insert_with(|| vec![Vec::new()]);
        let result = match name.as_str() {
            "clone" | "clone3" | "fork" | "vfork" | "wait4" | "getpid" | "gettid" => {
                "pid".to_string()
            }
            _ => result.clone(),
        };
        segments.last_mut().unwrap().push((name.clone(), result));
        if name == "execve" {
            segments.push(Vec::new());
        }
    }
    let mut out: Vec<Vec<(String, String)>> = threads
        .into_values()
        .flatten()
        .filter(|s| !s.is_empty())
        .map(|s| {
            // An image's own calls start at its marker, dup(-7).
            let from = s
                .iter()
                .position(|(n, r)| n == "dup" && r == "EBADF")
                .unwrap_or(0);
            s[from..]
                .iter()
                .filter(|(n, _)| n != "futex")
                .cloned()
                .collect()
        })
        .collect();
    out.sort();
    out
}

/// `strace -f -qq -o LOG TARGET`, which must succeed: what it printed,
/// and its calls as [`strace_calls`] reads them.
pub(crate) fn strace_f(target: &Path, log: &Path) -> (Finished, Vec<(String, String, String)>) {
    let plain = run(
        std::process::Command::new("strace")
            .args(["-f", "-qq", "-o"])
            .arg(log)
            .arg(target),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "strace: {}", plain.stderr);
    let calls = strace_calls(&std::fs::read_to_string(log).unwrap());
    (plain, calls)
}

/// `weft syscalls show OUT`, which must succeed, and its lines as
/// (thread, name, result), the vDSO's left out.
pub(crate) fn shown_lines(out: &Path) -> (Finished, Vec<(String, String, String)>) {
    let shown = run(
        weft().args(["syscalls", "show"]).arg(out),
        Duration::from_secs(60),
    );
    assert_eq!(shown.status, 0, "weft syscalls show: {}", shown.stderr);
    let calls = parse_shown(&shown.stdout);
    (shown, calls)
}

/// `show`'s lines as (thread, name, result), the vDSO's left out.
pub(crate) fn parse_shown(stdout: &str) -> Vec<(String, String, String)> {
    stdout
        .lines()
        .filter(|l| !l.ends_with(" (vDSO)"))
        .filter_map(|l| {
            let tid = l.split_whitespace().next()?;
            let call = l.splitn(3, char::is_whitespace).nth(2)?.trim_start();
            let call = call.split_once(' ').map_or(call, |(_, c)| c).trim_start();
            let (head, r) = call.rsplit_once(" = ")?;
            let name = head.split('(').next()?;
            Some((tid.to_string(), name.to_string(), result(r)))
        })
        .collect()
}

/// `strace -f -o` lines as (pid, name, result), a call cut by another
/// thread's (`<unfinished ...>`) taken with its result from its
/// `<... name resumed>` line.
pub(crate) fn strace_calls(log: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut pending: std::collections::HashMap<String, usize> = Default::default();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        if let Some(resumed) = rest.strip_prefix("<... ") {
            if let (Some(k), Some((_, r))) = (pending.remove(pid), resumed.rsplit_once(" = ")) {
                let entry: &mut (String, String, String) = &mut out[k];
                entry.2 = result(r);
            }
            continue;
        }
        let name = rest.split('(').next().unwrap_or("").to_string();
        if rest.ends_with("<unfinished ...>") {
            pending.insert(pid.to_string(), out.len());
            out.push((pid.to_string(), name, "?".to_string()));
        } else if let Some((_, r)) = rest.rsplit_once(" = ") {
            out.push((pid.to_string(), name, result(r)));
        }
    }
    out
}
