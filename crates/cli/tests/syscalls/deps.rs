//! `weft syscalls deps`: the resources weft works out from the record
//! alone are the ones the kernel names through strace (`-yy`), and the
//! orders the program forces between its processes are edges.

use super::result;
use crate::support::*;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

/// The calls that use a descriptor in their first argument and that weft
/// and strace both see as one operation on one resource.
const FD_CALLS: [&str; 3] = ["read", "write", "lseek"];

/// One call as both sides are compared: process, name, result, and the
/// resource of its first argument (strace's text between `<>`, weft's
/// resource number).
#[derive(Debug, Clone)]
struct Used {
    name: String,
    result: String,
    resource: Option<String>,
}

/// A call as a tool printed it: pid, name, first argument, result.
type Row = (i32, String, String, String);
/// A process's call: name, first argument, result.
type Brief = (String, String, String);

/// Per process (in the order they first appear), its calls from each
/// `dup(-7)` marker to the next `execve`, as `(pid, name, first argument,
/// result)` rows give them.
fn per_process(rows: &[Row]) -> Vec<Vec<Brief>> {
    let mut order: Vec<i32> = Vec::new();
    let mut by: HashMap<i32, (bool, Vec<Brief>)> = HashMap::new();
    for (pid, name, first, result) in rows {
        if !order.contains(pid) {
            order.push(*pid);
        }
        let (on, calls) = by.entry(*pid).or_default();
        if name == "dup" && first.starts_with("-7") {
            *on = true;
            continue;
        }
        if name == "execve" {
            *on = false;
        }
        if *on {
            calls.push((name.clone(), first.clone(), result.clone()));
        }
    }
    order
        .into_iter()
        .map(|p| by.remove(&p).unwrap().1)
        .collect()
}

/// strace's file's rows: pid, name, first argument, result; a call strace
/// split (`<unfinished ...>`) joined with its result.
fn strace_rows(log: &str) -> Vec<Row> {
    let mut out: Vec<Row> = Vec::new();
    let mut pending: HashMap<i32, usize> = HashMap::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let (Ok(pid), rest) = (pid.parse::<i32>(), rest.trim_start()) else {
            continue;
        };
        if rest.starts_with("+++") || rest.starts_with("---") {
            continue;
        }
        if let Some(resumed) = rest.strip_prefix("<... ") {
            if let (Some(k), Some((_, r))) = (pending.remove(&pid), resumed.rsplit_once(" = ")) {
                out[k].3 = result(r);
            }
            continue;
        }
        let Some((name, args)) = rest.split_once('(') else {
            continue;
        };
        let first = args.split([',', ')']).next().unwrap_or("").to_string();
        let first = match args.find('<').filter(|&i| i < first.len().max(1) + 1) {
            // A descriptor with its annotation, which may hold a comma or
            // a `->`: it ends where the argument does.
            Some(_) => {
                let end = [">,", ">)"].iter().filter_map(|e| args.find(e)).min();
                args[..end.map_or(args.len(), |e| e + 1)].to_string()
            }
            None => first,
        };
        if rest.ends_with("<unfinished ...>") {
            pending.insert(pid, out.len());
            out.push((pid, name.to_string(), first, "?".to_string()));
        } else if let Some((_, r)) = rest.rsplit_once(" = ") {
            out.push((pid, name.to_string(), first, result(r)));
        }
    }
    out
}

/// strace's name for the resource of `fd<...>`: the text inside, a
/// socket by the pair of its ends' inodes (`UNIX-STREAM:[a->b]`: both
/// ends of a pair are one resource to weft).
fn strace_resource(first: &str) -> Option<String> {
    let inside = first.split_once('<')?.1.strip_suffix('>')?;
    if let Some((kind, ends)) = inside.split_once(":[") {
        if let Some((a, b)) = ends.trim_end_matches(']').split_once("->") {
            let (a, b) = (a.min(b), a.max(b));
            return Some(format!("{kind}:{a}:{b}"));
        }
    }
    Some(inside.to_string())
}

