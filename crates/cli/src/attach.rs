//! `weft attach`: instrument a running process for a while, then put every
//! byte back and leave it running.

use crate::requests::{Perturbation, Requests};
use crate::run::{is_gone, report_load, report_pending, report_skipped};
use crate::{output, signals, ProbeArgs};
use anyhow::{Context, Result};
use std::time::{Duration, Instant};
use weft_process::{ExitWatch, Tracee};

/// Attaches to `pid`, counts until `duration`, Ctrl-C or exit, detaches.
pub fn attach(
    pid: i32,
    duration: Option<Duration>,
    max_overhead: Option<f64>,
    args: &ProbeArgs,
) -> Result<i32> {
    let definitions = crate::requests::definitions(args)?;
    let exe = weft_process::exe_path(pid)?;
    weft_image::Image::open(&weft_process::path_in_root(pid, &exe))
        .with_context(|| format!("process {pid} runs {}", exe.display()))?;
    let watch = ExitWatch::new(pid)?;
    let mut session = crate::requests::session_for(pid, args)?;
    let events = crate::requests::events_dir(args)?;
    let report_out = output::open_report(args)?;
    let mut req = Requests::build(args, &mut session, events, definitions)?;
    let mut perturbation = Perturbation::new(&req)?;
    perturbation.predict(&req, pid, max_overhead, args.verbose)?;
    let prepared = session.prepare(&req.specs)?;
    report_pending(&prepared);
    let started = Instant::now();
    let mut tracee = Tracee::attach(pid)?;
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
    tracee.detach()?;
    req.sampler.live_from_now();
    let stopped = started.elapsed();
    signals::catch_stop_requests();
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
    let deadline = duration.map(|d| Instant::now() + d);
    let control = crate::control::Control::start();
    let mut view = crate::live_view::LiveView::new(pid, &req);
    let mut exec = crate::run::ExecNotice::new(pid);
    let exited = loop {
        exec.check();
        view.tick(&req);
        while let Some(line) = control.next() {
            if let Err(e) = crate::control::handle(&line, pid, &mut session, &mut req) {
                say!("weft: {}: {e:#}", line.trim());
            }
            view.interrupted();
        }
        if watch.wait(Duration::ZERO) {
            break true;
        }
        if signals::stop_requested() || deadline.is_some_and(|d| Instant::now() >= d) {
            break false;
        }
        let sample_in = req.tick(&session);
        let step = deadline.map_or(sample_in, |d| {
            d.saturating_duration_since(Instant::now()).min(sample_in)
        });
        if session.load_pending(step) {
            match session.handle_loads(&req.specs) {
                Ok(Some(report)) => {
                    report_load(&report, args.verbose);
                    req.describe_trace(&session)?;
                }
                Ok(None) => {}
                Err(e) if is_gone(&e) => break true,
                Err(e) => return Err(e.into()),
            }
        }
    };
    if exited {
        if args.verbose {
            say!("weft: process {pid} ended (weft is not its parent, so cannot tell whether it exited or was killed)");
        }
    } else {
        restore_target(pid, &mut session, args.verbose)?;
    }
    req.sampler.sample(&session);
    req.finish_tracing(&session)?;
    perturbation.report(&req, &session);
    output::write_report(
        args,
        report_out,
        &output::Report {
            counts: &session.counts(),
            metrics: &req.sampler.results(&session),
            without_thread_slot: session.threads_without_slot(),
        },
    )?;
    Ok(0)
}

/// The detach episode: every splice taken out and weft's memory reclaimed.
/// A busy program can refuse an episode for a moment (a thread that weft
/// cannot seize as it is born or exits); since giving up would leave weft's
/// code in the program, the episode is tried again for up to 10 s. Removal
/// picks up where a failed attempt stopped, from the bytes it finds.
fn restore_target(pid: i32, session: &mut weft_live::Session, verbose: bool) -> Result<()> {
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
