//! `weft syscalls`: record every system call of a workload (probes at its
//! `syscall` instructions writing into per-thread rings, and weft's
//! SIGSYS handler for the ones not rewritten yet; no stop per call) and print them back in strace's shape; `deps` (in [`deps`])
//! works out the order between their threads, `replay` (in [`replay`])
//! makes the calls again.

mod command;
mod deps;
mod reexec;
mod watch;

pub use command::read_environment;
mod read;
mod replay;

use crate::ProbeArgs;
use anyhow::{bail, Result};
use clap::{Args, Parser, Subcommand};
use read::read_calls;
use std::path::PathBuf;

/// `weft syscalls ...`.
#[derive(Args, Debug)]
pub struct SyscallsArgs {
    #[command(subcommand)]
    command: SyscallsCommand,
}

#[derive(Subcommand, Debug)]
enum SyscallsCommand {
    /// Start a program (and, by default, every process it creates), or
    /// attach to a running one with -p, and record each system call its
    /// code makes (a started program's from its first instruction, its
    /// dynamic loader's included): number, arguments, result and the TSC
    /// at both ends, into DIR (an events directory of CTF streams: `weft
    /// events DIR` reads it too; a started program's command, directory
    /// and environment go into DIR/command.json, for `reexec`). A thread
    /// whose ring is full waits for weft to empty it, a second at most at
    /// a time: only a weft that stalls longer (a debug build instrumenting
    /// a new image) loses calls, counted and reported. A started
    /// program's calls go to weft's SIGSYS handler in the process (Syscall
    /// User Dispatch) until their site is busy enough to be rewritten; an
    /// attached one has every site rewritten at once. Attached, weft
    /// records until Ctrl-C or -d, then detaches.
    Record {
        /// Where to write: a new or empty directory.
        #[arg(short = 'o', long = "out", value_name = "DIR")]
        out: PathBuf,
        /// Attach to this running process instead of starting CMD.
        #[arg(
            short = 'p',
            long = "pid",
            value_name = "PID",
            conflicts_with = "command"
        )]
        pid: Option<i32>,
        /// With -p: detach after this long (`10s`, `500ms`).
        #[arg(short = 'd', long, value_name = "DURATION", value_parser = crate::duration::parse)]
        duration: Option<std::time::Duration>,
        /// Replace an earlier weft trace in DIR (weft removes its own files
        /// there first; a directory holding anything else is refused).
        #[arg(long)]
        force: bool,
        /// Only the functions matching PATTERN (`libc.so.6:*`, `'*:read'`);
        /// all of every module by default, and then the clocks the vDSO
        /// reads without a system call too.
        #[arg(long, value_name = "PATTERN", default_value = "*:*")]
        only: String,
        /// Record the first process only, not the processes it (or, with
        /// -p, the process) creates.
        #[arg(long)]
        no_follow: bool,
        /// Bytes of each thread's ring: a power of two from 64K to 64M. A
        /// ring holds what a thread's calls write while weft is away (a
        /// millisecond); 1M holds a tight loop's, and fits in a core's
        /// cache, which a larger one may not (bench/RESULTS.md). Rings
        /// share 1 GiB per process: up to 1M, 512 threads alive at once
        /// can record; 2M 256, 4M 128, 16M 32, 64M 8 (the calls of threads
        /// beyond are lost, and counted as dropped).
        #[arg(long, value_name = "SIZE", default_value = "1M")]
        ring_size: String,
        /// Also write events.jsonl (an object per event) and trace.json
        /// (Chrome/Perfetto) into DIR, as `weft run --events-out` does: with
        /// the data of reads and writes in hex they are several times the
        /// streams' size, and take longer to write than a busy program ran.
        #[arg(long)]
        json_files: bool,
        /// Rewrite every `syscall` site of each program first, instead of
        /// catching the calls of sites not rewritten with Syscall User
        /// Dispatch: for measuring weft. Each exec is slower, and the C
        /// library's first calls (before its libraries are instrumented)
        /// are missing, so `reexec` of such a record diverges at once
        /// (docs/syscalls.md).
        #[arg(long)]
        no_dispatch: bool,
        /// Settle each program once weft has been with it this many seconds
        /// (`auto`: half a second, once it has made half a million calls;
        /// `never`: do not): every `syscall` site rewritten, then the
        /// kernel's Syscall User Dispatch off, which costs every call some
        /// 33 ns here. A settled program's calls from code it generates at
        /// run time are not recorded; a program running such code is not
        /// settled (docs/syscalls.md, "Settled processes").
        #[arg(long, value_name = "SECONDS", default_value = "auto")]
        settle_after: String,
        /// The program and its arguments.
        #[arg(last = true, required_unless_present = "pid", value_name = "CMD")]
        command: Vec<String>,
    },
    /// Print the calls of a directory `weft syscalls record` wrote, one a
    /// line as strace does: thread, seconds since the start, and
    /// `name(arguments) = result` (`-1 ENAME (description)` for an error,
    /// `?` for a call that did not return).
    Show {
        /// A directory written by `weft syscalls record`.
        dir: PathBuf,
        /// One JSON object a line instead: `tid`, `time` (seconds since
        /// the start), `nr`, `name`, `args` (six registers), `result`
        /// (`rax` at the return, minus the error number for an error;
        /// absent for a call that did not return), `errno` (the error's
        /// name), `duration_ns` (instruction to return) and `buffers` (the
        /// memory the call read or wrote: `what` is `path`, `sent` or
        /// `filled`, `arg` its argument, `hex` its bytes, `truncated`).
        /// `args` are the raw registers (`AT_FDCWD` is 4294967196).
        /// `user_ns`: the thread's user CPU time at the call, in ns from
        /// its first call (when the per-thread CPU clock was there).
        /// `loader`: the dynamic loader made it (mapping the libraries
        /// before `main`, or for `dlopen`).
        #[arg(long)]
        json: bool,
    },
    /// Count the calls of a directory `weft syscalls record` wrote, per
    /// call, as `strace -c -w` does: share of the time, seconds, µs per
    /// call, calls and errors. Time is wall-clock time from the `syscall`
    /// instruction to its return, blocking included.
    Stats {
        /// A directory written by `weft syscalls record`.
        dir: PathBuf,
    },
    /// The resources the recorded calls used (files by path, pipes,
    /// sockets, the inherited standard streams), worked out by simulating
    /// each process's descriptor table and open file descriptions (dup,
    /// fork, close-on-exec), and the dependencies between different
    /// threads' operations on them: an edge from a call to another
    /// thread's call that began after it returned. --fine (the default)
    /// keeps the edges between operations that conflict (a write, or an
    /// offset both use through one shared description) and reports the
    /// coarse order's others as dropped; --coarse keeps every operation on
    /// a resource in its recorded order. Prints a summary, the resources
    /// and the edges; see docs/syscalls.md.
    Deps {
        /// A directory written by `weft syscalls record`.
        dir: PathBuf,
        #[command(flatten)]
        order: OrderArgs,
        /// Also write the calls with edges as a dot graph to FILE (each
        /// thread in a cluster, dropped edges dashed).
        #[arg(long, value_name = "FILE")]
        dot: Option<PathBuf>,
        /// One JSON object instead: `mode`, `resources` (name, kind,
        /// operations, threads, edges), `ops` (call, tid, pid, name,
        /// resource, access, description, offset), `edges` and `dropped`
        /// (from, to, resource; calls are indexes in the order `show`
        /// prints them), `unresolved` (calls).
        #[arg(long)]
        json: bool,
    },
    /// Run CMD again under weft, fed from the record in DIR: at each
    /// `syscall` instruction and each vDSO clock of each process and
    /// thread (matched to the recorded ones in the order they were made),
    /// the call is checked against the recorded one; calls whose results
    /// a rerun cannot reproduce (process and thread ids, clocks, random
    /// bytes, input from outside the workload, a `wait4` with `WNOHANG`
    /// that found no child ended) get the recorded result and bytes
    /// without reaching the kernel, the others are made (a `wait4` that
    /// reaped a child waits for that child). The program's signal
    /// handlers run where the record had their deliveries, and at no
    /// signal the rerun's own processes send. The first call
    /// that differs from the record (another call, or another descriptor)
    /// ends the rerun with a report of both and the call's stack; exit
    /// status 1 then, else CMD's. A call that depends on another
    /// thread's or process's (`deps`) waits until that one returned, as
    /// in the record. With --cpu-max, --memory-max or --drop-caches the
    /// rerun's processes run in such a control group, and the time its
    /// fed calls span is the prediction. CMD must be the recorded command
    /// (same arguments, same directory); it runs with the recorded
    /// environment (DIR/command.json), and, as root, its first process and
    /// the processes it forks with their recorded pids when those are free
    /// (weft says which did not).
    Reexec {
        /// A directory written by `weft syscalls record`.
        dir: PathBuf,
        #[command(flatten)]
        order: OrderArgs,
        /// Also write the report into FILE as one JSON object: `made`,
        /// `answered`, `waits`, `recorded_s` (from the program's first own
        /// call to the last return), `rerun_s` (from the first process's
        /// exec to the last return), `held_s` (of which weft held the
        /// workload's only process to instrument a library or an image),
        /// `predicted_s` (the rerun's span without them: the prediction,
        /// with limits),
        /// `configuration`, `peak_memory`, `differ` (calls made again that
        /// returned other results), `diverged`, and `calls` (per call, in
        /// `show`'s order: `began_s` and `ended_s` in the rerun, from its
        /// first process's exec, and `result`; null where it did not get
        /// there).
        #[arg(long, value_name = "FILE")]
        json: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        /// End a rerun whose call has waited this long past ten times its
        /// recorded call's time (what it waits for is not part of the
        /// rerun: a process outside the workload, the other end of a
        /// FIFO, a server), with a report of the call: 30s, 2s, 500ms.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse)]
        stall: std::time::Duration,
        /// The program and its arguments, as recorded.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Run CMD itself (not under weft) in the configuration replay's
    /// limits give, in its control group from its first instruction, and
    /// print its elapsed time: the actual time to hold a replay's
    /// prediction against. Exits with CMD's status (128 + the signal that
    /// killed it, saying so, and whether the OOM killer did).
    Actual {
        #[command(flatten)]
        limits: LimitArgs,
        /// The program and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Make the recorded calls again: a process per recorded process
    /// (forked where the record forked), a thread per recorded thread,
    /// each making its thread's calls in order with the recorded
    /// arguments (descriptors translated, paths moved into a sandbox,
    /// what was written out written again), holding the memory the
    /// recorded process held, spinning for the time the thread ran
    /// between calls, and waiting for the dependencies `deps` finds with
    /// futexes. The sandbox is a copy weft makes of the files
    /// the workload found in place (removed afterwards), or --root. The
    /// standard streams are /dev/null. Prints the recorded and replayed
    /// elapsed times, the calls whose results differ and those not made
    /// again (memory, signals, futexes, ...); see docs/syscalls.md.
    Replay {
        /// A directory written by `weft syscalls record`.
        dir: PathBuf,
        #[command(flatten)]
        order: OrderArgs,
        /// Replay in this directory, which must hold the files the
        /// workload found in place under their own paths (DIR/etc/passwd
        /// for /etc/passwd); relative paths are under DIR followed by the
        /// current directory. The replay writes into it as the workload
        /// wrote, so a second replay starts from what the first left.
        #[arg(long, value_name = "SANDBOX")]
        root: Option<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        /// Stop a replay that makes no progress this long (`30s`).
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = crate::duration::parse)]
        stall: std::time::Duration,
        /// One JSON object instead: `recorded_s`, `replayed_s`, `made`,
        /// `differ` (call, recorded, replayed), `skipped` (name, why,
        /// calls), `stalled`, and `calls` (per call, in `show`'s order:
        /// `outcome`, `result`, `began_s`, `ended_s`).
        #[arg(long)]
        json: bool,
    },
}

