//! `weft`: the command-line front end. Thin: it parses arguments, calls the
//! libraries, and turns their errors into one clear line.

/// Writes a line to standard error, like `eprintln!`, but never panics:
/// when standard error is full or gone, the message is lost and weft goes
/// on to exit with its own status.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod allocator;
mod attach;
mod control;
mod duration;
mod html;
mod inspect;
mod live_view;
mod output;
mod paths;
mod regen;
mod requests;
mod run;
mod signals;
mod syscalls;
mod workload;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// weft traces and instruments unmodified programs, running ones included.
#[derive(Parser, Debug)]
#[command(name = "weft", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a program (and, by default, every process it creates) under
    /// weft: count, time, trace events or record paths until it exits.
    Run(RunArgs),
    /// Attach to running processes, count, time, trace or record paths
    /// for a while, detach.
    Attach(AttachArgs),
    /// Show functions, disassembly, CFGs and liveness of a binary or process.
    Inspect(inspect::InspectArgs),
    /// Render a JSON report's time histograms as a self-contained HTML page.
    Report(ReportArgs),
    /// Print the events of an events directory, one per line, in time order,
    /// streamed (memory does not grow with the trace). A directory whose
    /// meta.json, ctf/metadata or events.jsonl is damaged or does not agree
    /// with the others is refused before anything is printed; a stream cut
    /// short is read up to its last whole packet; a corrupt one (or one
    /// holding event ids meta.json does not describe) is read up to the
    /// damage and makes the exit status 1.
    Events {
        /// A directory written with --events-out.
        dir: PathBuf,
        /// First cut each CTF stream back to its last whole packet, as a
        /// weft killed while writing or a full disk may leave them, so that
        /// babeltrace2 reads them (a stream corrupted in the middle loses
        /// everything from the damage on), write a missing or cut
        /// ctf/metadata again from meta.json, and remove weft's leftover
        /// temporary files.
        #[arg(long)]
        repair: bool,
    },
    /// Measure what each instrumentation primitive costs on this machine
    /// and store it for predicting perturbation.
    Calibrate,
    /// Regenerate what a --paths trace recorded: per thread and process
    /// image, every stretch of code run, one a line as MODULE+0xVADDR (the
    /// ELF virtual address objdump and nm show), every instruction with
    /// --insns, Dinero IV input with --din, or a binary form. A trace made
    /// with --validate is checked again; a damaged trace exits 1 with the
    /// byte where regeneration lost its place, and one whose weft was
    /// killed or whose disk filled is regenerated up to where it stops,
    /// then exits 1.
    Regen(regen::RegenArgs),
    /// Record every system call of a workload without stopping it per
    /// call (`record`), and print the calls back (`show`).
    Syscalls(syscalls::SyscallsArgs),
}

/// What a thread does when its event ring is full (`--ring-mode`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingMode {
    /// Drop the event and count it.
    Discard,
    /// Wait for weft to make room.
    Block,
    /// Overwrite the oldest events; weft dumps the rings on SIGUSR2 and at the end.
    Flight,
}

impl From<RingMode> for weft_events::RingMode {
    fn from(mode: RingMode) -> weft_events::RingMode {
        match mode {
            RingMode::Discard => weft_events::RingMode::Discard,
            RingMode::Block => weft_events::RingMode::Block,
            RingMode::Flight => weft_events::RingMode::Flight,
        }
    }
}

/// The clock of event timestamps.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockChoice {
    /// The TSC where it is invariant, else CLOCK_MONOTONIC.
    Auto,
    /// The time-stamp counter (`rdtsc`, a few cycles).
    Tsc,
    /// CLOCK_MONOTONIC in nanoseconds, read through the target's vDSO.
    Monotonic,
}

impl From<ClockChoice> for weft_events::ClockChoice {
    fn from(choice: ClockChoice) -> weft_events::ClockChoice {
        match choice {
            ClockChoice::Auto => weft_events::ClockChoice::Auto,
            ClockChoice::Tsc => weft_events::ClockChoice::Tsc,
            ClockChoice::Monotonic => weft_events::ClockChoice::Monotonic,
        }
    }
}

