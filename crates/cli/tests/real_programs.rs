//! Real programs from Debian: their output is unchanged under weft, and a
//! library function's count equals gdb's breakpoint hit count for the same run.

use crate::support::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// gdb's hit count of a breakpoint on `function` over a whole run.
fn gdb_hits(function: &str, program: &str, args: &[&str]) -> u64 {
    gdb_count(
        &format!("gdb-{function}"),
        &format!(
            "set pagination off\nset confirm off\nset breakpoint pending on\nbreak {function}\ncommands 1\nsilent\ncontinue\nend\nrun\ninfo breakpoints\n"
        ),
        program,
        args,
    )
}

/// Runs `program` under gdb with `script` (written to scratch directory
/// `name`), at most 300 s, and returns the hit count `info breakpoints`
/// reports.
fn gdb_count(name: &str, script: &str, program: &str, args: &[&str]) -> u64 {
    let path = scratch(name).join("count.gdb");
    std::fs::write(&path, script).unwrap();
    let out = run(
        Command::new("gdb")
            .args(["-nx", "-batch", "-x"])
            .arg(&path)
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
    let counted = count_run(
        &format!("real-{name}"),
        &["--count", pattern],
        program,
        args,
        Duration::from_secs(120),
    );
    let with = &counted.out;
    assert_eq!(with.status, plain.status, "{}", with.stderr);
    assert_eq!(with.stdout, plain.stdout, "output changed under weft");
    let counted = counted.count(gdb_name, "entry");
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

/// python3 sleeping in `clock_nanosleep` between loop turns, attached twice
/// while it runs: the thread weft borrows for its remote system calls is
/// often blocked in that call, and the call must restart as the kernel
/// would restart it (no `OSError: [Errno 514]` leaking to the program).
#[test]
fn python3_sleeping_survives_attach_cycles() {
    let python = "/usr/bin/python3";
    if !Path::new(python).exists() {
        skip("Debian's python3 missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    // It loops until a line arrives on stdin (sent once weft is done).
    let script = "import sys, threading, time\n\
                  done = threading.Event()\n\
                  threading.Thread(target=lambda: (sys.stdin.readline(), done.set())).start()\n\
                  i = 0\n\
                  while not done.is_set():\n    sum(range(5000)); time.sleep(0.01); i += 1\n\
                  print('done', i > 0)\n";
    let mut child = KillOnDrop(
        std::process::Command::new(python)
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn python3"),
    );
    std::thread::sleep(Duration::from_millis(300));
    let pid = child.0.id().to_string();
    for pattern in ["libc.so.6:*", "python3*:*"] {
        let out = run(
            weft().args([
                "attach",
                "-p",
                &pid,
                "--duration",
                "0.1",
                "--count",
                pattern,
            ]),
            // Thousands of points by a debug build on a loaded machine.
            Duration::from_secs(240),
        );
        assert_eq!(out.status, 0, "{pattern}: {}", out.stderr);
    }
    std::io::Write::write_all(&mut child.0.stdin.take().unwrap(), b"stop\n").unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(st) = child.0.try_wait().unwrap() {
            break st;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "python3 did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut out = String::new();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.0.stdout.take().unwrap(), &mut out).unwrap();
    std::io::Read::read_to_string(&mut child.0.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(
        (status.code(), out.as_str()),
        (Some(0), "done True\n"),
        "{err}"
    );
}

/// The file offset in `libc` of the implementation IFUNC `symbol` leads to
/// on this machine, as `weft inspect functions` shows it.
fn ifunc_implementation(libc: &str, symbol: &str) -> u64 {
    let list = |pattern: &str| {
        let out = run(
            weft().args(["inspect", "functions", libc, pattern]),
            Duration::from_secs(60),
        );
        assert_eq!(out.status, 0, "{}", out.stderr);
        out.stdout
    };
    let listed = list(symbol);
    let chosen = listed
        .split_once(&format!(" {symbol} [ifunc -> "))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(name, _)| name.to_string())
        .unwrap_or_else(|| panic!("{symbol} is no IFUNC leading somewhere:\n{listed}"));
    list(&chosen)
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some(chosen.as_str()))
        .and_then(|l| hex(l.split_whitespace().next()?))
        .unwrap_or_else(|| panic!("no address for {chosen}"))
}

/// gdb's hit count of a breakpoint at `offset` in libc.so.6, set when libc
/// is loaded and enabled from the program's entry point (where `weft run`
/// starts counting) to its exit. gdb's own LINES and COLUMNS are kept out
/// of the program's environment (python3 calls strlen once per variable).
fn gdb_hits_in_libc(offset: u64, program: &str, args: &[&str]) -> u64 {
    let script =
        format!(
            "set pagination off\nset confirm off\n\
             unset environment LINES\nunset environment COLUMNS\n\
             catch load libc.so.6\nrun\ndelete 1\n\
             python\n\
             maps = gdb.execute('info proc mappings', to_string=True).splitlines()\n\
             base = min(int(l.split()[0], 16) for l in maps if l.rstrip().endswith('libc.so.6') and int(l.split()[3], 16) == 0)\n\
             gdb.execute('break *%d' % (base + {offset}))\n\
             gdb.execute('disable 2')\n\
             entry = [l for l in gdb.execute('info files', to_string=True).splitlines() if 'Entry point' in l][0].split()[-1]\n\
             gdb.execute('tbreak *' + entry)\n\
             end\n\
             continue\nenable 2\nignore 2 1000000000\ncontinue\ninfo breakpoints\n"
        );
    gdb_count(&format!("gdb-libc-{offset:x}"), &script, program, args)
}

/// `strlen`, `memcpy` and `strcmp` (IFUNCs in glibc) counted in Debian's
/// python3.11, in the weft test target, and by gdb at the implementation
/// the IFUNC leads to (calls from the program and from inside libc alike):
/// the same numbers.
#[test]
fn ifunc_counts_match_gdb_at_the_chosen_implementation() {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let python = "/usr/bin/python3.11";
    if !have("gdb") || !Path::new(python).exists() || !Path::new(libc).exists() {
        skip(
            "gdb, Debian's python3.11 or libc.so.6 missing (scripts/install-deps.sh installs them)",
        );
        return;
    }
    let target = build("ifunc", &O2);
    let target = target.to_str().unwrap();
    let workloads: [(&str, &[&str]); 2] = [
        (target, &["2000"]),
        (
            python,
            &[
                "-c",
                "import os\nprint(sum(len(os.path.join('a', str(i))) for i in range(200)))",
            ],
        ),
    ];
    for (program, args) in workloads {
        for symbol in ["strlen", "memcpy", "strcmp"] {
            let counted = count_run(
                &format!("ifunc-gdb-{symbol}"),
                &["--count", &format!("libc.so.6:{symbol}")],
                program,
                args,
                Duration::from_secs(120),
            );
            assert_eq!(counted.out.status, 0, "{}", counted.out.stderr);
            let weft = counted.count(symbol, "entry");
            let gdb = gdb_hits_in_libc(ifunc_implementation(libc, symbol), program, args);
            assert!(gdb > 0, "{program}: the workload must call {symbol}");
            assert_eq!(weft, gdb, "{program}: {symbol}, weft vs gdb");
        }
    }
}