/// Which operations on a resource keep their recorded order (`deps`,
/// `replay`, `reexec`).
#[derive(Args, Debug, Clone, Copy)]
pub struct OrderArgs {
    /// Every operation on a resource keeps its recorded order.
    #[arg(long, conflicts_with = "fine")]
    coarse: bool,
    /// Only operations that conflict keep it (the default).
    #[arg(long)]
    fine: bool,
}

impl OrderArgs {
    /// The dependency mode asked for.
    fn mode(&self) -> weft_syscalls::deps::Mode {
        match self.coarse {
            true => weft_syscalls::deps::Mode::Coarse,
            false => weft_syscalls::deps::Mode::Fine,
        }
    }
}

/// Another configuration to run under (ULTra's prediction): a control
/// group with these limits, after dropping the page cache.
#[derive(Args, Debug, Clone, Copy)]
pub struct LimitArgs {
    /// Run in a control group with this much memory (`memory.max`, or
    /// v1's `memory.limit_in_bytes`): bytes, or 64M, 2G.
    #[arg(long, value_name = "SIZE", value_parser = weft_replay::limits::parse_size)]
    memory_max: Option<u64>,
    /// Run in a control group with this share of CPU time, in per cent of
    /// one CPU (`cpu.max`, or v1's CFS quota): 50%, 200%.
    #[arg(long, value_name = "PCT", value_parser = weft_replay::limits::parse_cpu)]
    cpu_max: Option<u32>,
    /// Write dirty pages out and drop the page cache first (a cold run).
    #[arg(long)]
    drop_caches: bool,
}

