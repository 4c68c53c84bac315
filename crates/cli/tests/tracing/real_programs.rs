//! Real programs from Debian traced through their USDT probes: python's
//! function probes with file and function names, postgres's query and
//! transaction probes with the query text.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

/// Debian's python3.11 fires `function__entry` only where a frame starts
/// in a fresh evaluation loop, which for Python code means a generator
/// function's call (cpython gh-98894: ordinary calls lost the probe in
/// 3.11), and `function__return` at every return and yield. The script
/// tallies its own calls of both kinds.
#[test]
fn python_function_probes_carry_file_and_function_names() {
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        skip("Debian's python3 missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    let script = "\
calls = {'gen': 0, 'plain': 0}
def gen():
    yield 1
def plain():
    calls['plain'] += 1
for i in range(37):
    g = gen()
    calls['gen'] += 1
for i in range(53):
    plain()
print('tally gen', calls['gen'])
print('tally plain', calls['plain'])
";
    let traced = trace_run(
        "usdt-python",
        &[
            "--trace",
            "usdt:python:function__entry@arg1/s,arg2/s",
            "--trace",
            "usdt:python:function__return@arg1/s,arg2/s",
        ],
        python,
        &["-c", script],
    );
    let (tally, text) = (traced.tallies(), traced.text());
    assert_eq!((tally["gen"], tally["plain"]), (37, 53));
    let named = |probe: &str, function: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(":python:{probe} probe")))
            .filter(|l| l.contains(&format!("arg1=\"<string>\" arg2=\"{function}\" ")))
            .count() as u64
    };
    assert_eq!(named("function__entry", "gen"), tally["gen"], "{text}");
    assert_eq!(named("function__return", "plain"), tally["plain"]);
    // The same strings in the Chrome trace, as JSON strings.
    let gens = chrome_trace(&traced.events)["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["name"] == "python:function__entry" && e["args"]["arg2"] == "gen")
        .filter(|e| e["args"]["arg1"] == "<string>" && e["args"]["arg3"].is_i64())
        .count() as u64;
    assert_eq!(gens, tally["gen"]);
    // babeltrace2 reads the strings from the CTF output.
    if let Some(text) = babeltrace(&traced.events) {
        let read = lines_with_all(&text, &["function__entry", "arg2 = { text = \"gen\" }"]) as u64;
        assert_eq!(read, tally["gen"]);
    }
}

/// Debian's postgres in single-user mode, traced by attaching: its
/// semaphore-guarded USDT probes fire once per query and transaction, and
/// `query__start` carries each query's text. postgres will not run as
/// root, so it runs as the `postgres` user; weft, as root, may attach.
#[test]
fn postgres_probes_count_queries_and_carry_their_text() {
    use std::io::Write;
    let Some(bin_dir) = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("bin"))
        .find(|b| b.join("postgres").exists())
    else {
        skip("postgres missing (bash scripts/install-deps.sh installs it)");
        return;
    };
    let Ok(status) = Command::new("id").arg("postgres").output() else {
        skip("no id command");
        return;
    };
    if !status.status.success() || !have("runuser") {
        skip("no postgres user or no runuser");
        return;
    }
    let dir = scratch("postgres");
    // The postgres user must reach its data directory: not under a home
    // directory it may not enter (CI's checkout), but in /tmp.
    let data = std::env::temp_dir().join(format!("weft-postgres-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).unwrap();
    let as_postgres = |program: &str| {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin_dir.join(program));
        c
    };
    let uid = |user: &str| -> u32 {
        let out = Command::new("id").args(["-u", user]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    std::os::unix::fs::chown(&data, Some(uid("postgres")), None).unwrap();
    let init = run(
        as_postgres("initdb").arg("-D").arg(&data),
        Duration::from_secs(120),
    );
    assert_eq!(init.status, 0, "{}", init.stderr);
    let mut runuser = KillOnDrop(
        as_postgres("postgres")
            .args(["--single", "-D"])
            .arg(&data)
            .arg("postgres")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    // runuser waits for its child, postgres: trace that one.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let postgres: i32 = loop {
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", runuser.0.id()))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            break pid.parse().unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "postgres starts");
        std::thread::sleep(Duration::from_millis(20));
    };
    let events = dir.join("events");
    let mut attached = attach(postgres, |c| {
        c.args(["--trace", "usdt:postgresql:transaction__start"])
            .args(["--trace", "usdt:postgresql:transaction__commit"])
            .args(["--trace", "usdt:postgresql:query__start@arg1/s"])
            .arg("--events-out")
            .arg(&events)
    });
    let mut stdin = runuser.0.stdin.take().unwrap();
    for i in 0..25 {
        writeln!(stdin, "select {i} * 7;").unwrap();
    }
    stdin.flush().unwrap();
    // postgres answers on its own time: wait until its 25 commits are on
    // disk (weft events reads the streams of a trace still running).
    let commits = || {
        lines_with(
            &events_text(&events),
            ":postgresql:transaction__commit probe",
        )
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while commits() < 25 {
        assert!(
            std::time::Instant::now() < deadline,
            "postgres runs the queries"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(attached.detach().success());
    // End of input ends postgres, and runuser with it.
    drop(stdin);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while runuser.0.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "postgres ends at end of input"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = events_text(&events);
    let count = |probe: &str| lines_with(&text, &format!(":postgresql:{probe} probe"));
    assert_eq!(count("transaction__start"), 25, "{text}");
    assert_eq!(count("transaction__commit"), 25);
    for i in 0..25 {
        let query = format!("arg1=\"select {i} * 7;\\n\"");
        assert_eq!(
            text.lines().filter(|l| l.ends_with(&query)).count(),
            1,
            "{query} in {text}"
        );
    }
    let _ = std::fs::remove_dir_all(&data);
}
