//! A new image of a followed process: instrumented at its first
//! instruction, then let run through its dynamic loader on its own until
//! the load hook reports its libraries (or, for the program weft starts
//! and for static programs, run there under ptrace); see
//! docs/syscalls.md, "From the first instruction".

use super::{Member, Workload, STOP_WAIT};
use crate::requests::{Perturbation, Requests};
use crate::run::report_skipped;
use crate::ProbeArgs;
use anyhow::Result;
use weft_process::{Auxv, ProcessMemory, StopReason, Tracee};

impl Workload {
    /// Instruments the image `pid` has just exec'd, as `weft run` does the
    /// program it starts: run to the program's entry (its libraries
    /// loaded), then the probes. `None` when it ended meanwhile.
    pub(super) fn instrument_new_image(
        &mut self,
        args: &ProbeArgs,
        pid: i32,
    ) -> Result<Option<Member>> {
        if !weft_process::wait_stopped(pid, STOP_WAIT)? {
            anyhow::bail!("it did not stop for weft within {STOP_WAIT:?}");
        }
        let command = weft_process::command_name(pid).unwrap_or_default();
        if weft_process::runs_64_bit(pid) == Some(false) {
            anyhow::bail!("{command} is a 32-bit program, and weft measures x86-64 programs only");
        }
        let mut tracee = Tracee::attach(pid)?;
        let auxv = Auxv::read(pid)?;
        let exec_path = tracee
            .memory()
            .read_c_string(weft_process::RemoteAddr(auxv.execfn), 4096);
        let mut session = self.session_for(pid, args)?;
        // The loader's calls too: probes before its first instruction.
        let mut early = None;
        if crate::run::from_first_instruction(args) && session.begin_startup(&mut tracee)? {
            let mut req = Requests::build(args, &mut session, None, self.definitions.clone())?;
            if let Some(first) = self.members.first() {
                req.trace_into(&first.req);
            }
            if let Some(path) = &exec_path {
                req.note_exec(pid, path.clone());
            }
            let report = crate::run::place_first(args, &mut session, &mut tracee, &req)?;
            req.map_feed(&mut session, &mut tracee, None)?;
            // The loader runs on its own, its calls going to the SIGSYS
            // handler in the process rather than each a stop in weft, and
            // weft serves the rest of the workload meanwhile: the load hook
            // holds it where its libraries are in place.
            if session.libraries_consistent()?.is_some()
                && session.install_load_hook(&mut tracee)?
            {
                tracee.detach()?;
                return Member::followed(pid, command, session, req, Some(report)).map(Some);
            }
            early = Some((req, report));
        }
        match crate::run::run_to_libraries(&session, &mut tracee, auxv.entry, early.is_some())? {
            StopReason::Reached => {}
            StopReason::Exited(_) | StopReason::Killed(_) => return Ok(None),
        }
        if crate::run::needs_main_first(args) {
            // A static program's start-up code runs before it has a TCB.
            match crate::run::run_to_main_if_static(&mut session, &mut tracee, args)? {
                StopReason::Reached => {}
                StopReason::Exited(_) | StopReason::Killed(_) => return Ok(None),
            }
        }
        session.end_startup(&tracee)?;
        let fed = early.is_some();
        let (mut req, mut report) = match early.take() {
            Some(placed) => placed,
            None => {
                let mut req = Requests::build(args, &mut session, None, self.definitions.clone())?;
                if let Some(first) = self.members.first() {
                    // One trace for the whole workload.
                    req.trace_into(&first.req);
                }
                if let Some(path) = exec_path {
                    req.note_exec(pid, path);
                }
                (req, weft_live::AddReport::default())
            }
        };
        let prepared = session.prepare(&req.specs)?;
        self.note_prepared(&prepared, &req);
        if let Some(paths) = &req.paths {
            paths
                .borrow_mut()
                .prepare_process(&mut session, &mut tracee)?;
        }
        report.absorb(session.apply(&mut tracee, prepared)?);
        if !fed {
            req.map_feed(&mut session, &mut tracee, None)?;
        }
        req.sampler.live_from_now();
        session.raise_semaphores(&tracee, &req.semaphores)?;
        session.enable_event_sites(&mut tracee, &req.event_sites, args.string_max)?;
        req.describe_trace(&session)?;
        session.install_load_hook(&mut tracee)?;
        req.note_ready(pid);
        tracee.detach()?;
        if args.verbose {
            say!(
                "weft: process {pid} ran exec ({command}): {} probe(s) placed",
                report.probes
            );
        }
        report_skipped(&report, args.verbose);
        Member::followed(pid, command, session, req, None).map(Some)
    }

    /// A new image that weft let run through its loader has reported a
    /// library load (see [`Member::starting`]): once the loader says its
    /// libraries are consistent, they get their probes, as at the stop of
    /// `run_to_libraries`; the hook's thread waits meanwhile.
    pub(super) fn libraries_loaded(&mut self, args: &ProbeArgs, m: &mut Member) -> Result<()> {
        if m.session.libraries_consistent()? != Some(true) {
            m.session.release_loads();
            return Ok(());
        }
        let mut tracee = Tracee::attach(m.pid)?;
        m.session.end_startup(&tracee)?;
        let prepared = m.session.prepare(&m.req.specs)?;
        self.note_prepared(&prepared, &m.req);
        let mut report = m.starting.take().unwrap_or_default();
        report.absorb(m.session.apply(&mut tracee, prepared)?);
        m.req.sampler.live_from_now();
        m.session.raise_semaphores(&tracee, &m.req.semaphores)?;
        m.session
            .enable_event_sites(&mut tracee, &m.req.event_sites, args.string_max)?;
        m.req.describe_trace(&m.session)?;
        m.req.note_ready(m.pid);
        tracee.detach()?;
        m.session.release_loads();
        if args.verbose {
            say!(
                "weft: process {} ran exec ({}): {} probe(s) placed",
                m.pid,
                m.command,
                report.probes
            );
        }
        report_skipped(&report, args.verbose);
        m.perturbation = Perturbation::new(&m.req)?;
        Ok(())
    }
}