impl LimitArgs {
    /// The control group these ask for (none without limits), the caches
    /// dropped first if asked.
    fn prepare(&self, name: &str) -> Result<Option<weft_replay::Group>> {
        let limits = weft_replay::Limits {
            memory_max: self.memory_max,
            cpu_max: self.cpu_max,
        };
        let group = match limits.any() {
            true => Some(weft_replay::Group::make(name, limits)?),
            false => None,
        };
        if self.drop_caches {
            // A cold run: weft's own reading of the program's images
            // does not warm the cache for it.
            weft_image::leave_page_cache_as_found();
            weft_process::drop_caches().map_err(|e| {
                anyhow::anyhow!(
                    "--drop-caches: writing /proc/sys/vm/drop_caches: {e} (it needs root)"
                )
            })?;
        }
        Ok(group)
    }

    /// The configuration as words, for the report.
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = self.memory_max {
            parts.push(format!("memory.max {} MiB", m >> 20));
        }
        if let Some(c) = self.cpu_max {
            parts.push(format!("{c}% of a CPU"));
        }
        if self.drop_caches {
            parts.push("caches dropped".to_string());
        }
        parts.join(", ")
    }
}

/// Parses the probe options `record` stands for.
#[derive(Parser, Debug)]
struct Probes {
    #[command(flatten)]
    probes: ProbeArgs,
}