/// A workload of three processes (fork, fork then exec) sharing a file
/// through one open file description and through another, a pipe and a
/// socket pair, with descriptors moved by `dup2` and `F_DUPFD_CLOEXEC`:
/// for every `read`, `write` and `lseek` of every process, the resource
/// weft works out from its record is the one strace names (its `-yy` asks
/// the kernel for the file, the pipe's and the sockets' inodes), one to
/// one; the exec'd process's inherited descriptor is the parent's very
/// description, its close-on-exec one is gone. And the orders the
/// program forces with waitpid are edges: the child's write before the
/// parent's read of the pipe, the child's read through the shared
/// description before the parent's, any read before the parent's write;
/// the child's read through its own description has no order with the
/// parent's reads (dropped by --fine).
#[test]
fn deps_resources_are_the_ones_strace_names() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let target = build("syscalls_deps", &O2);
    let dir = scratch("syscalls-deps");
    let (work_s, work_w) = (dir.join("work-strace"), dir.join("work-weft"));
    for w in [&work_s, &work_w] {
        let _ = std::fs::remove_dir_all(w);
        std::fs::create_dir_all(w).unwrap();
    }
    let log = dir.join("strace.log");
    let plain = run(
        std::process::Command::new("strace")
            .args(["-f", "-yy", "-qq", "-o"])
            .arg(&log)
            .arg(&target)
            .arg(&work_s),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "strace: {}", plain.stderr);
    assert_eq!(plain.stdout, "lost\ndone\n");
    let out_dir = dir.join("rec");
    let _ = std::fs::remove_dir_all(&out_dir);
    let recorded = run(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out_dir)
            .arg("--")
            .arg(&target)
            .arg(&work_w),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.status, 0, "weft: {}", recorded.stderr);
    assert_eq!(recorded.stdout, plain.stdout, "the program's output");

    let shown = run(
        weft().args(["syscalls", "show", "--json"]).arg(&out_dir),
        Duration::from_secs(60),
    );
    assert_eq!(shown.status, 0, "show: {}", shown.stderr);
    let calls: Vec<serde_json::Value> = shown
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deps = run(
        weft().args(["syscalls", "deps", "--json"]).arg(&out_dir),
        Duration::from_secs(60),
    );
    assert_eq!(deps.status, 0, "deps: {}", deps.stderr);
    let deps: serde_json::Value = serde_json::from_str(deps.stdout.trim()).unwrap();
    let text = run(
        weft().args(["syscalls", "deps"]).arg(&out_dir),
        Duration::from_secs(60),
    );
    assert_eq!(text.status, 0, "deps: {}", text.stderr);

    // Each call's first argument, process and first resource, as weft has them.
    let mut op_of: BTreeMap<usize, &serde_json::Value> = BTreeMap::new();
    for op in deps["ops"].as_array().unwrap() {
        op_of
            .entry(op["call"].as_u64().unwrap() as usize)
            .or_insert(op);
    }
    let weft_rows: Vec<Row> = calls
        .iter()
        .map(|c| {
            let arg = c["args"][0].as_u64().unwrap() as i64 as i32;
            let result = match &c["result"] {
                serde_json::Value::Null => "?".to_string(),
                r => match c["errno"].as_str() {
                    Some(e) => e.to_string(),
                    None => result(&r.to_string()),
                },
            };
            let pid = c["tid"].as_i64().unwrap() as i32;
            (
                pid,
                c["name"].as_str().unwrap().to_string(),
                arg.to_string(),
                result,
            )
        })
        .collect();
    let index_of: Vec<usize> = (0..calls.len()).collect();
    let strace = per_process(&strace_rows(&std::fs::read_to_string(&log).unwrap()));
    // Rows keep their call index through per_process by riding in `first`.
    let weft = per_process(
        &weft_rows
            .iter()
            .zip(&index_of)
            .map(|((p, n, a, r), k)| (*p, n.clone(), format!("{a} #{k}"), r.clone()))
            .collect::<Vec<_>>(),
    );
    assert_eq!(weft.len(), 3, "three processes: {weft:?}");
    assert_eq!(strace.len(), 3, "three processes: {strace:?}");
    let used = |calls: &[Brief], of: &dyn Fn(&str) -> Option<String>| {
        calls
            .iter()
            .filter(|(n, _, _)| FD_CALLS.contains(&n.as_str()))
            .map(|(name, first, result)| Used {
                name: name.clone(),
                result: result.clone(),
                resource: of(first),
            })
            .collect::<Vec<_>>()
    };
    let weft_resource = |first: &str| -> Option<String> {
        let k: usize = first.rsplit_once(" #")?.1.parse().ok()?;
        Some(op_of.get(&k)?["resource"].to_string())
    };
    let mut forward: HashMap<String, String> = HashMap::new();
    let mut backward: HashMap<String, String> = HashMap::new();
    for (w, s) in weft.iter().zip(&strace) {
        let (w, s) = (used(w, &weft_resource), used(s, &|f| strace_resource(f)));
        let brief = |u: &[Used]| -> Vec<(String, String)> {
            u.iter()
                .map(|c| (c.name.clone(), c.result.clone()))
                .collect()
        };
        assert_eq!(
            brief(&w),
            brief(&s),
            "weft's calls (left), strace's (right)"
        );
        for (a, b) in w.iter().zip(&s) {
            assert_eq!(
                a.resource.is_some(),
                b.resource.is_some(),
                "{a:?} against strace's {b:?}"
            );
            let (Some(wr), Some(sr)) = (&a.resource, &b.resource) else {
                continue;
            };
            let f = forward.entry(wr.clone()).or_insert_with(|| sr.clone());
            assert_eq!(f, sr, "weft's resource {wr} is two of strace's");
            let b = backward.entry(sr.clone()).or_insert_with(|| wr.clone());
            assert_eq!(b, wr, "strace's {sr} is two of weft's");
        }
    }
    // stdout, the file, the pipe, the socket pair.
    assert_eq!(forward.len(), 4, "{forward:?}");

    // The orders waitpid forces.
    let name_of = |k: usize| calls[k]["name"].as_str().unwrap().to_string();
    let tid_of = |k: usize| calls[k]["tid"].as_i64().unwrap();
    let find = |pid_rank: usize, name: &str, arg0: i64, nth: usize| -> usize {
        let pid = weft_rows.iter().map(|r| r.0).fold(Vec::new(), |mut v, p| {
            if !v.contains(&p) {
                v.push(p);
            }
            v
        })[pid_rank] as i64;
        (0..calls.len())
            .filter(|&k| {
                tid_of(k) == pid
                    && calls[k]["loader"] != true
                    && name_of(k) == name
                    && calls[k]["args"][0].as_u64().unwrap() as i64 as i32 as i64 == arg0
            })
            .nth(nth)
            .unwrap_or_else(|| panic!("process {pid_rank}'s {name}({arg0}) #{nth}"))
    };
    let edges = |key: &str| -> Vec<(usize, usize)> {
        deps[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["from"].as_u64().unwrap() as usize,
                    e["to"].as_u64().unwrap() as usize,
                )
            })
            .collect()
    };
    let (kept, dropped) = (edges("edges"), edges("dropped"));
    // Descriptors: f = 3, the pipe 4 and 5, the sockets 6 and 7; the
    // child's second open of the file is 4 (after it closes the pipe's).
    let (child_write_pipe, parent_close_pipe) = (find(1, "write", 5, 0), find(0, "close", 5, 0));
    assert!(
        kept.contains(&(child_write_pipe, parent_close_pipe)),
        "the child's write, then the parent's first use of the pipe: {kept:?}"
    );
    let (child_read_f, parent_read_f) = (find(1, "read", 3, 0), find(0, "read", 3, 0));
    assert!(
        kept.contains(&(child_read_f, parent_read_f)),
        "the shared description's offset: {kept:?}"
    );
    let child_read_again = find(1, "read", 4, 0);
    assert!(
        dropped.iter().any(|&(from, _)| from == child_read_again),
        "a read through a description of its own: {dropped:?}"
    );
    // A write orders everything on the file, whatever the description.
    let (parent_write_f, exec_lseek) = (find(0, "write", 3, 1), find(2, "lseek", 10, 0));
    assert!(
        kept.contains(&(child_read_again, parent_write_f)),
        "the child's read, then the parent's write: {kept:?}"
    );
    // The exec'd process goes through the parent's description after the
    // parent's write.
    assert!(
        kept.contains(&(parent_write_f, exec_lseek)),
        "the parent's write, then the exec'd child's lseek: {kept:?}"
    );
    let description = |k: usize| op_of[&k]["description"].clone();
    assert_eq!(description(exec_lseek), description(parent_read_f));
    assert!(text.stdout.contains("fine: "), "{}", text.stdout);
}
