//! Running a replay (or the real workload, to compare) under another
//! configuration: a control group with a memory limit and a CPU share,
//! after the page cache was dropped (ULTra's prediction). cgroup v2 where
//! the unified hierarchy has the `memory` and `cpu` controllers, else the
//! v1 hierarchies of those controllers (this machine's kind: systemd's
//! hybrid layout binds them to v1). The group is made before the workload
//! starts, its first process joins it before doing anything, and it is
//! removed once every process in it has ended.

use std::path::{Path, PathBuf};

/// The configuration to run under.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// `memory.max` (v2) or `memory.limit_in_bytes` (v1), in bytes.
    pub memory_max: Option<u64>,
    /// The CPU share, in per cent of one CPU (`50`: half a CPU, `200`: two).
    pub cpu_max: Option<u32>,
}

impl Limits {
    /// Whether any limit is asked for.
    pub fn any(&self) -> bool {
        self.memory_max.is_some() || self.cpu_max.is_some()
    }
}

/// Why the limits could not be set.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    /// No hierarchy has the controller.
    #[error("no cgroup hierarchy here has the {0} controller (mounted neither in cgroup v2 with it enabled nor as a v1 hierarchy): limits need it")]
    NoController(&'static str),
    /// Writing the group's files failed.
    #[error("setting up the control group {path}: {source} (limits need root)")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The period of the CPU quota, in µs.
const PERIOD_US: u64 = 100_000;

/// A control group made for one run.
#[derive(Debug)]
pub struct Group {
    /// Its directories (one for v2; one per controller for v1).
    dirs: Vec<PathBuf>,
    /// Where its peak memory use is read, if the kernel keeps it.
    peak: Option<PathBuf>,
    /// Where the kernel counts the processes its OOM killer ended in it
    /// (`memory.events` in v2, `memory.oom_control` in v1), with a memory
    /// limit.
    events: Option<PathBuf>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> LimitError + '_ {
    move |source| LimitError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn write(path: &Path, text: &str) -> Result<(), LimitError> {
    std::fs::write(path, text).map_err(io(path))
}

/// The cgroup v2 mount, if its root offers `controller`.
fn v2_with(controller: &str) -> Option<PathBuf> {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|root| {
            std::fs::read_to_string(root.join("cgroup.controllers"))
                .is_ok_and(|c| c.split_whitespace().any(|x| x == controller))
        })
}

/// The v1 hierarchy of `controller`, if mounted.
fn v1_of(controller: &str) -> Option<PathBuf> {
    let dir = PathBuf::from("/sys/fs/cgroup").join(controller);
    dir.join("tasks").exists().then_some(dir)
}

impl Group {
    /// Makes a group named `name` with `limits`.
    pub fn make(name: &str, limits: Limits) -> Result<Group, LimitError> {
        let wanted: Vec<&'static str> = [
            limits.memory_max.map(|_| "memory"),
            limits.cpu_max.map(|_| "cpu"),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(root) = wanted
            .iter()
            .all(|c| v2_with(c).is_some())
            .then(|| v2_with(wanted[0]))
            .flatten()
        {
            let enable: String = wanted.iter().map(|c| format!("+{c} ")).collect();
            write(&root.join("cgroup.subtree_control"), enable.trim_end())?;
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            let group = Group {
                peak: Some(dir.join("memory.peak")).filter(|p| p.exists()),
                events: limits.memory_max.map(|_| dir.join("memory.events")),
                dirs: vec![dir.clone()],
            };
            if let Some(bytes) = limits.memory_max {
                write(&dir.join("memory.max"), &bytes.to_string())?;
                write(&dir.join("memory.swap.max"), "0").ok();
            }
            if let Some(pct) = limits.cpu_max {
                let quota = PERIOD_US * u64::from(pct) / 100;
                write(&dir.join("cpu.max"), &format!("{quota} {PERIOD_US}"))?;
            }
            return Ok(group);
        }
        let mut group = Group {
            dirs: Vec::new(),
            peak: None,
            events: None,
        };
        for controller in wanted {
            let root = v1_of(controller).ok_or(LimitError::NoController(controller))?;
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            group.dirs.push(dir.clone());
            match controller {
                "memory" => {
                    let bytes = limits.memory_max.expect("asked for");
                    write(&dir.join("memory.limit_in_bytes"), &bytes.to_string())?;
                    // Swap counts too where the kernel accounts it.
                    let memsw = dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &bytes.to_string()).ok();
                    }
                    group.peak = Some(dir.join("memory.max_usage_in_bytes"));
                    group.events = Some(dir.join("memory.oom_control"));
                }
                _ => {
                    let pct = limits.cpu_max.expect("asked for");
                    write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
                    let quota = PERIOD_US * u64::from(pct) / 100;
                    write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
        }
        Ok(group)
    }

    /// The files that move a process into the group when its id is
    /// written there (`cgroup.procs`, one per hierarchy).
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// Moves process `pid` into the group.
    pub fn add(&self, pid: i32) -> Result<(), LimitError> {
        for dir in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// How many processes of the group the kernel's OOM killer ended (its
    /// `oom_kill` count; 0 without a memory limit or where the kernel
    /// does not say).
    pub fn oom_kills(&self) -> u64 {
        let Some(text) = self
            .events
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
        else {
            return 0;
        };
        text.lines()
            .find_map(|l| l.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The most memory the group used, in bytes, if the kernel says.
    pub fn peak_memory(&self) -> Option<u64> {
        std::fs::read_to_string(self.peak.as_ref()?)
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Parses a `--memory-max` size: bytes, or with `K`, `M`, `G` (powers of
/// 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let (digits, unit) = t.split_at(t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("'{text}' is not a size: write bytes or 512M, 2G"))?;
    let scale = match unit.to_ascii_uppercase().trim_end_matches(['B', 'I']) {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return Err(format!("'{text}' is not a size: write bytes or 512M, 2G")),
    };
    n.checked_mul(scale)
        .filter(|&b| b >= 1 << 20)
        .ok_or_else(|| format!("'{text}': give at least 1M"))
}

/// Parses a `--cpu-max` share: per cent of one CPU (`50%`, `150`).
pub fn parse_cpu(text: &str) -> Result<u32, String> {
    let n: u32 = text.trim().trim_end_matches('%').parse().map_err(|_| {
        format!("'{text}' is not a CPU share: write per cent of one CPU, 50% or 200%")
    })?;
    if n == 0 || n > 10_000 {
        return Err(format!("'{text}': give 1% to 10000%"));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_shares_parse_and_bad_ones_say_why() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert!(parse_size("12X").unwrap_err().contains("not a size"));
        assert!(parse_size("4K").unwrap_err().contains("at least 1M"));
        assert_eq!(parse_cpu("50%"), Ok(50));
        assert_eq!(parse_cpu("200"), Ok(200));
        assert!(parse_cpu("0%").is_err());
        assert!(parse_cpu("half").unwrap_err().contains("not a CPU share"));
    }
}
