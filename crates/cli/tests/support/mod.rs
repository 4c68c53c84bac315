//! Test support: running commands with bounded waits, reading tallies
//! and weft's JSON; building targets per variant is in `variants`.

mod variants;

pub(crate) use variants::variant_test;
pub use variants::*;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The weft binary under test.
pub fn weft() -> Command {
    Command::new(env!("CARGO_BIN_EXE_weft"))
}

/// A scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("scratch")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The result of a finished command.
#[derive(Debug)]
pub struct Finished {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a command to completion, killing it (by pid) after `limit`.
pub fn run(cmd: &mut Command, limit: Duration) -> Finished {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let t_out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let t_err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("command timed out after {limit:?}: {cmd:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Finished {
        status: code,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

/// "tally NAME COUNT" lines of a target's output.
pub fn tallies(stdout: &str) -> BTreeMap<String, u64> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next()? == "tally").then_some(())?;
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect()
}

/// One row of weft's JSON counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CountRow {
    pub module: String,
    pub function: String,
    pub point: String,
    pub calls: u64,
}

/// Reads `{"counts": [...]}`.
pub fn read_counts(path: &Path) -> Vec<CountRow> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| CountRow {
            module: r["module"].as_str().unwrap().into(),
            function: r["function"].as_str().unwrap().into(),
            point: r["point"].as_str().unwrap().into(),
            calls: r["calls"].as_u64().unwrap(),
        })
        .collect()
}

/// The count of `function` at `point` ("entry", "exit", "instruction"), summed over modules.
pub fn count_of(rows: &[CountRow], function: &str, point: &str) -> u64 {
    let matching: Vec<&CountRow> = rows
        .iter()
        .filter(|r| r.function == function && r.point == point)
        .collect();
    assert!(
        !matching.is_empty(),
        "no count for {function} ({point}) in {rows:?}"
    );
    matching.iter().map(|r| r.calls).sum()
}

/// A child process killed (by pid) and reaped when dropped.
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether a program is on PATH.
pub fn have(program: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {program}"))
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Skips a test loudly: says why on stderr (`SKIPPED: WHY`), and fails the
/// test instead when the environment variable `WEFT_CI` is set (CI installs
/// every tool, so there a skip means a test did not run). Every test that
/// cannot run for a missing tool or permission comes through here, then
/// returns.
pub fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
    if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
        panic!("WEFT_CI is set, so a skip is a failure: {why}");
    }
}

/// Waits (at most 30 s) until weft, started with `attach --verbose` and a
/// piped stderr, says it has attached; returns its further stderr lines.
pub fn wait_attached(weft: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = weft.stderr.take().expect("weft's stderr piped");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    loop {
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("weft attaches within 30 s");
        if line.contains("attached to") {
            return rx;
        }
    }
}

/// Asks weft to detach and finish (SIGINT, sent to its pid) and waits for
/// it, at most 30 s; returns its exit status.
pub fn interrupt(weft: &mut std::process::Child) -> std::process::ExitStatus {
    // SAFETY: kill with weft's own pid.
    unsafe { libc::kill(weft.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = weft.try_wait().expect("weft's status") {
            return status;
        }
        assert!(Instant::now() < deadline, "weft detaches within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The server target (tests/targets/server.c), driven line by line;
/// killed by pid when dropped.
pub struct Server {
    child: KillOnDrop,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Server {
    pub fn start() -> Server {
        let bin = build("server", &O2);
        let mut child = Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in
                std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut s = Server {
            child: KillOnDrop(child),
            stdin,
            lines,
        };
        assert_eq!(s.line(), "ready");
        s
    }

    pub fn pid(&self) -> i32 {
        self.child.0.id() as i32
    }

    pub fn send(&mut self, cmd: &str) {
        use std::io::Write;
        writeln!(self.stdin, "{cmd}").unwrap();
        self.stdin.flush().unwrap();
    }

    pub fn line(&mut self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(30))
            .expect("the server answers within 30 s")
    }
}
