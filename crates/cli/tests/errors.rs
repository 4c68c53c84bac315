//! Clear one-line errors, never a panic.

use crate::support::*;
use std::time::Duration;

fn fails(cmd: &mut std::process::Command, expect: &[&str]) -> Finished {
    let out = run(cmd, Duration::from_secs(30));
    assert_ne!(out.status, 0, "{cmd:?} should fail");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(out.stderr.starts_with("weft: "), "{}", out.stderr);
    for e in expect {
        assert!(out.stderr.contains(e), "expected {e:?} in: {}", out.stderr);
    }
    out
}

#[test]
fn no_such_pid() {
    fails(
        weft().args(["attach", "-p", "999999999", "--count", "x"]),
        &["no process with pid 999999999"],
    );
}

#[test]
fn pattern_matching_nothing_lists_near_misses() {
    let bin = build("basic", &O2);
    fails(
        weft().args(["run", "--count", "wrok", "--"]).arg(&bin),
        &["pattern 'wrok' matches no function", "did you mean: work"],
    );
    fails(
        weft()
            .args(["run", "--count", "libc.so.6:mallocc", "--"])
            .arg(&bin),
        &["pattern 'libc.so.6:mallocc' matches no function", "malloc"],
    );
    // Every pattern that matches nothing is named, not the first alone.
    fails(
        weft()
            .args(["run", "--count", "wrok", "--count", "wokr", "--"])
            .arg(&bin),
        &["'wrok'", "'wokr'", "match no function"],
    );
}

#[test]
fn offset_not_on_an_instruction_boundary() {
    let bin = build("shapes", &O2);
    // riprel+0 is `mov shapes_var(%rip),%eax`, 6 bytes long: +2 is inside it.
    fails(
        weft().args(["run", "--count", "riprel+2", "--"]).arg(&bin),
        &["riprel+0x2 is not the start of an instruction"],
    );
}

#[test]
fn not_elf_and_not_x86_64() {
    let dir = scratch("not-elf");
    let text = dir.join("notes.txt");
    std::fs::write(&text, "hello").unwrap();
    fails(
        weft().args(["inspect", "functions"]).arg(&text),
        &["is not an ELF file"],
    );
    // A minimal AArch64 ELF header.
    let mut h = vec![0u8; 64];
    h[..4].copy_from_slice(b"\x7fELF");
    h[4] = 2;
    h[5] = 1;
    h[6] = 1;
    h[16] = 2;
    h[18] = 183;
    h[20] = 1;
    h[52] = 64;
    let arm = dir.join("arm-prog");
    std::fs::write(&arm, h).unwrap();
    fails(
        weft().args(["inspect", "functions"]).arg(&arm),
        &["x86-64 code only"],
    );
}

#[test]
fn program_that_cannot_start() {
    let out = fails(
        weft().args(["run", "--count", "x", "--", "/nonexistent/program"]),
        &["cannot start /nonexistent/program"],
    );
    assert_eq!(out.status, 127);
}

#[test]
fn a_record_of_a_program_that_cannot_start_leaves_no_directory() {
    let dir = scratch("record-cannot-start");
    let out_dir = dir.join("rec");
    let out = fails(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out_dir)
            .args(["--", "/nonexistent/program"]),
        &["cannot start /nonexistent/program"],
    );
    assert_eq!(out.status, 127);
    assert!(!out_dir.exists(), "{} was left behind", out_dir.display());
    // A directory the user made stays.
    std::fs::create_dir(&out_dir).unwrap();
    fails(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out_dir)
            .args(["--", "/nonexistent/program"]),
        &["cannot start /nonexistent/program"],
    );
    assert!(out_dir.is_dir());
}

#[test]
fn nothing_to_count() {
    fails(
        weft().args(["run", "--", "/bin/true"]),
        &["nothing to measure"],
    );
}

#[test]
fn permission_denied_has_a_hint() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !have("setpriv") {
        skip("permission test needs root (to drop to nobody) and setpriv");
        return;
    }
    let sleeper = KillOnDrop(
        std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap(),
    );
    let weft_path = env!("CARGO_BIN_EXE_weft");
    // `nobody` may not be able to read the build directory: copy weft out.
    let dir = scratch("perm");
    let copy = dir.join("weft");
    std::fs::copy(weft_path, &copy).unwrap();
    for d in [
        dir.as_path(),
        dir.parent().unwrap(),
        dir.parent().unwrap().parent().unwrap(),
    ] {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755));
    }
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&copy);
    cmd.args([
        "attach",
        "-p",
        &sleeper.0.id().to_string(),
        "--count",
        "nanosleep",
    ]);
    let out = run(&mut cmd, Duration::from_secs(30));
    if out.stderr.contains("Permission denied (os error 13)") && out.stderr.contains("setpriv") {
        skip("nobody cannot execute the copied weft here");
        return;
    }
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(out.stderr.contains("permission denied"), "{}", out.stderr);
    assert!(out.stderr.contains("hint:"), "{}", out.stderr);
}

