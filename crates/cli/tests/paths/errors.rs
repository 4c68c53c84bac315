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
    let raw = zstd_roundtrip_corrupt(&whole);
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

/// The trace's chunks with one record byte in the middle of the first
/// chunk changed to a witness number no function has (0xF9), compressed
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
    // After the 40-byte chunk header and a few records: a witness 0xF9.
    raw[40 + 16] = 0xF9;
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
