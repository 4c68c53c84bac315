//! Where a replay's paths go: a sandbox directory that holds a copy of
//! the files the workload found in place (those whose first use in the
//! record read them and succeeded), laid out under their own paths, so
//! the replay reads what the workload read and writes nowhere else.
//! `/dev`, `/proc` and `/sys` are the machine's own. Relative paths were
//! relative to the directory the workload started in, which the record
//! does not hold: the replay takes its own current directory for it.

use crate::Error;
use std::path::{Path, PathBuf};
use weft_syscalls::fds::{Access, Kind, Resources};
use weft_syscalls::Call;

/// Paths no sandbox copies: the machine's devices and kernel files.
const PASS_THROUGH: [&str; 3] = ["/dev", "/proc", "/sys"];

/// A replay's sandbox.
#[derive(Debug)]
pub struct Sandbox {
    /// Its root.
    pub root: PathBuf,
    /// The directory the workload started in, as the replay assumes it.
    pub start: PathBuf,
    /// weft made it (and removes it when done).
    made: bool,
}

/// A path the workload needs in place, and the first call that used it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Needed {
    /// As the record resolved it (absolute, or `./` relative to where the
    /// workload started).
    pub path: String,
    /// The call (an index).
    pub call: usize,
    /// The record proves it was there (else: a directory holding a path
    /// the workload used, made when this machine has it, never checked).
    pub required: bool,
}

/// The files `calls` found in place: each file resource whose first
/// operation reads it and found it (a `stat`, an `open` without
/// `O_CREAT`, a `readlink` that said it is no link: any answer but
/// `ENOENT` and `ENOTDIR`), but for the machine's own (`/dev`, `/proc`,
/// `/sys`).
pub fn needed(calls: &[Call], resources: &Resources) -> Vec<Needed> {
    let mut seen = vec![false; resources.resources.len()];
    let mut out = Vec::new();
    for op in &resources.ops {
        if std::mem::replace(&mut seen[op.resource], true) {
            continue;
        }
        let r = &resources.resources[op.resource];
        // ENOENT, ENOTDIR: the path was not there.
        let ok = calls[op.call]
            .exit
            .is_some_and(|e| e.result >= 0 || !matches!(e.result, -2 | -20));
        if r.kind == Kind::File && op.access == Access::Read && ok && !passes_through(&r.name) {
            out.push(Needed {
                path: r.name.clone(),
                call: op.call,
                required: true,
            });
        }
    }
    // The directories holding the paths the workload used, but for those
    // it made itself (a `mkdir` there would fail).
    let made: std::collections::HashSet<&str> = resources
        .ops
        .iter()
        .filter(|o| matches!(calls[o.call].nr, 83 | 258) && o.access == Access::Write)
        .filter(|o| calls[o.call].exit.is_some_and(|e| e.result == 0))
        .map(|o| resources.resources[o.resource].name.as_str())
        .collect();
    let mut holders: Vec<Needed> = Vec::new();
    for op in &resources.ops {
        let r = &resources.resources[op.resource];
        let Some((dir, _)) = r.name.rsplit_once('/') else {
            continue;
        };
        let dir = if dir.is_empty() { "/" } else { dir };
        if r.kind != Kind::File || made.contains(dir) || passes_through(dir) {
            continue;
        }
        if !holders.iter().any(|h| h.path == dir) && !out.iter().any(|n| n.path == dir) {
            holders.push(Needed {
                path: dir.to_string(),
                call: op.call,
                required: false,
            });
        }
    }
    out.extend(holders);
    out
}

fn passes_through(path: &str) -> bool {
    PASS_THROUGH
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|r| r.starts_with('/')))
}

impl Sandbox {
    /// A new sandbox under the system's temporary directory holding a
    /// copy of each `needed` file (directories made, not filled), with
    /// `start` as the workload's starting directory; and the needed files
    /// this machine no longer has.
    pub fn make(needed: &[Needed], start: &Path) -> Result<(Sandbox, Vec<Needed>), Error> {
        let base = std::env::temp_dir().join(format!("weft-replay-{}", std::process::id()));
        let io = |what: String| move |source| Error::Io { what, source };
        std::fs::create_dir_all(&base)
            .map_err(io(format!("making the sandbox {}", base.display())))?;
        let sandbox = Sandbox {
            root: base,
            start: start.to_path_buf(),
            made: true,
        };
        std::fs::create_dir_all(sandbox.start_dir())
            .map_err(io("making the sandbox's starting directory".into()))?;
        let mut missing = Vec::new();
        for n in needed {
            let real = sandbox.real(&n.path);
            // A directory holding a path the workload used: only made.
            if !n.required && !real.is_dir() {
                continue;
            }
            if std::fs::symlink_metadata(&real).is_err() {
                if n.required {
                    missing.push(n.clone());
                }
                continue;
            }
            sandbox
                .copy_in(&real, 8)
                .map_err(io(format!("copying {} into the sandbox", n.path)))?;
        }
        Ok((sandbox, missing))
    }

