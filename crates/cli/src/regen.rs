//! `weft regen DIR`: the code a `--paths` trace's threads ran, rebuilt
//! from their witnesses (see `weft_paths::regen`), as text, as Dinero IV
//! input (`--din`) or in a compact binary form (`--binary`, described in
//! docs/paths.md); thread after thread, or interleaved in time by the
//! trace's schedule (`--interleave`).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::PathBuf;
use weft_paths::data::{Access, Kind, Why};
use weft_paths::instrument::FunctionInfo;
use weft_paths::regen::{Program, RegenError, Segment, Summary};
use weft_paths::trace_dir::{StreamKey, Trace};

/// `weft regen`.
#[derive(Args, Debug)]
pub struct RegenArgs {
    /// A directory written with --paths-out.
    pub dir: PathBuf,
    /// Write to FILE instead of standard output.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Every instruction's address, not one line per stretch of code run
    /// without a branch or call.
    #[arg(long)]
    pub insns: bool,
    /// Dinero IV's input format: `2 ADDRESS` (an instruction fetch, the
    /// runtime address in hex) for every instruction, the threads' streams
    /// one after another; for cache simulators.
    #[arg(long, conflicts_with_all = ["binary", "insns"])]
    pub din: bool,
    /// The compact binary form (docs/paths.md): a module table, then per
    /// thread stream a header and 8 bytes per stretch (or instruction,
    /// with --insns): module index << 48 | ELF virtual address; with
    /// --data, 16 bytes per access after it.
    #[arg(long)]
    pub binary: bool,
    /// One stream for all threads and processes, in the order they ran:
    /// each thread's code is cut where the trace's schedule saw it switched
    /// out or in or enter or leave a system call, and the pieces come in
    /// time order, each headed with its thread and time.
    #[arg(long)]
    pub interleave: bool,
    /// Also the data addresses (a trace run with --data): after each
    /// instruction (or stretch) ` L|S|M ADDRESS,SIZE` for its loads, stores
    /// and both, `?` for an address weft could not regenerate (counted by
    /// reason at the end); with --din, Dinero's `0 ADDRESS` and `1 ADDRESS`;
    /// with --binary, two `u64`s (docs/paths.md).
    #[arg(long)]
    pub data: bool,
    /// Hold at most SIZE (such as 512M or 4G) of the trace's decompressed
    /// witnesses in memory; past it they go to an unnamed file in the
    /// trace's directory (or $TMPDIR) that regeneration maps, so a trace
    /// larger than memory regenerates. Default: half the memory this
    /// process may take now (the machine's, or its control group's).
    #[arg(long, value_name = "SIZE", value_parser = crate::parse_bytes)]
    pub memory: Option<u64>,
}

/// `bytes` for a message: in KiB, MiB or GiB.
fn size(bytes: u64) -> String {
    let b = bytes as f64;
    match bytes {
        0..0x10_0000 => format!("{:.1} KiB", b / 1024.0),
        0x10_0000..0x4000_0000 => format!("{:.1} MiB", b / f64::from(1 << 20)),
        _ => format!("{:.2} GiB", b / f64::from(1 << 30)),
    }
}

/// Bytes of a trace's records regeneration holds in memory: `memory`, or
/// half of what this process may take now.
pub fn memory_budget(memory: Option<u64>) -> u64 {
    memory.unwrap_or_else(|| weft_process::memory_available().map_or(u64::MAX, |m| m / 2))
}

/// Magic of the binary form.
const BINARY_MAGIC: &[u8; 8] = b"WEFTBLK1";
/// Ends a stream in the binary form.
const BINARY_END: u64 = u64::MAX;
/// In the binary form, the first word of an access (`--data`): this tag
/// (where a stretch has its module index), then the kind (`L` 0, `S` 1,
/// `M` 2) << 16, [`BINARY_UNKNOWN`] for an address not regenerated, and
/// the size; the second word is the address (0 when not regenerated).
const BINARY_ACCESS: u64 = 0xFFFE << 48;
const BINARY_UNKNOWN: u64 = 1 << 24;
/// Segments a regenerating thread hands over at a time (`--interleave`).
const BATCH: usize = 4096;

