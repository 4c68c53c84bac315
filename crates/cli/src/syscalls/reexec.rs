//! `weft syscalls reexec DIR -- CMD`: the real program run again under
//! weft, its calls fed from the record (`weft_syscalls::reexec`): weft
//! builds the feed, starts CMD with the feed probes at every `syscall`
//! instruction of every process it makes, watches the feed for a
//! divergence (ending the rerun at the first), and reports.

use super::watch::{unfinished_ends, watch, Ended, Stall};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use weft_abi::feed as f;
use weft_syscalls::reexec::{self as rx, Divergence};
use weft_syscalls::Call;

/// Runs `command` fed from the record in `dir`; the exit status: the
/// program's, or 1 when it diverged from the record.
pub fn reexec(
    dir: &Path,
    mode: weft_syscalls::deps::Mode,
    json: Option<&Path>,
    limits: &super::LimitArgs,
    stall: Duration,
    command: &[String],
) -> Result<i32> {
    let (meta, calls, known) = super::read_calls(dir)?;
    if meta.dropped > 0 {
        anyhow::bail!(
            "{} lost {} event(s) while it was recorded, so calls are missing from it and a rerun would diverge where they are: record again (`weft syscalls record --force -o DIR -- CMD`)",
            dir.display(),
            meta.dropped
        );
    }
    let resources = weft_syscalls::fds::resolve(&calls, &known);
    let edges = weft_syscalls::deps::edges(&calls, &resources, mode);
    let mut feed = rx::build_feed(&calls, &resources, &edges);
    // The program starts as it was recorded: with its environment.
    let recorded = super::command::read(dir)?;
    if meta.deliveries {
        rx::feed_signals(&mut feed.bytes);
        // A process weft attached to had its layout randomised: the
        // rerun's addresses are not its.
        if recorded.is_none() {
            rx::rips_unknown(&mut feed.bytes);
        }
    }
    let path = std::env::temp_dir().join(format!("weft-feed-{}", std::process::id()));
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, &feed.bytes))
        .with_context(|| format!("writing the feed {}", path.display()))?;
    let feed_path = Removed(path.clone());
    let env_path = Removed(path.with_extension("env"));
    if let Some(r) = &recorded {
        if r.argv != command {
            say!(
                "weft: the record is of `{}`, this is `{}`: another command's calls differ",
                r.argv.join(" "),
                command.join(" ")
            );
        }
        let here = std::env::current_dir().unwrap_or_default();
        if r.cwd != here {
            say!(
                "weft: the record was made in {}, this is {}: paths relative to it may differ",
                r.cwd.display(),
                here.display()
            );
        }
        super::command::write_environment(&env_path.0, &r.env)?;
    }
    let done = Arc::new(AtomicBool::new(false));
    let unfinished = unfinished_ends(&calls, &feed, meta.ticks_per_ns);
    let feed_lengths: Vec<u64> = feed.calls.iter().map(|ks| ks.len() as u64).collect();
    let stall = Stall::new(&calls, &feed, meta.ticks_per_ns, stall);
    let ended = Arc::new(std::sync::Mutex::new(Ended::default()));
    let watcher = {
        let (path, done, ended) = (path.clone(), done.clone(), ended.clone());
        std::thread::spawn(move || {
            watch(&path, &done, (&unfinished, &feed_lengths), &stall, &ended)
        })
    };
    // The rerun's processes (not weft) in the configuration asked for.
    let group = limits.prepare(&format!("weft-reexec-{}", std::process::id()))?;
    let mut options: Vec<std::ffi::OsString> = ["weft", "--reexec-feed"].map(Into::into).to_vec();
    options.push(path.clone().into());
    options.push("--no-aslr".into());
    // A rerun keeps its calls under dispatch: a settled process's sites
    // hand the feed no call through the SIGSYS handler's frame it reads.
    options.push("--settle-after".into());
    options.push("never".into());
    // The recorded pid, when it is free: a signal's sender is then the
    // id the rerun's getpid() answers (glibc's cancellation checks so).
    let recorded_pid = feed.rings.first().copied().unwrap_or(0);
    if recorded_pid > 0 {
        options.push("--launch-pid".into());
        options.push(recorded_pid.to_string().into());
    }
    // The record says where each signal reached a handler: the rerun's
    // handlers run there, and at no other signal.
    if meta.deliveries {
        options.push("--feed-signals".into());
    }
    if recorded.is_some() {
        options.push("--launch-env".into());
        options.push(env_path.0.clone().into());
    }
    for procs in group.iter().flat_map(|g| g.procs_files()) {
        options.push("--join-cgroup".into());
        options.push(procs.into());
    }
    let probes = <super::Probes as clap::Parser>::try_parse_from(options)?.probes;
    let status = crate::run::run(&probes, true, command);
    let peak = group.as_ref().and_then(|g| g.peak_memory());
    let oom_kills = group.as_ref().map_or(0, |g| g.oom_kills());
    drop(group);
    if oom_kills > 0 {
        say!(
            "weft: the kernel's OOM killer ended {oom_kills} process(es) of the rerun under the \
             group's memory limit (the program's memory and weft's, in the program, do not fit)"
        );
    }
    done.store(true, Ordering::Relaxed);
    let diverged = watcher.join().unwrap_or(None);
    let ended = *ended.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = ended.inside {
        say!(
            "weft: the record ends inside {} (its process was killed, or the record stopped \
             there): the rerun, as long in it, was ended",
            weft_syscalls::strace_line(&calls[k])
        );
    }
    let bytes = std::fs::read(&feed_path.0)?;
    drop(feed_path);
    let other_pids = other_pids(&calls, &known, &feed, &rx::progress(&bytes));
    let sender_checked = sender_checked(&calls, recorded_pid, &rx::exact_ids(&bytes), &other_pids);
    if let Some((k, waited, true)) = ended.stalled {
        say!(
            "weft: the rerun stalled: recorded thread {}'s thread waited {waited:.1} s in the rerun in a futex call its record does not have, before its call {}: a lock or a join the rerun's threads wait for in another order than the record's, or for a thread that will not come; weft ended the rerun (--stall sets how long it waits)",
            calls[k].tid,
            weft_syscalls::strace_line(&calls[k])
        );
    }
    if let Some((k, waited, false)) = ended.stalled {
        let c = &calls[k];
        let took = (c.exit.and_then(|e| e.tsc)).map_or(0, |end| end.saturating_sub(c.entry_tsc))
            as f64
            / meta.ticks_per_ns.max(1e-9)
            / 1e9;
        let why = match sender_checked {
            // The likelier reason, said below.
            Some(_) => "a signal the rerun could not send as recorded (below)",
            None => {
                "what it waits for is not part of the rerun (a process outside the workload, the \
                 other end of a FIFO, a server it talks to)"
            }
        };
        say!(
            "weft: the rerun stalled: recorded thread {}'s call waited {waited:.1} s in the rerun: {}, which returned after \
             {took:.6} s in the record. Most likely {why}: weft ended the rerun (--stall sets how \
             long past ten times the recorded time it waits)",
            c.tid,
            weft_syscalls::strace_line(c)
        );
    }
    let later: Vec<String> = (other_pids.iter())
        .filter(|(&recorded, _)| recorded != recorded_pid)
        .map(|(recorded, (rerun, why))| format!("{recorded} as {rerun} ({why})"))
        .collect();
    if !later.is_empty() {
        say!(
            "weft: {} process(es) of the rerun ran with other pids than recorded: {}. What the \
             kernel says of them differs from what the rerun answers for them: /proc/PID is not \
             theirs, and a signal's sender is not getpid() (docs/syscalls.md, \"Process ids\")",
            later.len(),
            later.join(", ")
        );
    }
    let status = status?;
    let mut progress = rx::progress(&bytes);
    // The call a thread diverged at was taken from its feed, not made.
    if let Some((
        Divergence {
            feed: Some(i),
            kind: f::DIFFERS,
            ..
        },
        _,
        _,
    )) = &diverged
    {
        if let Some(p) = progress.get_mut(*i) {
            p.cursor = p.cursor.saturating_sub(1);
        }
    }
    let mut by_reason: BTreeMap<rx::Answer, usize> = BTreeMap::new();
    let mut made = 0u64;
    let mut answered = 0u64;
    for (i, p) in progress.iter().enumerate() {
        made += p.cursor;
        answered += p.answered;
        for &k in feed.calls[i].iter().take(p.cursor as usize) {
            if let Some(&why) = feed.answers.get(&k) {
                *by_reason.entry(why).or_default() += 1;
            }
        }
    }
    let reruns = rx::rerun_calls(&bytes, &feed);
    let spans = Spans::of(&calls, &reruns, meta.ticks_per_ns);
    // Calls made again whose results are not the recorded ones (addresses
    // aside): what the rerun found different before it diverged, if it
    // did.
    let differ: Vec<(usize, i64)> = (0..calls.len())
        .filter(|k| !feed.answers.contains_key(k))
        .filter_map(|k| {
            let (_, result) = reruns.get(&k)?.ended?;
            // A call that never returned in the record (a successful
            // `execve`, whose slot the parent's return shares) has no
            // result to compare.
            let recorded = calls[k].exit.filter(|e| e.tsc.is_some())?.result;
            let nr = calls[k].nr;
            let comparable = !weft_syscalls::returns_address(nr)
                && !rx::result_is_translated(nr)
                && !rx::result_is_an_id(nr);
            (recorded != result && comparable).then_some((k, result))
        })
        .collect();
    let reasons: Vec<String> = by_reason
        .iter()
        .map(|(why, n)| format!("{n} {}", why.describe()))
        .collect();
    let deliveries = calls
        .iter()
        .filter(|c| weft_syscalls::is_delivery(c))
        .count();
    let raised: u64 = progress.iter().map(|p| p.raised).sum();
    say!(
        "weft: re-executed {} of the {} recorded calls ({} thread(s) of {}), {answered} answered from the record{}",
        made - raised,
        calls.len() - deliveries,
        progress.iter().filter(|p| p.tid != 0).count(),
        progress.len(),
        match reasons.is_empty() {
            true => String::new(),
            false => format!(": {}", reasons.join(", ")),
        }
    );
    let configuration = limits.describe();
    let held = match spans.held_s > 0.0 {
        true => format!(
            ", {:.6} s of it weft instrumenting libraries or images while the workload had no \
             other process (predicted without it: {:.6} s)",
            spans.held_s, spans.predicted_s
        ),
        false => String::new(),
    };
    say!(
        "weft: the fed calls spanned {:.6} s in the rerun{}{held}, {:.6} s in the record (first \
         call to last return){}",
        spans.rerun_s,
        match configuration.is_empty() {
            true => String::new(),
            false => format!(" ({configuration})"),
        },
        spans.recorded_s,
        peak.map_or(String::new(), |p| format!(
            "; the rerun's peak memory {:.1} MiB",
            p as f64 / 1048576.0
        )),
    );
    if let Some(&(k, result)) = differ.first() {
        say!(
            "weft: {} call(s) made again returned other results than recorded; the first, of recorded thread {}: {}, returned {result}",
            differ.len(),
            calls[k].ring,
            weft_syscalls::strace_line(&calls[k])
        );
    }
    if feed.waits > 0 {
        let given_up: u64 = progress.iter().map(|p| p.waits_given_up).sum();
        say!(
            "weft: {} wait(s) of a call for another thread's call it depends on, as the record orders them{}",
            feed.waits,
            match given_up {
                0 => String::new(),
                n => format!(" ({n} wait(s) given up: the other call never came)"),
            }
        );
    }
    let (extra, skipped) = progress
        .iter()
        .fold((0, 0), |(e, s), p| (e + p.futexes.0, s + p.futexes.1));
    if extra + skipped > 0 {
        say!(
            "weft: {extra} futex call(s) the record did not have were made, and {skipped} recorded ones were not needed (whether a thread waits for a lock or a join is timing)"
        );
    }
    if deliveries > 0 {
        say!(
            "weft: {raised} of the record's {deliveries} signal deliveries were raised for the program's handlers at the places the record gives (the first call, return or instruction after the signal; signals the rerun's own processes sent to those handlers were dropped)"
        );
    }
    if feed.interrupted > 0 {
        say!(
            "weft: {} recorded call(s) that a signal interrupted and the program made again were left out (a call interrupted in the rerun stands for its recorded one again)",
            feed.interrupted
        );
    }
    if !feed.cut.is_empty() {
        say!(
            "weft: {} call(s) were made, not answered: the record holds their bytes cut (more than {} a call)",
            feed.cut.len(),
            weft_syscalls::DATA_MAX
        );
    }
    if let Some(path) = json {
        let report = serde_json::json!({
            "made": made,
            "answered": answered,
            "waits": feed.waits,
            "recorded_s": spans.recorded_s,
            "rerun_s": spans.rerun_s,
            "held_s": spans.held_s,
            "predicted_s": spans.predicted_s,
            "configuration": configuration,
            "differ": differ.len(),
            "peak_memory": peak,
            "diverged": diverged.as_ref().map(|(d, paths, stack)| describe_divergence(d, paths, stack, &feed, &calls)),
            "calls": spans.calls,
        });
        std::fs::write(path, format!("{report}\n"))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some((d, paths, stack)) = diverged {
        say!("{}", describe_divergence(&d, &paths, &stack, &feed, &calls));
        if !stack.is_empty() {
            say!("weft: its call stack (from .eh_frame):");
            for (k, frame) in stack.iter().enumerate() {
                say!("  #{k:<2} {frame}");
            }
        }
        if let Some(why) = &sender_checked {
            say!("{why}");
        }
        return Ok(1);
    }
    if ended.stalled.is_some() {
        if let Some(why) = &sender_checked {
            say!("{why}");
        }
        return Ok(1);
    }
    // A thread that made fewer calls than its record diverged too, but
    // for the last one of a process killed by a signal in the record,
    // blocked there (`= ?`): killed in the rerun, it may not have come to
    // make it (its killer's signal raised where the record had it, after
    // the calls that had returned by then).
    let mut killed = weft_syscalls::killed::killed(&calls);
    killed.extend(
        meta.killed
            .iter()
            .map(|(&pid, &signal)| (pid, signal as u32)),
    );
    let killed_in_it = |i: usize, cursor: usize| {
        let ks = &feed.calls[i];
        let last = &calls[ks[ks.len() - 1]];
        cursor + 1 == ks.len() && last.exit.is_none() && killed.contains_key(&meta.pid_of(last.tid))
    };
    let short: Vec<String> = progress
        .iter()
        .enumerate()
        .filter(|(i, p)| (p.cursor as usize) < feed.calls[*i].len())
        .filter(|(i, p)| !killed_in_it(*i, p.cursor as usize))
        .map(|(i, p)| {
            let next = &calls[feed.calls[i][p.cursor as usize]];
            format!(
                "recorded thread {} made {} of its {} calls (next: {})",
                feed.rings[i],
                p.cursor,
                feed.calls[i].len(),
                weft_syscalls::name(next.nr)
            )
        })
        .collect();
    if !short.is_empty() {
        say!(
            "weft: the rerun ended before the record did: {}",
            short.join("; ")
        );
        return Ok(1);
    }
    Ok(status)
}

