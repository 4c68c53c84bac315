//! Test support: running commands with bounded waits, reading tallies
//! and JSON, attaching weft to a process and detaching it. Building
//! targets per variant is in `variants`; the openings of the counting,
//! tracing and metrics tests (run weft, read what it wrote) in `counts`,
//! `events` and `metrics`; the server target's driver in `server`; a
//! target waiting for a line on stdin in `waiting`.

mod counts;
mod events;
mod metrics;
mod server;
mod variants;
mod waiting;

pub use counts::*;
pub use events::*;
pub use metrics::*;
pub use server::*;
pub(crate) use variants::variant_test;
pub use variants::*;
pub use waiting::*;

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

/// A hexadecimal number as weft and binutils print them, with or without
/// `0x`; None if it is not one.
pub fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// Checks that weft refused with exit status `code` and one clear line,
/// `weft: ...` saying `want` (and no panic); `context` names the case.
pub fn assert_clear_error(out: &Finished, code: i32, want: &str, context: &str) {
    assert_eq!(out.status, code, "{context}: {}", out.stderr);
    assert!(
        !out.stderr.contains("panicked"),
        "{context}: {}",
        out.stderr
    );
    assert!(
        out.stderr.starts_with("weft: ") && out.stderr.contains(want),
        "{context}: {}",
        out.stderr
    );
}

/// Reads and parses a JSON file weft wrote.
pub fn read_json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
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

pub use weft_process::stolen_ns;

/// Skips a test loudly: says why on stderr (`SKIPPED: WHY`), and fails the
/// test instead when the environment variable `WEFT_CI` is set and not
/// empty (CI installs every tool, so there a skip means a test did not
/// run). Every test that cannot run for a missing tool or permission comes
/// through here, then returns.
pub fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
    if std::env::var_os("WEFT_CI").is_some_and(|v| !v.is_empty()) {
        panic!("WEFT_CI is set, so a skip is a failure: {why}");
    }
}

/// The target's memory map and the bytes of every executable mapping.
pub fn maps_and_text(pid: &str) -> TextOf {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut text = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (range, perms) = (fields.next().unwrap(), fields.next().unwrap());
        if !perms.contains('x') || line.ends_with("[vsyscall]") {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let mut bytes = vec![0u8; (end - start) as usize];
        mem.seek(SeekFrom::Start(start)).unwrap();
        mem.read_exact(&mut bytes).unwrap();
        text.push((line.to_string(), bytes));
    }
    (maps, text)
}

/// Asserts that every executable mapping of `before` is still there in
/// `after`, holding the same bytes (both from [`maps_and_text`]); a
/// mapping weft left (its own memory) may come in between. `context`
/// starts the message.
pub fn assert_same_code(before: &TextOf, after: &TextOf, context: &str) {
    for (range, old) in &before.1 {
        let new = after
            .1
            .iter()
            .find(|(r, _)| r == range)
            .map(|(_, bytes)| bytes)
            .unwrap_or_else(|| panic!("{context}: the mapping {range} is gone"));
        assert!(old == new, "{context}: code changed in {range}");
    }
}

/// What [`maps_and_text`] returns.
pub type TextOf = (String, Vec<(String, Vec<u8>)>);

/// The exit code of `child` once it has ended, waiting at most `limit`
/// (`None` if it has not ended by then, or was killed by a signal).
pub fn wait_bounded(child: &mut std::process::Child, limit: Duration) -> Option<i32> {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
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

/// weft attached to a process (`weft attach -p PID --verbose ...`), killed
/// by pid when dropped if it has not finished.
pub struct Attached {
    pub weft: KillOnDrop,
    /// weft's stderr lines after the one saying it attached.
    pub stderr: std::sync::mpsc::Receiver<String>,
}

/// Starts `weft attach -p PID --verbose` with the arguments `more` adds
/// (requests, outputs), and waits (at most 30 s) until it has attached.
pub fn attach(
    pid: impl std::fmt::Display,
    more: impl FnOnce(&mut Command) -> &mut Command,
) -> Attached {
    let mut cmd = weft();
    cmd.args(["attach", "-p", &pid.to_string(), "--verbose"]);
    more(&mut cmd);
    let mut weft = KillOnDrop(cmd.stderr(Stdio::piped()).spawn().expect("weft starts"));
    let stderr = wait_attached(&mut weft.0);
    Attached { weft, stderr }
}

impl Attached {
    /// Detaches (SIGINT to weft's pid) and waits at most 30 s; returns
    /// weft's exit status.
    pub fn detach(&mut self) -> std::process::ExitStatus {
        interrupt(&mut self.weft.0)
    }
}
