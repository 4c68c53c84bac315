//! Real programs from Debian: their output is unchanged under weft, and a
//! library function's count equals gdb's breakpoint hit count for the same run.

use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// gdb's hit count of a breakpoint on `function` over a whole run.
fn gdb_hits(function: &str, program: &str, args: &[&str]) -> u64 {
    let dir = scratch(&format!("gdb-{function}"));
    let script = dir.join("count.gdb");
    std::fs::write(
        &script,
        format!(
            "set pagination off\nset confirm off\nset breakpoint pending on\nbreak {function}\ncommands 1\nsilent\ncontinue\nend\nrun\ninfo breakpoints\n"
        ),
    )
    .unwrap();
    let out = run(
        Command::new("gdb")
            .args(["-nx", "-batch", "-x"])
            .arg(&script)
            .arg("--args")
            .arg(program)
            .args(args),
        Duration::from_secs(300),
    );
    out.stdout
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("breakpoint already hit ")
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or_else(|| panic!("no hit count from gdb:\n{}\n{}", out.stdout, out.stderr))
}

fn compare(program: &str, args: &[&str], pattern: &str, gdb_name: &str, name: &str) {
    let plain = run(Command::new(program).args(args), Duration::from_secs(120));
    let dir = scratch(&format!("real-{name}"));
    let json = dir.join("counts.json");
    let with = run(
        weft()
            .args(["run", "--count", pattern, "--format", "json", "--output"])
            .arg(&json)
            .arg("--")
            .arg(program)
            .args(args),
        Duration::from_secs(120),
    );
    assert_eq!(with.status, plain.status, "{}", with.stderr);
    assert_eq!(with.stdout, plain.stdout, "output changed under weft");
    let counted = count_of(&read_counts(&json), gdb_name, "entry");
    let hits = gdb_hits(gdb_name, program, args);
    assert!(hits > 0, "the workload must call {gdb_name}");
    assert_eq!(counted, hits, "weft vs gdb for {pattern}");
}

#[test]
fn sqlite3_script_step_count_matches_gdb() {
    if !have("sqlite3") || !have("gdb") {
        skip("sqlite3 or gdb missing (bash scripts/install-deps.sh installs them)");
        return;
    }
    let dir = scratch("sqlite-script");
    let sql = dir.join("script.sql");
    std::fs::write(
        &sql,
        "create table t(a integer, b text);\n\
         with recursive n(x) as (select 1 union all select x + 1 from n where x < 500) insert into t select x, 'row' || x from n;\n\
         select count(*), sum(a) from t;\n\
         select b from t where a % 97 = 0;\n\
         create index ta on t(a);\n\
         select max(a) from t where a < 250;\n",
    )
    .unwrap();
    let read = format!(".read {}", sql.display());
    compare(
        "sqlite3",
        &[":memory:", &read],
        "libsqlite3.so.0:sqlite3_step",
        "sqlite3_step",
        "sqlite3",
    );
}

#[test]
fn python3_getpid_count_matches_gdb() {
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() || !have("gdb") {
        skip("Debian's python3 or gdb missing (bash scripts/install-deps.sh installs them)");
        return;
    }
    compare(
        python,
        &[
            "-c",
            "import os\nfor _ in range(300): os.getpid()\nprint('ok', sum(range(1000)))",
        ],
        "libc.so.6:getpid",
        "getpid",
        "python3",
    );
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
    let mut w = KillOnDrop(
        weft()
            .args(["attach", "-p", &postgres.to_string(), "--verbose"])
            .args(["--trace", "usdt:postgresql:transaction__start"])
            .args(["--trace", "usdt:postgresql:transaction__commit"])
            .args(["--trace", "usdt:postgresql:query__start@arg1/s"])
            .arg("--events-out")
            .arg(&events)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let _stderr = wait_attached(&mut w.0);
    let mut stdin = runuser.0.stdin.take().unwrap();
    for i in 0..25 {
        writeln!(stdin, "select {i} * 7;").unwrap();
    }
    stdin.flush().unwrap();
    // postgres answers on its own time: wait until its 25 commits are on
    // disk (weft events reads the streams of a trace still running).
    let commits = || {
        run(weft().arg("events").arg(&events), Duration::from_secs(30))
            .stdout
            .lines()
            .filter(|l| l.contains(":postgresql:transaction__commit probe"))
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while commits() < 25 {
        assert!(
            std::time::Instant::now() < deadline,
            "postgres runs the queries"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(interrupt(&mut w.0).success());
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
    let text = run(weft().arg("events").arg(&events), Duration::from_secs(30)).stdout;
    let count = |probe: &str| {
        text.lines()
            .filter(|l| l.contains(&format!(":postgresql:{probe} probe")))
            .count()
    };
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
