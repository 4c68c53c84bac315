//! `--paths`: abstract execution in a run. The traced functions are laid
//! out again with witness stores (`weft_paths`); each process gets a pool
//! of buffers with guard pages and weft's fault handler; weft drains full
//! buffers while the program runs and writes them to `--paths-out DIR`.

use crate::ProbeArgs;
use anyhow::{bail, Context, Result};
use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use weft_live::{Session, SharedMemory};
use weft_paths::instrument::{ImageCode, PathsInstrument};
use weft_paths::pool::{self, Pool};
use weft_paths::trace_dir::{Chunk, ForkPoint, Meta, ScheduleInfo, TraceWriter};
use weft_plan::{Action, PointSpec};
use weft_process::{ProcessMemory, Tracee};
use weft_schedule::PoolAt;

/// One process's pool: the file and where the process maps it.
struct ProcessPool {
    pid: i32,
    command: String,
    file: SharedMemory,
}

/// The paths traced in a run and the trace being written.
pub struct PathsRun {
    instrument: Arc<PathsInstrument>,
    layout: Pool,
    pools: Vec<ProcessPool>,
    writer: Option<TraceWriter>,
    dir: PathBuf,
    patterns: Vec<String>,
    /// Why writing the trace stopped (a full disk), if it did.
    stopped: Option<String>,
    /// When buffers of threads that are gone were last looked for.
    reclaimed: std::time::Instant,
    /// Full buffers with a record reserved and not yet written (a signal
    /// came between a store's reservation and its write), by (pool, buffer):
    /// since when. They are drained once it is written, or after a second.
    unwritten: std::collections::HashMap<(usize, u64), std::time::Instant>,
    /// Every block also records itself, checked at the end.
    validate: bool,
    /// `paths.json` was written once already (see
    /// [`PathsRun::write_early_table`]).
    table_written: bool,
    /// Registers' values are recorded (`--data`): the only records with 0
    /// bytes inside, so buffers are then read record by record to find
    /// where they end.
    values: bool,
    /// When each thread ran (BPF), if it could be loaded; with where each
    /// process's buffers lie.
    schedule: Option<weft_schedule::Recorder>,
    pools_at: std::collections::HashMap<i32, PoolAt>,
}

impl PathsRun {
    /// The run's `--paths` requests, or `None` without any: one for the
    /// whole weft run, shared by the requests of every process it traces
    /// (one function table, one trace).
    pub fn shared(args: &ProbeArgs) -> Result<Option<Rc<RefCell<PathsRun>>>> {
        thread_local! {
            // Weak: the requests holding it last finish the trace.
            static CURRENT: RefCell<std::rc::Weak<RefCell<PathsRun>>> =
                const { RefCell::new(std::rc::Weak::new()) };
        }
        if let Some(current) = CURRENT.with(|c| c.borrow().upgrade()) {
            return Ok(Some(current));
        }
        let Some(run) = PathsRun::new(args)? else {
            return Ok(None);
        };
        let run = Rc::new(RefCell::new(run));
        CURRENT.with(|c| *c.borrow_mut() = Rc::downgrade(&run));
        Ok(Some(run))
    }

    fn new(args: &ProbeArgs) -> Result<Option<PathsRun>> {
        if args.paths.is_empty() {
            if args.validate || args.paths_data {
                bail!(
                    "--validate and --data go with a --paths trace: give --paths WHAT and \
                     --paths-out DIR"
                );
            }
            return Ok(None);
        }
        if let Some(p) = args
            .paths
            .iter()
            .find(|p| p.trim().is_empty() || *p == "fn:")
        {
            bail!(
                "--paths {p:?} names nothing: give all (the program), a module (libsqlite3) or \
                 fn:PATTERN"
            );
        }
        let Some(dir) = args.paths_out.clone() else {
            bail!("--paths records into a directory: give --paths-out DIR");
        };
        weft_paths::trace_dir::check_dir(&dir)?;
        Ok(Some(PathsRun {
            instrument: Arc::new(PathsInstrument::new(args.validate, args.paths_data)),
            layout: Pool::new(args.paths_buffers as u64, args.paths_buffer_size),
            pools: Vec::new(),
            writer: None,
            dir,
            patterns: args.paths.clone(),
            stopped: None,
            reclaimed: std::time::Instant::now(),
            unwritten: std::collections::HashMap::new(),
            validate: args.validate,
            table_written: false,
            values: args.paths_data,
            schedule: match schedule_loaded().and_then(weft_schedule::Recorder::reading) {
                Ok(r) => Some(r),
                Err(e) => {
                    say!("weft: the trace has no schedule (weft regen --interleave needs it): {e}");
                    None
                }
            },
            pools_at: std::collections::HashMap::new(),
        }))
    }

