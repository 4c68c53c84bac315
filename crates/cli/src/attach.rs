//! `weft attach`: instrument a running process for a while, then put every
//! byte back and leave it running.

use crate::requests::{Perturbation, Requests};
use crate::run::{is_gone, report_skipped};
use crate::workload::{Member, Settle, Workload};
use crate::{output, signals, ProbeArgs};
use anyhow::{bail, Context, Result};
use std::time::{Duration, Instant};
use weft_live::Session;
use weft_process::{ExitWatch, Tracee};

/// Attaches to every process of `pids`, measures until `duration`,
/// Ctrl-C or their exit, detaches. With several processes, each gets its
/// own instrumentation and its own part of the report, followed by the
/// total.
pub fn attach(
    pids: &[i32],
    duration: Option<Duration>,
    max_overhead: Option<f64>,
    follow: bool,
    args: &ProbeArgs,
) -> Result<i32> {
    if pids.len() > 1 && !args.trace.is_empty() {
        bail!(
            "--trace records one process's events into one directory: attach to one process \
             at a time to trace it (counts and metrics take several)"
        );
    }
    crate::start_background_work(args);
    if follow && args.ring_mode == crate::RingMode::Flight && !args.trace.is_empty() {
        bail!(
            "--ring-mode flight records one process: trace without --follow, or in discard \
             or block mode"
        );
    }
    let mut unique = pids.to_vec();
    unique.sort_unstable();
    unique.dedup();
    if unique.len() != pids.len() {
        bail!("-p names a process twice: give each process once");
    }
    let report_out = output::open_report(args)?;
    // Ctrl-C or SIGTERM from here on detaches (once every process is
    // attached): a request that comes while weft attaches must not kill
    // weft with its code in the processes.
    signals::catch_stop_requests();
    let definitions = crate::requests::definitions(args)?;
    let mut workload = Workload::new(follow, definitions);
    if follow && !workload.following() {
        bail!("--follow cannot follow new processes on this machine (see above)");
    }
    for &pid in pids {
        match attach_one(&mut workload, pid, max_overhead, args) {
            Ok(m) => workload.add(m),
            Err(e) => {
                // Those already attached get their code back first.
                for m in &mut workload.members {
                    if let Err(r) = restore_target(m.pid, &mut m.session, args.verbose) {
                        say!("weft: {r:#}");
                    }
                }
                return Err(if pids.len() > 1 {
                    e.context(format!("attaching to process {pid}"))
                } else {
                    e
                });
            }
        }
    }
    let deadline = duration.map(|d| Instant::now() + d);
    // Commands on standard input and the live view address one process.
    let single = pids.len() == 1 && !follow;
    let control = single.then(crate::control::Control::start);
    let mut view =
        single.then(|| crate::live_view::LiveView::new(pids[0], &workload.members[0].req));
    loop {
        if let (Some(view), [m]) = (&mut view, workload.members.as_mut_slice()) {
            view.tick(&m.req);
            while let Some(line) = control.as_ref().and_then(|c| c.next()) {
                if let Err(e) = crate::control::handle(&line, m.pid, &mut m.session, &mut m.req) {
                    say!("weft: {}: {e:#}", line.trim());
                }
                view.interrupted();
            }
        }
        for m in workload.live() {
            if let Some(exec) = &mut m.exec {
                exec.check();
            }
        }
        let alive = workload.live().count();
        if alive == 0 || signals::stop_requested() || deadline.is_some_and(|d| Instant::now() >= d)
        {
            break;
        }
        let mut step = workload
            .live()
            .map(|m| m.req.tick(&m.session))
            .min()
            .unwrap_or(Duration::from_millis(50));
        if let Some(d) = deadline {
            step = step.min(d.saturating_duration_since(Instant::now()));
        }
        workload.serve(args, step)?;
    }
    // New processes are no longer followed; those stopped for weft were
    // let go as they came.
    workload.stop_following(args)?;
    // Every process gets its code back, even if one of them refuses.
    let mut refused = None;
    for m in workload.live() {
        if let Err(e) = restore_target(m.pid, &mut m.session, args.verbose) {
            say!("weft: {e:#}");
            refused.get_or_insert(e);
        }
    }
    if let Some(e) = refused {
        return Err(e);
    }
    // A process given with -p that ended is always said (it may have
    // crashed: its numbers stop there); the processes it made, with -v.
    for m in workload.members.iter().filter(|m| m.done) {
        if args.verbose || pids.contains(&m.pid) {
            say!("weft: process {} ({}) ended while weft was attached (weft is not its parent, so cannot tell whether it exited or was killed)", m.pid, m.command);
        }
    }
    workload.finish(args, report_out)?;
    Ok(0)
}