/// What to count and how to report it (shared by `run` and `attach`).
#[derive(Args, Debug, Clone)]
pub struct ProbeArgs {
    /// Count calls of functions matching PATTERN: `work`, `str*`,
    /// `libc.so.6:malloc`, `'*:free'`; `FUNCTION+OFFSET` counts one
    /// instruction. Repeatable.
    #[arg(long = "count", value_name = "PATTERN")]
    pub count: Vec<String>,
    /// Count returns to the caller (past tail calls) of matching functions. Repeatable.
    #[arg(long = "count-exits", value_name = "PATTERN")]
    pub count_exits: Vec<String>,
    /// Measure a metric for a focus: `wall_time:fn=work`,
    /// `calls:fn=write,inside=flush_log`, `sum_arg:fn=write,arg=3`,
    /// `cpu_time:fn=compute,thread=each`, `calls:fn=work,if=arg1==3`.
    /// Metrics: calls, wall_time, cpu_time, concurrency, lock_wait, sum_arg.
    /// Repeatable.
    #[arg(long = "metric", value_name = "NAME:FOCUS")]
    pub metric: Vec<String>,
    /// Trace events: `fn:PATTERN` records each entry (first --args
    /// arguments) and exit (return value) of the matching functions,
    /// `entry:PATTERN` entries only, `usdt:PROVIDER:NAME` USDT probes,
    /// `event:PROVIDER:NAME` the program's own rich event sites
    /// (`WEFT_EVENT`, include/weft/event.h; globs allowed), `syscalls` every
    /// system call (`syscalls:PATTERN`: those the matching functions make;
    /// `weft syscalls` records and reads them), into per-thread
    /// rings. Append `@arg1/s,arg2/s` to a `fn:` or `entry:` request to
    /// record those arguments as strings. Repeatable.
    #[arg(long = "trace", value_name = "KIND:WHAT")]
    pub trace: Vec<String>,
    /// Arguments recorded at each traced entry (0 to 6).
    #[arg(long = "args", value_name = "N", default_value_t = 2,
          value_parser = clap::value_parser!(u8).range(0..=6))]
    pub trace_args: u8,
    /// Bytes recorded at most of each string argument (`@argN/s`); longer
    /// strings are cut and marked.
    #[arg(long, value_name = "BYTES", default_value_t = 128,
          value_parser = clap::value_parser!(u16).range(8..=4096))]
    pub string_max: u16,
    /// What a thread does when its event ring is full: `discard` drops the
    /// event and counts it (the thread never waits); `block` waits, yielding
    /// the processor, until weft has made room, so no event is lost while
    /// weft keeps up (a writer stops waiting 1 s after weft stops draining).
    /// `flight` keeps the latest events: a full ring overwrites its oldest
    /// ones, weft does not drain while tracing, and it writes what the
    /// rings hold to --events-out DIR at the end, and to DIR/dump-N at
    /// each SIGUSR2 sent to weft.
    #[arg(long, value_enum, default_value_t = RingMode::Discard)]
    pub ring_mode: RingMode,
    /// Event timestamps: `tsc`, `monotonic` (CLOCK_MONOTONIC through the
    /// target's vDSO, comparable with other tools' traces), or `auto` (the
    /// TSC where it is invariant, else monotonic).
    #[arg(long, value_enum, default_value_t = ClockChoice::Auto)]
    pub clock: ClockChoice,
    /// Bytes of each thread's event ring: a power of two from 64K to 64M
    /// (`256K`, `1M`, `16M`).
    #[arg(long, value_name = "SIZE", default_value = "256K", value_parser = parse_size)]
    pub ring_size: u64,
    /// Write traced events to DIR: ctf/ (CTF 1.8), trace.json
    /// (Chrome/Perfetto), events.jsonl, meta.json. DIR must be new, empty,
    /// or (with --force) an earlier weft trace; it is created 0700, its
    /// files 0600.
    #[arg(long, value_name = "DIR")]
    pub events_out: Option<PathBuf>,
    /// Record the paths of functions (abstract execution): `all` (every
    /// function of the program's file), `fn:PATTERN` (`fn:work`,
    /// `fn:libz.so.1:inflate*`), or a module name (every function in
    /// it). Each traced function runs from a copy that writes a few
    /// witnesses per call; `weft regen DIR` rebuilds every block and
    /// instruction the program ran. Repeatable; needs --paths-out.
    #[arg(long = "paths", value_name = "WHAT")]
    pub paths: Vec<String>,
    /// Where --paths writes its trace (paths.json and buffers.zst): a new
    /// or empty directory, or an earlier paths trace (replaced).
    #[arg(long, value_name = "DIR", requires = "paths")]
    pub paths_out: Option<PathBuf>,
    /// Bytes of each witness buffer of --paths (a thread fills one, then
    /// weft's fault handler hands it another): `4K` to `64M`.
    #[arg(long, value_name = "SIZE", default_value = "1M", value_parser = parse_paths_buffer)]
    pub paths_buffer_size: u64,
    /// Witness buffers per process for --paths (1 to 50).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=50))]
    pub paths_buffers: u32,
    /// With --paths: every block the traced functions run also writes a
    /// record (the expensive way), and at the end weft checks that
    /// regeneration from the witnesses gives the same blocks, reporting
    /// the first difference and exiting 1 if there is one (`weft regen`
    /// checks such a trace again).
    #[arg(long)]
    pub validate: bool,
    /// With --paths: the traced functions also record the register values
    /// their load and store addresses need (8 bytes each, where a value
    /// cannot be computed from the path), for `weft regen --data`.
    #[arg(long = "data")]
    pub paths_data: bool,
    /// Replace an earlier weft trace in --events-out DIR: weft removes its
    /// own files there (meta.json, events.jsonl, trace.json, ctf/, dump-N/)
    /// first. A directory holding anything else is refused all the same.
    #[arg(long)]
    pub force: bool,
    /// Finish --events-out DIR with meta.json and the CTF streams alone,
    /// without events.jsonl and trace.json (`weft syscalls record`).
    #[arg(long, hide = true)]
    pub streams_only: bool,
    /// Rewrite every `syscall` site of each image at its first
    /// instruction, instead of catching the calls of sites not rewritten
    /// with Syscall User Dispatch and rewriting the busy ones
    /// (`weft syscalls record`, docs/syscalls.md).
    #[arg(long, hide = true)]
    pub no_dispatch: bool,
    /// Settle each image once weft has been with it this many seconds:
    /// every `syscall` site rewritten, then Syscall User Dispatch off,
    /// which the kernel otherwise charges every call (`auto`: after half a
    /// second, once it has made half a million calls; `never`: keep it on;
    /// `weft syscalls record`, docs/syscalls.md, "Settled processes").
    #[arg(long, value_name = "SECONDS", hide = true, default_value = "auto", value_parser = parse_settle_after)]
    pub settle_after: SettleAfter,
    /// Re-execution's feed (`weft syscalls reexec` builds it): follow the
    /// recorded calls in FILE at every `syscall` instruction.
    #[arg(long, value_name = "FILE", hide = true)]
    pub reexec_feed: Option<PathBuf>,
    /// With --reexec-feed: run the program's signal handlers where the
    /// feed's record had their deliveries, and drop the signals the
    /// rerun's own processes get (the record holds its deliveries).
    #[arg(long, hide = true, requires = "reexec_feed")]
    pub feed_signals: bool,
    /// Start the program with address space layout randomization off
    /// (`weft syscalls record` and `reexec` do, so that a rerun computes
    /// with the recorded addresses).
    #[arg(long, hide = true)]
    pub no_aslr: bool,
    /// Move the program into a control group before it runs its first
    /// instruction: write its pid into FILE (a `cgroup.procs`), as many
    /// as given (`weft syscalls reexec` with limits).
    #[arg(long, value_name = "FILE", hide = true)]
    pub join_cgroup: Vec<PathBuf>,
    /// Start the program with the environment FILE holds (a JSON array
    /// of `NAME=value`), not weft's (`weft syscalls reexec`: the recorded
    /// one).
    #[arg(long, value_name = "FILE", hide = true)]
    pub launch_env: Option<PathBuf>,
    /// Start the program with process id PID when it is free and weft
    /// may choose ids (`weft syscalls reexec`: the recorded one).
    #[arg(long, value_name = "PID", hide = true)]
    pub launch_pid: Option<i32>,
    /// Metric definitions to request with --metric like the built-in ones
    /// (format: docs/metrics.md): a regular file of at most 1 MiB, read
    /// before the program is started or attached to.
    #[arg(long, value_name = "FILE")]
    pub metrics_file: Option<PathBuf>,
    /// Sampling interval of the metrics' time histograms (`10ms`, `1s`).
    #[arg(long, value_name = "DURATION", default_value = "100ms", value_parser = duration::parse_interval)]
    pub interval: std::time::Duration,
    /// Buckets per time histogram (2 to 1000000); when full, bucket width doubles.
    #[arg(long, value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(2..=1_000_000))]
    pub buckets: u32,
    /// Report format.
    #[arg(long, value_enum, default_value_t = output::Format::Table)]
    pub format: output::Format,
    /// Write the report to FILE instead of standard error (a new file is
    /// created 0600; a symbolic link is followed only if it is weft's
    /// user's or root's).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Show how each point was spliced and how long the target was stopped.
    #[arg(long, short)]
    pub verbose: bool,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    probes: ProbeArgs,
    /// Measure the program weft starts only. By default weft follows the
    /// whole workload: every process the program creates (fork, vfork,
    /// clone) and every program they exec gets the same requests, and the
    /// report has a part per process and image (pid and command) and their
    /// total. Following needs BPF (root); without it weft says so and
    /// measures the first process only.
    #[arg(long)]
    no_follow: bool,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct ReportArgs {
    /// A report written by `weft run/attach --format json --output FILE`.
    input: PathBuf,
    /// Where to write the page.
    #[arg(long, value_name = "OUT.html")]
    html: PathBuf,
}