    /// Copies `real` (a file, a directory made empty, a symbolic link as
    /// a link, and what it points to, up to `links` links deep) to its
    /// place in the sandbox, unless it is there already.
    fn copy_in(&self, real: &Path, links: u32) -> std::io::Result<()> {
        let copy = self.inside(&real.to_string_lossy());
        let Ok(meta) = std::fs::symlink_metadata(real) else {
            return Ok(()); // gone since: the replay will say where it differs
        };
        if std::fs::symlink_metadata(&copy).is_ok() {
            return Ok(());
        }
        // Its directories first, as they are: a directory reached through
        // a symbolic link is a link in the sandbox too.
        if let Some(parent) = real.parent().filter(|p| *p != Path::new("/")) {
            self.copy_in(parent, links)?;
        }
        if let Some(parent) = copy.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Through a directory that is a link, it may be there now.
        if std::fs::symlink_metadata(&copy).is_ok() {
            return Ok(());
        }
        if meta.is_dir() {
            std::fs::create_dir(&copy)?;
        } else if meta.is_file() {
            std::fs::copy(real, &copy)?;
        } else if meta.file_type().is_symlink() {
            let target = std::fs::read_link(real)?;
            std::os::unix::fs::symlink(&target, &copy)?;
            let pointed = real.parent().unwrap_or(Path::new("/")).join(&target);
            if links > 0 && !passes_through(&pointed.to_string_lossy()) {
                self.copy_in(&pointed, links - 1)?;
            }
        }
        Ok(())
    }

    /// The sandbox at `root`, which must hold every `needed` file.
    pub fn given(
        root: &Path,
        needed: &[Needed],
        start: &Path,
        describe: &dyn Fn(usize) -> String,
    ) -> Result<Sandbox, Error> {
        let sandbox = Sandbox {
            root: root.to_path_buf(),
            start: start.to_path_buf(),
            made: false,
        };
        if !root.is_dir() {
            return Err(Error::NotADirectory(root.display().to_string()));
        }
        for n in needed.iter().filter(|n| n.required) {
            if std::fs::symlink_metadata(sandbox.inside(&n.path)).is_err() {
                return Err(Error::MissingFile {
                    root: root.display().to_string(),
                    path: sandbox.real(&n.path).display().to_string(),
                    call: describe(n.call),
                });
            }
        }
        Ok(sandbox)
    }

    /// How the replay maps paths into it.
    pub fn paths(&self) -> Paths {
        Paths {
            root: self.root.clone(),
        }
    }

    /// Where the replay starts: the starting directory inside the root.
    pub fn start_dir(&self) -> PathBuf {
        self.inside(&self.start.to_string_lossy())
    }

    /// A recorded path as it is on this machine.
    fn real(&self, path: &str) -> PathBuf {
        match path.strip_prefix("./") {
            Some(rel) => self.start.join(rel),
            None if path == "." => self.start.clone(),
            None => PathBuf::from(path),
        }
    }

    /// A recorded path inside the sandbox.
    fn inside(&self, path: &str) -> PathBuf {
        let real = self.real(path);
        let rel = real.strip_prefix("/").unwrap_or(&real);
        self.root.join(rel)
    }
}

/// How a replay maps the paths the program passed into its sandbox.
#[derive(Debug, Clone)]
pub struct Paths {
    root: PathBuf,
}

impl Paths {
    /// Paths into `root`.
    #[cfg(test)]
    pub(crate) fn for_tests(root: &Path) -> Paths {
        Paths {
            root: root.to_path_buf(),
        }
    }

    /// A path as the program passed it, for the replay: an absolute one
    /// moved into the sandbox (but for `/dev`, `/proc`, `/sys`); a
    /// relative one as it is (the replay runs in [`Sandbox::start_dir`]).
    pub fn map(&self, path: &[u8]) -> Vec<u8> {
        let text = String::from_utf8_lossy(path);
        if !path.starts_with(b"/") || passes_through(&text) {
            return path.to_vec();
        }
        let mut out = self.root.as_os_str().as_encoded_bytes().to_vec();
        out.extend_from_slice(path);
        out
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        if self.made {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_paths_move_in_and_devices_stay() {
        let s = Sandbox {
            root: PathBuf::from("/tmp/box"),
            start: PathBuf::from("/home/u"),
            made: false,
        };
        let p = s.paths();
        assert_eq!(p.map(b"/etc/passwd"), b"/tmp/box/etc/passwd");
        assert_eq!(p.map(b"/dev/null"), b"/dev/null");
        assert_eq!(p.map(b"/device"), b"/tmp/box/device");
        assert_eq!(p.map(b"data/x"), b"data/x");
        assert_eq!(s.start_dir(), PathBuf::from("/tmp/box/home/u"));
        assert_eq!(s.inside("./a/b"), PathBuf::from("/tmp/box/home/u/a/b"));
        assert_eq!(s.real("./a"), PathBuf::from("/home/u/a"));
    }
}
