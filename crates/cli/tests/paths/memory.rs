//! `weft regen` on a trace whose records are more than the memory it may
//! hold: they go to an unnamed file it maps, and the output is the same.

use super::*;
use std::io::Read;

/// Whether files `a` and `b` hold the same bytes (read in pieces: they
/// are large).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut a, mut b) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = a.read(&mut x).unwrap();
        let mut m = 0;
        while m < n {
            match b.read(&mut y[m..n]).unwrap() {
                0 => return false,
                k => m += k,
            }
        }
        if x[..n] != y[..n] {
            return false;
        }
        if n == 0 {
            return b.read(&mut y).unwrap() == 0;
        }
    }
}

/// The MiB a regen's note gives as its memory budget.
fn budget_mib(stderr: &str) -> f64 {
    let (_, after) = stderr
        .split_once("more than the memory budget (")
        .unwrap_or_else(|| panic!("no note of the budget: {stderr}"));
    let (n, unit) = after.split_once(' ').unwrap();
    let n: f64 = n.parse().unwrap();
    match &unit[..3] {
        "KiB" => n / 1024.0,
        "MiB" => n,
        _ => n * 1024.0,
    }
}

/// 13.5 MiB of witnesses regenerate alike: held in memory; past a budget
/// of 1 MiB (`--memory`); and in a control group that limits regen to 24
/// MiB, where the default budget is half of what the group leaves it (a
/// budget from the machine's memory would hold them all).
#[test]
fn a_trace_past_the_memory_budget_regenerates_the_same_from_a_file() {
    let target = build("paths", &O2);
    let dir = scratch("paths-memory");
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], &target, &["600000"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let regen = |extra: &[&str], to: &str| {
        let file = dir.join(to);
        let out = run(
            weft()
                .args(["regen", "--binary", "-o"])
                .arg(&file)
                .args(extra)
                .arg(&trace),
            Duration::from_secs(300),
        );
        assert_eq!(out.status, 0, "regen {extra:?}: {}", out.stderr);
        (file, out.stderr)
    };
    let (held, note) = regen(&[], "held.bin");
    assert!(!note.contains("memory budget"), "{note}");
    let (mapped, note) = regen(&["--memory", "1M"], "mapped.bin");
    assert!(
        note.contains("more than the memory budget (1.0 MiB, --memory)")
            && note.contains(&format!("unnamed file in {}", trace.display())),
        "{note}"
    );
    assert!(same_bytes(&held, &mapped), "--memory 1M changed the output");
    std::fs::remove_file(&mapped).unwrap();
    let limits = weft_replay::limits::Limits {
        memory_max: Some(24 << 20),
        cpu_max: None,
    };
    let group = match weft_replay::limits::Group::make(
        &format!("weft-regen-test-{}", std::process::id()),
        limits,
    ) {
        Ok(g) => g,
        Err(e) => return skip(&format!("no memory control group: {e}")),
    };
    // The shell joins the group, then becomes regen.
    let procs: Vec<String> = group
        .procs_files()
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let limited = dir.join("limited.bin");
    let out = run(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(r#"for f in $PROCS; do echo $$ > "$f"; done; exec "$@""#)
            .arg("sh")
            .arg(env!("CARGO_BIN_EXE_weft"))
            .args(["regen", "--binary", "-o"])
            .arg(&limited)
            .arg(&trace)
            .env("PROCS", procs.join(" ")),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "regen in 24 MiB: {}", out.stderr);
    assert_eq!(group.oom_kills(), 0);
    let budget = budget_mib(&out.stderr);
    assert!(
        budget <= 12.0 && out.stderr.contains("half of what this process may take"),
        "{}",
        out.stderr
    );
    assert!(
        same_bytes(&held, &limited),
        "the group's budget changed the output"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