#[derive(Args, Debug)]
struct AttachArgs {
    /// The process to attach to, or several, comma-separated
    /// (`-p 1234,5678`): each gets the same probes and its own part of
    /// the report, followed by their total.
    #[arg(
        long,
        short = 'p',
        value_name = "PID[,PID...]",
        value_delimiter = ',',
        required = true
    )]
    pid: Vec<i32>,
    /// Detach after this long (`0.5`, `500ms`, `2s`, `1m`); default: until
    /// Ctrl-C, SIGTERM or the target's exit.
    #[arg(long, short = 'd', value_name = "DURATION", value_parser = duration::parse)]
    duration: Option<std::time::Duration>,
    /// Refuse metric requests whose predicted perturbation (from `weft
    /// calibrate`'s costs and the call rates measured for a moment first)
    /// exceeds PCT percent of one CPU. (`run` has no rates before the
    /// program runs; it reports the observed perturbation at the end.)
    #[arg(long, value_name = "PCT", value_parser = parse_percent)]
    max_overhead: Option<f64>,
    /// Also measure every process the attached ones create while weft is
    /// attached (fork, vfork, clone) and every program they exec, each in
    /// its own part of the report; detaching takes the probes out of all
    /// of them. Needs BPF (root). Not with --trace.
    #[arg(long)]
    follow: bool,
    #[command(flatten)]
    probes: ProbeArgs,
}