/// Prints each thread's regenerated code, thread by thread, or
/// interleaved in time. Returns the exit status: 1 for a trace cut short,
/// whose cut was said before regenerating what comes before it.
pub fn regen(a: &RegenArgs) -> Result<i32> {
    let budget = memory_budget(a.memory);
    let mut trace = Trace::read_within(&a.dir, budget)?;
    if let Some(dir) = trace.streams.mapped_in() {
        say!(
            "weft: the trace's records ({}) are more than the memory budget ({}{}): they were written to an unnamed file in {} and are regenerated from there",
            size(trace.streams.len()),
            size(budget),
            if a.memory.is_some() { ", --memory" } else { ", half of what this process may take; --memory sets it" },
            dir.display()
        );
    }
    // A trace cut short: what comes before the cut is regenerated, and
    // the run fails (the cut said once, here).
    let cut = trace.cut.take();
    if let Some(e) = &cut {
        say!("weft: {e}: regenerating what comes before it");
    }
    // Said first: a stream that misses records may fail to regenerate.
    if trace.meta.lost > 0 {
        say!(
            "weft: {} bytes of records were lost while tracing (no buffer was free in time): \
             some streams miss records",
            trace.meta.lost
        );
    }
    let program = Program::new(
        &trace.meta.functions,
        &trace.meta.loads,
        trace.meta.validate,
    );
    if a.binary && a.output.is_none() {
        bail!("--binary writes bytes: give -o FILE");
    }
    if a.data && !trace.meta.functions.iter().any(|f| f.data.is_some()) {
        bail!(
            "{} was traced without --data: run `weft run --paths ... --data` to record the \
             registers data addresses need",
            a.dir.display()
        );
    }
    if let Some(e) = trace.schedule_error.as_ref().filter(|_| a.interleave) {
        bail!(
            "{e}: --interleave needs the schedule; without it the threads come one after another"
        );
    }
    if a.interleave && trace.meta.schedule.is_none() {
        bail!(
            "{} has no schedule (BPF could not record one when it was traced): \
             --interleave needs it; without --interleave the threads come one after another",
            a.dir.display()
        );
    }
    let sink: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(Named {
            inner: std::fs::File::create(path)
                .with_context(|| format!("creating {}", path.display()))?,
            name: path.display().to_string(),
        }),
        None => Box::new(Named {
            inner: std::io::stdout().lock(),
            name: "standard output".into(),
        }),
    };
    let mut out = Output::new(a, &trace, program.functions(), sink)?;
    let summaries = if a.interleave {
        interleaved(&trace, &program, &mut out)?
    } else {
        let mut summaries = Vec::new();
        for &key in trace.threads.keys() {
            out.header(key, None)?;
            let mut failed: Option<std::io::Error> = None;
            let accesses = std::cell::RefCell::new(Vec::new());
            // A forked child goes on in its parent's frames.
            let from = program.inherited_in(&trace, key);
            let stream = trace.stream(key);
            let summary = if a.data {
                let biases = out.biases_of(key.2);
                program.regenerate_data(
                    key.2 as usize,
                    stream,
                    (&biases, from.as_ref()),
                    |s, _| {
                        if failed.is_none() {
                            failed = out.segment(key.2, s, &accesses.borrow()).err();
                        }
                        accesses.borrow_mut().clear();
                    },
                    |x| accesses.borrow_mut().push(x),
                )
            } else {
                program.regenerate_at(key.2 as usize, stream, from.as_ref(), |s, _| {
                    if failed.is_none() {
                        failed = out.segment(key.2, s, &[]).err();
                    }
                })
            };
            if let Some(e) = failed {
                return Err(e.into());
            }
            if let Err(e) = &summary {
                out.cut(&e.to_string())?;
            }
            summaries.push((key, summary));
        }
        summaries
    };
    out.finish()?;
    if cut.is_some() {
        return Ok(1);
    }
    if !trace.meta.complete {
        bail!(
            "{} was not finished (the weft that wrote it was killed, or its disk filled): \
             each thread's stream ends where what was written ends",
            a.dir.display()
        );
    }
    if a.data {
        say!("weft: {}", out.data_summary());
    }
    let mut checked = 0u64;
    for ((pid, tid, image), summary) in summaries {
        let summary = summary.with_context(|| {
            format!(
                "regenerating thread {tid} of process {pid} ({}, image {image}) from {}",
                trace.command(image),
                a.dir.display()
            )
        })?;
        if summary.skipped > 0 {
            say!(
                "weft: thread {tid} of process {pid}: its first {} record(s) came before \
                 its first traced call and were passed over",
                summary.skipped
            );
        }
        checked += summary.checked;
    }
    if a.din && !a.interleave && trace.threads.len() > 1 {
        say!(
            "weft: {} thread streams, written one after another (--interleave orders them \
             in time)",
            trace.threads.len()
        );
    }
    if let Some(s) = trace
        .meta
        .schedule
        .filter(|s| a.interleave && s.dropped > 0)
    {
        say!(
            "weft: {} schedule record(s) were dropped while tracing (weft read the kernel's \
             ring too late): the order is coarser there",
            s.dropped
        );
    }
    if trace.meta.validate {
        say!(
            "weft: validated: {checked} block(s) regenerated equal the blocks the threads \
             recorded"
        );
    }
    Ok(0)
}