/// The time the fed calls took, recorded and in the rerun.
struct Spans {
    /// From the record's first call to its last return, in seconds.
    recorded_s: f64,
    /// The same in the rerun, from its first process's `exec` (as
    /// `actual` times the program) to the last return.
    rerun_s: f64,
    /// Of which weft held the workload's only live process (a library
    /// load or a new image instrumented: `workload::SOLE_HOLDS`).
    held_s: f64,
    /// The rerun's span without weft's holds: the prediction.
    predicted_s: f64,
    /// Per recorded call: when the rerun made it and when it returned, in
    /// seconds from the rerun's start (its first process's `exec`, else
    /// its first call: `began_s`, `ended_s`), and
    /// its result there (`result`); null where the rerun did not get
    /// there.
    calls: Vec<serde_json::Value>,
}

impl Spans {
    fn of(
        calls: &[Call],
        reruns: &std::collections::HashMap<usize, rx::Rerun>,
        recorded_ticks_per_ns: f64,
    ) -> Spans {
        let span = |first: Option<u64>, last: Option<u64>, ticks_per_ns: f64| match (first, last) {
            (Some(a), Some(b)) if b > a => (b - a) as f64 / ticks_per_ns / 1e9,
            _ => 0.0,
        };
        // From the first call the program's own code made: the loader's
        // before it come before weft's stop to instrument the libraries.
        let own = |k: &usize| calls.iter().position(|c| !c.loader).is_none_or(|f| *k >= f);
        let recorded_s = span(
            (0..calls.len())
                .filter(own)
                .map(|k| calls[k].entry_tsc)
                .min(),
            calls
                .iter()
                .filter_map(|c| c.exit.and_then(|e| e.tsc))
                .max(),
            recorded_ticks_per_ns,
        );
        let ticks_per_ns = weft_live::clock::ticks_per_ns();
        // From the first process's `exec`, as the program's own run is
        // timed (`actual`): the loader's work is in the prediction, weft's
        // holds before it ran are taken out below. Else from its first own
        // call.
        let started = *crate::workload::WORKLOAD_START
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let first = started.or_else(|| {
            (reruns.iter())
                .filter(|(k, _)| own(k))
                .map(|(_, r)| r.began)
                .min()
        });
        let last = reruns.values().filter_map(|r| r.ended).map(|e| e.0).max();
        let seconds = |tsc: u64| tsc.saturating_sub(first.unwrap_or(0)) as f64 / ticks_per_ns / 1e9;
        let calls = (0..calls.len())
            .map(|k| match reruns.get(&k) {
                Some(r) => serde_json::json!({
                    "began_s": seconds(r.began),
                    "ended_s": r.ended.map(|e| seconds(e.0)),
                    "result": r.ended.map(|e| e.1),
                }),
                None => serde_json::json!({"began_s": null, "ended_s": null, "result": null}),
            })
            .collect();
        // weft's holds of the workload's only process within the span.
        let held_s = match (first, last) {
            (Some(a), Some(b)) => {
                let holds = crate::workload::SOLE_HOLDS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                holds
                    .iter()
                    .map(|&(from, to)| to.min(b).saturating_sub(from.max(a)))
                    .sum::<u64>() as f64
                    / ticks_per_ns
                    / 1e9
            }
            _ => 0.0,
        };
        let rerun_s = span(first, last, ticks_per_ns);
        Spans {
            recorded_s,
            rerun_s,
            held_s,
            predicted_s: (rerun_s - held_s).max(0.0),
            calls,
        }
    }
}

