//! `weft run`: start a program with probes in place from its first
//! instruction, let it run untraced, report when it exits.

use crate::{output, signals, ProbeArgs};
use anyhow::{bail, Result};
use weft_live::{AddReport, PointSpec, Session};
use weft_process::{wait_child_exit, Auxv, LaunchSpec, RemoteAddr, StopReason, Tracee};

/// The probe requests of the command line.
pub fn parse_specs(args: &ProbeArgs) -> Result<Vec<PointSpec>> {
    let mut specs = Vec::new();
    for p in &args.count {
        specs.push(PointSpec::parse(p)?);
    }
    for p in &args.count_exits {
        specs.push(PointSpec::exits(p)?);
    }
    if specs.is_empty() {
        bail!("nothing to count: give --count PATTERN (for example --count main or --count 'libc.so.6:malloc')");
    }
    Ok(specs)
}

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
    eprintln!("weft: {} point(s) not instrumented:", report.skipped.len());
    for s in &report.skipped[..shown] {
        eprintln!("weft:   {}:{}: {}", s.module, s.function, s.why);
    }
    if shown < report.skipped.len() {
        eprintln!("weft:   ... (--verbose lists all)");
    }
}

/// Runs `command` with the probes of `args`; returns the program's exit code.
pub fn run(args: &ProbeArgs, command: &[String]) -> Result<i32> {
    let specs = parse_specs(args)?;
    let spec = LaunchSpec {
        program: command[0].clone(),
        args: command[1..].to_vec(),
    };
    let mut tracee = Tracee::launch(&spec)?;
    let pid = tracee.pid();
    let setup = (|| -> Result<Option<(Session, i32)>> {
        let auxv = Auxv::read(pid)?;
        match tracee.run_to(RemoteAddr(auxv.entry))? {
            StopReason::Reached => {}
            StopReason::Exited(code) => return Ok(Some((Session::new(pid)?, code))),
            StopReason::Killed(sig) => return Ok(Some((Session::new(pid)?, 128 + sig))),
        }
        let mut session = Session::new(pid)?;
        let prepared = session.prepare(&specs)?;
        let started = std::time::Instant::now();
        let report = session.apply(&mut tracee, prepared)?;
        if args.verbose {
            output::print_points(&session.points());
            eprintln!(
                "weft: {} probe(s), {} jmp and {} int3 splice(s) in {:.2} ms",
                report.probes,
                report.jumps,
                report.traps,
                started.elapsed().as_secs_f64() * 1e3
            );
        }
        report_skipped(&report, args.verbose);
        Ok(Some((session, -1)))
    })();
    let (session, early_exit) = match setup {
        Ok(Some(s)) => s,
        Ok(None) => unreachable!("setup always returns a session"),
        Err(e) => {
            // The program never ran its own code: do not leave it behind.
            // SAFETY: kill on our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            drop(tracee);
            let _ = wait_child_exit(pid);
            return Err(e);
        }
    };
    let code = if early_exit >= 0 {
        early_exit
    } else {
        tracee.detach()?;
        signals::forward_to_child(pid);
        wait_child_exit(pid)?
    };
    output::write_counts(args, &session.counts())?;
    Ok(code)
}
