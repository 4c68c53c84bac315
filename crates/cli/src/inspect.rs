//! `weft inspect`: what weft sees in a binary or a running process —
//! functions, USDT probes, rich event sites, disassembly, control-flow
//! graphs, liveness.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::path::Path;
use weft_code::{format_instruction, FunctionCode, RegSet};
use weft_image::{Function, Pattern};
use weft_live::Module;

/// `weft inspect` arguments.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct InspectArgs {
    #[command(subcommand)]
    what: Option<What>,
    /// The same as `weft inspect usdt BINARY|PID`.
    #[arg(long, value_name = "BINARY|PID")]
    usdt: Option<String>,
    /// The same as `weft inspect events BINARY|PID`.
    #[arg(long, value_name = "BINARY|PID")]
    events: Option<String>,
}

#[derive(Subcommand, Debug)]
enum What {
    /// List functions (address, size, module, name, where the range came from).
    Functions {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Only functions matching this pattern.
        pattern: Option<String>,
    },
    /// List USDT probes (`.note.stapsdt`): provider:name, site, semaphore, arguments.
    Usdt {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Only probes whose PROVIDER:NAME matches this glob.
        pattern: Option<String>,
    },
    /// List rich event sites (`weft/event.h`): provider:name, descriptor, fields.
    Events {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Only sites whose PROVIDER:NAME matches this glob.
        pattern: Option<String>,
    },
    /// Disassemble functions, marking basic-block starts.
    Disasm {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Function pattern.
        function: String,
    },
    /// Print functions' control-flow graphs in Graphviz DOT.
    Cfg {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Function pattern.
        function: String,
    },
    /// Registers and flags live before each instruction (or one: FUNCTION+OFFSET).
    Liveness {
        /// A binary's path, or the PID of a running process.
        target: String,
        /// Function pattern, optionally +OFFSET.
        point: String,
    },
}

/// Runs an inspect command.
pub fn inspect(args: &InspectArgs) -> Result<()> {
    let what = match (&args.what, &args.usdt, &args.events) {
        (Some(what), _, _) => what,
        (None, Some(target), _) => &What::Usdt {
            target: target.clone(),
            pattern: None,
        },
        (None, None, Some(target)) => &What::Events {
            target: target.clone(),
            pattern: None,
        },
        (None, None, None) => bail!(
            "say what to inspect: functions, usdt, events, disasm, cfg or liveness \
             (weft inspect --help)"
        ),
    };
    match what {
        What::Functions { target, pattern } => {
            let modules = load(target)?;
            let pattern = pattern.as_deref().map(Pattern::parse).transpose()?;
            println!(
                "{:<18} {:>8}  {:<24} {:<40} SOURCE",
                "ADDRESS", "SIZE", "MODULE", "NAME"
            );
            for m in &modules {
                if pattern.as_ref().is_some_and(|p| !p.matches_module(&m.name)) {
                    continue;
                }
                // IFUNCs: the implementation the process uses.
                let chosen = ifunc_choices(target, m);
                for f in m.image.functions() {
                    if pattern.as_ref().is_some_and(|p| !matches(p, f)) {
                        continue;
                    }
                    let mut name = f.display_name().to_string();
                    if f.ifunc {
                        match chosen.get(&f.name).and_then(|&at| m.image.function_at(at)) {
                            Some(to) => {
                                name.push_str(&format!(" [ifunc -> {}]", to.display_name()))
                            }
                            None => name.push_str(" [ifunc]"),
                        }
                    }
                    println!(
                        "{:#018x} {:>8}  {:<24} {:<40} {:?}",
                        m.runtime(f.addr),
                        f.size,
                        m.name,
                        name,
                        f.source
                    );
                }
            }
        }
        What::Usdt { target, pattern } => {
            let modules = load(target)?;
            println!(
                "{:<24} {:<36} {:>18} {:>18}  ARGUMENTS",
                "MODULE", "PROBE", "SITE", "SEMAPHORE"
            );
            for m in &modules {
                for p in m.image.usdt_probes() {
                    let full = format!("{}:{}", p.provider, p.name);
                    if pattern
                        .as_deref()
                        .is_some_and(|g| !weft_image::glob_match(g, &full))
                    {
                        continue;
                    }
                    let sem = p
                        .semaphore
                        .map_or("-".to_string(), |s| format!("{:#x}", m.runtime(s)));
                    let args: Vec<String> = p
                        .args
                        .iter()
                        .map(|(size, op)| format!("{size}@{op}"))
                        .collect();
                    println!(
                        "{:<24} {:<36} {:>#18x} {:>18}  {}",
                        m.name,
                        full,
                        m.runtime(p.pc),
                        sem,
                        args.join(" ")
                    );
                }
            }
        }
        What::Events { target, pattern } => {
            let modules = load(target)?;
            println!(
                "{:<24} {:<36} {:>18}  FIELDS",
                "MODULE", "EVENT", "DESCRIPTOR"
            );
            for m in &modules {
                for e in m.image.event_sites() {
                    let full = format!("{}:{}", e.provider, e.name);
                    if pattern
                        .as_deref()
                        .is_some_and(|g| !weft_image::glob_match(g, &full))
                    {
                        continue;
                    }
                    println!(
                        "{:<24} {:<36} {:>#18x}  {}",
                        m.name,
                        full,
                        m.runtime(e.addr),
                        e.fields
                    );
                }
            }
        }
        What::Disasm { target, function } => {
            for (m, f, code) in find(target, function)? {
                println!(
                    "{}:{} at {:#x}, {} bytes, {} blocks",
                    m,
                    f.display_name(),
                    code.start(),
                    f.size,
                    code.blocks().len()
                );
                let starts: Vec<u64> = code.blocks().iter().map(|b| b.start).collect();
                for i in code.instructions() {
                    let mark = if starts.contains(&i.ip()) { ">" } else { " " };
                    println!(
                        "{mark} {:#x} <+{}>: {}",
                        i.ip(),
                        i.ip() - code.start(),
                        format_instruction(i)
                    );
                }
            }
        }
        What::Cfg { target, function } => {
            for (m, f, code) in find(target, function)? {
                print!("{}", code.to_dot(&format!("{m}:{}", f.display_name())));
            }
        }
        What::Liveness { target, point } => {
            let pattern = Pattern::parse(point)?;
            let base = Pattern {
                offset: None,
                ..pattern.clone()
            }
            .to_string();
            for (m, f, code) in find(target, &base)? {
                let live = code.liveness();
                let shown: Vec<_> = match pattern.offset {
                    Some(off) => match code.instruction_at(code.start() + off) {
                        Some(i) => vec![*i],
                        None => bail!(
                            "{m}:{}+{off:#x} is not the start of an instruction",
                            f.display_name()
                        ),
                    },
                    None => code.instructions().to_vec(),
                };
                println!(
                    "{}:{} — live before each instruction (free = not live: usable by a snippet)",
                    m,
                    f.display_name()
                );
                for i in shown {
                    let l = live.live_before(i.ip()).unwrap_or(RegSet::ALL);
                    let free = RegSet::ALL - l;
                    println!(
                        "{:#x} <+{}>: {:<40} live: {}  free: {}",
                        i.ip(),
                        i.ip() - code.start(),
                        format_instruction(&i),
                        l,
                        free
                    );
                }
            }
        }
    }
    Ok(())
}

