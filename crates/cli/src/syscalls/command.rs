//! `command.json` in a record: the command `weft syscalls record` started,
//! the directory it ran in and the environment it had, so that `weft
//! syscalls reexec` starts the program as it was recorded (a program's
//! environment is input too: Python's memory use depends on its length)
//! and says so when the command or the directory differ.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The file's name in a record.
const FILE: &str = "command.json";

/// A recorded start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The directory it started in.
    pub cwd: PathBuf,
    /// Its environment, `NAME=value` each.
    pub env: Vec<String>,
}

/// Writes the start of `argv` from here, with weft's environment (which
/// the program inherits), into record `dir`.
pub fn write(dir: &Path, argv: &[String]) -> Result<()> {
    let env: Vec<String> = std::env::vars_os()
        .map(|(k, v)| format!("{}={}", k.to_string_lossy(), v.to_string_lossy()))
        .collect();
    let cwd = std::env::current_dir().unwrap_or_default();
    let json = serde_json::json!({"argv": argv, "cwd": cwd, "env": env});
    let path = dir.join(FILE);
    write_private(&path, format!("{json}\n").as_bytes())
}

/// Writes `bytes` to `path`, readable by its owner only (0600, like the
/// record's other files: an environment may hold secrets), and never
/// through a symbolic link.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let context = || format!("writing {}", path.display());
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(context)?;
    // A file an older record left keeps its mode through `open`.
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .with_context(context)?;
    file.write_all(bytes).with_context(context)
}

/// The start record `dir` holds, if it has one (records of attached
/// processes and older ones have none).
pub fn read(dir: &Path) -> Result<Option<Recorded>> {
    let path = dir.join(FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let bad = || {
        anyhow::anyhow!(
            "{} is damaged: it is not the command weft recorded",
            path.display()
        )
    };
    let json: serde_json::Value = serde_json::from_str(&text).map_err(|_| bad())?;
    let strings = |key: &str| -> Option<Vec<String>> {
        json[key]
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(String::from))
            .collect()
    };
    Ok(Some(Recorded {
        argv: strings("argv").ok_or_else(bad)?,
        cwd: PathBuf::from(json["cwd"].as_str().ok_or_else(bad)?),
        env: strings("env").ok_or_else(bad)?,
    }))
}

/// The environment a `--launch-env` file holds (a JSON array of strings).
pub fn read_environment(file: &Path) -> Result<Vec<String>> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a JSON array of strings", file.display()))
}

/// Writes `env` as a `--launch-env` file.
pub fn write_environment(file: &Path, env: &[String]) -> Result<()> {
    write_private(file, serde_json::to_string(env)?.as_bytes())
}