    /// Process `parent` created `child`, which runs on in the parent's
    /// memory or a copy of it: its threads use the same pool there.
    pub fn forked(&mut self, parent: i32, child: i32) {
        if let (Some(recorder), Some(&at)) = (&self.schedule, self.pools_at.get(&parent)) {
            self.pools_at.insert(child, at);
            if let Err(e) = recorder.trace(child, at) {
                say!("weft: process {child} is not in the schedule: {e}");
            }
        }
    }

    /// Writes the schedule's records read since the last time.
    fn take_schedule(&mut self) -> Result<()> {
        let (Some(recorder), Some(writer)) = (self.schedule.as_mut(), self.writer.as_mut()) else {
            return Ok(());
        };
        let records = recorder.take(std::time::Duration::ZERO)?;
        if !records.is_empty() {
            writer.schedule(&records)?;
        }
        Ok(())
    }

    /// The probe plan: every matched function laid out again.
    /// `all` is every function of the program's own file, `fn:PATTERN` a
    /// function pattern, and anything else a module (every function in
    /// it).
    pub fn specs(&self, session: &mut Session) -> Result<Vec<PointSpec>> {
        session.refresh_modules()?;
        // The program's own file: the module mapped from /proc/PID/exe.
        let exe = weft_process::exe_path(session.pid())
            .ok()
            .map(|p| weft_process::path_in_root(session.pid(), &p))
            .and_then(|p| std::fs::canonicalize(p).ok());
        let main = session
            .modules()
            .iter()
            .find(|m| std::fs::canonicalize(&m.path).ok() == exe)
            .or_else(|| session.modules().first())
            .map(|m| m.name.clone())
            .unwrap_or_default();
        let mut specs = Vec::new();
        for p in &self.patterns {
            // `ALL` or `All` is meant as `all`: no module has that name.
            let pattern = if p.eq_ignore_ascii_case("all") {
                format!("{main}:*")
            } else if let Some(f) = p.strip_prefix("fn:") {
                f.to_string()
            } else {
                format!("{p}:*")
            };
            let action = Action::Rebuild(self.instrument.clone());
            specs.push(PointSpec::parse(&pattern)?.with_action(action));
        }
        // Every new thread starts there: its copy gives the thread a clean
        // cursor (glibc reuses exited threads' TCBs).
        let thread_start = weft_paths::instrument::THREAD_START;
        let named = |name: &str| {
            session
                .modules()
                .iter()
                .any(|m| m.image.function_named(name).is_some())
        };
        // A forked child gets a cursor of its own (glibc 2.34 and later).
        let fork = weft_paths::instrument::FORK;
        if named(fork) {
            let pattern = format!("*:{fork}");
            specs.push(
                PointSpec::parse(&pattern)?.with_action(Action::Rebuild(self.instrument.clone())),
            );
        }
        // A thread that blocks every signal still takes its handovers.
        if let Some(mask) = weft_paths::instrument::SIGNAL_MASK
            .iter()
            .find(|name| named(name))
        {
            let pattern = format!("*:{mask}");
            specs.push(
                PointSpec::parse(&pattern)?.with_action(Action::Rebuild(self.instrument.clone())),
            );
        }
        if named(thread_start) {
            let start = format!("*:{thread_start}");
            specs.push(
                PointSpec::parse(&start)?.with_action(Action::Rebuild(self.instrument.clone())),
            );
        } else {
            say!(
                "weft: the C library's {thread_start} is not named here (install its debug \
                 symbols: libc6-dbg); a thread that reuses the memory of one that exited may \
                 mix its witnesses with the old thread's"
            );
        }
        Ok(specs)
    }