type Summaries = Vec<(StreamKey, Result<Summary, RegenError>)>;

/// A segment a regenerating thread hands over: with the stream offset it
/// was decided at and its accesses (`--data`).
type Item = (Segment, usize, Vec<Access>);

/// Writes the pieces of every stream in time order (`--interleave`): each
/// stream is regenerated by a thread of its own, which hands its segments
/// over with the stream offset each was decided at.
fn interleaved(trace: &Trace, program: &Program, out: &mut Output) -> Result<Summaries> {
    let pieces = weft_paths::interleave::pieces(trace);
    if let Some(info) = trace.meta.schedule {
        if (trace.schedule.len() as u64) < info.records {
            say!(
                "weft: the schedule holds {} of the {} records the trace says it has: the order \
                 is coarser where records are missing",
                trace.schedule.len(),
                info.records
            );
        }
    }
    let unscheduled = trace
        .threads
        .keys()
        .filter(|&&(pid, tid, _)| !trace.schedule.iter().any(|e| (e.pid, e.tid) == (pid, tid)))
        .count();
    if unscheduled > 0 {
        say!(
            "weft: {unscheduled} thread stream(s) have no schedule record (a process weft did not \
             follow: --no-follow): they come first, as if run at the start"
        );
    }
    let keys: Vec<StreamKey> = trace.threads.keys().copied().collect();
    let streams: Vec<&[u8]> = keys.iter().map(|&k| trace.stream(k)).collect();
    let origin = trace.schedule.first().map_or(0, |e| e.ns);
    std::thread::scope(|scope| -> Result<Summaries> {
        let mut feeds = HashMap::new();
        let mut workers = Vec::new();
        for (&key, stream) in keys.iter().zip(&streams) {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Item>>(2);
            let biases = out.biases_of(key.2);
            let data = out.wants_data();
            let from = program.inherited_in(trace, key);
            workers.push((
                key,
                scope.spawn(move || {
                    let batch = std::cell::RefCell::new(Vec::with_capacity(BATCH));
                    let accesses = std::cell::RefCell::new(Vec::new());
                    let segment = |s: Segment, at: usize| {
                        let mut b = batch.borrow_mut();
                        b.push((s, at, std::mem::take(&mut *accesses.borrow_mut())));
                        if b.len() == BATCH {
                            let _ = tx.send(std::mem::replace(&mut *b, Vec::with_capacity(BATCH)));
                        }
                    };
                    let summary = if data {
                        let biases = (biases.as_slice(), from.as_ref());
                        program.regenerate_data(key.2 as usize, stream, biases, segment, |x| {
                            accesses.borrow_mut().push(x)
                        })
                    } else {
                        program.regenerate_at(key.2 as usize, stream, from.as_ref(), segment)
                    };
                    let _ = tx.send(batch.into_inner());
                    summary
                }),
            ));
            feeds.insert(key, (rx, VecDeque::<Item>::new()));
        }
        let mut current = None;
        for p in &pieces {
            let Some((rx, pending)) = feeds.get_mut(&p.stream) else {
                continue;
            };
            while pending.back().is_none_or(|&(_, at, _)| at <= p.to) {
                match rx.recv() {
                    Ok(batch) => pending.extend(batch),
                    Err(_) => break,
                }
            }
            while pending.front().is_some_and(|&(_, at, _)| at <= p.to) {
                let Some((s, _, accesses)) = pending.pop_front() else {
                    break;
                };
                if current != Some(p.stream) {
                    out.header(p.stream, Some(p.ns.saturating_sub(origin)))?;
                    current = Some(p.stream);
                }
                out.segment(p.stream.2, s, &accesses)?;
            }
        }
        drop(feeds);
        Ok(workers
            .into_iter()
            .map(|(key, w)| {
                let summary = w.join().unwrap_or_else(|_| {
                    Err(RegenError {
                        offset: 0,
                        what: "regeneration stopped".into(),
                    })
                });
                (key, summary)
            })
            .collect())
    })
}