/// `256K`, `1M`, `65536`: a size in bytes, a power of two.
fn parse_size(text: &str) -> std::result::Result<u64, String> {
    let bytes = parse_bytes(text)?;
    let range = weft_live::ring::MIN_DATA..=weft_live::ring::MAX_DATA;
    if !bytes.is_power_of_two() || !range.contains(&bytes) {
        return Err(format!("'{text}': a power of two from 64K to 64M"));
    }
    Ok(bytes)
}

/// A witness buffer's size: whole pages from 4K to 64M.
fn parse_paths_buffer(text: &str) -> std::result::Result<u64, String> {
    let bytes = parse_bytes(text)?;
    if bytes % 4096 != 0 || !(4096..=64 << 20).contains(&bytes) {
        return Err(format!("'{text}': whole 4K pages, from 4K to 64M"));
    }
    Ok(bytes)
}

/// `256K`, `1M`, `4G`, `65536`: a size in bytes.
fn parse_bytes(text: &str) -> std::result::Result<u64, String> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let scale = match unit {
        "" => 1,
        "K" | "k" | "KiB" => 1 << 10,
        "M" | "m" | "MiB" => 1 << 20,
        "G" | "g" | "GiB" => 1 << 30,
        _ => return Err(format!("'{text}': write a size such as 256K, 1M or 16M")),
    };
    let bytes = digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("'{text}': write a size such as 256K, 1M or 16M"))?;
    Ok(bytes)
}