fn matches(p: &Pattern, f: &Function) -> bool {
    p.matches_function(&f.name, f.demangled())
        || f.aliases.iter().any(|a| p.matches_function(a, None))
}

/// Modules of a binary (link-time addresses) or of a process (runtime addresses).
fn load(target: &str) -> Result<Vec<Module>> {
    if !Path::new(target).exists() {
        if let Ok(pid) = target.parse::<i32>() {
            let maps = weft_process::maps::read(pid)?;
            return Ok(Module::discover(pid, &maps, &[])?);
        }
        bail!("{target}: no such file (nor a running process id)");
    }
    Ok(vec![Module::from_file(Path::new(target))?])
}

/// The implementations a module's IFUNCs lead to in the process `target`
/// names (for a file, in a process of weft's on this machine); empty when
/// weft cannot tell (see `weft_live::ifunc`).
fn ifunc_choices(
    target: &str,
    m: &Module,
) -> std::collections::HashMap<String, weft_image::FileAddr> {
    let process = match Path::new(target).exists() {
        true => std::process::id() as i32,
        false => target.parse::<i32>().unwrap_or(0),
    };
    weft_live::ifunc::choices(process, m).unwrap_or_default()
}

fn find(target: &str, function: &str) -> Result<Vec<(String, Function, FunctionCode)>> {
    let modules = load(target)?;
    let pattern = Pattern::parse(function)?;
    let mut out = Vec::new();
    for m in &modules {
        if !pattern.matches_module(&m.name) {
            continue;
        }
        let chosen = ifunc_choices(target, m);
        for f in m.image.functions().iter().filter(|f| matches(&pattern, f)) {
            // An IFUNC: the implementation that runs, as counting uses it
            // (offsets apply to it), under the name asked for.
            let shown = match chosen.get(&f.name).and_then(|&at| m.image.function_at(at)) {
                Some(to) if f.ifunc => {
                    let mut to = to.clone();
                    to.rename(format!(
                        "{} [ifunc -> {}]",
                        f.display_name(),
                        to.display_name()
                    ));
                    to
                }
                _ => f.clone(),
            };
            if let Some(code) = m.function_code(&shown) {
                out.push((m.name.clone(), shown, code));
            }
        }
    }
    if out.is_empty() {
        let names = modules
            .iter()
            .flat_map(|m| m.image.functions().iter().map(|f| f.name.as_str()));
        let near = weft_image::near_misses(&pattern.function, names, 5);
        if near.is_empty() {
            bail!("no function matches '{function}'");
        }
        bail!(
            "no function matches '{function}' (did you mean: {}?)",
            near.join(", ")
        );
    }
    Ok(out)
}