/// The feed file, removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The paths a diverging call names, read from its thread's memory (it
/// waits in weft's code until weft ends it).
pub(super) fn paths_of(d: &Divergence) -> Vec<String> {
    use weft_process::ProcessMemory;
    let Ok(memory) = weft_process::ProcMemory::open(d.tid) else {
        return Vec::new();
    };
    weft_syscalls::path_arguments(d.nr)
        .iter()
        .filter_map(|&arg| {
            let at = weft_process::RemoteAddr(d.args[arg]);
            // A string near the end of its mapping: read less.
            let bytes = [256, 64, 16]
                .iter()
                .find_map(|&n| memory.read_vec(at, n).ok())?;
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            Some(String::from_utf8_lossy(&bytes[..end]).into_owned())
        })
        .collect()
}

/// Frames a backtrace shows at most.
const FRAMES_MAX: usize = 32;

/// The diverging thread's call stack, innermost first, each frame as
/// `module:function+0xOFF`: unwound with the modules' `.eh_frame` from
/// the registers the feed probe saved (the call's site, `rsp`, the
/// callee-saved ones), reading the stack while the thread waits.
pub(super) fn backtrace_of(d: &Divergence) -> Vec<String> {
    use weft_process::ProcessMemory;
    let (Ok(maps), Ok(memory)) = (
        weft_process::maps::read(d.tid),
        weft_process::ProcMemory::open(d.tid),
    ) else {
        return Vec::new();
    };
    let Ok(mut modules) = weft_live::Module::discover(d.tid, &maps, &[]) else {
        return Vec::new();
    };
    if let Ok(Some(vdso)) = weft_live::Module::vdso(d.tid, &maps) {
        modules.push(vdso);
    }
    // The site's name: `module:function+0xOFF` (a vDSO entry's has no
    // offset).
    let pc = rx::site_name(d.site).and_then(|site| {
        let (module, rest) = site.split_once(':')?;
        let (function, offset) = match rest.rsplit_once("+0x") {
            Some((f, o)) => (f, u64::from_str_radix(o, 16).ok()?),
            None => (rest, 0),
        };
        let m = modules.iter().find(|m| m.name == module)?;
        Some(m.runtime(m.image.function_named(function)?.addr).get() + offset)
    });
    let mut read = |at: u64| {
        let bytes = memory.read_vec(weft_process::RemoteAddr(at), 8).ok()?;
        Some(u64::from_le_bytes(bytes.try_into().ok()?))
    };
    // A call weft's SIGSYS handler made: the thread's own registers are in
    // the signal frame, its call 2 bytes before the pc there.
    let dispatched = rx::site_name(d.site)
        .is_some_and(|s| s.starts_with(&format!("{}:", weft_abi::dispatch::MODULE_NAME)));
    let mut frame = match (dispatched, pc) {
        (true, _) => {
            use weft_abi::sigaction::ucontext as uc;
            let at = weft_abi::dispatch::ucontext_at(d.rsp);
            let reg = |offset: u64| read(at + offset);
            let (Some(pc), Some(rsp)) = (reg(uc::RIP), reg(uc::RSP)) else {
                return Vec::new();
            };
            let saved = [uc::RBX, uc::RBP, uc::R12, uc::R13, uc::R14, uc::R15]
                .map(|offset| reg(offset).unwrap_or(0));
            weft_image::Frame::new(pc - 2, rsp, saved)
        }
        (false, Some(pc)) => weft_image::Frame::new(pc, d.rsp, d.callee_saved),
        (false, None) => return Vec::new(),
    };
    let mut out = Vec::new();
    for k in 0..FRAMES_MAX {
        let Some(m) = modules.iter().find(|m| (m.lo..m.hi).contains(&frame.pc)) else {
            out.push(format!("{:#x}", frame.pc));
            break;
        };
        // A return address may be one past its function (a call that
        // does not return): its function is the call's.
        let at = m.file_addr(weft_process::RemoteAddr(frame.pc));
        let lookup = weft_image::FileAddr(at.get() - u64::from(k > 0));
        out.push(match m.image.function_at(lookup) {
            Some(f) => format!(
                "{}:{}+{:#x}",
                m.name,
                f.display_name(),
                at.get() - f.addr.get()
            ),
            None => format!("{}+{:#x}", m.name, at.get()),
        });
        match m.image.caller(&frame, m.bias, k == 0, &mut read) {
            // Each caller's frame is above its callee's.
            Some(up) if up.pc != 0 && up.regs[7] > frame.regs[7] => frame = up,
            _ => break,
        }
    }
    out
}

