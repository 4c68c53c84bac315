//! Files weft writes, made so that no other user can redirect or read them
//! (traces and reports hold arguments and strings of the target): every
//! directory weft creates is 0700 and every file 0600, as `perf.data` is,
//! and every name is created or opened relative to a directory descriptor
//! opened with `O_DIRECTORY | O_NOFOLLOW`, new files with `O_CREAT |
//! O_EXCL | O_NOFOLLOW`, so a symbolic link planted between a check and a
//! create can never redirect a write. Files weft rewrites are written under
//! a temporary name in the same directory and renamed over. This module
//! owns those primitives ([`SafeDir`]) and the report files of `--output`
//! and `weft report --html` ([`create_output`]).

use crate::{Error, Refusal, Result};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, Stat};
use rustix::io::Errno;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// The start of the names of weft's temporary files; a killed weft may
/// leave some, and they are weft's own like the rest.
pub(crate) const TEMP_PREFIX: &str = ".weft-tmp-";

/// The effective user weft runs as.
pub(crate) fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Turns an `io::Error` into an [`Error::Io`] saying what weft was doing.
pub(crate) fn io(what: String) -> impl Fn(io::Error) -> Error {
    move |source| Error::Io {
        what: what.clone(),
        source,
    }
}

/// A path's directory and last component: the directory is opened as the
/// user gave it (links followed), the last component never through a
/// link. `.`, `..` and `/` (no last component) are opened as they are:
/// they are never links.
fn split(path: &Path) -> (&Path, &OsStr) {
    match path.file_name() {
        Some(name) => match path.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => (parent, name),
            _ => (Path::new("."), name),
        },
        None => (path, OsStr::new(".")),
    }
}

/// The file type of `st`.
pub(crate) fn kind(st: &Stat) -> FileType {
    FileType::from_raw_mode(st.st_mode)
}

/// A directory opened without following a link, with the path it was
/// opened by (for messages).
#[derive(Debug)]
pub(crate) struct SafeDir {
    fd: OwnedFd,
    path: PathBuf,
}

/// What a name in a directory is, if anything: its `lstat`.
pub(crate) type Entry = Option<Stat>;

impl SafeDir {
    /// The directory holding `path`'s last component (links followed: the
    /// user named it), and that component.
    pub fn parent_of(path: &Path) -> io::Result<(SafeDir, &OsStr)> {
        let (parent, name) = split(path);
        let fd = rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok((
            SafeDir {
                fd,
                path: parent.to_path_buf(),
            },
            name,
        ))
    }

    /// Opens the directory `path`, whose last component must not be a
    /// symbolic link (`ELOOP` if it is).
    pub fn open(path: &Path) -> io::Result<SafeDir> {
        let (parent, name) = SafeDir::parent_of(path)?;
        Ok(parent.open_dir(name)?.named(path))
    }

    /// The path of `name` in this directory, for messages.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// The path this directory was opened by.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The same directory, named `path` in messages.
    pub fn named(self, path: &Path) -> SafeDir {
        SafeDir {
            path: path.to_path_buf(),
            ..self
        }
    }

    /// The directory's own `stat`.
    pub fn stat(&self) -> io::Result<Stat> {
        Ok(rustix::fs::fstat(&self.fd)?)
    }