/// A percentage of one CPU: a finite number above 0.
fn parse_percent(text: &str) -> std::result::Result<f64, String> {
    match text.trim().trim_end_matches('%').parse::<f64>() {
        Ok(p) if p.is_finite() && p > 0.0 => Ok(p),
        _ => Err(format!(
            "'{text}' is not a percentage above 0 (such as 2 or 0.5)"
        )),
    }
}

/// Starts what weft needs later and can do meanwhile on other threads:
/// loading the schedule's BPF programs. Called once `run` has started its
/// program: a thread makes the C library handle SIGSETXID, and the
/// program must start with the dispositions weft had.
pub(crate) fn start_background_work(probes: &ProbeArgs) {
    if !probes.paths.is_empty() {
        paths::load_schedule_in_background();
    }
}

fn main() -> ExitCode {
    // The TSC's rate is measured across weft's start-up, at no wait.
    weft_live::clock::start_measuring_ticks();
    let cli = Cli::parse();
    weft_process::raise_open_file_limit();
    let result = match cli.command {
        Command::Run(a) => run::run(&a.probes, !a.no_follow, &a.command),
        Command::Attach(a) => {
            attach::attach(&a.pid, a.duration, a.max_overhead, a.follow, &a.probes)
        }
        Command::Inspect(a) => {
            signals::die_on_closed_output();
            inspect::inspect(&a).map(|_| 0)
        }
        Command::Calibrate => calibrate(),
        Command::Events { dir, repair } => {
            signals::die_on_closed_output();
            print_events(&dir, repair)
        }
        Command::Report(a) => html::report(&a.input, &a.html).map(|_| 0),
        Command::Regen(a) => {
            signals::die_on_closed_output();
            // Regeneration holds as much of the trace as its memory
            // budget allows: nothing more on top.
            allocator::lean();
            regen::regen(&a)
        }
        Command::Syscalls(a) => syscalls::syscalls(&a),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            say!("weft: {}", one_line(&e));
            if let Some(hint) = hint(&e) {
                say!("weft: hint: {hint}");
            }
            ExitCode::from(exit_code_for(&e))
        }
    }
}

/// The error chain on one line: "what failed: why".
fn one_line(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}

fn process_error(e: &anyhow::Error) -> Option<&weft_process::Error> {
    e.chain().find_map(|c| {
        c.downcast_ref::<weft_process::Error>().or_else(|| {
            match c.downcast_ref::<weft_live::Error>() {
                Some(weft_live::Error::Process(p)) => Some(p),
                _ => None,
            }
        })
    })
}

/// What the user can do about common failures.
fn hint(e: &anyhow::Error) -> Option<String> {
    match process_error(e)? {
        weft_process::Error::PermissionDenied { .. } => Some(
            "run weft as root or with CAP_SYS_PTRACE, or as the target's user with \
             /proc/sys/kernel/yama/ptrace_scope set to 0"
                .into(),
        ),
        weft_process::Error::AlreadyTraced(pid) => {
            Some(format!("detach the debugger or strace from {pid} first"))
        }
        _ => None,
    }
}

fn exit_code_for(e: &anyhow::Error) -> u8 {
    match process_error(e) {
        Some(weft_process::Error::Launch { source, .. }) => match source.raw_os_error() {
            Some(libc::ENOENT) => 127,
            Some(libc::EACCES) | Some(libc::ENOEXEC) => 126,
            _ => 1,
        },
        _ => 1,
    }
}