/// The report of a divergence: the rerun's call, the recorded one, where.
fn describe_divergence(
    d: &Divergence,
    paths: &[String],
    stack: &[String],
    feed: &rx::FeedFile,
    calls: &[Call],
) -> String {
    let mut site = rx::site_name(d.site).unwrap_or_else(|| format!("site {}", d.site));
    // A call weft's SIGSYS handler made was made where its stack begins.
    if site.starts_with(&format!("{}:", weft_abi::dispatch::MODULE_NAME)) {
        if let Some(first) = stack.first() {
            site = first.clone();
        }
    }
    // The call as `show` prints the recorded one, with the paths it named.
    let made = Call {
        tid: d.tid,
        ring: d.tid,
        entry_tsc: 0,
        user_ns: None,
        loader: false,
        nr: d.nr,
        vdso: site.starts_with(weft_live::VDSO_NAME),
        args: d.args,
        exit: None,
        buffers: weft_syscalls::path_arguments(d.nr)
            .iter()
            .zip(paths)
            .map(|(&arg, path)| weft_syscalls::Buffer {
                what: weft_syscalls::Memory::Path,
                arg,
                bytes: path.as_bytes().to_vec(),
                truncated: false,
            })
            .collect(),
    };
    let line = weft_syscalls::strace_line(&made);
    let asked = line.strip_suffix(" = ?").unwrap_or(&line);
    let Some(i) = d.feed else {
        return format!(
            "weft: the rerun diverged: thread {} is none the record made (its first call: {asked} in {site})",
            d.tid
        );
    };
    let ring = feed.rings.get(i).copied().unwrap_or(0);
    let recorded = feed
        .calls
        .get(i)
        .and_then(|ks| ks.get(d.call as usize))
        .map(|&k| weft_syscalls::strace_line(&calls[k]));
    match (d.kind, recorded) {
        (f::BEYOND, _) | (_, None) => format!(
            "weft: the rerun diverged: thread {} (recorded thread {ring}) made a call after its {} recorded ones: {asked} in {site}",
            d.tid, d.call
        ),
        (_, Some(recorded)) => format!(
            "weft: the rerun diverged at call {} of thread {} (recorded thread {ring}): it made {asked} in {site}, where the record has {recorded}",
            d.call + 1,
            d.tid
        ),
    }
}

