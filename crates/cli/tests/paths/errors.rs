//! Bad input and checking: directories weft must not write, damaged
//! traces, and `--validate` catching a table that misleads.

use super::*;
use crate::support::*;
use std::time::Duration;

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
    // A --paths that names nothing, said as the user wrote it.
    for empty in ["", "fn:"] {
        let out = run(
            weft()
                .args(["run", "--paths", empty, "--paths-out"])
                .arg(dir.join("empty"))
                .arg("--")
                .arg(&target),
            Duration::from_secs(60),
        );
        assert_clear_error(
            &out,
            1,
            &format!("--paths {empty:?} names nothing"),
            "--paths ''",
        );
    }
    // `ALL` is `all`: the program's functions are traced.
    let upper = dir.join("upper");
    let out = run(
        weft()
            .args(["run", "--no-follow", "--paths", "ALL", "--paths-out"])
            .arg(&upper)
            .arg("--")
            .arg(&target),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert!(
        out.stderr.contains("paths of ") && !out.stderr.contains("paths of 0 function"),
        "{}",
        out.stderr
    );
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
    // An earlier trace, its schedule included, is replaced.
    assert!(
        trace.join("schedule.zst").exists(),
        "no schedule: {}",
        out.stderr
    );
    let out = paths_run(&trace, &[], &target, &["2000"]);
    assert_eq!(out.status, 0, "weft over an earlier trace: {}", out.stderr);
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
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "the cut said once: {}",
        out.stderr
    );
    // Bytes changed inside the compressed stream: zstd's word for it, not
    // a record cut short (zstd checks each frame's content).
    let mut flipped = whole.clone();
    let middle = flipped.len() / 2;
    flipped[middle..middle + 8]
        .iter_mut()
        .for_each(|b| *b ^= 0xFF);
    std::fs::write(&zst, &flipped).unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(
        &out,
        1,
        "the zstd stream is damaged",
        "a corrupted buffers.zst",
    );
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "the damage said once: {}",
        out.stderr
    );
    // Cut after hundreds of chunks (weft killed, a full disk): what comes
    // before the cut is regenerated, and the cut is still the error.
    let many = dir.join("many");
    let out = paths_run(&many, &["--paths-buffer-size", "4K"], &target, &["100000"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let zst_many = many.join("buffers.zst");
    let bytes = std::fs::read(&zst_many).unwrap();
    std::fs::write(&zst_many, &bytes[..bytes.len() * 3 / 4]).unwrap();
    let out = run(weft().arg("regen").arg(&many), Duration::from_secs(60));
    assert_clear_error(&out, 1, "at byte", "a buffers.zst cut after many chunks");
    assert!(
        out.stderr.contains("regenerating what comes before it"),
        "{}",
        out.stderr
    );
    let regenerated = out.stdout.lines().filter(|l| !l.starts_with('#')).count();
    assert!(regenerated > 1000, "{regenerated} lines before the cut");
    // A stream whose records do not fit the table: refused at an offset.
    std::fs::write(&zst, &whole).unwrap();
    // After the 40-byte chunk header and a few records: the entry of a
    // function id no function has (0xF9 starts the entries of ids 8,415
    // and above).
    let raw = zstd_altered(&whole, |raw| raw[40 + 16] = 0xF9);
    std::fs::write(&zst, raw).unwrap();
    let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_clear_error(&out, 1, "at byte", "records that do not fit the table");
    // The output says where the stream stopped.
    assert!(
        out.stdout
            .contains("# regeneration of this stream stopped here: "),
        "{}",
        out.stdout
    );
    // Chunk headers that weft cannot have written: a process image the
    // table does not list (bits 40 up of the handover number), no thread.
    for (byte, value, says) in [(13, 7, "process image 7"), (4, 0, "thread 0")] {
        let altered = zstd_altered(&whole, |raw| {
            raw[byte..byte + 4].copy_from_slice(&[value, 0, 0, 0]);
        });
        std::fs::write(&zst, altered).unwrap();
        let out = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
        assert_clear_error(&out, 1, says, "an altered chunk header");
        assert!(out.stderr.contains("at byte 0"), "{}", out.stderr);
    }
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
    // Which program's stream: a workload has several per process.
    assert!(out.stderr.contains(", image 0)"), "{}", out.stderr);
}

/// The trace's chunks, decompressed, changed by `alter`, compressed again.
fn zstd_altered(compressed: &[u8], alter: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
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
    alter(&mut raw);
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

/// A `--validate` that fails fails the run: two threads sharing one 4 KiB
/// buffer lose records (the second waits for a free buffer, then gives
/// up), so the trace cannot validate, and `weft run` exits 1 after saying
/// so (the trace is still written).
#[test]
fn a_failed_validation_fails_the_run() {
    let target = build("paths_threads", &O2);
    let trace = scratch("paths-validation-fails").join("trace");
    let out = run(
        weft()
            .args(["run", "--paths", "all", "--validate"])
            .args(["--paths-buffers", "1", "--paths-buffer-size", "4K"])
            .arg("--paths-out")
            .arg(&trace)
            .arg("--")
            .arg(&target),
        Duration::from_secs(120),
    );
    assert_clear_error(&out, 1, "validation FAILED", "records lost");
    assert!(out.stderr.contains("bytes lost"), "{}", out.stderr);
    // The failure names the loss, whichever stream failed first.
    let failed = out
        .stderr
        .lines()
        .find(|l| l.contains("validation FAILED"))
        .unwrap_or_default();
    assert!(failed.contains("bytes of records were lost"), "{failed}");
    assert!(trace.join("paths.json").exists());
    // So does `weft regen`, before any stream fails (a new-user trial,
    // session 33: it said only the mismatch).
    let again = run(weft().arg("regen").arg(&trace), Duration::from_secs(120));
    assert!(
        again.stderr.contains("bytes of records were lost"),
        "{}",
        again.stderr
    );
}

/// A weft killed with `kill -9` leaves a trace that is read up to where
/// it stops: its `paths.json`, written as soon as the functions were laid
/// out, says the trace was not finished, and `weft regen` gives what was
/// written, then exits 1 saying so.
#[test]
fn a_killed_wefts_trace_is_read_up_to_where_it_stops() {
    let target = build("paths_loop", &O2);
    let trace = scratch("paths-killed").join("trace");
    let mut weft_run = weft()
        .args(["run", "--no-follow", "--paths", "all"])
        .args(["--paths-buffer-size", "4K"])
        .arg("--paths-out")
        .arg(&trace)
        .arg("--")
        .arg(&target)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn weft");
    // The early table, then a few full buffers drained.
    let table = trace.join("paths.json");
    let start = std::time::Instant::now();
    while !table.exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    weft_run.kill().expect("kill -9 weft");
    let _ = weft_run.wait();
    assert!(table.exists(), "no paths.json after 30 s");
    // The program runs on without weft: end it by its pid, from the table.
    let meta = read_json(&table);
    assert_eq!(
        meta["complete"], false,
        "the early table says it is not finished"
    );
    let pid = meta["processes"][0][0].as_i64().expect("the program's pid") as i32;
    // SAFETY: kill(2) on the pid of the program this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let start = std::time::Instant::now();
    while std::path::Path::new(&format!("/proc/{pid}")).exists()
        && start.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_eq!(regen.status, 1, "{}", regen.stderr);
    assert!(
        regen.stderr.contains("was not finished")
            || regen.stderr.contains("unfinished trace was cut"),
        "{}",
        regen.stderr
    );
    assert!(!regen.stderr.contains("panicked"), "{}", regen.stderr);
    assert!(
        regen
            .stdout
            .lines()
            .filter(|l| l.contains("paths_loop"))
            .count()
            > 100,
        "what was written is regenerated: {}",
        &regen.stdout[..regen.stdout.len().min(500)]
    );
    // Its schedule too, flushed as the buffers are: one stream in the
    // order the threads ran, up to where it stops.
    let interleaved = run(
        weft().args(["regen", "--interleave"]).arg(&trace),
        Duration::from_secs(60),
    );
    assert_eq!(interleaved.status, 1, "{}", interleaved.stderr);
    assert!(
        !interleaved.stderr.contains("no schedule"),
        "{}",
        interleaved.stderr
    );
    assert!(
        interleaved.stdout.contains("# thread ") && interleaved.stdout.contains(" at "),
        "{}",
        &interleaved.stdout[..interleaved.stdout.len().min(500)]
    );
    // A full disk names the file it could not write.
    let full = run(
        weft().arg("regen").args(["-o", "/dev/full"]).arg(&trace),
        Duration::from_secs(60),
    );
    assert_clear_error(&full, 1, "writing /dev/full", "regen -o /dev/full");
}