    /// Gives the stopped process `pid` its pool and weft's fault handler,
    /// before the traced functions are applied.
    pub fn prepare_process(&mut self, session: &mut Session, tracee: &mut Tracee) -> Result<()> {
        if self.writer.is_none() && self.pools.is_empty() {
            self.writer = Some(TraceWriter::create(&self.dir)?);
        }
        let layout = self.layout;
        // Threads start with no buffer (an earlier weft may have left a
        // cursor into its own pool).
        for tid in tracee.threads() {
            let tcb = tracee.registers(tid)?.fs_base;
            if tcb != 0 {
                tracee.memory().write(
                    weft_process::RemoteAddr(tcb + weft_paths::rebuild::CURSOR),
                    &0u64.to_le_bytes(),
                )?;
            }
        }
        let file =
            SharedMemory::create(layout.size() as usize).context("creating the witness buffers")?;
        file.write(0, &layout.header_bytes());
        // Handovers are numbered on from every earlier pool: a process that
        // execs writes its new image's buffers after its old one's.
        file.store_u64(
            pool::SEQ,
            (self.pools.len() as u64) << weft_paths::trace_dir::IMAGE_SHIFT,
        );
        if weft_process::same_pid_namespace(session.pid()) {
            file.store_u32(pool::OWNER, std::process::id());
        }
        let guards: Vec<u64> = (0..=layout.buffers).map(|k| layout.guard(k)).collect();
        let at = session.map_into_process(
            tracee,
            &file,
            &guards,
            (layout.code(), pool::CODE_SIZE),
            (layout.own(), pool::PAGE),
        )?;
        let handler = weft_paths::handler::handler_code(at + layout.code(), at, layout)
            .map_err(|e| anyhow::anyhow!("generating the fault handler: {e}"))?;
        if handler.bytes.len() as u64 > pool::CODE_SIZE {
            bail!("the fault handler does not fit its pages");
        }
        file.write(layout.code(), &handler.bytes);
        self.instrument.begin_image(
            session.pid(),
            ImageCode {
                claim: handler.claim,
                process: at + layout.program_process(),
                forked: at + layout.forked_cursor(),
                rseq: registered_rseq(tracee),
            },
        );

        if let Some(recorder) = &self.schedule {
            let at = PoolAt {
                first_buffer: at + layout.buffer(0),
                stride: layout.stride(),
                descriptors: at + layout.desc(0),
                buffers: layout.buffers,
            };
            self.pools_at.insert(session.pid(), at);
            if let Err(e) = recorder.trace(session.pid(), at) {
                say!(
                    "weft: process {} is not in the schedule: {e}",
                    session.pid()
                );
            }
        }
        file.write(pool::NEW_ACTION, &handler.kernel_action());
        session.set_signal_action(
            tracee,
            weft_abi::signal::SIGSEGV,
            at + pool::NEW_ACTION,
            at + layout.program_action(),
        )?;
        // The program's own SIGSEGV handlers go behind weft's (the
        // `sigaction` hook), in this process and in each child it forks
        // (the copy of `_Fork` writes the child's pid).
        tracee.memory().write(
            weft_process::RemoteAddr(at + layout.program_process()),
            &(session.pid() as u64).to_le_bytes(),
        )?;
        session.keep_signal_action(weft_live::KeptAction {
            signal: weft_abi::signal::SIGSEGV,
            action: at + layout.program_action(),
            process: at + layout.program_process(),
        });
        self.pools.push(ProcessPool {
            pid: session.pid(),
            command: weft_process::command_name(session.pid()).unwrap_or_default(),
            file,
        });
        Ok(())
    }

    /// Writes every full buffer to the trace and gives it back. If the
    /// trace cannot be written (a full disk), it stops there: the threads
    /// are told weft is gone (they write on over their own buffers, and
    /// the program runs on), and what was written is kept.
    pub fn drain(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        if let Err(e) = self.try_drain() {
            say!("weft: {e:#}; the paths trace stops here (what was written is kept)");
            self.stopped = Some(format!("{e:#}"));
            for p in &self.pools {
                p.file.store_u32(pool::GONE, 1);
                p.file.futex_wake(pool::FREED);
            }
        }
    }

