//! `weft regen DIR`: the code a `--paths` trace's threads ran, rebuilt
//! from their witnesses (see `weft_paths::regen`).

use anyhow::{Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use weft_paths::regen::Program;
use weft_paths::trace_dir::Trace;

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
}

/// Prints each thread's regenerated code, thread by thread.
pub fn regen(a: &RegenArgs) -> Result<()> {
    let trace = Trace::read(&a.dir)?;
    let program = Program::new(&trace.meta.functions, trace.meta.validate);
    let sink: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, sink);
    let functions = program.functions();
    let mut checked = 0u64;
    for &(pid, tid, image) in trace.threads.keys() {
        let command = trace.command(image);
        writeln!(out, "# thread {tid} of process {pid} ({command})")?;
        let stream = trace.stream((pid, tid, image));
        let mut failed: Option<std::io::Error> = None;
        let summary = program
            .regenerate(&stream, |s| {
                if failed.is_some() {
                    return;
                }
                let f = &functions[s.function as usize];
                let b = &f.blocks[s.block as usize];
                let last = if a.insns { s.last } else { s.first + 1 };
                for k in s.first..last {
                    let at = b.start + b.insns[k as usize] as u64;
                    if let Err(e) = writeln!(out, "{}+{at:#x}", f.module) {
                        failed = Some(e);
                        return;
                    }
                }
            })
            .with_context(|| {
                format!(
                    "regenerating thread {tid} of process {pid} from {}",
                    a.dir.display()
                )
            })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        if summary.skipped > 0 {
            say!(
                "weft: thread {tid} of process {pid}: its first {} record(s) came before \
                 its first traced call and were passed over",
                summary.skipped
            );
        }
        checked += summary.checked;
    }
    out.flush()?;
    if trace.meta.validate {
        say!(
            "weft: validated: {checked} block(s) regenerated equal the blocks the threads \
             recorded"
        );
    }
    Ok(())
}