/// Attaches to `pid` and puts the probes of `args` in place.
fn attach_one(
    workload: &mut Workload,
    pid: i32,
    max_overhead: Option<f64>,
    args: &ProbeArgs,
) -> Result<Member> {
    let definitions = crate::requests::definitions(args)?;
    let exe = weft_process::exe_path(pid)?;
    weft_image::Image::open(&weft_process::path_in_root(pid, &exe))
        .with_context(|| format!("process {pid} runs {}", exe.display()))?;
    let watch = ExitWatch::new(pid)?;
    let command = weft_process::command_name(pid).unwrap_or_default();
    let mut session = workload.session_for(pid, args)?;
    let events = crate::requests::events_dir(args)?;
    let mut req = Requests::build(args, &mut session, events, definitions)?;
    let mut perturbation = Perturbation::new(&req)?;
    perturbation.predict(&req, pid, max_overhead, args.verbose)?;
    let prepared = session.prepare(&req.specs)?;
    workload.note_prepared(&prepared, &req);
    let started = Instant::now();
    let mut tracee = Tracee::attach(pid)?;
    if let Some(paths) = &req.paths {
        paths
            .borrow_mut()
            .prepare_process(&mut session, &mut tracee)?;
    }
    let applied = session
        .apply(&mut tracee, prepared)
        .and_then(|r| session.install_load_hook(&mut tracee).map(|_| r));
    let report = match applied {
        Ok(r) => r,
        Err(e) => {
            if session.remove_all(&mut tracee).is_err() {
                drop(tracee);
                if let Err(r) = restore_target(pid, &mut session, args.verbose) {
                    say!("weft: {r:#}");
                }
            }
            return Err(e.into());
        }
    };
    session.raise_semaphores(&tracee, &req.semaphores)?;
    session.enable_event_sites(&mut tracee, &req.event_sites, args.string_max)?;
    req.describe_trace(&session)?;
    // Followed while still held: a fork right after the detach is caught.
    workload.follow(pid)?;
    tracee.detach()?;
    req.sampler.live_from_now();
    let stopped = started.elapsed();
    if args.verbose {
        output::print_points(&session.points());
        let sites = report.jumps + report.traps;
        say!(
            "weft: attached to {pid}: {} probe(s), {} jmp, {} springboard and {} int3 splice(s); target stopped {:.2} ms ({:.1} us per point)",
            report.probes,
            report.jumps,
            report.springboards,
            report.traps,
            stopped.as_secs_f64() * 1e3,
            stopped.as_secs_f64() * 1e6 / sites.max(1) as f64
        );
    }
    report_skipped(&report, args.verbose);
    Ok(Member {
        pid,
        command,
        session,
        req,
        perturbation,
        watch: Some(watch),
        done: false,
        exec: (!workload.following()).then(|| crate::run::ExecNotice::new(pid)),
        starting: None,
        rewrites_failed: 0,
        since: std::time::Instant::now(),
        settle: Settle::Waiting,
    })
}

/// The detach episode: every splice taken out and weft's memory reclaimed.
/// A busy program can refuse an episode for a moment (a thread that weft
/// cannot seize as it is born or exits); since giving up would leave weft's
/// code in the program, the episode is tried again for up to 10 s. Removal
/// picks up where a failed attempt stopped, from the bytes it finds.
fn restore_target(pid: i32, session: &mut Session, verbose: bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let outcome = Tracee::attach(pid)
            .map_err(weft_live::Error::from)
            .and_then(|mut tracee| {
                let notes = session.remove_all(&mut tracee)?;
                tracee.detach()?;
                Ok(notes)
            });
        match outcome {
            Ok(notes) => {
                for n in notes {
                    say!("weft: note: {n}");
                }
                if verbose {
                    say!("weft: detached from {pid}; original code restored");
                }
                return Ok(());
            }
            Err(e) if is_gone(&e) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                if verbose {
                    say!("weft: taking instrumentation out of {pid} failed ({e}); trying again");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "could not take weft's instrumentation out of process {pid} within 10 s; \
                     what stays keeps working without weft"
                )))
            }
        }
    }
}