    fn try_drain(&mut self) -> Result<()> {
        self.take_schedule()?;
        self.write_early_table()?;
        let layout = self.layout;
        let reclaim = self.reclaimed.elapsed() >= std::time::Duration::from_millis(100);
        if reclaim {
            self.reclaimed = std::time::Instant::now();
        }
        let Some(writer) = self.writer.as_mut() else {
            return Ok(());
        };
        // Every 100 ms, what was drained goes to the file (a killed weft
        // leaves it readable there).
        if reclaim {
            writer.flush()?;
        }
        for (pi, p) in self.pools.iter().enumerate() {
            let mut freed = false;
            for k in 0..layout.buffers {
                let d = layout.desc(k);
                if !p
                    .file
                    .compare_exchange_u32(d + pool::STATE, pool::FULL, pool::DRAINING)
                {
                    continue;
                }
                let len = p.file.load_u64(d + pool::LEN).min(layout.buffer_size);
                let chunk = chunk_of(&p.file, layout, k, len as usize);
                // A record its thread reserved and has not written yet: a
                // signal handler ran in between and filled the buffer. The
                // write comes once the handler returns.
                if records_end(&chunk.bytes, self.values) < chunk.bytes.len() {
                    let since = *self
                        .unwritten
                        .entry((pi, k))
                        .or_insert_with(std::time::Instant::now);
                    if since.elapsed() < std::time::Duration::from_secs(1) {
                        p.file.store_u32(d + pool::STATE, pool::FULL);
                        continue;
                    }
                }
                self.unwritten.remove(&(pi, k));
                writer.forks.extend(fork_point(&p.file, layout, k));
                writer.chunk(&chunk)?;
                p.file.zero(layout.buffer(k), len as usize);
                p.file.store_u32(d + pool::STATE, pool::FREE);
                freed = true;
            }
            // Buffers of threads that exited, and of forked children that
            // exited or exec'd (they no longer map the pool), go back too.
            for k in (0..layout.buffers).filter(|_| reclaim) {
                let d = layout.desc(k);
                let (pid, tid) = (
                    p.file.load_u32(d + pool::PID),
                    p.file.load_u32(d + pool::TID),
                );
                if p.file.load_u32(d + pool::STATE) != pool::OWNED || pid == 0 || tid == 0 {
                    continue;
                }
                let (pid, tid) = (pid as i32, tid as i32);
                let held = weft_process::thread_is_alive(pid, tid)
                    && (pid == p.pid || weft_process::maps_inode(pid, p.file.inode()));
                if held
                    || !p
                        .file
                        .compare_exchange_u32(d + pool::STATE, pool::OWNED, pool::DRAINING)
                {
                    continue;
                }
                let used = write_held(writer, &p.file, layout, k, self.values)?;
                p.file.zero(layout.buffer(k), used);
                p.file.store_u32(d + pool::STATE, pool::FREE);
                freed = true;
            }
            if freed {
                p.file.add_u32(pool::FREED, 1);
                p.file.futex_wake(pool::FREED);
            }
            // A thread that waited too long said weft was gone: it is not.
            if p.file.load_u32(pool::GONE) != 0 {
                p.file.store_u32(pool::GONE, 0);
            }
        }
        Ok(())
    }

    /// The trace's `paths.json` as it stands.
    fn table(
        &self,
        lost: u64,
        ticks_per_ns: f64,
        schedule: Option<ScheduleInfo>,
        forks: Vec<weft_paths::trace_dir::ForkPoint>,
    ) -> Meta {
        Meta {
            format: weft_paths::trace_dir::FORMAT.into(),
            version: weft_paths::trace_dir::VERSION,
            functions: self.instrument.functions(),
            processes: self
                .pools
                .iter()
                .map(|p| (p.pid, p.command.clone()))
                .collect(),
            lost,
            ticks_per_ns,
            validate: self.validate,
            loads: self.instrument.images(),
            schedule,
            forks,
            complete: true,
        }
    }

    /// Writes `paths.json` once, as soon as functions are laid out, so
    /// that a trace cut short (weft killed, a full disk) is read up to the
    /// cut; [`PathsRun::finish`] writes it whole at the end.
    fn write_early_table(&mut self) -> Result<()> {
        if self.table_written || !self.instrument.has_functions() {
            return Ok(());
        }
        self.table_written = true;
        let forks = self
            .writer
            .as_ref()
            .map(|w| w.forks.clone())
            .unwrap_or_default();
        // A schedule is being recorded: a trace cut short is read with
        // what of it was written.
        let schedule = self.schedule.as_ref().map(|_| ScheduleInfo {
            records: 0,
            dropped: 0,
        });
        let meta = Meta {
            complete: false,
            ..self.table(0, weft_live::clock::ticks_per_ns(), schedule, forks)
        };
        if let Some(writer) = self.writer.as_ref() {
            writer.write_table(&meta)?;
        }
        Ok(())
    }

