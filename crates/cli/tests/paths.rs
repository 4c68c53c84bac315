//! Abstract execution (`--paths`, `weft regen`): the instructions weft
//! regenerates from a run's witnesses equal, one for one and in order,
//! those QEMU's user-mode emulator executes for the same program and
//! input (`qemu-x86_64 -singlestep -d exec,nochain`: one log line per
//! instruction), restricted to the functions weft traced.

use crate::support::*;
use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::Duration;

/// The instruction addresses (ELF virtual addresses) of the traced
/// functions, read from the trace's table; with `only`, of those
/// functions only.
fn traced_instructions(trace: &Path, only: Option<&[&str]>) -> HashSet<u64> {
    let meta = read_json(&trace.join("paths.json"));
    let mut out = HashSet::new();
    for f in meta["functions"].as_array().unwrap() {
        let name = f["name"].as_str().unwrap();
        if only.is_some_and(|names| !names.contains(&name)) {
            continue;
        }
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

/// Functions of `tests/targets/paths.c`.
const OWN: &[&str] = &[
    "classify",
    "fib",
    "by_cmp",
    "twice",
    "thrice",
    "work",
    "main",
    "dive",
    "bail_out",
    "on_signal",
    "on_signal_leave",
    "handlers",
];

variant_test!(regenerates_what_qemu_ran, |v| {
    if !have_qemu() {
        return;
    }
    let target = build("paths", v);
    let dir = scratch(&format!("paths-qemu-{}", v.name));
    let trace = dir.join("trace");
    let plain = run(
        std::process::Command::new(&target).arg("300"),
        Duration::from_secs(30),
    );
    let out = paths_run(&trace, &[], &target, &["300"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the traced program's output");
    // A static program is traced from main (its start-up code sets up the
    // thread pointer); its libc's IFUNCs choose by the CPU, and QEMU's is
    // not this one, so only the target's own functions are compared.
    let static_build = v.name.contains("static");
    let only = static_build.then_some(OWN);
    let keep = traced_instructions(&trace, only);
    for f in OWN {
        let meta = read_json(&trace.join("paths.json"));
        assert!(
            meta["functions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == *f),
            "{f} traced"
        );
    }
    let weft_trace: Vec<u64> = regenerated(&trace)
        .into_iter()
        .filter(|a| keep.contains(a))
        .collect();
    let main = read_json(&trace.join("paths.json"))["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "main")
        .and_then(|g| g["vaddr"].as_u64());
    let qemu = qemu_instructions(
        &target,
        &["300"],
        &keep,
        main.filter(|_| static_build),
        &dir,
    );
    assert!(
        qemu.len() > 10_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &weft_trace, v.name);
});

#[test]
fn four_kib_buffers_lose_nothing() {
    if !have_qemu() {
        return;
    }
    let target = build("paths", &O2);
    let dir = scratch("paths-tiny-buffers");
    let trace = dir.join("trace");
    let tiny = ["--paths-buffer-size", "4K", "--paths-buffers", "2"];
    let out = paths_run(&trace, &tiny, &target, &["3000"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let chunks: u64 = out
        .stderr
        .split(" in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no buffer count in {}", out.stderr));
    assert!(
        chunks >= 5,
        "4 KiB buffers filled and handed over: {chunks}"
    );
    assert!(!out.stderr.contains("lost"), "{}", out.stderr);
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(&target, &["3000"], &keep, None, &dir);
    assert_same_trace(&qemu, &regenerated(&trace), "4 KiB buffers");
}

#[test]
fn gzip_regenerates_what_qemu_ran() {
    if !have_qemu() {
        return;
    }
    let gzip = Path::new("/usr/bin/gzip");
    let dir = scratch("paths-gzip");
    let input = dir.join("input.txt");
    let text: String = (0..3000)
        .map(|i| format!("line {i} of some text {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let trace = dir.join("trace");
    let input_arg = input.to_str().unwrap();
    let args = ["-n", "-k", "-f", input_arg];
    let out = paths_run(&trace, &[], gzip, &args);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let plain = std::process::Command::new(gzip)
        .args(["-n", "-c", input_arg])
        .output()
        .unwrap();
    let traced = std::fs::read(dir.join("input.txt.gz")).unwrap();
    assert!(
        traced == plain.stdout,
        "gzip's output under --paths differs"
    );
    let keep = traced_instructions(&trace, None);
    let names: BTreeSet<String> = read_json(&trace.join("paths.json"))["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.len() > 50,
        "most of gzip's functions traced: {names:?}"
    );
    // The same run again under QEMU: from the same start (no .gz yet).
    std::fs::remove_file(dir.join("input.txt.gz")).unwrap();
    let qemu = qemu_instructions(gzip, &args, &keep, None, &dir);
    assert!(
        qemu.len() > 100_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &regenerated(&trace), "gzip");
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
    let meta = read_json(&trace.join("paths.json"));
    let mut out = HashSet::new();
    for f in meta["functions"].as_array().unwrap() {
        if f["module"] != module {
            continue;
        }
        for b in f["blocks"].as_array().unwrap() {
            let start = b["start"].as_u64().unwrap();
            for o in b["insns"].as_array().unwrap() {
                out.insert(start + o.as_u64().unwrap());
            }
        }
    }
    out
}

#[test]
fn a_pipeline_is_traced_process_by_process() {
    if !have_qemu() {
        return;
    }
    let dir = scratch("paths-pipeline");
    let input = dir.join("input.txt");
    let text: String = (0..2000)
        .map(|i| format!("line {i} of a pipeline {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let trace = dir.join("trace");
    let pipeline = format!("gzip -n -c {} | wc -c", input.display());
    let plain = run(
        std::process::Command::new("/bin/sh").args(["-c", &pipeline]),
        Duration::from_secs(30),
    );
    // The whole workload (weft follows by default), with tiny buffers and
    // a record per block.
    let out = run(
        weft()
            .args(["run", "--paths", "all", "--validate"])
            .args(["--paths-buffer-size", "4K", "--paths-buffers", "4"])
            .arg("--paths-out")
            .arg(&trace)
            .args(["--", "/bin/sh", "-c", &pipeline]),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the pipeline's output");
    assert!(!out.stderr.contains("lost"), "{}", out.stderr);
    assert!(
        out.stderr.contains("validated: regeneration gives the"),
        "{}",
        out.stderr
    );
    let streams = regenerated_by_command(&trace);
    let commands: BTreeSet<&str> = streams.iter().map(|(c, _)| c.as_str()).collect();
    for c in ["sh", "gzip", "wc"] {
        assert!(commands.contains(c), "{c} in the trace: {commands:?}");
    }
    let own = |command: &str, module: &str| -> Vec<u64> {
        let (_, insns) = streams
            .iter()
            .find(|(c, _)| c == command)
            .expect("the command's stream");
        insns
            .iter()
            .filter(|(m, _)| m == module)
            .map(|&(_, a)| a)
            .collect()
    };
    // The same pipeline, each program under QEMU with the argv[0] the
    // shell gives it.
    let input_arg = input.to_str().unwrap();
    let (gzip_log, wc_log) = (dir.join("gzip.log"), dir.join("wc.log"));
    let qemu = |log: &Path, name: &str| {
        format!(
            "qemu-x86_64 -singlestep -d exec,nochain,page -D {} -0 {name} /usr/bin/{name}",
            log.display()
        )
    };
    let under_qemu = format!(
        "{} -n -c {input_arg} | {} -c",
        qemu(&gzip_log, "gzip"),
        qemu(&wc_log, "wc")
    );
    let q = run(
        std::process::Command::new("/bin/sh").args(["-c", &under_qemu]),
        Duration::from_secs(300),
    );
    assert_eq!(
        q.stdout, plain.stdout,
        "the pipeline under qemu: {}",
        q.stderr
    );
    for (name, log, least) in [("gzip", &gzip_log, 50_000), ("wc", &wc_log, 100)] {
        let program = Path::new("/usr/bin").join(name);
        let keep = traced_instructions_of(&trace, name);
        let qemu = qemu_log_instructions(log, &program, &keep, None);
        assert!(qemu.len() > least, "qemu ran {} of {name}", qemu.len());
        assert_same_trace(&qemu, &own(name, name), &format!("{name} in the pipeline"));
    }
}

#[test]
fn sqlite3_regenerates_what_qemu_ran() {
    if !have_qemu() {
        return;
    }
    let sqlite3 = Path::new("/usr/bin/sqlite3");
    let dir = scratch("paths-sqlite3");
    let script = dir.join("script.sql");
    std::fs::write(
        &script,
        "create table t(a integer primary key, b text, c real);\n\
         with recursive n(i) as (select 1 union all select i+1 from n where i < 500)\n\
           insert into t select i, 'row' || i, i * 1.5 from n;\n\
         create index tb on t(b);\n\
         select count(*), sum(c), max(b) from t where a % 7 = 3;\n\
         select b from t where b like 'row4%' order by c desc limit 3;\n",
    )
    .unwrap();
    let read = format!(".read {}", script.display());
    let args = [":memory:", read.as_str()];
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], sqlite3, &args);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, "72|27162.0|row94\nrow499\nrow498\nrow497\n");
    // The shell's own functions, called back from the library for each row.
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(sqlite3, &args, &keep, None, &dir);
    assert!(
        qemu.len() > 5_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &regenerated(&trace), "sqlite3");
}

variant_test!(
    each_thread_regenerates_its_own_calls,
    [o0_pie, o2_pie, o2_static],
    |v| {
        let target = build("paths_threads", v);
        let dir = scratch(&format!("paths-threads-{}", v.name));
        let trace = dir.join("trace");
        let out = paths_run(&trace, &["--validate"], &target, &[]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        // Every thread's blocks, as the threads recorded them one by one,
        // equal their regeneration from the witnesses.
        assert!(
            out.stderr.contains("validated: regeneration gives the")
                && out
                    .stderr
                    .contains(" block(s) the 7 thread stream(s) recorded"),
            "{}",
            out.stderr
        );
        // The target's own tally: "TID CALLS" per thread, six threads in two
        // waves (the second reusing the first's stacks and TCBs).
        let tally: std::collections::BTreeMap<String, u64> = out
            .stdout
            .lines()
            .map(|l| {
                let (tid, n) = l.split_once(' ').unwrap();
                (tid.to_string(), n.parse().unwrap())
            })
            .collect();
        assert_eq!(tally.len(), 6, "{}", out.stdout);
        let meta = read_json(&trace.join("paths.json"));
        let step = meta["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == "step")
            .expect("step traced");
        let entry = format!(
            "{}+{:#x}",
            step["module"].as_str().unwrap(),
            step["vaddr"].as_u64().unwrap()
        );
        let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(120));
        assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
        let mut calls: std::collections::BTreeMap<String, u64> = Default::default();
        let mut thread = String::new();
        for line in regen.stdout.lines() {
            if let Some(rest) = line.strip_prefix("# thread ") {
                thread = rest.split_whitespace().next().unwrap().to_string();
            } else if line == entry {
                *calls.entry(thread.clone()).or_default() += 1;
            }
        }
        assert_eq!(
            calls, tally,
            "step's calls per thread, regenerated vs the target's tally"
        );
    }
);

#[test]
fn attach_traces_a_running_process_and_puts_its_code_back() {
    let target = build("paths_loop", &O2);
    let dir = scratch("paths-attach");
    let trace = dir.join("trace");
    let mut child = std::process::Command::new(&target).spawn().unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(Duration::from_millis(200));
    let before = maps_and_text(&pid);
    let out = run(
        weft()
            .args([
                "attach",
                "-p",
                &pid,
                "--duration",
                "1s",
                "--paths",
                "all",
                "--paths-out",
            ])
            .arg(&trace),
        Duration::from_secs(60),
    );
    let alive = child.try_wait().unwrap().is_none();
    let after = maps_and_text(&pid);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert!(alive, "the process runs on after weft detaches");
    assert_same_code(&before, &after, "after attach --paths");
    let meta = read_json(&trace.join("paths.json"));
    let step = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "step")
        .expect("step traced");
    let entry = format!("paths_loop-O2-pie+{:#x}", step["vaddr"].as_u64().unwrap());
    let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
    let calls = regen.stdout.lines().filter(|l| *l == entry).count();
    // About 100 calls per millisecond's sleep: a second gives thousands.
    assert!(
        calls > 1000,
        "step's calls regenerated over a 1 s attach: {calls}"
    );
}

#[test]
fn damaged_traces_and_wrong_directories_are_refused_clearly() {
    let target = build("paths", &O2);
    let dir = scratch("paths-damaged");
    // A directory holding something else is not written into.
    let other = dir.join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    let out = paths_run(&other, &[], &target, &[]);
    assert_clear_error(
        &out,
        1,
        "is not a weft paths trace",
        "--paths-out over another directory",
    );
    assert!(other.join("notes.txt").exists());
    // A paths.json weft did not write is not replaced, and a link is not
    // followed.
    let foreign = dir.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("paths.json"), "{\"mine\": 1}").unwrap();
    let out = paths_run(&foreign, &[], &target, &[]);
    assert_clear_error(&out, 1, "is not a weft paths trace", "a foreign paths.json");
    assert_eq!(
        std::fs::read_to_string(foreign.join("paths.json")).unwrap(),
        "{\"mine\": 1}"
    );
    let link = dir.join("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&other, &link).unwrap();
    let out = paths_run(&link, &[], &target, &[]);
    assert_clear_error(&out, 1, "is a symbolic link", "--paths-out through a link");
    // Witnesses without their table: a run that did not finish.
    let unfinished = dir.join("unfinished");
    std::fs::create_dir_all(&unfinished).unwrap();
    std::fs::write(unfinished.join("buffers.zst"), b"").unwrap();
    let out = run(
        weft().arg("regen").arg(&unfinished),
        Duration::from_secs(60),
    );
    assert_clear_error(&out, 1, "did not finish", "a trace without paths.json");
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], &target, &["2000"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    // Weft's user's only.
    use std::os::unix::fs::PermissionsExt;
    for p in [
        trace.clone(),
        trace.join("paths.json"),
        trace.join("buffers.zst"),
    ] {
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert!(mode & 0o077 == 0, "{} is {mode:o}", p.display());
    }
    // A stream cut short: the message names the byte where it ends.
    let zst = trace.join("buffers.zst");
    let whole = std::fs::read(&zst).unwrap();
    std::fs::write(&zst, &whole[..whole.len() / 2]).unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "at byte", "a truncated buffers.zst");
    // A stream whose records do not fit the table: refused at an offset.
    std::fs::write(&zst, &whole).unwrap();
    let raw = zstd_roundtrip_corrupt(&whole);
    std::fs::write(&zst, raw).unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "at byte", "records that do not fit the table");
    // A table with an index out of range.
    std::fs::write(&zst, &whole).unwrap();
    let meta = std::fs::read_to_string(trace.join("paths.json")).unwrap();
    std::fs::write(
        trace.join("paths.json"),
        meta.replacen("\"entry\":0", "\"entry\":9999", 1),
    )
    .unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "no entry block", "a damaged paths.json");
    std::fs::write(trace.join("paths.json"), "{").unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "not a paths table", "paths.json cut short");
}

#[test]
fn validate_reports_the_first_difference() {
    let target = build("paths", &O2);
    let dir = scratch("paths-validate");
    let trace = dir.join("trace");
    let out = paths_run(&trace, &["--validate"], &target, &["500"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert!(
        out.stderr.contains("validated: regeneration gives the"),
        "{}",
        out.stderr
    );
    let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_eq!(regen.status, 0, "{}", regen.stderr);
    assert!(regen.stderr.contains("validated:"), "{}", regen.stderr);
    // A table that sends regeneration the wrong way: two out-edges of one
    // of classify's branches swap their witnesses. The blocks the thread
    // recorded show where regeneration first goes wrong.
    let path = trace.join("paths.json");
    let mut meta = read_json(&path);
    let classify = meta["functions"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|f| f["name"] == "classify")
        .expect("classify traced");
    let edges = classify["edges"].as_array_mut().unwrap();
    let (a, b) = (0..edges.len())
        .flat_map(|i| (i + 1..edges.len()).map(move |j| (i, j)))
        .find(|&(i, j)| {
            edges[i][0] == edges[j][0]
                && edges[i][2].as_u64() != Some(0)
                && edges[j][2].as_u64() != Some(0)
        })
        .expect("a branch of classify with a witness on each way out");
    let (wa, wb) = (edges[a][2].clone(), edges[b][2].clone());
    edges[a][2] = wb;
    edges[b][2] = wa;
    std::fs::write(&path, meta.to_string()).unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "first difference after", "a table that misleads");
}

/// The trace's chunks with one record byte in the middle of the first
/// chunk changed to a witness number no function has (0xFA), compressed
/// again.
fn zstd_roundtrip_corrupt(compressed: &[u8]) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut d = std::process::Command::new("zstd")
        .args(["-dc"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("zstd runs");
    {
        use std::io::Write;
        d.stdin.take().unwrap().write_all(compressed).unwrap();
    }
    use std::io::Read;
    d.stdout.take().unwrap().read_to_end(&mut raw).unwrap();
    d.wait().unwrap();
    // After the 40-byte chunk header and a few records: a witness 0xFA.
    raw[40 + 16] = 0xFA;
    let mut c = std::process::Command::new("zstd")
        .args(["-c"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("zstd runs");
    {
        use std::io::Write;
        c.stdin.take().unwrap().write_all(&raw).unwrap();
    }
    let mut out = Vec::new();
    c.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    c.wait().unwrap();
    out
}

#[test]
fn din_and_binary_forms_give_the_addresses_the_program_ran() {
    if !have_qemu() {
        return;
    }
    let target = build("paths_din", &O2);
    let dir = scratch("paths-din");
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], &target, &["200"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    // The program's own word for where `work` runs.
    let printed = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("work at "))
        .and_then(hex)
        .unwrap_or_else(|| panic!("the target prints work's address: {}", out.stderr));
    let meta = read_json(&trace.join("paths.json"));
    let work = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "work")
        .and_then(|f| f["vaddr"].as_u64())
        .expect("work traced");
    let bias = printed - work;
    let din = run(
        weft().arg("regen").arg("--din").arg(&trace),
        Duration::from_secs(60),
    );
    assert_eq!(din.status, 0, "weft regen --din: {}", din.stderr);
    let fetched: Vec<u64> = din
        .stdout
        .lines()
        .map(|l| {
            let a = l
                .strip_prefix("2 ")
                .unwrap_or_else(|| panic!("a din instruction fetch: {l:?}"));
            u64::from_str_radix(a, 16).unwrap()
        })
        .collect();
    assert_eq!(
        fetched.iter().filter(|&&a| a == printed).count(),
        200,
        "work's first instruction fetched once per call, at the address it printed"
    );
    let vaddrs: Vec<u64> = fetched.iter().map(|a| a - bias).collect();
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(&target, &["200"], &keep, None, &dir);
    assert_same_trace(&qemu, &vaddrs, "--din less the program's own load bias");
    // The binary form: the same instructions, module index << 48 | vaddr.
    let file = dir.join("insns.bin");
    let bin = run(
        weft()
            .args(["regen", "--binary", "--insns", "-o"])
            .arg(&file)
            .arg(&trace),
        Duration::from_secs(60),
    );
    assert_eq!(bin.status, 0, "weft regen --binary: {}", bin.stderr);
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[..8], b"WEFTBLK1");
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let mut at = 12;
    let mut modules = Vec::new();
    for _ in 0..u32_at(8) {
        let n = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
        modules.push(String::from_utf8(bytes[at + 2..at + 2 + n].to_vec()).unwrap());
        at += 2 + n;
    }
    assert_eq!(bytes[at], 1, "a stream header");
    let command_len = u32_at(at + 13) as usize;
    at += 17 + command_len;
    let mut decoded = Vec::new();
    loop {
        let e = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        at += 8;
        if e == u64::MAX {
            break;
        }
        assert!(modules[(e >> 48) as usize].starts_with("paths_din"));
        decoded.push(e & 0xffff_ffff_ffff);
    }
    assert_eq!(at, bytes.len(), "one thread, one stream");
    assert_same_trace(&qemu, &decoded, "--binary --insns");
}

#[test]
fn python3_regenerates_through_its_split_functions() {
    // Debian's python3.11 is built with its cold code split off: jumps
    // and switch cases into `.cold` parts and back, thousands of them.
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        skip("Debian's python3 is not installed (apt-get install python3)");
        return;
    }
    let dir = scratch("paths-python3");
    let script = dir.join("work.py");
    std::fs::write(
        &script,
        "d = {}\nfor i in range(3000):\n    d[i % 37] = d.get(i % 37, 0) + i * i\n\
         print(sum(d.values()), len(d), sorted(d)[:3])\n",
    )
    .unwrap();
    let args = ["-S", "-E"];
    let plain = run(
        std::process::Command::new(python)
            .args(args)
            .arg(&script)
            .env("PYTHONHASHSEED", "0"),
        Duration::from_secs(30),
    );
    let trace = dir.join("trace");
    let out = run(
        weft()
            .args([
                "run",
                "--no-follow",
                "--paths",
                "all",
                "--validate",
                "--paths-out",
            ])
            .arg(&trace)
            .arg("--")
            .arg(python)
            .args(args)
            .arg(&script)
            .env("PYTHONHASHSEED", "0"),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "python's output under --paths");
    // Every block python ran in its traced functions, as it recorded them
    // one by one, equals their regeneration from the witnesses.
    let validated = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("weft: validated: regeneration gives the "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no validation line: {}", out.stderr));
    assert!(validated > 1_000_000, "{validated} blocks validated");
    let meta = read_json(&trace.join("paths.json"));
    let functions = meta["functions"].as_array().unwrap();
    let resumes: usize = functions
        .iter()
        .map(|f| f["resumes"].as_array().map_or(0, |r| r.len()))
        .sum();
    assert!(
        functions.len() > 3000 && resumes > 1000,
        "{} functions, {resumes} ways back from other parts",
        functions.len()
    );
}

variant_test!(
    cpp_exceptions_regenerate_what_qemu_ran,
    [o0_pie, o2_pie],
    |v| {
        if !have_qemu() {
            return;
        }
        // A throw from deep recursion, a destructor on the way, a catch
        // further up: the unwinder finds the original callers (the copies
        // push original return addresses) and enters landing pads, which
        // write resume records.
        let target = build("paths_throw", v);
        let dir = scratch(&format!("paths-throw-{}", v.name));
        let trace = dir.join("trace");
        let plain = run(
            std::process::Command::new(&target).arg("40"),
            Duration::from_secs(30),
        );
        assert_eq!(plain.stdout, "sum -40 tally 40\n");
        let out = paths_run(&trace, &["--validate"], &target, &["40"]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "the program under --paths");
        assert!(out.stderr.contains("validated:"), "{}", out.stderr);
        let keep = traced_instructions(&trace, None);
        let qemu = qemu_instructions(&target, &["40"], &keep, None, &dir);
        assert!(
            qemu.len() > 1_000,
            "qemu ran {} traced instructions",
            qemu.len()
        );
        assert_same_trace(&qemu, &regenerated(&trace), v.name);
    }
);