/// Where the regenerated code goes, in the form asked for.
struct Output<'a> {
    out: std::io::BufWriter<Box<dyn Write>>,
    a: &'a RegenArgs,
    trace: &'a Trace,
    functions: &'a [FunctionInfo],
    /// Per function, its module's index (the binary form).
    module_of: Vec<u64>,
    /// Per process image, its load biases (`--din`).
    biases: HashMap<u32, Vec<u64>>,
    /// A binary stream is open.
    open: bool,
    /// The binary form, a stretch an entry.
    binary_stretches: bool,
    /// Accesses written, and those not regenerated by reason (`--data`).
    regenerated: u64,
    not: HashMap<Why, u64>,
}

impl<'a> Output<'a> {
    fn new(
        a: &'a RegenArgs,
        trace: &'a Trace,
        functions: &'a [FunctionInfo],
        sink: Box<dyn Write>,
    ) -> Result<Output<'a>> {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, sink);
        // The binary form numbers modules by name.
        let mut modules: Vec<&str> = functions.iter().map(|f| f.module.as_str()).collect();
        modules.sort_unstable();
        modules.dedup();
        let module_of = functions
            .iter()
            .map(|f| modules.binary_search(&f.module.as_str()).unwrap_or(0) as u64)
            .collect();
        if a.binary {
            if modules.len() >= (BINARY_ACCESS >> 48) as usize {
                bail!(
                    "the binary form numbers at most {} modules; this trace has {}: use a \
                     text form",
                    BINARY_ACCESS >> 48,
                    modules.len()
                );
            }
            out.write_all(BINARY_MAGIC)?;
            out.write_all(&(modules.len() as u32).to_le_bytes())?;
            for m in &modules {
                out.write_all(&(m.len() as u16).to_le_bytes())?;
                out.write_all(m.as_bytes())?;
            }
        }
        let mut biases = HashMap::new();
        if a.din || a.data {
            for &(_, _, image) in trace.threads.keys() {
                if let std::collections::hash_map::Entry::Vacant(v) = biases.entry(image) {
                    v.insert(image_biases(trace, image, functions)?);
                }
            }
        }
        Ok(Output {
            out,
            a,
            trace,
            functions,
            module_of,
            biases,
            open: false,
            binary_stretches: a.binary && !a.insns && !a.din,
            regenerated: 0,
            not: HashMap::new(),
        })
    }

    fn wants_data(&self) -> bool {
        self.a.data
    }

    /// The load biases of process image `image`, per function.
    fn biases_of(&self, image: u32) -> Vec<u64> {
        self.biases.get(&image).cloned().unwrap_or_default()
    }

    /// How many accesses were regenerated, and why the others were not.
    fn data_summary(&self) -> String {
        let mut line = format!("data: {} access(es) regenerated", self.regenerated);
        let mut not: Vec<(&Why, &u64)> = self.not.iter().collect();
        not.sort_by_key(|&(_, n)| std::cmp::Reverse(*n));
        for (why, n) in not {
            let why = match why {
                Why::ThreadLocal => "thread-local (fs or gs)",
                Why::Repeated => "a repeated string instruction or a gather",
                Why::Unknown => {
                    "a register regeneration does not know (after a longjmp, a landing pad or \
                     a jump back in from another part)"
                }
            };
            line.push_str(&format!("; {n} not: {why}"));
        }
        line
    }

    /// Starts (a piece of, `at` ns into the schedule) a thread's stream.
    fn header(&mut self, (pid, tid, image): StreamKey, at: Option<u64>) -> std::io::Result<()> {
        let command = self.trace.command(image);
        if self.a.binary {
            self.end()?;
            self.out.write_all(&[1u8])?;
            for v in [pid, tid, image, command.len() as u32] {
                self.out.write_all(&v.to_le_bytes())?;
            }
            self.out.write_all(command.as_bytes())?;
            self.open = true;
        } else if !self.a.din {
            write!(self.out, "# thread {tid} of process {pid} ({command})")?;
            if let Some(ns) = at {
                write!(self.out, " at {:.6} ms", ns as f64 / 1e6)?;
            }
            writeln!(self.out)?;
        }
        Ok(())
    }

    /// Marks in the text forms where a stream's regeneration stopped (the
    /// error itself goes to standard error once every stream is written).
    fn cut(&mut self, why: &str) -> std::io::Result<()> {
        if !self.a.binary && !self.a.din {
            writeln!(
                self.out,
                "# regeneration of this stream stopped here: {why}"
            )?;
        }
        Ok(())
    }

    /// A segment run by a thread of process image `image`, with the
    /// accesses its instructions made (`--data`).
    #[inline]
    fn segment(&mut self, image: u32, s: Segment, accesses: &[Access]) -> std::io::Result<()> {
        if self.binary_stretches && accesses.is_empty() {
            // The common case, kept short: one 8-byte entry.
            let entry = self.module_of[s.function as usize] << 48 | s.at;
            return self.out.write_all(&entry.to_le_bytes());
        }
        self.segment_lines(image, s, accesses)
    }

    /// [`Output::segment`] as lines, instructions, or with accesses.
    fn segment_lines(
        &mut self,
        image: u32,
        s: Segment,
        accesses: &[Access],
    ) -> std::io::Result<()> {
        let f = &self.functions[s.function as usize];
        let b = &f.blocks[s.block as usize];
        let every = self.a.insns || self.a.din;
        let last = if every { s.last } else { s.first + 1 };
        let mut next = 0;
        for k in s.first..last {
            let at = b.start + b.insns[k as usize] as u64;
            if self.a.din {
                let bias = self
                    .biases
                    .get(&image)
                    .map_or(0, |b| b[s.function as usize]);
                writeln!(self.out, "2 {:x}", at.wrapping_add(bias))?;
            } else if self.a.binary {
                let entry = self.module_of[s.function as usize] << 48 | at;
                self.out.write_all(&entry.to_le_bytes())?;
            } else {
                write_line(&mut self.out, &f.module, at)?;
            }
            // This instruction's accesses (a stretch's all come after its line).
            if every {
                let until = next + accesses[next..].partition_point(|x| x.insn <= k);
                for x in &accesses[next..until] {
                    self.access(x)?;
                }
                next = until;
            }
        }
        for x in &accesses[next..] {
            self.access(x)?;
        }
        Ok(())
    }

    fn access(&mut self, x: &Access) -> std::io::Result<()> {
        let addr = match x.addr {
            Ok(a) => {
                self.regenerated += 1;
                Some(a)
            }
            Err(why) => {
                *self.not.entry(why).or_default() += 1;
                None
            }
        };
        if self.a.binary {
            let code = match x.kind {
                Kind::L => 0,
                Kind::S => 1,
                Kind::M => 2,
            };
            let unknown = if addr.is_none() { BINARY_UNKNOWN } else { 0 };
            let first = BINARY_ACCESS | code << 16 | unknown | u64::from(x.size);
            self.out.write_all(&first.to_le_bytes())?;
            return self.out.write_all(&addr.unwrap_or(0).to_le_bytes());
        }
        let kind = match x.kind {
            Kind::L => "L",
            Kind::S => "S",
            Kind::M => "M",
        };
        match (self.a.din, addr) {
            (true, Some(a)) => {
                if x.kind != Kind::S {
                    writeln!(self.out, "0 {a:x}")?;
                }
                if x.kind != Kind::L {
                    writeln!(self.out, "1 {a:x}")?;
                }
            }
            (true, None) => {}
            (false, Some(a)) => writeln!(self.out, " {kind} {a:#x},{}", x.size)?,
            (false, None) => writeln!(self.out, " {kind} ?,{}", x.size)?,
        }
        Ok(())
    }

    /// Ends the binary stream that is open.
    fn end(&mut self) -> std::io::Result<()> {
        if self.open {
            self.out.write_all(&BINARY_END.to_le_bytes())?;
            self.open = false;
        }
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.end()?;
        self.out.flush()
    }
}

