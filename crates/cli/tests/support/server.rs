//! The server target (tests/targets/server.c) driven line by line, for
//! the tests that attach to a running process.

use super::*;
use std::process::{Command, Stdio};
use std::time::Duration;

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