/// The recorded processes whose rerun ran with another pid: by recorded
/// pid, the rerun's and why. A process's main thread is the feed of a
/// ring whose id is its process's.
fn other_pids(
    calls: &[weft_syscalls::Call],
    known: &std::collections::HashMap<i32, i32>,
    feed: &rx::FeedFile,
    progress: &[rx::Progress],
) -> std::collections::BTreeMap<i32, (i32, &'static str)> {
    // SAFETY: geteuid only reads this process's effective user id.
    let root = unsafe { libc::geteuid() } == 0;
    let made_by = |pid: i32| {
        calls.iter().find(|c| {
            [56, 57, 58, 435].contains(&c.nr) && c.exit.is_some_and(|e| e.result == i64::from(pid))
        })
    };
    (feed.rings.iter().zip(progress))
        .filter(|&(&ring, p)| known.get(&ring).is_none_or(|&pid| pid == ring) && p.tid > 0 && p.tid != ring)
        .map(|(&ring, p)| {
            let why = match made_by(ring) {
                _ if !root => "weft may choose pids only as root",
                Some(c) if !rx::forks(c) => {
                    "made by vfork, posix_spawn or a clone on a stack of its own, which keep the id the kernel picks"
                }
                _ => "another process had its pid",
            };
            (ring, (p.tid, why))
        })
        .collect()
}