    /// Ends the trace: full buffers, then what each thread had written
    /// into the buffer it held, and `paths.json`. Returns a line for the
    /// user.
    pub fn finish(&mut self, ticks_per_ns: f64) -> Result<String> {
        self.drain();
        let layout = self.layout;
        let Some(mut writer) = self.writer.take() else {
            return Ok(String::new());
        };
        let mut lost = 0;
        for p in &self.pools {
            p.file.store_u32(pool::GONE, 1);
            p.file.futex_wake(pool::FREED);
            for k in 0..layout.buffers {
                let d = layout.desc(k);
                if self.stopped.is_some() || p.file.load_u32(d + pool::STATE) != pool::OWNED {
                    continue;
                }
                write_held(&mut writer, &p.file, layout, k, self.values)?;
            }
            lost += p.file.load_u64(pool::LOST);
        }
        let schedule = match self.schedule.as_mut() {
            Some(recorder) if self.stopped.is_none() => {
                let records = recorder.take(std::time::Duration::ZERO)?;
                writer.schedule(&records)?;
                Some(ScheduleInfo {
                    records: writer.schedule_records,
                    dropped: recorder.dropped(),
                })
            }
            _ => None,
        };
        let (bytes, chunks) = (writer.bytes, writer.chunks);
        let forks = std::mem::take(&mut writer.forks);
        let meta = self.table(lost, ticks_per_ns, schedule, forks);
        let traced = meta
            .functions
            .iter()
            .filter(|f| !f.blocks.is_empty())
            .count();
        writer.finish(&meta)?;
        let mut line = format!(
            "weft: paths of {traced} function(s): {bytes} bytes of witnesses in {chunks} buffer(s), \
             written to {}",
            self.dir.display()
        );
        let reused = self.instrument.copies_reused();
        if reused > 0 {
            line.push_str(&format!(
                "; {reused} copies taken from an earlier process of the same program"
            ));
        }
        if lost > 0 {
            line.push_str(&format!(
                "; {lost} bytes lost (weft did not free buffers in time)"
            ));
        }
        if self.validate {
            match validate(&self.dir)? {
                Ok(passed) => line.push_str(&format!("\nweft: {passed}")),
                Err(failed) => {
                    // The trace is written; the run fails (exit 1).
                    say!("{line}");
                    bail!("{failed}");
                }
            }
        }
        Ok(line)
    }
}

/// Regenerates every thread of the trace in `dir` and compares it with
/// the blocks it recorded: the outcome, in a line (`Err`: a failure).
fn validate(dir: &std::path::Path) -> Result<std::result::Result<String, String>> {
    let budget = crate::regen::memory_budget(None);
    let mut trace = weft_paths::trace_dir::Trace::read_within(dir, budget)?;
    if let Some(cut) = trace.cut.take() {
        return Err(cut.into());
    }
    let program = weft_paths::regen::Program::new(&trace.meta.functions, &trace.meta.loads, true);
    let mut checked = 0u64;
    for &key in trace.threads.keys() {
        let (pid, tid, image) = key;
        let from = program.inherited_in(&trace, key);
        match program.regenerate_at(image as usize, trace.stream(key), from.as_ref(), |_, _| {}) {
            Ok(s) => checked += s.checked,
            Err(e) => {
                // Lost records come first: they are the likely cause.
                let lost = match trace.meta.lost {
                    0 => String::new(),
                    n => format!(
                        "{n} bytes of records were lost (no buffer was free in time: give \
                         --paths-buffers more), and "
                    ),
                };
                return Ok(Err(format!(
                    "validation FAILED: {lost}in thread {tid} of process {pid} ({}, image \
                     {image}), {e}",
                    trace.command(image)
                )));
            }
        }
    }
    let line = format!(
        "validated: regeneration gives the {checked} block(s) the {} thread stream(s) recorded",
        trace.threads.len()
    );
    if trace.meta.lost > 0 {
        return Ok(Err(format!(
            "validation FAILED: {} bytes of records were lost (no buffer was free in time: \
             give --paths-buffers more), so some streams miss records; what was kept \
             regenerates equal ({line})",
            trace.meta.lost
        )));
    }
    Ok(Ok(line))
}

