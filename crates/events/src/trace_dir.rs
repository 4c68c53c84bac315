//! The events directory weft writes (`--events-out DIR`): whether weft may
//! write there, and weft's own names in it. A missing DIR is created
//! (0700); an empty directory of weft's user is used; a symbolic link, a
//! file, another user's directory and a directory holding anything but
//! weft's files are refused; an earlier weft trace is refused unless
//! `--force` is given, and then only weft's own files are removed. This
//! module also creates the flight-mode dumps `DIR/dump-N`.

use crate::files::{euid, io, kind, SafeDir, TEMP_PREFIX};
use crate::{Error, Refusal, Result};
use rustix::fs::{FileType, Mode};
use rustix::io::Errno;
use std::path::Path;

/// The files weft writes at the top of an events directory
/// (`command.json`: the command `weft syscalls record` started, its
/// directory and environment).
const TOP_FILES: [&str; 4] = ["meta.json", "events.jsonl", "trace.json", "command.json"];

/// Whether `name` is one of weft's CTF stream files: `stream_TID`.
pub(crate) fn is_stream(name: &str) -> bool {
    name.strip_prefix("stream_")
        .is_some_and(|tid| !tid.is_empty() && tid.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether `name` is a flight-mode dump: `dump-N`.
fn is_dump(name: &str) -> bool {
    name.strip_prefix("dump-")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// An events directory being written: `DIR` and `DIR/ctf`, both opened
/// without following links.
#[derive(Debug)]
pub struct TraceDir {
    root: SafeDir,
    ctf: SafeDir,
}

/// One of weft's entries in an earlier trace, to remove with `--force`.
#[derive(Debug)]
enum Own {
    /// A file at the top (or a temporary file).
    File(String),
    /// `ctf/` and the files in it.
    Ctf(Vec<String>),
    /// `dump-N/` and what it holds.
    Dump(String, Vec<Own>),
}

/// What an existing directory holds.
#[derive(Debug)]
enum Holds {
    Nothing,
    /// A weft trace: these entries.
    Weft(Vec<Own>),
    /// Something that is not weft's: one such entry.
    Other(String),
}

/// Looks at what `dir` holds; `top` allows dumps (not inside a dump).
fn survey(dir: &SafeDir, top: bool, euid: u32) -> std::io::Result<Holds> {
    let names = dir.names()?;
    let mut own = Vec::new();
    let mut trace = false;
    for name in &names {
        let Some(st) = dir.entry(name)? else {
            continue; // gone meanwhile
        };
        let ty = kind(&st);
        let mine = st.st_uid == euid;
        if ty == FileType::RegularFile
            && (TOP_FILES.contains(&name.as_str()) || name.starts_with(TEMP_PREFIX))
        {
            trace |= name == "meta.json";
            own.push(Own::File(name.clone()));
        } else if name == "ctf" && ty == FileType::Directory && mine {
            let ctf = dir.open_dir(name)?;
            let files = ctf.names()?;
            for file in &files {
                let regular = ctf
                    .entry(file)?
                    .is_none_or(|st| kind(&st) == FileType::RegularFile);
                let weft = file == "metadata" || is_stream(file) || file.starts_with(TEMP_PREFIX);
                if !(regular && weft) {
                    return Ok(Holds::Other(format!("ctf/{file}")));
                }
            }
            trace = true;
            own.push(Own::Ctf(files));
        } else if top && is_dump(name) && ty == FileType::Directory && mine {
            match survey(&dir.open_dir(name)?, false, euid)? {
                Holds::Nothing => own.push(Own::Dump(name.clone(), Vec::new())),
                Holds::Weft(inner) => own.push(Own::Dump(name.clone(), inner)),
                Holds::Other(entry) => return Ok(Holds::Other(format!("{name}/{entry}"))),
            }
        } else {
            return Ok(Holds::Other(name.clone()));
        }
    }
    Ok(match names.first() {
        None => Holds::Nothing,
        Some(_) if trace => Holds::Weft(own),
        Some(first) => Holds::Other(first.clone()),
    })
}

/// Removes weft's entries `own` from `dir` (those already gone are fine).
fn remove(dir: &SafeDir, own: &[Own]) -> std::io::Result<()> {
    let gone_ok = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        r => r,
    };
    for entry in own {
        match entry {
            Own::File(name) => gone_ok(dir.remove_file(name))?,
            Own::Ctf(files) => {
                let ctf = dir.open_dir("ctf")?;
                for file in files {
                    gone_ok(ctf.remove_file(file))?;
                }
                gone_ok(dir.remove_dir("ctf"))?;
            }
            Own::Dump(name, inner) => {
                remove(&dir.open_dir(name)?, inner)?;
                gone_ok(dir.remove_dir(name))?;
            }
        }
    }
    Ok(())
}

impl TraceDir {
    /// Opens `path` to write a trace into, creating it if missing (its
    /// parents as they come, the directory itself 0700), and refusing it
    /// if it is a symbolic link, not a directory, another user's, or holds
    /// anything but an earlier weft trace, which `force` allows and
    /// removes (only weft's files).
    pub fn prepare(path: &Path, force: bool) -> Result<TraceDir> {
        let refuse = |why| Error::Refused {
            what: "events directory",
            path: path.to_path_buf(),
            why,
        };
        let err = |doing: &str| io(format!("{doing} {}", path.display()));
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(err("creating the parents of"))?;
        }
        let (parent, name) = SafeDir::parent_of(path).map_err(err("opening the parent of"))?;
        match parent.entry(name).map_err(err("looking at"))? {
            None => match rustix::fs::mkdirat(&parent, name, Mode::RWXU) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(err("creating")(e.into())),
            },
            Some(st) if kind(&st) == FileType::Symlink => {
                return Err(refuse(Refusal::SymbolicLink))
            }
            Some(st) if kind(&st) != FileType::Directory => {
                return Err(refuse(Refusal::NotADirectory))
            }
            Some(_) => {}
        }
        let root = match parent.open_dir(name) {
            Ok(dir) => dir.named(path),
            // Replaced meanwhile (a link opened with O_NOFOLLOW | O_DIRECTORY
            // gives ENOTDIR): say what it is now.
            Err(e) => {
                return Err(match parent.entry(name) {
                    Ok(Some(st)) if kind(&st) == FileType::Symlink => refuse(Refusal::SymbolicLink),
                    Ok(Some(st)) if kind(&st) != FileType::Directory => {
                        refuse(Refusal::NotADirectory)
                    }
                    _ => err("opening")(e),
                })
            }
        };
        let euid = euid();
        let owner = root.stat().map_err(err("looking at"))?.st_uid;
        if owner != euid {
            return Err(refuse(Refusal::OtherOwner { owner, euid }));
        }
        match survey(&root, true, euid).map_err(err("reading"))? {
            Holds::Nothing => {}
            Holds::Weft(own) if force => {
                remove(&root, &own).map_err(err("removing the earlier trace in"))?
            }
            Holds::Weft(_) => return Err(refuse(Refusal::EarlierTrace)),
            Holds::Other(entry) => return Err(refuse(Refusal::NotWeft { entry })),
        }
        TraceDir::with_ctf(root)
    }

    /// `root` with a new `ctf/` in it.
    fn with_ctf(root: SafeDir) -> Result<TraceDir> {
        let ctf = root
            .make_dir("ctf")
            .map_err(io(format!("creating {}", root.join("ctf").display())))?;
        Ok(TraceDir { root, ctf })
    }

    /// Creates the flight-mode dump `DIR/dump-N`, a new events directory.
    pub fn dump(&self, n: u32) -> Result<TraceDir> {
        let name = format!("dump-{n}");
        let root = self
            .root
            .make_dir(&name)
            .map_err(io(format!("creating {}", self.root.join(&name).display())))?;
        TraceDir::with_ctf(root)
    }

    /// The directory's path, as the user gave it.
    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// `DIR` itself.
    pub(crate) fn root(&self) -> &SafeDir {
        &self.root
    }

    /// `DIR/ctf`.
    pub(crate) fn ctf(&self) -> &SafeDir {
        &self.ctf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-tracedir-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn refusal(r: Result<TraceDir>) -> Refusal {
        match r {
            Err(Error::Refused { why, .. }) => why,
            other => panic!("not refused: {other:?}"),
        }
    }

    /// Writes the files of a finished trace with a dump into `dir`.
    fn earlier_trace(dir: &Path) {
        for sub in [dir.to_path_buf(), dir.join("dump-1")] {
            std::fs::create_dir_all(sub.join("ctf")).unwrap();
            for file in [
                "meta.json",
                "events.jsonl",
                "trace.json",
                "ctf/metadata",
                "ctf/stream_7",
            ] {
                std::fs::write(sub.join(file), b"x").unwrap();
            }
        }
        std::fs::write(dir.join(format!("{TEMP_PREFIX}meta.json-1-0")), b"").unwrap();
    }

    #[test]
    fn a_new_directory_is_created_private() {
        let base = scratch("new");
        let dir = TraceDir::prepare(&base.join("a/b/ev"), false).unwrap();
        assert_eq!(dir.path(), base.join("a/b/ev"));
        for d in ["a/b/ev", "a/b/ev/ctf"] {
            let mode = std::fs::metadata(base.join(d))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{d}");
        }
        // An empty directory of weft's user is used as it is.
        std::fs::create_dir(base.join("empty")).unwrap();
        TraceDir::prepare(&base.join("empty"), false).unwrap();
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn links_files_and_other_contents_are_refused() {
        let base = scratch("refused");
        let target = base.join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, base.join("link")).unwrap();
        for path in [base.join("link"), base.join("link/")] {
            assert_eq!(
                refusal(TraceDir::prepare(&path, true)),
                Refusal::SymbolicLink
            );
        }
        assert!(std::fs::read_dir(&target).unwrap().next().is_none());
        std::fs::write(base.join("file"), b"").unwrap();
        assert_eq!(
            refusal(TraceDir::prepare(&base.join("file"), false)),
            Refusal::NotADirectory
        );
        std::fs::write(target.join("notes.txt"), b"mine").unwrap();
        assert_eq!(
            refusal(TraceDir::prepare(&target, true)),
            Refusal::NotWeft {
                entry: "notes.txt".into()
            }
        );
        // weft's names with something else among them: not weft's.
        let mixed = base.join("mixed");
        earlier_trace(&mixed);
        std::fs::write(mixed.join("ctf/notes"), b"").unwrap();
        assert_eq!(
            refusal(TraceDir::prepare(&mixed, true)),
            Refusal::NotWeft {
                entry: "ctf/notes".into()
            }
        );
        assert!(mixed.join("meta.json").exists(), "nothing removed");
        // Only an events.jsonl: not a trace.
        let lone = base.join("lone");
        std::fs::create_dir(&lone).unwrap();
        std::fs::write(lone.join("events.jsonl"), b"").unwrap();
        assert!(matches!(
            refusal(TraceDir::prepare(&lone, true)),
            Refusal::NotWeft { .. }
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn an_earlier_trace_is_replaced_only_with_force() {
        let base = scratch("earlier");
        let ev = base.join("ev");
        earlier_trace(&ev);
        assert_eq!(
            refusal(TraceDir::prepare(&ev, false)),
            Refusal::EarlierTrace
        );
        assert!(ev.join("dump-1/ctf/stream_7").exists());
        let dir = TraceDir::prepare(&ev, true).unwrap();
        let left: Vec<_> = std::fs::read_dir(&ev)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["ctf"]);
        assert!(std::fs::read_dir(ev.join("ctf")).unwrap().next().is_none());
        // Dumps are new directories beside it.
        dir.dump(1).unwrap();
        assert!(ev.join("dump-1/ctf").is_dir());
        assert!(dir.dump(1).is_err(), "never into an existing dump");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn another_users_directory_is_refused() {
        if euid() != 0 {
            return; // only root gives a directory away
        }
        let base = scratch("other");
        let theirs = base.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
        assert_eq!(
            refusal(TraceDir::prepare(&theirs, true)),
            Refusal::OtherOwner {
                owner: 65534,
                euid: 0
            }
        );
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn stream_and_dump_names() {
        assert!(is_stream("stream_123") && !is_stream("stream_") && !is_stream("stream_1x"));
        assert!(is_dump("dump-2") && !is_dump("dump-") && !is_dump("dumps"));
    }
}