/// Removes a record directory that a failed start left holding nothing
/// but an empty `ctf/` (`remove_dir` removes only empty directories).
fn remove_if_unused(dir: &std::path::Path) {
    if std::fs::remove_dir(dir.join("ctf")).is_ok() {
        let _ = std::fs::remove_dir(dir);
    }
}

/// Runs `weft syscalls ...`; the exit status.
pub fn syscalls(args: &SyscallsArgs) -> Result<i32> {
    match &args.command {
        SyscallsCommand::Record {
            out,
            pid,
            duration,
            force,
            only,
            no_follow,
            ring_size,
            json_files,
            no_dispatch,
            settle_after,
            command,
        } => {
            if duration.is_some() && pid.is_none() {
                bail!("-d is how long to stay attached: give it with -p PID (a started program is recorded until it exits)");
            }
            if only.trim().is_empty() || only.contains('[') && !only.contains(']') {
                bail!("--only '{only}' is not a pattern: write [MODULE:]FUNCTION with * and ? (libc.so.6:*, '*:read')");
            }
            let mut options: Vec<String> = [
                "weft",
                "--trace",
                &format!("syscalls:{only}"),
                "--ring-mode",
                "block",
                "--ring-size",
                ring_size,
                "--events-out",
                &out.to_string_lossy(),
                "--no-aslr",
            ]
            .map(String::from)
            .to_vec();
            if *force {
                options.push("--force".into());
            }
            if !json_files {
                options.push("--streams-only".into());
            }
            if *no_dispatch {
                options.push("--no-dispatch".into());
            }
            options.push("--settle-after".into());
            options.push(settle_after.clone());
            let probes = Probes::try_parse_from(options)?.probes;
            match pid {
                Some(pid) => crate::attach::attach(&[*pid], *duration, None, !no_follow, &probes),
                None => {
                    let existed = out.exists();
                    let status =
                        crate::run::run(&probes, !no_follow, command).inspect_err(|_| {
                            if !existed {
                                remove_if_unused(out);
                            }
                        })?;
                    command::write(out, command)?;
                    Ok(status)
                }
            }
        }
        SyscallsCommand::Show { dir, json } => {
            crate::signals::die_on_closed_output();
            show(dir, *json)
        }
        SyscallsCommand::Stats { dir } => {
            crate::signals::die_on_closed_output();
            let (meta, calls, _) = read_calls(dir)?;
            print!(
                "{}",
                weft_syscalls::render_stats(&weft_syscalls::stats(&calls, meta.ticks_per_ns))
            );
            Ok(dropped(&meta))
        }
        SyscallsCommand::Deps {
            dir,
            order,
            dot,
            json,
        } => {
            crate::signals::die_on_closed_output();
            let (meta, calls, known) = read_calls(dir)?;
            let mode = order.mode();
            let found = deps::Found::new(&calls, &known, mode);
            if let Some(path) = dot {
                let mut file = std::io::BufWriter::new(weft_events::create_output(path)?);
                found.dot(&mut file)?;
                std::io::Write::flush(&mut file)?;
            }
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            match json {
                true => found.json(&mut out)?,
                false => found.text(&mut out)?,
            }
            std::io::Write::flush(&mut out)?;
            Ok(dropped(&meta))
        }
        SyscallsCommand::Replay {
            dir,
            order,
            root,
            limits,
            stall,
            json,
        } => {
            crate::signals::die_on_closed_output();
            // Ctrl-C and SIGTERM stop the replay's processes, and weft
            // removes its sandbox and control group.
            crate::signals::catch_stop_requests();
            let (meta, calls, known) = read_calls(dir)?;
            let mode = order.mode();
            replay::replay(
                &meta,
                &calls,
                &known,
                replay::Request {
                    mode,
                    root: root.as_deref(),
                    stall: *stall,
                    json: *json,
                    limits: *limits,
                },
            )
        }
        SyscallsCommand::Actual { limits, command } => actual(limits, command),
        SyscallsCommand::Reexec {
            dir,
            order,
            json,
            limits,
            stall,
            command,
        } => {
            let mode = order.mode();
            reexec::reexec(dir, mode, json.as_deref(), limits, *stall, command)
        }
    }
}