#[test]
fn kernel_thread_has_nothing_to_instrument() {
    // kthreadd is pid 2 on a machine that boots its own kernel.
    if std::fs::read_to_string("/proc/2/comm")
        .map(|c| c.trim() != "kthreadd")
        .unwrap_or(true)
    {
        skip("pid 2 is not kthreadd here (a container?)");
        return;
    }
    fails(
        weft().args(["attach", "-p", "2", "--count", "x"]),
        &["process 2 has no program to instrument"],
    );
}

/// Options that cannot mean anything are refused before anything runs:
/// clap's usage error (status 2) for a value out of range, weft's own
/// line (status 1) for a request it cannot honour. Never a panic.
#[test]
fn hostile_options_are_refused_in_one_line() {
    let bin = build("basic", &O2);
    let deep = format!(
        "calls:fn=work,if={}arg1{}",
        "(".repeat(400),
        ")".repeat(400)
    );
    let long = format!("calls:fn=work,if={}", vec!["arg1"; 300].join(" + "));
    let chain = format!("calls:fn=work,if={} > 0", vec!["arg1"; 40].join(" + "));
    // A loop over bad options (not build variants), each with its message.
    for (args, want, code) in [
        (&["--interval", "0"][..], "shortest interval", 2),
        (&["--args", "99"][..], "not in 0..=6", 2),
        (&["--buckets", "0"][..], "not in 2..=1000000", 2),
        (
            &["--metric", "calls:fn=work,if=ret > 0"][..],
            "'ret' (the return value) is not known yet",
            1,
        ),
        (&["--metric", &deep][..], "nested more than 32 levels", 1),
        (
            &["--metric", &long][..],
            "more than the 1000 an expression may have",
            1,
        ),
        (&["--metric", &chain][..], "levels of operations", 1),
        (
            &["--metric", "calls:fn=work,if=arg1 > 18446744073709551616"][..],
            "'18446744073709551616' is out of range: integer constants are 64 bits, from \
             -9223372036854775808 (i64::MIN) to 18446744073709551615 (u64::MAX, \
             0xFFFFFFFFFFFFFFFF)",
            1,
        ),
        // A definitions file that never ends: refused without reading it
        // (it was read until memory ran out).
        (
            &["--metrics-file", "/dev/zero", "--metric", "calls:fn=work"][..],
            "weft: metric definitions: cannot read /dev/zero: it is a character device, not a \
             regular file; give a file of metric definitions (format: docs/metrics.md)\n",
            1,
        ),
        (
            &["--metrics-file", "/", "--metric", "calls:fn=work"][..],
            "cannot read /: it is a directory, not a regular file",
            1,
        ),
    ] {
        let out = run(
            weft()
                .args(["run", "--count", "work"])
                .args(args)
                .arg("--")
                .arg(&bin),
            Duration::from_secs(30),
        );
        let shown: Vec<String> = args.iter().map(|a| a.chars().take(40).collect()).collect();
        assert_eq!(out.status, code, "{shown:?}: {}", out.stderr);
        assert!(
            !out.stderr.contains("panicked"),
            "{shown:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(want), "{shown:?}: {}", out.stderr);
        assert!(!out.stdout.contains("tally"), "{shown:?}: the program ran");
    }
    // `attach` only: refused before any process is looked at.
    for bad in [&["--max-overhead", "NaN"][..], &["--max-overhead=-3"][..]] {
        let out = run(
            weft()
                .args(["attach", "-p", "1", "--metric", "calls:fn=work"])
                .args(bad),
            Duration::from_secs(30),
        );
        assert_eq!(out.status, 2, "{bad:?}: {}", out.stderr);
        assert!(
            out.stderr.contains("not a percentage"),
            "{bad:?}: {}",
            out.stderr
        );
    }
    // attach's --duration: refused before weft looks for the process.
    let out = run(
        weft().args([
            "attach",
            "-p",
            "1",
            "--count",
            "work",
            "--duration",
            "99999999999999999999s",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 2, "{}", out.stderr);
    assert!(out.stderr.contains("longest duration"), "{}", out.stderr);
}

/// A report that cannot be written is an error and a non-zero status, not
/// a success with the report lost; so is a full standard error.
#[test]
fn unwritable_reports_fail() {
    let bin = build("basic", &O2);
    let out = run(
        weft()
            .args(["run", "--count", "work", "--output", "/dev/full", "--"])
            .arg(&bin),
        Duration::from_secs(30),
    );
    assert_clear_error(
        &out,
        1,
        "the report was not written to /dev/full",
        "--output /dev/full",
    );
    let full = std::fs::File::options()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let mut child = KillOnDrop(
        weft()
            .args(["run", "--count", "work", "--format", "json", "--"])
            .arg(&bin)
            .stdout(std::process::Stdio::null())
            .stderr(full)
            .spawn()
            .expect("spawn weft"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(std::time::Instant::now() < deadline, "weft did not finish");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(
        status.code(),
        Some(1),
        "a report lost to a full standard error"
    );
}