/// `weft calibrate`: measures and stores the primitives' costs.
fn calibrate() -> anyhow::Result<i32> {
    let costs = weft_metrics::Costs::measure()?;
    costs.store()?;
    println!(
        "primitive costs on this machine (ns per execution), stored in {}:",
        weft_metrics::Costs::path().display()
    );
    for (what, ns) in [
        ("trampoline (jmp there and back)", costs.trampoline),
        ("inline counter", costs.counter),
        ("mini-trampoline call", costs.mini),
        ("addCounter by an expression", costs.add_expr),
        ("predicate", costs.predicate),
        ("startTimer + stopTimer", costs.timer_pair),
    ] {
        println!("  {what:<34} {ns:>8.2}");
    }
    Ok(0)
}

/// `weft events [--repair] DIR`: the events, then what could not be read
/// (a stream cut short is only noted; a corrupt one makes the exit status 1).
fn print_events(dir: &std::path::Path, repair: bool) -> anyhow::Result<i32> {
    if repair {
        for r in weft_events::repair_dir(dir)? {
            say!(
                "weft: {}: cut back to {} byte(s), its last whole packet; removed {} byte(s) \
                 after it ({})",
                r.stream.display(),
                r.offset,
                r.removed,
                r.why
            );
        }
        if let Some(why) = weft_events::repair_metadata(dir)? {
            say!(
                "weft: {}: written again from meta.json ({why})",
                dir.join("ctf").join("metadata").display()
            );
        }
    }
    // Checked and scanned first (an inconsistent directory is refused
    // before anything is printed), then streamed in time order: memory
    // does not grow with the trace.
    let trace = weft_events::TraceReader::open(dir)?;
    let meta = trace.meta();
    use std::io::Write;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
    let mut lines = weft_events::TextLines::new(meta);
    let unwritable = |source| weft_events::Error::Io {
        what: "cannot write the events to standard output".into(),
        source,
    };
    trace
        .each_in_time_order(&mut |e| out.write_all(lines.line(e).as_bytes()).map_err(unwritable))?;
    out.flush().map_err(unwritable)?;
    if meta.dropped > 0 && meta.ring_mode == weft_events::RingMode::Flight {
        say!(
            "weft: flight mode: these are the latest events; {} older one(s) were overwritten",
            meta.dropped
        );
    } else if meta.dropped > 0 {
        say!(
            "weft: {} event(s) were dropped while tracing (rings full)",
            meta.dropped
        );
    }
    for damage in trace.damage() {
        say!("weft: {damage}");
    }
    if !trace.damage().is_empty() {
        say!(
            "weft: hint: `weft events --repair {}` cuts the streams back to their last whole \
             packet, so that babeltrace2 reads them",
            dir.display()
        );
    }
    Ok(if trace.damage().iter().any(|d| d.is_corrupt()) {
        1
    } else {
        0
    })
}

/// `--settle-after`: how long weft is with an image before it settles it,
/// if ever, and how many calls the image must have made by then.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SettleAfter(pub Option<(std::time::Duration, u64)>);

/// What `--settle-after auto` waits for: half a second, and half a million
/// calls. Settling stops the program some 120 ms in all, and saves some
/// 30 ns a call from then on: a program that has made few calls by then
/// (`make` waiting for its compilers) would pay more than it gains.
const SETTLE_AUTO: (std::time::Duration, u64) = (std::time::Duration::from_millis(500), 500_000);

/// `--settle-after`: seconds, `auto` or `never`.
fn parse_settle_after(text: &str) -> std::result::Result<SettleAfter, String> {
    match text {
        "never" => return Ok(SettleAfter(None)),
        "auto" => return Ok(SettleAfter(Some(SETTLE_AUTO))),
        _ => {}
    }
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && s >= 0.0 => Ok(SettleAfter(Some((
            std::time::Duration::from_secs_f64(s),
            0,
        )))),
        _ => Err(format!(
            "'{text}' is not a number of seconds (or `auto`, `never`)"
        )),
    }
}