/// `weft syscalls actual`: CMD run in the limits' control group; its
/// elapsed time (and peak memory) on standard error.
fn actual(limits: &LimitArgs, command: &[String]) -> Result<i32> {
    use std::os::unix::process::{CommandExt, ExitStatusExt};
    let group = limits.prepare(&format!("weft-actual-{}", std::process::id()))?;
    // The program joins the group before its first instruction: between
    // its fork and its exec, it writes itself into each `cgroup.procs`.
    // Moved in after it started, a program (and a child it forked at
    // once) ran unlimited in 3 of 20 runs of a new-user trial.
    let procs: Vec<std::ffi::CString> = group
        .as_ref()
        .map(|g| g.procs_files())
        .unwrap_or_default()
        .iter()
        .filter_map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok())
        .collect();
    let mut program = std::process::Command::new(&command[0]);
    program.args(&command[1..]);
    // SAFETY: between fork and exec the closure makes system calls only
    // (open, write, close), on strings made before the fork: nothing that
    // allocates or takes a lock.
    unsafe {
        program.pre_exec(move || {
            for path in &procs {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
            }
            Ok(())
        })
    };
    let started = std::time::Instant::now();
    let mut child = program
        .spawn()
        .map_err(|e| anyhow::anyhow!("starting {} in its control group: {e}", command[0]))?;
    let status = child.wait()?;
    let elapsed = started.elapsed().as_secs_f64();
    let peak = group.as_ref().and_then(|g| g.peak_memory());
    let under = match limits.describe() {
        d if d.is_empty() => String::new(),
        d => format!(" ({d})"),
    };
    let memory = peak.map_or(String::new(), |p| {
        format!(", peak memory {:.1} MiB", p as f64 / 1048576.0)
    });
    say!("weft: {} ran {elapsed:.6} s{under}{memory}", command[0]);
    if let Some(signal) = status.signal() {
        let oom = match group.as_ref().map_or(0, |g| g.oom_kills()) {
            0 => String::new(),
            _ => " (the kernel's OOM killer, under the group's memory limit)".into(),
        };
        say!(
            "weft: {} (pid {}) was killed by {}{oom}",
            command[0],
            child.id(),
            nix::sys::signal::Signal::try_from(signal)
                .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string())
        );
        return Ok(128 + signal);
    }
    Ok(status.code().unwrap_or(1))
}

