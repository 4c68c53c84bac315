//! `weft regen DIR`: the code a `--paths` trace's threads ran, rebuilt
//! from their witnesses (see `weft_paths::regen`), as text, as Dinero IV
//! input (`--din`) or in a compact binary form (`--binary`, described in
//! docs/paths.md).

use anyhow::{bail, Context, Result};
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use weft_paths::instrument::FunctionInfo;
use weft_paths::regen::{Program, Segment};
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
    /// Dinero IV's input format: `2 ADDRESS` (an instruction fetch, the
    /// runtime address in hex) for every instruction, the threads' streams
    /// one after another; for cache simulators.
    #[arg(long, conflicts_with_all = ["binary", "insns"])]
    pub din: bool,
    /// The compact binary form (docs/paths.md): a module table, then per
    /// thread stream a header and 8 bytes per stretch (or instruction,
    /// with --insns): module index << 48 | ELF virtual address.
    #[arg(long)]
    pub binary: bool,
}

/// Magic of the binary form.
const BINARY_MAGIC: &[u8; 8] = b"WEFTBLK1";
/// Ends a stream in the binary form.
const BINARY_END: u64 = u64::MAX;

/// Prints each thread's regenerated code, thread by thread.
pub fn regen(a: &RegenArgs) -> Result<()> {
    let trace = Trace::read(&a.dir)?;
    let program = Program::new(&trace.meta.functions, trace.meta.validate);
    if a.binary && a.output.is_none() {
        bail!("--binary writes bytes: give -o FILE");
    }
    let sink: Box<dyn Write> = match &a.output {
        Some(path) => Box::new(
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, sink);
    let functions = program.functions();
    // The binary form numbers modules by name.
    let mut modules: Vec<&str> = functions.iter().map(|f| f.module.as_str()).collect();
    modules.sort_unstable();
    modules.dedup();
    let module_of: Vec<u64> = functions
        .iter()
        .map(|f| modules.binary_search(&f.module.as_str()).unwrap_or(0) as u64)
        .collect();
    if a.binary {
        out.write_all(BINARY_MAGIC)?;
        out.write_all(&(modules.len() as u32).to_le_bytes())?;
        for m in &modules {
            out.write_all(&(m.len() as u16).to_le_bytes())?;
            out.write_all(m.as_bytes())?;
        }
    }
    let mut checked = 0u64;
    for &(pid, tid, image) in trace.threads.keys() {
        let command = trace.command(image);
        let biases = if a.din {
            image_biases(&trace, image, functions)?
        } else {
            Vec::new()
        };
        if a.binary {
            out.write_all(&[1u8])?;
            for v in [pid, tid, image, command.len() as u32] {
                out.write_all(&v.to_le_bytes())?;
            }
            out.write_all(command.as_bytes())?;
        } else if !a.din {
            writeln!(out, "# thread {tid} of process {pid} ({command})")?;
        }
        let stream = trace.stream((pid, tid, image));
        let mut failed: Option<std::io::Error> = None;
        let mut write = |s: Segment| -> std::io::Result<()> {
            let f = &functions[s.function as usize];
            let b = &f.blocks[s.block as usize];
            let last = if a.insns || a.din {
                s.last
            } else {
                s.first + 1
            };
            for k in s.first..last {
                let at = b.start + b.insns[k as usize] as u64;
                if a.din {
                    writeln!(out, "2 {:x}", at.wrapping_add(biases[s.function as usize]))?;
                } else if a.binary {
                    let entry = module_of[s.function as usize] << 48 | at;
                    out.write_all(&entry.to_le_bytes())?;
                } else {
                    writeln!(out, "{}+{at:#x}", f.module)?;
                }
            }
            Ok(())
        };
        let summary = program
            .regenerate(&stream, |s| {
                if failed.is_none() {
                    failed = write(s).err();
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
        if a.binary {
            out.write_all(&BINARY_END.to_le_bytes())?;
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
    if a.din && trace.threads.len() > 1 {
        say!(
            "weft: {} thread streams, written one after another",
            trace.threads.len()
        );
    }
    if trace.meta.validate {
        say!(
            "weft: validated: {checked} block(s) regenerated equal the blocks the threads \
             recorded"
        );
    }
    Ok(())
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