/// Buffer `k` of a pool as a chunk of `len` bytes.
fn chunk_of(file: &SharedMemory, layout: Pool, k: u64, len: usize) -> Chunk {
    let d = layout.desc(k);
    Chunk {
        pid: file.load_u32(d + pool::PID),
        tid: file.load_u32(d + pool::TID),
        seq: file.load_u64(d + pool::DESC_SEQ),
        tsc_start: file.load_u64(d + pool::TSC_START),
        tsc_end: file.load_u64(d + pool::TSC_END),
        len,
        bytes: file.read(layout.buffer(k), len),
    }
}

/// Where the stream of a forked child whose first buffer is `k` went on
/// from its parent's, if it is one.
fn fork_point(file: &SharedMemory, layout: Pool, k: u64) -> Option<ForkPoint> {
    let d = layout.desc(k);
    let at = file.load_u64(d + pool::PARENT_AT);
    (at != 0).then(|| ForkPoint {
        child: file.load_u64(d + pool::DESC_SEQ),
        parent: file.load_u64(d + pool::PARENT_SEQ),
        at: at - 1,
    })
}

/// Writes what a thread wrote into buffer `k`, which it still holds (or
/// held when it ended), as a chunk; returns the bytes used.
fn write_held(
    writer: &mut TraceWriter,
    file: &SharedMemory,
    layout: Pool,
    k: u64,
    values: bool,
) -> Result<usize> {
    let whole = file.read(layout.buffer(k), layout.buffer_size as usize);
    let used = records_end(&whole, values);
    let mut chunk = chunk_of(file, layout, k, used);
    chunk.tsc_end = 0;
    writer.forks.extend(fork_point(file, layout, k));
    writer.chunk(&chunk)?;
    Ok(used)
}

/// The schedule's programs, loading since [`load_schedule_in_background`].
type Loading = std::thread::JoinHandle<weft_schedule::Result<weft_schedule::Loaded>>;
static SCHEDULE: std::sync::Mutex<Option<Loading>> = std::sync::Mutex::new(None);

/// Starts loading the schedule's BPF programs on a thread of their own,
/// while weft starts the program and plans its copies.
pub fn load_schedule_in_background() {
    if let (Ok(mut slot), Ok(handle)) = (
        SCHEDULE.lock(),
        std::thread::Builder::new()
            .name("weft-schedule".into())
            .spawn(weft_schedule::Loaded::load),
    ) {
        *slot = Some(handle);
    }
}

/// The schedule's programs: those loading in the background, else loaded now.
fn schedule_loaded() -> weft_schedule::Result<weft_schedule::Loaded> {
    let loading = SCHEDULE.lock().ok().and_then(|mut slot| slot.take());
    match loading.map(std::thread::JoinHandle::join) {
        Some(Ok(loaded)) => loaded,
        _ => weft_schedule::Loaded::load(),
    }
}

/// Where the records of a buffer end: at its first 0 byte, unless it may
/// hold registers' values (`values`), which only reading record by record
/// tells apart.
fn records_end(bytes: &[u8], values: bool) -> usize {
    if values {
        weft_paths::record::records_end(bytes)
    } else {
        weft_paths::record::records_end_without_values(bytes)
    }
}

/// The restartable sequence the stopped process's threads registered
/// (glibc 2.35 and later register one for each thread they start): where
/// its `rseq_cs` word lies from the thread pointer, and its signature.
/// None if no thread has one (an older C library, a static program that
/// has not reached `main`, or `glibc.pthread.rseq=0`): the stores then
/// reserve with `xadd`.
fn registered_rseq(tracee: &Tracee) -> Option<weft_paths::rebuild::Rseq> {
    /// `rseq_cs` in the kernel's `struct rseq`.
    const CS_FIELD: u64 = 8;
    tracee.threads().into_iter().find_map(|tid| {
        let config = tracee.rseq(tid).ok()?;
        let tcb = tracee.registers(tid).ok()?.fs_base;
        if config.area == 0 || tcb == 0 || config.len < 32 {
            return None;
        }
        let offset = (config.area + CS_FIELD).wrapping_sub(tcb) as i64;
        Some(weft_paths::rebuild::Rseq {
            cs_offset: i32::try_from(offset).ok()?,
            signature: config.signature,
        })
    })
}