/// Why a rerun cannot send a signal the C library checks the sender of,
/// if its record has one: glibc's thread cancellation (`SIGRTMIN`) and
/// its broadcast of a `set*id` call to every thread (`SIGRT_1`) act only
/// on a signal whose sender (`si_pid`) is `getpid()`, which the rerun
/// answers with the recorded pid. They work in the rerun's processes
/// that have their recorded pid (`exact`), nowhere else; `other` says
/// why a process has another.
fn sender_checked(
    calls: &[weft_syscalls::Call],
    first: i32,
    exact: &std::collections::HashSet<i32>,
    other: &std::collections::BTreeMap<i32, (i32, &'static str)>,
) -> Option<String> {
    const SIGCANCEL: u64 = 32;
    const SIGSETXID: u64 = 33;
    let (process, signal) = calls.iter().find_map(|c| {
        let (process, signal) = match c.nr {
            234 => (Some(c.args[0] as i32), c.args[2]),
            200 => (None, c.args[1]),
            _ => return None,
        };
        let checked = signal == SIGCANCEL || signal == SIGSETXID;
        (checked && !process.is_some_and(|p| exact.contains(&p))).then_some((process, signal))
    })?;
    let what = match signal {
        SIGCANCEL => "a thread cancelled (`pthread_cancel`: a tgkill of SIGRTMIN)",
        _ => "a set*id call sent to every thread (glibc's broadcast: a tgkill of SIGRT_1)",
    };
    let process = match process {
        Some(pid) if pid == first => format!(
            "in the first process ({pid}), which the rerun could not start with its recorded \
             pid (another process had it, or weft may not choose pids: not root)"
        ),
        Some(pid) => match other.get(&pid) {
            Some((rerun, why)) => {
                format!("in process {pid}, which ran as {rerun} in the rerun: {why}")
            }
            None => {
                format!("in process {pid}, which the rerun did not start with its recorded pid")
            }
        },
        None => "by tkill, whose process weft does not know".to_string(),
    };
    Some(format!(
        "weft: the record has {what} {process}, so the rerun cannot do it: the C library acts on \
         that signal only when its sender is getpid(), which the rerun answers with the recorded \
         id (docs/syscalls.md, \"Process ids\")"
    ))
}