    /// What `name` is here (not following a link), or None if nothing.
    pub fn entry(&self, name: impl AsRef<Path>) -> io::Result<Entry> {
        match rustix::fs::statat(&self.fd, name.as_ref(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The names in this directory (`.` and `..` left out), sorted.
    pub fn names(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    /// Opens the subdirectory `name`, not through a link.
    pub fn open_dir(&self, name: impl AsRef<Path>) -> io::Result<SafeDir> {
        let name = name.as_ref();
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(SafeDir {
            fd,
            path: self.join(name),
        })
    }

    /// Creates the subdirectory `name` (0700; `EEXIST` if anything has
    /// that name) and opens it.
    pub fn make_dir(&self, name: impl AsRef<Path>) -> io::Result<SafeDir> {
        rustix::fs::mkdirat(&self.fd, name.as_ref(), Mode::RWXU)?;
        self.open_dir(name)
    }

    /// Creates the file `name` (0600; `EEXIST` if anything has that name,
    /// a dangling link included) for writing.
    pub fn create(&self, name: impl AsRef<Path>) -> io::Result<File> {
        let fd = rustix::fs::openat(
            &self.fd,
            name.as_ref(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?;
        Ok(File::from(fd))
    }

    /// Opens the file `name` for reading (or, with `write`, for writing),
    /// not through a link.
    pub fn open_file(&self, name: impl AsRef<Path>, write: bool) -> io::Result<File> {
        let access = if write {
            OFlags::WRONLY
        } else {
            OFlags::RDONLY
        };
        let fd = rustix::fs::openat(
            &self.fd,
            name.as_ref(),
            access | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }

    /// Removes the file (or link) `name`.
    pub fn remove_file(&self, name: impl AsRef<Path>) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(
            &self.fd,
            name.as_ref(),
            AtFlags::empty(),
        )?)
    }

    /// Removes the empty subdirectory `name`.
    pub fn remove_dir(&self, name: impl AsRef<Path>) -> io::Result<()> {
        Ok(rustix::fs::unlinkat(
            &self.fd,
            name.as_ref(),
            AtFlags::REMOVEDIR,
        )?)
    }

    /// Writes the file `name` as `write` produces it: into a new temporary
    /// file here (0600, created with `O_EXCL`), renamed over `name` once
    /// complete, so that a reader sees the old file or the new one, never
    /// a part. On failure the temporary file is removed.
    pub fn replace(&self, name: &str, write: impl FnOnce(&mut File) -> Result<()>) -> Result<()> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let target = self.join(name);
        let (temp, mut file) = loop {
            let temp = format!(
                "{TEMP_PREFIX}{name}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            match self.create(&temp) {
                Ok(file) => break (temp, file),
                // A leftover of an earlier weft with the same pid.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(io(format!("writing {}", target.display()))(e)),
            }
        };
        let written = write(&mut file)
            .and_then(|()| {
                file.flush()
                    .map_err(io(format!("writing {}", target.display())))
            })
            .and_then(|()| {
                rustix::fs::renameat(&self.fd, temp.as_str(), &self.fd, name)
                    .map_err(|e| io(format!("writing {}", target.display()))(e.into()))
            });
        if written.is_err() {
            let _ = self.remove_file(&temp);
        }
        written
    }

    /// Replaces the file `name` with `bytes` (see [`SafeDir::replace`]).
    pub fn replace_with_bytes(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let target = self.join(name);
        self.replace(name, |file| {
            file.write_all(bytes)
                .map_err(io(format!("writing {}", target.display())))
        })
    }
}

impl AsFd for SafeDir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Opens the report file `path` for writing (`--output FILE`, `weft
/// report --html FILE`). A new file is created 0600, never through a link.
/// An existing regular file is emptied and rewritten (the user named it)
/// if it is weft's user's or root's and has no other name (hard link). A symbolic link is followed only if
/// weft's user or root owns it, so `/dev/stdout` works and a link another
/// user planted in `/tmp` is refused. Devices such as `/dev/null` and
/// `/dev/full` are opened as they are.
pub fn create_output(path: &Path) -> Result<File> {
    let what = "output file";
    let refuse = |why| Error::Refused {
        what,
        path: path.to_path_buf(),
        why,
    };
    let err = io(format!("cannot write {}", path.display()));
    let euid = euid();
    let trusted = |owner: u32| owner == euid || owner == 0;
    let (dir, name) = SafeDir::parent_of(path).map_err(&err)?;
    // A path that changes between the look and the open is looked at again.
    for _ in 0..8 {
        let Some(before) = dir.entry(name).map_err(&err)? else {
            match dir.create(name) {
                Ok(file) => return Ok(file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(err(e)),
            }
        };
        let ty = kind(&before);
        if ty == FileType::Directory {
            return Err(refuse(Refusal::IsADirectory));
        }
        if ty == FileType::RegularFile && before.st_nlink > 1 {
            // Where the kernel does not protect hard links
            // (fs.protected_hardlinks=0), another user can link a file of
            // root's into /tmp under the name weft was given.
            return Err(refuse(Refusal::HardLinked {
                links: before.st_nlink,
            }));
        }
        if !trusted(before.st_uid) && ty != FileType::CharacterDevice {
            return Err(refuse(match ty {
                FileType::Symlink => Refusal::UntrustedLink {
                    owner: before.st_uid,
                    euid,
                },
                _ => Refusal::OtherOwner {
                    owner: before.st_uid,
                    euid,
                },
            }));
        }
        let file = if ty == FileType::Symlink {
            // Followed, creating its target if missing (as a shell's `>`
            // would), but not truncated before the link is checked again.
            rustix::fs::openat(
                &dir,
                name,
                OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
                Mode::RUSR | Mode::WUSR,
            )
        } else {
            rustix::fs::openat(
                &dir,
                name,
                OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
        };
        let file = match file {
            Ok(fd) => File::from(fd),
            // Replaced by a link, or removed, meanwhile.
            Err(Errno::LOOP | Errno::NOENT) => continue,
            Err(e) => return Err(err(e.into())),
        };
        let same = dir
            .entry(name)
            .map_err(&err)?
            .is_some_and(|now| (now.st_dev, now.st_ino) == (before.st_dev, before.st_ino));
        if !same {
            continue;
        }
        let opened = rustix::fs::fstat(&file).map_err(|e| err(e.into()))?;
        if kind(&opened) == FileType::RegularFile {
            file.set_len(0).map_err(&err)?;
        }
        return Ok(file);
    }
    Err(err(io::Error::other(
        "it kept changing while weft opened it; give another path",
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("weft-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn new_files_and_directories_are_private_and_never_through_a_link() {
        let base = scratch("private");
        let dir = SafeDir::open(&base).unwrap();
        let sub = dir.make_dir("ctf").unwrap();
        assert_eq!(mode(&base.join("ctf")), 0o700);
        sub.create("stream_1").unwrap().write_all(b"x").unwrap();
        assert_eq!(mode(&base.join("ctf/stream_1")), 0o600);
        // A planted link is never written through, dangling or not.
        let victim = base.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, base.join("ctf/stream_2")).unwrap();
        std::os::unix::fs::symlink(base.join("nowhere"), base.join("ctf/stream_3")).unwrap();
        assert!(sub.create("stream_2").is_err());
        assert!(sub.create("stream_3").is_err());
        assert!(sub.open_file("stream_2", true).is_err());
        assert!(!base.join("nowhere").exists());
        std::os::unix::fs::symlink(&base, base.join("link")).unwrap();
        // O_NOFOLLOW | O_DIRECTORY on a link: ENOTDIR.
        assert_eq!(
            SafeDir::open(&base.join("link"))
                .unwrap_err()
                .raw_os_error(),
            Some(Errno::NOTDIR.raw_os_error())
        );
        assert!(
            SafeDir::open(&base.join("link/")).is_err(),
            "a trailing slash"
        );
        // Replaced files: whole, private, and no temporary file left.
        dir.replace_with_bytes("meta.json", b"one").unwrap();
        dir.replace_with_bytes("meta.json", b"two").unwrap();
        assert_eq!(std::fs::read(base.join("meta.json")).unwrap(), b"two");
        assert_eq!(mode(&base.join("meta.json")), 0o600);
        assert_eq!(dir.names().unwrap(), ["ctf", "link", "meta.json", "victim"]);
        // Replacing a link swaps the link, not its target.
        std::os::unix::fs::symlink(&victim, base.join("trace.json")).unwrap();
        dir.replace_with_bytes("trace.json", b"{}").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn output_files_are_created_private_and_rewritten_when_they_are_ours() {
        let base = scratch("output");
        let path = base.join("report.txt");
        create_output(&path)
            .unwrap()
            .write_all(b"long text")
            .unwrap();
        assert_eq!(mode(&path), 0o600);
        create_output(&path).unwrap().write_all(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        // weft's own link is followed; its target is rewritten.
        let link = base.join("link.txt");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        create_output(&link)
            .unwrap()
            .write_all(b"via link")
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"via link");
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        // A dangling link of weft's user creates its target.
        let dangling = base.join("dangling");
        std::os::unix::fs::symlink(base.join("made"), &dangling).unwrap();
        create_output(&dangling).unwrap();
        assert!(base.join("made").exists());
        // A file with another name is refused, and both names keep it.
        let other_name = base.join("other-name");
        std::fs::hard_link(&path, &other_name).unwrap();
        assert!(matches!(
            create_output(&path),
            Err(Error::Refused {
                why: Refusal::HardLinked { links: 2 },
                ..
            })
        ));
        assert_eq!(std::fs::read(&other_name).unwrap(), b"via link");
        std::fs::remove_file(&other_name).unwrap();
        // Devices as they are; directories refused.
        create_output(Path::new("/dev/null"))
            .unwrap()
            .write_all(b"x")
            .unwrap();
        assert!(matches!(
            create_output(&base),
            Err(Error::Refused {
                why: Refusal::IsADirectory,
                ..
            })
        ));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn paths_split_into_their_directory_and_last_component() {
        assert_eq!(split(Path::new("a/b/")), (Path::new("a"), OsStr::new("b")));
        assert_eq!(split(Path::new("b")), (Path::new("."), OsStr::new("b")));
        assert_eq!(split(Path::new("/b")), (Path::new("/"), OsStr::new("b")));
        assert_eq!(split(Path::new("..")), (Path::new(".."), OsStr::new(".")));
        assert_eq!(split(Path::new("/")), (Path::new("/"), OsStr::new(".")));
    }
}