/// 1 (after saying so) if the recording dropped events, else 0.
fn dropped(meta: &weft_events::Meta) -> i32 {
    if meta.dropped == 0 {
        return 0;
    }
    say!(
        "weft: {} event(s) were dropped while recording: calls are missing",
        meta.dropped
    );
    1
}

/// `weft syscalls show [--json] DIR`.
fn show(dir: &std::path::Path, json: bool) -> Result<i32> {
    let (meta, calls, _) = read_calls(dir)?;
    use std::io::Write;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let seconds = |tsc: u64| tsc.saturating_sub(meta.start_tsc) as f64 / meta.ticks_per_ns / 1e9;
    for call in &calls {
        if !json {
            writeln!(
                out,
                "{:<7} {:>12.6} {}",
                call.tid,
                seconds(call.entry_tsc),
                weft_syscalls::strace_line(call)
            )?;
            continue;
        }
        if let Some(signal) = weft_abi::delivery::signal(call.nr) {
            let mut line = serde_json::json!({
                "tid": call.tid,
                "time": seconds(call.entry_tsc),
                "signal": signal,
                "si_code": call.args[3] as i32,
                "si_pid": call.args[4] as u32,
                "si_uid": (call.args[4] >> 32) as u32,
                "interrupted_rip": call.args[0],
                "interrupted_rax": call.args[1] as i64,
                "interrupted_at": match call.args[2] >> 32 {
                    weft_abi::delivery::AFTER_SYSCALL => "after a syscall",
                    weft_abi::delivery::AT_SYSCALL => "at a syscall",
                    weft_abi::delivery::IN_WEFT => "in weft's code",
                    weft_abi::delivery::AFTER_CALL => "in weft's code after a call",
                    _ => "elsewhere",
                },
                "line": weft_syscalls::strace_line(call),
            });
            // The union's fields strace shows for the code: a child's
            // status, a queued or timer signal's value and timer.
            let code = call.args[3] as i32;
            let word = call.args[5];
            match (signal, code) {
                (17, 1..=6) => line["si_status"] = (word as i32).into(),
                (_, -1) => line["si_value"] = word.into(),
                (_, -2) => {
                    line["si_timerid"] = (call.args[4] as u32).into();
                    line["si_overrun"] = ((call.args[4] >> 32) as u32).into();
                    line["si_value"] = word.into();
                }
                _ => {}
            }
            writeln!(out, "{line}")?;
            continue;
        }
        let mut line = serde_json::json!({
            "tid": call.tid,
            "time": seconds(call.entry_tsc),
            "nr": call.nr,
            "name": weft_syscalls::name(call.nr),
            "args": call.args,
        });
        if call.vdso {
            line["vdso"] = true.into();
        }
        let buffers: Vec<serde_json::Value> = call
            .buffers
            .iter()
            .map(|b| {
                let hex = weft_live::to_hex(&b.bytes);
                let what = match b.what {
                    weft_syscalls::Memory::Path => "path",
                    weft_syscalls::Memory::Sent => "sent",
                    weft_syscalls::Memory::Filled => "filled",
                    weft_syscalls::Memory::Iovecs => "iovecs",
                    weft_syscalls::Memory::Address => "address",
                    weft_syscalls::Memory::Control => "control",
                    weft_syscalls::Memory::Flags => "flags",
                    weft_syscalls::Memory::Argv => "argv",
                    weft_syscalls::Memory::Environment => "environment",
                };
                serde_json::json!({"what": what, "arg": b.arg, "hex": hex, "truncated": b.truncated})
            })
            .collect();
        if !buffers.is_empty() {
            line["buffers"] = buffers.into();
        }
        if let Some(user) = call.user_ns {
            line["user_ns"] = user.into();
        }
        if call.loader {
            line["loader"] = true.into();
        }
        if let Some(r) = call.exit {
            line["result"] = r.result.into();
            if (-4095..0).contains(&r.result) {
                let errno = weft_syscalls::errno_name(-r.result as i32);
                line["errno"] = errno.split(' ').next().unwrap_or("").into();
            }
            if let Some(tsc) = r.tsc {
                let ns = tsc.saturating_sub(call.entry_tsc) as f64 / meta.ticks_per_ns;
                line["duration_ns"] = (ns.round() as u64).into();
            }
        }
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(dropped(&meta))
}
