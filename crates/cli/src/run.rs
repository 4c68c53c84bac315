//! `weft run`: start a program with probes in place from its first
//! instruction, let it run untraced, report when it exits.

use crate::requests::{Perturbation, Requests};
use crate::{output, signals, ProbeArgs};
use anyhow::Result;
use weft_live::{AddReport, Session};
use weft_process::{
    child_has_exited, wait_child_exit, Auxv, LaunchSpec, RemoteAddr, StopReason, Tracee,
};

/// Prints what could not be instrumented (all of it with --verbose).
pub fn report_skipped(report: &AddReport, verbose: bool) {
    if report.skipped.is_empty() {
        return;
    }
    let shown = if verbose {
        report.skipped.len()
    } else {
        report.skipped.len().min(5)
    };
    say!("weft: {} point(s) not instrumented:", report.skipped.len());
    for s in &report.skipped[..shown] {
        say!("weft:   {}:{}: {}", s.module, s.function, s.why);
    }
    if shown < report.skipped.len() {
        say!("weft:   ... (--verbose lists all)");
    }
}

/// Notes patterns that wait for their library to be loaded.
pub fn report_pending(prepared: &weft_live::Prepared) {
    for p in &prepared.pending {
        say!("weft: '{p}' matches no loaded module yet; it will be instrumented when the library is loaded");
    }
    for n in &prepared.notes {
        say!("weft: note: {n}");
    }
}

/// Says which module-qualified patterns were never instrumented because
/// their library was never loaded (their rows read 0 for that reason).
pub fn report_never_loaded(session: &Session, req: &Requests) {
    for p in session.never_loaded(&req.specs) {
        say!("weft: '{p}' was never instrumented: no module it names was loaded");
    }
}

/// Prints what instrumenting a newly loaded library did (with --verbose).
pub fn report_load(report: &AddReport, verbose: bool) {
    if verbose {
        say!(
            "weft: library loaded: {} probe(s), {} jmp, {} springboard and {} int3 splice(s)",
            report.probes,
            report.jumps,
            report.springboards,
            report.traps
        );
    }
    report_skipped(report, verbose);
}

/// Runs `command` with the probes of `args`; returns the program's exit code.
pub fn run(args: &ProbeArgs, command: &[String]) -> Result<i32> {
    let mut definitions = Some(crate::requests::definitions(args)?);
    let mut events = crate::requests::events_dir(args)?;
    let report_out = output::open_report(args)?;
    let spec = LaunchSpec {
        program: command[0].clone(),
        args: command[1..].to_vec(),
    };
    let mut tracee = Tracee::launch(&spec)?;
    let pid = tracee.pid();
    let mut session = crate::requests::session_for(pid, args)?;
    let mut requests = None;
    let setup = (|| -> Result<Option<i32>> {
        let auxv = Auxv::read(pid)?;
        match tracee.run_to(RemoteAddr(auxv.entry))? {
            StopReason::Reached => {}
            StopReason::Exited(code) => return Ok(Some(code)),
            StopReason::Killed(sig) => return Ok(Some(128 + sig)),
        }
        // After the loader: the libraries (and their USDT probes) are there.
        let req = requests.insert(Requests::build(
            args,
            &mut session,
            events.take(),
            definitions.take().unwrap_or_default(),
        )?);
        let prepared = session.prepare(&req.specs)?;
        report_pending(&prepared);
        let started = std::time::Instant::now();
        let report = session.apply(&mut tracee, prepared)?;
        req.sampler.live_from_now();
        session.raise_semaphores(&tracee, &req.semaphores)?;
        session.enable_event_sites(&mut tracee, &req.event_sites, args.string_max)?;
        req.describe_trace(&session)?;
        let hooked = session.install_load_hook(&mut tracee)?;
        if args.verbose {
            output::print_points(&session.points());
            say!(
                "weft: {} probe(s), {} jmp, {} springboard and {} int3 splice(s) in {:.2} ms{}",
                report.probes,
                report.jumps,
                report.springboards,
                report.traps,
                started.elapsed().as_secs_f64() * 1e3,
                if hooked { "; watching for dlopen" } else { "" }
            );
        }
        report_skipped(&report, args.verbose);
        Ok(None)
    })();
    let code = match setup {
        Ok(Some(code)) => code,
        Ok(None) => {
            // The program weft instrumented, read while it is still stopped.
            let exec = ExecNotice::new(pid);
            tracee.detach()?;
            signals::forward_to_child(pid);
            let req = requests.as_mut().expect("built before the program ran");
            wait_serving_loads(pid, &mut session, req, args.verbose, exec)?
        }
        Err(e) => {
            // The program never ran its own code: do not leave it behind.
            // Our own child, not yet reaped, so the pid is still its own.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            drop(tracee);
            let _ = wait_child_exit(pid);
            return Err(e);
        }
    };
    let metrics = match requests.as_mut() {
        Some(req) => {
            report_never_loaded(&session, req);
            req.sampler.sample(&session);
            req.finish_tracing(&session)?;
            Perturbation::new(req)?.report(req, &session, None);
            req.sampler.results(&session)
        }
        None => vec![],
    };
    output::write_report(
        args,
        report_out,
        &output::Report {
            counts: &session.counts(),
            metrics: &metrics,
            without_thread_slot: session.threads_without_slot(),
            processes: &[],
        },
    )?;
    Ok(code)
}

/// Waits for the child to exit, instrumenting libraries it loads meanwhile.
fn wait_serving_loads(
    pid: i32,
    session: &mut Session,
    req: &mut Requests,
    verbose: bool,
    mut exec: ExecNotice,
) -> Result<i32> {
    loop {
        exec.check();
        if child_has_exited(pid)? {
            // Sample once more while the zombie's /proc entries (CPU times) remain.
            req.sampler.sample(session);
            return Ok(wait_child_exit(pid)?);
        }
        let step = req.tick(session);
        if session.load_pending(step) {
            match session.handle_loads(&req.specs) {
                Ok(Some(report)) => {
                    report_load(&report, verbose);
                    req.describe_trace(session)?;
                }
                Ok(None) => {}
                Err(e) if is_gone(&e) => return Ok(wait_child_exit(pid)?),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// Says once when the process has replaced its program (exec): weft's
/// instrumentation went with the old image, and weft does not follow. It
/// watches the command name, which a zombie still has.
pub struct ExecNotice {
    pid: i32,
    name: Option<String>,
}

impl ExecNotice {
    /// Remembers the program `pid` runs now.
    pub fn new(pid: i32) -> ExecNotice {
        ExecNotice {
            pid,
            name: weft_process::command_name(pid).ok(),
        }
    }

    /// Prints the notice if the program changed since (once).
    pub fn check(&mut self) {
        let Some(before) = &self.name else {
            return;
        };
        let Ok(now) = weft_process::command_name(self.pid) else {
            return;
        };
        if &now != before {
            say!(
                "weft: process {} ran exec ({before} became {now}); weft does not follow \
                 exec, so what it measures and traces ends there (point weft at the program \
                 itself)",
                self.pid
            );
            self.name = None;
        }
    }
}

/// Whether an error says the target went away.
pub fn is_gone(e: &weft_live::Error) -> bool {
    matches!(e, weft_live::Error::Process(p) if p.is_gone())
}
