//! A target that prints "ready", then waits for a line on stdin.

use super::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;

/// A target started in a session of its own (so in another process group
/// than weft's), waiting for a line on stdin after printing "ready".
pub struct Waiting {
    pub child: KillOnDrop,
    out: BufReader<std::process::ChildStdout>,
}

impl Waiting {
    pub fn start(bin: &std::path::Path, args: &[&str]) -> Waiting {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .process_group(0);
        let mut child = KillOnDrop(cmd.spawn().expect("spawn the target"));
        let mut out = BufReader::new(child.0.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        Waiting { child, out }
    }

    pub fn pid(&self) -> String {
        self.child.0.id().to_string()
    }

    /// `weft attach` for 100 ms, counting `pattern`.
    pub fn attach_counting(&self, pattern: &str) -> Finished {
        let pid = self.pid();
        let args = [
            "attach",
            "-p",
            &pid,
            "--duration",
            "100ms",
            "--count",
            pattern,
        ];
        run(weft().args(args), Duration::from_secs(30))
    }

    /// Sends `line` to the target, then reads its output up to and
    /// including a line that starts with `until`.
    pub fn say(&mut self, line: &str, until: &str) -> String {
        let stdin = self.child.0.stdin.as_mut().unwrap();
        stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
        stdin.flush().unwrap();
        let mut said = String::new();
        loop {
            let mut l = String::new();
            if self.out.read_line(&mut l).unwrap() == 0 {
                panic!("the target ended before {until:?}: {said}");
            }
            said.push_str(&l);
            if l.starts_with(until) {
                return said;
            }
        }
    }

    /// Lets the target finish (a last line, unless it stopped reading);
    /// its output and exit status.
    pub fn finish(mut self) -> (String, Option<i32>) {
        // A target that read its last line already may have closed stdin.
        let _ = self.child.0.stdin.take().unwrap().write_all(b"go\n");
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut self.out, &mut rest).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(st) = self.child.0.try_wait().unwrap() {
                break st;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the target did not finish"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        (rest, status.code())
    }
}
