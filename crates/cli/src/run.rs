//! `weft run`: start a program with probes in place from its first
//! instruction, let it run untraced, report when it exits.

use crate::requests::{Perturbation, Requests};
use crate::workload::{Member, Settle, Workload};
use crate::{output, signals, ProbeArgs};
use anyhow::Result;
use weft_live::{AddReport, Session};
use weft_process::{
    child_has_exited, wait_child_exit, Auxv, LaunchSpec, RemoteAddr, StopReason, Tracee,
};

/// Set when weft itself ends the program it runs with `SIGKILL` (a
/// re-execution that diverged or stalled): its end is then not reported
/// as a kill, which `reexec` explains instead.
pub static ENDED_BY_WEFT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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

/// Notes patterns that wait for their library to be loaded, and what the
/// user should know about how patterns resolved.
pub fn report_pending(pending: &[String], notes: &[String]) {
    for p in pending {
        say!("weft: '{p}' matches no loaded module yet; it will be instrumented when the library is loaded");
    }
    for n in notes {
        say!("weft: note: {n}");
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

/// Runs `command` with the probes of `args`; returns the program's exit
/// code. With `follow`, every process the program starts and every
/// program they exec is measured too, each in its own part of the report.
pub fn run(args: &ProbeArgs, follow: bool, command: &[String]) -> Result<i32> {
    let definitions = crate::requests::definitions(args)?;
    let mut events = crate::requests::events_dir(args)?;
    let report_out = output::open_report(args)?;
    let flight = args.ring_mode == crate::RingMode::Flight && !args.trace.is_empty();
    if follow && flight {
        say!(
            "weft: --ring-mode flight records the process weft starts only: its children and \
             the programs it execs are not followed (give --no-follow to silence this)"
        );
    }
    let follow = follow && !flight;
    let mut workload = Workload::new(follow, definitions.clone());
    let spec = LaunchSpec {
        program: command[0].clone(),
        args: command[1..].to_vec(),
        no_aslr: args.no_aslr,
        env: match &args.launch_env {
            Some(file) => Some(crate::syscalls::read_environment(file)?),
            None => None,
        },
        pid: args.launch_pid,
    };
    let mut tracee = Tracee::launch(&spec)?;
    if let Some(asked) = spec.pid.filter(|&p| p != tracee.pid()) {
        // SAFETY: geteuid only reads this process's effective user id.
        let why = match unsafe { libc::geteuid() } {
            0 => "another process has that id now",
            _ => "weft may choose process ids only as root",
        };
        say!(
            "weft: the rerun's first process runs as pid {}, not as its recorded {asked}: {why}. \
             What the kernel says of it then differs from what the rerun answers for it: \
             /proc/{asked} is not its own, and a signal's sender is not getpid() \
             (docs/syscalls.md, \"Process ids\")",
            tracee.pid()
        );
    }
    if weft_process::runs_64_bit(tracee.pid()) == Some(false) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(tracee.pid()),
            nix::sys::signal::Signal::SIGKILL,
        );
        let pid = tracee.pid();
        drop(tracee);
        let _ = wait_child_exit(pid);
        anyhow::bail!(
            "{} is a 32-bit program, and weft measures x86-64 programs only",
            command[0]
        );
    }
    // Stopped at its exec: the group holds all it and its children run.
    for procs in &args.join_cgroup {
        if let Err(e) = std::fs::write(procs, tracee.pid().to_string()) {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(tracee.pid()),
                nix::sys::signal::Signal::SIGKILL,
            );
            anyhow::bail!(
                "moving {} into the control group ({}): {e}",
                command[0],
                procs.display()
            );
        }
    }
    crate::start_background_work(args);
    let pid = tracee.pid();
    let mut session = workload.session_for(pid, args)?;
    // The workload's start, then weft's two holds of it before it runs its
    // own code (instrumenting it at its exec, then its libraries): what
    // `syscalls reexec` predicts from (`workload::WORKLOAD_START`).
    let at_exec = weft_live::clock::tsc();
    crate::workload::note_workload_start(at_exec);
    let mut libraries_from = None;
    let setup = (|| -> Result<Result<Requests, i32>> {
        let auxv = Auxv::read(pid)?;
        let started = std::time::Instant::now();
        // The loader's calls too: probes before its first instruction.
        let mut early = None;
        if from_first_instruction(args) && session.begin_startup(&mut tracee)? {
            let req = Requests::build(args, &mut session, events.take(), definitions.clone())?;
            let report = place_first(args, &mut session, &mut tracee, &req)?;
            req.map_feed(&mut session, &mut tracee, Some(pid))?;
            early = Some((req, report));
        }
        crate::workload::note_sole_hold(at_exec);
        match run_to_libraries(&session, &mut tracee, auxv.entry, early.is_some())? {
            StopReason::Reached => {}
            StopReason::Exited(code) => return Ok(Err(code)),
            StopReason::Killed(sig) => return Ok(Err(128 + sig)),
        }
        libraries_from = Some(weft_live::clock::tsc());
        // After the loader: the libraries (and their USDT probes) are there.
        if needs_main_first(args) {
            match run_to_main_if_static(&mut session, &mut tracee, args)? {
                StopReason::Reached => {}
                StopReason::Exited(code) => return Ok(Err(code)),
                StopReason::Killed(sig) => return Ok(Err(128 + sig)),
            }
        }
        session.end_startup(&tracee)?;
        let fed = early.is_some();
        let (mut req, mut report) = match early.take() {
            Some(placed) => placed,
            None => (
                Requests::build(args, &mut session, events.take(), definitions)?,
                AddReport::default(),
            ),
        };
        let prepared = session.prepare(&req.specs)?;
        workload.note_prepared(&prepared, &req);
        if let Some(paths) = &req.paths {
            paths
                .borrow_mut()
                .prepare_process(&mut session, &mut tracee)?;
        }
        report.absorb(session.apply(&mut tracee, prepared)?);
        if !fed {
            req.map_feed(&mut session, &mut tracee, Some(pid))?;
        }
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
        Ok(Ok(req))
    })();
    let req = match setup {
        Ok(Ok(req)) => req,
        Ok(Err(code)) => {
            output::write_report(
                args,
                report_out,
                &output::Report {
                    counts: &session.counts(),
                    metrics: &[],
                    without_thread_slot: 0,
                    processes: &[],
                },
            )?;
            return Ok(code);
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
    let perturbation = Perturbation::new(&req)?;
    req.note_ready(pid);
    workload.add(Member {
        pid,
        command: weft_process::command_name(pid).unwrap_or_default(),
        session,
        req,
        perturbation,
        watch: None,
        done: false,
        // The program weft instrumented, read while it is still stopped.
        exec: (!workload.following()).then(|| ExecNotice::new(pid)),
        starting: None,
        rewrites_failed: 0,
        since: std::time::Instant::now(),
        settle: Settle::Waiting,
    });
    workload.follow(pid)?;
    if let Some(from) = libraries_from {
        crate::workload::note_sole_hold(from);
    }
    tracee.detach()?;
    signals::forward_to_child(pid);
    let code = wait_for_workload(pid, &mut workload, args)?;
    workload.stop_following(args)?;
    workload.finish(args, report_out)?;
    if !args.paths.is_empty() && code == 128 + weft_abi::signal::SIGSEGV {
        say!(
            "weft: the program died of SIGSEGV. If it does not when run alone, it may have \
             lost weft's buffer handover, which is a SIGSEGV too: a program that sets its \
             SIGSEGV action without the C library (a raw rt_sigaction) or runs traced code \
             with SIGSEGV blocked by sigsuspend or pselect loses it (docs/paths.md, \
             \"Programs that handle or block SIGSEGV\"); trace other functions with \
             --paths fn:PATTERN"
        );
    }
    Ok(code)
}

/// Places the probes at a new image's first instruction: the dispatch
/// module's and those of the sites that make threads and processes, then
/// Syscall User Dispatch on (every site, as with `--no-dispatch`, if
/// the dispatch function could not be spliced or the kernel has no
/// dispatch).
pub fn place_first(
    args: &ProbeArgs,
    session: &mut Session,
    tracee: &mut Tracee,
    req: &Requests,
) -> Result<AddReport> {
    let dispatch = !args.no_dispatch;
    if dispatch {
        session.begin_dispatch(tracee)?;
    }
    let prepared = session.prepare(&req.specs)?;
    let mut report = session.apply(tracee, prepared)?;
    let signals = signal_deliveries(args);
    if dispatch && !session.enable_dispatch(tracee, signals)? {
        let prepared = session.prepare(&req.specs)?;
        report.absorb(session.apply(tracee, prepared)?);
    }
    if session.dispatching() {
        if signals == weft_abi::delivery::RECORD {
            req.note_deliveries();
        }
        let loader = (session.modules().iter())
            .find(|m| m.name.starts_with("ld-linux"))
            .map(|m| (m.lo, m.hi));
        if let Some(range) = loader {
            req.note_loader(tracee.pid(), range);
        }
    }
    Ok(report)
}

/// What weft's delivery stub does with the program's signal handlers
/// (`weft_abi::delivery`, docs/syscalls.md, "Signals and their
/// handlers"): a record of system calls records each delivery; a rerun
/// of a record that holds them delivers the recorded ones where they came.
fn signal_deliveries(args: &ProbeArgs) -> u64 {
    use weft_abi::delivery;
    let records = args
        .trace
        .iter()
        .any(|t| t == "syscalls" || t.starts_with("syscalls:"));
    match (&args.reexec_feed, args.feed_signals) {
        (Some(_), true) => delivery::RERUN,
        (None, _) if records => delivery::RECORD,
        _ => delivery::OFF,
    }
}

/// Whether the probes go in at the program's first instruction, before its
/// dynamic loader runs (`Session::begin_startup`), so that the loader's
/// own system calls are recorded (and fed, in a re-execution) like the
/// program's: for the system call capture and re-execution's feed, unless
/// the request needs the libraries loaded first (USDT probes, rich events,
/// metrics) or the C library's thread pointer (`--paths`).
pub fn from_first_instruction(args: &ProbeArgs) -> bool {
    let calls = args
        .trace
        .iter()
        .any(|t| t == "syscalls" || t.starts_with("syscalls:"))
        || args.reexec_feed.is_some();
    let needs_libraries = !args.metric.is_empty()
        || args
            .trace
            .iter()
            .any(|t| t.starts_with("usdt:") || t.starts_with("event:"));
    calls && !needs_libraries && args.paths.is_empty()
}

/// Runs the program, stopped before its dynamic loader, to where the
/// probes for its libraries go in: its `entry`, or, for a session that
/// began at the first instruction (`early`, see
/// [`from_first_instruction`]), the moment the loader tells debuggers its
/// libraries are consistent (`_dl_debug_state` with `_r_debug.r_state`
/// `RT_CONSISTENT`), stopped just after that call. The C library is then
/// mapped, relocated and set up (the thread pointer too), and no library's
/// constructor has run yet: their calls are recorded too. A program
/// without a loader that tells (a static one) runs to its entry.
pub fn run_to_libraries(
    session: &Session,
    tracee: &mut Tracee,
    entry: u64,
    early: bool,
) -> Result<StopReason> {
    use weft_process::ProcessMemory;
    let loader = session
        .modules()
        .iter()
        .find(|m| m.name.starts_with("ld-linux"))
        .filter(|_| early);
    let notice = loader.and_then(|m| {
        let state = m.image.symbol_address("_dl_debug_state")?;
        let debug = m.image.symbol_address("_r_debug")?;
        Some((m.runtime(state), m.runtime(debug)))
    });
    let Some((state, debug)) = notice else {
        return Ok(tracee.run_to(RemoteAddr(entry))?);
    };
    /// `struct r_debug`'s `r_state`, and its value once the loader is done.
    const R_STATE: u64 = 24;
    const RT_CONSISTENT: u32 = 0;
    // RT_ADD before the libraries are mapped, RT_CONSISTENT after; more
    // with audit modules. Each time out of the function again (its entry
    // is where the thread stops, and where the load hook goes).
    for _ in 0..16 {
        match tracee.run_to(state)? {
            StopReason::Reached => {}
            ended => return Ok(ended),
        }
        let mut word = [0u8; 4];
        tracee
            .memory()
            .read(RemoteAddr(debug.0 + R_STATE), &mut word)?;
        let rsp = tracee.registers(tracee.pid())?.rsp;
        let back = tracee.memory().read_u64(RemoteAddr(rsp))?;
        match tracee.run_to(RemoteAddr(back))? {
            StopReason::Reached => {}
            ended => return Ok(ended),
        }
        if u32::from_le_bytes(word) == RT_CONSISTENT {
            return Ok(StopReason::Reached);
        }
    }
    Ok(tracee.run_to(RemoteAddr(entry))?)
}

/// Whether the request places code that needs the thread pointer all over
/// the program, start-up code included: `--paths`' witness stores, and the
/// system call probes, recording or feeding (a static program's start-up
/// code makes calls before it has set up its thread pointer). Placed at
/// the first instruction, they follow the start-up code to `main`, where
/// the start-up ends: a static program that stopped at its entry would
/// still be in it, and the probes would go in a second time.
pub fn needs_main_first(args: &ProbeArgs) -> bool {
    !args.paths.is_empty()
        || args.reexec_feed.is_some()
        || args
            .trace
            .iter()
            .any(|t| t == "syscalls" || t.starts_with("syscalls:"))
}

/// A static program sets up its thread pointer itself, after its entry:
/// code traced with `--paths` (or a system call probe) before that has no
/// thread control block. Such a program runs on to `main` first (its
/// start-up code is then not traced). `main` is the symbol, or in a
/// stripped program the address its entry code hands the C library.
pub fn run_to_main_if_static(
    session: &mut Session,
    tracee: &mut Tracee,
    args: &ProbeArgs,
) -> Result<StopReason> {
    session.refresh_modules()?;
    let modules = session.modules();
    let dynamic = modules.iter().any(|m| m.name.starts_with("ld-linux"));
    let Some(program) = modules.first() else {
        return Ok(StopReason::Reached);
    };
    if dynamic {
        return Ok(StopReason::Reached);
    }
    let image = &program.image;
    let from_start = || {
        let entry = image.entry();
        let code = image.bytes_at(entry, 64)?;
        weft_code::main_from_start(entry.0, code).map(weft_image::FileAddr)
    };
    let main = image.symbol_address("main").or_else(|| {
        let main = from_start()?;
        if !args.paths.is_empty() {
            say!(
                "weft: {} has no symbols; its main is where its entry code hands it to the C \
                 library. weft knows the C library's setjmp, longjmp, fork and signal-mask \
                 functions by their names, so a trace through them may lose its place here \
                 (--validate checks)",
                program.name
            );
        }
        Some(main)
    });
    match main {
        Some(main) => Ok(tracee.run_to(program.runtime(main))?),
        None => anyhow::bail!(
            "{}: a static program whose main weft cannot find (no symbol, and its entry code \
             is not the C library's _start): its start-up code sets up the thread pointer \
             that --paths and system call probes need. Trace a build with symbols",
            program.name
        ),
    }
}

/// Serves the workload (library loads, new processes and images) until
/// weft's child `pid` has exited and every other process of the workload
/// has too; returns the child's exit code.
fn wait_for_workload(pid: i32, workload: &mut Workload, args: &ProbeArgs) -> Result<i32> {
    let mut code = None;
    let mut exited_at = None;
    let mut said_waiting = false;
    loop {
        for m in workload.live() {
            if let Some(exec) = &mut m.exec {
                exec.check();
            }
        }
        if code.is_none() && child_has_exited(pid)? {
            let killed_by = weft_process::killed_by(pid);
            // In the workload's one trace (its members share the recorder),
            // whichever member of the process is still there.
            if let (Some(signal), Some(m)) =
                (killed_by, workload.members.iter().find(|m| m.pid == pid))
            {
                m.req.note_killed(pid, signal);
            }
            // Sampled once more while the zombie's /proc entries (CPU times) remain.
            for m in workload.live().filter(|m| m.pid == pid) {
                m.finish();
            }
            // A shell says so of its own children; weft's exit status
            // (128 + the signal) alone would not. A rerun weft ended
            // itself is `reexec`'s to report (a divergence, a stall).
            let weft_ended_it = ENDED_BY_WEFT.load(std::sync::atomic::Ordering::Relaxed);
            if let Some(signal) = killed_by.filter(|&s| !(weft_ended_it && s == nix::libc::SIGKILL))
            {
                let name = nix::sys::signal::Signal::try_from(signal)
                    .map_or_else(|_| format!("signal {signal}"), |s| s.as_str().to_string());
                say!("weft: the program (pid {pid}) was killed by {name}");
            }
            code = Some(wait_child_exit(pid)?);
            exited_at = Some(std::time::Instant::now());
        }
        if let Some(code) = code {
            // Only once the program has exited: it reads the follower's map.
            let running = workload.outstanding();
            if running == 0 || signals::stop_requested() {
                return Ok(code);
            }
            // Said when they outlive it by a second (not for the last
            // moments of processes ending with it).
            let outlived = exited_at.is_some_and(|t| t.elapsed().as_secs() >= 1);
            if outlived && !said_waiting {
                said_waiting = true;
                say!(
                    "weft: process {pid} exited; waiting for the {running} other process(es) of \
                     the workload (Ctrl-C stops waiting)"
                );
                signals::catch_stop_requests();
            }
        }
        let step = workload
            .live()
            .map(|m| m.req.tick(&m.session))
            .min()
            .unwrap_or(std::time::Duration::from_millis(50));
        workload.serve(args, step)?;
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