/// The output's writer, naming where it writes in its errors (a full
/// disk said only "No space left on device").
struct Named<W> {
    inner: W,
    name: String,
}

impl<W> Named<W> {
    fn error(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("writing {}: {e}", self.name))
    }
}

impl<W: Write> Write for Named<W> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.inner.write(bytes).map_err(|e| self.error(e))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.error(e))
    }
}

/// `MODULE+0xADDRESS` and a newline, as `writeln!` with `{:#x}` gives it,
/// without the formatting machinery (regeneration writes millions).
fn write_line(out: &mut impl Write, module: &str, at: u64) -> std::io::Result<()> {
    let mut line = [0u8; 20];
    let digits = (64 - at.max(1).leading_zeros()).div_ceil(4) as usize;
    line[..3].copy_from_slice(b"+0x");
    for k in 0..digits {
        let nibble = (at >> (4 * (digits - 1 - k))) & 0xF;
        line[3 + k] = b"0123456789abcdef"[nibble as usize];
    }
    line[3 + digits] = b'\n';
    out.write_all(module.as_bytes())?;
    out.write_all(&line[..4 + digits])
}

/// Per function of the table, its module's load bias in process image
/// `image` (0 for a module the image did not trace).
fn image_biases(trace: &Trace, image: u32, functions: &[FunctionInfo]) -> Result<Vec<u64>> {
    let Some(loads) = trace.meta.loads.get(image as usize) else {
        bail!(
            "{} does not say where process image {image} loaded its modules (a trace from an \
             earlier weft): --din needs runtime addresses",
            trace_name(trace)
        );
    };
    Ok(functions
        .iter()
        .map(|f| {
            loads
                .modules
                .iter()
                .find(|(p, _)| *p == f.path)
                .map_or(0, |&(_, bias)| bias)
        })
        .collect())
}

fn trace_name(trace: &Trace) -> String {
    format!(
        "the trace of {} process image(s)",
        trace.meta.processes.len()
    )
}

#[cfg(test)]
mod tests {
    use super::write_line;

    #[test]
    fn lines_are_what_the_formatter_writes() {
        for at in [0u64, 1, 0xf, 0x10, 0x4011c6, 0x55d1_2345_6789, u64::MAX] {
            let mut ours = Vec::new();
            write_line(&mut ours, "gzip", at).unwrap();
            assert_eq!(String::from_utf8(ours).unwrap(), format!("gzip+{at:#x}\n"));
        }
    }
}
