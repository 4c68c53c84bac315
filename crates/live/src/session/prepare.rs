//! Preparing: patterns resolved against the modules and the matched
//! functions analysed, while the target runs.

use super::*;
use weft_image::{near_misses, Function, Pattern};

/// Probes resolved and analysed, ready to apply.
#[derive(Debug)]
pub struct Prepared {
    pub(super) items: Vec<PreparedProbe>,
    pub(super) skipped: Vec<SkippedPoint>,
    /// Module-qualified patterns whose module is not loaded (yet).
    pub pending: Vec<String>,
    /// What the user should know about how patterns resolved (an IFUNC
    /// whose implementation other names share).
    pub notes: Vec<String>,
    /// Patterns that match nothing in this process, as the pattern and
    /// the names near it here, when the session is one part of a workload
    /// (see [`Session::part_of_workload`]); otherwise such a pattern is
    /// the error [`Error::NoMatch`].
    pub unmatched: Vec<(String, Vec<String>)>,
    /// Per spec, whether it matched a function.
    pub(super) matched: Vec<bool>,
}

impl Prepared {
    /// Number of probes to apply.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether there is nothing to apply.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

#[derive(Debug)]
pub(super) struct PreparedProbe {
    pub(super) module: usize,
    pub(super) function_addr: FileAddr,
    pub(super) display: String,
    pub(super) kind: PointKind,
    pub(super) action: Action,
    pub(super) tag: u64,
    /// The function's code with its points, then (for exits) the parts the
    /// compiler split off it (`.cold`), whose returns are the function's.
    pub(super) parts: Vec<Part>,
    /// Exits that wait for the return to the caller: the function leaves
    /// through tail calls, or has no exit, so its calls' return addresses
    /// are replaced (see `returns.rs`).
    pub(super) arm_return: bool,
    /// A system call point's number (see [`weft_plan::Resolved::syscall`]).
    pub(super) syscall: Option<u64>,
}

/// One stretch of a function's code and the points in it.
#[derive(Debug)]
pub(super) struct Part {
    pub(super) points: Vec<u64>,
    pub(super) code: FunctionCode,
    pub(super) after_end: Vec<u8>,
}

/// Whether a symbol names a part the compiler split off a function
/// (`f.cold`, `f.part.0.cold`, `f.cold.12`): code entered by jumps from its
/// function, never called, whose returns are that function's.
pub(crate) fn is_split_part(name: &str) -> bool {
    name.ends_with(".cold") || name.contains(".cold.")
}

/// The parts split off `f` in `module` (see [`is_split_part`]).
fn split_parts<'m>(module: &'m Module, f: &Function) -> impl Iterator<Item = &'m Function> {
    let cold = format!("{}.cold", f.name);
    module.image.functions().iter().filter(move |g| {
        g.name == cold
            || g.name
                .strip_prefix(&cold)
                .is_some_and(|rest| rest.starts_with('.'))
    })
}

impl Session {
    /// Resolves patterns against the modules and analyses the matched
    /// functions. The target may be running. A pattern that matches
    /// nothing is an error naming near misses.
    /// A session that began at the program's first instruction (see
    /// `startup.rs`) resolves them in the modules mapped then until
    /// [`Session::end_startup`], and in the others after it.
    pub fn prepare(&mut self, specs: &[PointSpec]) -> Result<Prepared> {
        self.refresh_modules()?;
        if self.in_startup() {
            let prepared = self.prepare_modules(specs, 0, false, &[])?;
            let modules = self.modules.len();
            if let Some(s) = &mut self.startup {
                s.modules = Some(modules);
                s.matched = prepared.matched.clone();
            }
            return Ok(prepared);
        }
        let (first, matched) = self.startup_done();
        let matched = matched.to_vec();
        self.prepare_modules(specs, first, true, &matched)
    }

    /// Adds the process's vDSO to the modules when a spec names it (and
    /// only then: wildcards never match it, see [`weft_image::Pattern`]).
    fn add_vdso_if_named(&mut self, specs: &[PointSpec]) -> Result<()> {
        if !specs.iter().any(|s| s.pattern.names_vdso()) || self.modules.iter().any(|m| m.is_vdso())
        {
            return Ok(());
        }
        let maps = weft_process::maps::read(self.pid)?;
        if let Some(vdso) = Module::vdso(self.pid, &maps)? {
            self.modules.push(std::sync::Arc::new(vdso));
        }
        Ok(())
    }

    /// Resolves patterns against modules `first..`; with `require_match`, a
    /// pattern matching nothing there is an error, unless `matched_before`
    /// says it matched in the modules before `first`.
    pub(super) fn prepare_modules(
        &mut self,
        specs: &[PointSpec],
        first: usize,
        require_match: bool,
        matched_before: &[bool],
    ) -> Result<Prepared> {
        self.add_vdso_if_named(specs)?;
        let mut items = Vec::new();
        let mut skipped = Vec::new();
        let mut pending = Vec::new();
        let mut notes = Vec::new();
        let mut unmatched = Vec::new();
        let mut matched = Vec::with_capacity(specs.len());
        let mut ifuncs: Vec<Option<Result<_, String>>> = vec![None; self.modules.len()];
        for (si, spec) in specs.iter().enumerate() {
            let before = items.len() + skipped.len();
            // The functions to analyse: (module, function, name matched,
            // name to report a failure under), analysed at once below.
            let mut wanted: Vec<(usize, &Function, &str, &str)> = Vec::new();
            for (mi, module) in self.modules.iter().enumerate().skip(first) {
                if !spec.pattern.matches_module(&module.name) {
                    continue;
                }
                let for_syscalls =
                    matches!(spec.kind, PointKind::Syscall | PointKind::AfterSyscall);
                // Only functions whose bytes hold a `syscall` (0f 05) are
                // worth decoding for one: most of a library's are not,
                // and decoding them all made every exec slow.
                let functions: Box<dyn Iterator<Item = &Function>> = match for_syscalls {
                    true => Box::new(module.image.functions_with_syscall_bytes()),
                    false => Box::new(module.image.functions().iter()),
                };
                for f in functions {
                    if for_syscalls && !self.dispatch_wants(mi, f) {
                        continue;
                    }
                    // Report the function under the name the pattern matched.
                    let matched = if spec.pattern.matches_function(&f.name, f.demangled()) {
                        f.display_name()
                    } else if let Some(a) = f
                        .aliases
                        .iter()
                        .find(|a| spec.pattern.matches_function(a, None))
                    {
                        a.as_str()
                    } else {
                        continue;
                    };
                    // A split-off part is no function of its own: its entry
                    // is a jump, its returns are its function's (added to
                    // that function's exits below). Only a pattern that
                    // names the part itself (`f.cold`), without a glob,
                    // instruments it; `f` alone matches its demangled
                    // `f(int) [clone .cold]` too, and means `f`.
                    let names_part = !spec.pattern.function.contains(['*', '?', '['])
                        && spec.pattern.function.contains(".cold");
                    if is_split_part(&f.name)
                        && !names_part
                        && matches!(spec.kind, PointKind::Entry | PointKind::Exit)
                    {
                        continue;
                    }
                    // An IFUNC's implementations make their system calls
                    // under their own names.
                    if f.ifunc && for_syscalls {
                        continue;
                    }
                    // An IFUNC: the implementation this process uses.
                    let target = if f.ifunc {
                        match ifunc_implementation(self.pid, module, f, &mut ifuncs[mi]) {
                            Ok((g, shared)) => {
                                // Laid out again, code reached under two names
                                // is one copy: no count to share.
                                let counts = !matches!(spec.action, Action::Rebuild(_));
                                if !shared.is_empty() && counts {
                                    notes.push(format!(
                                        "{}:{} runs the same code as {}: its count includes \
                                         their calls",
                                        module.name,
                                        matched,
                                        shared.join(", ")
                                    ));
                                }
                                g
                            }
                            Err(why) => {
                                skipped.push(SkippedPoint {
                                    module: module.name.clone(),
                                    function: matched.to_string(),
                                    why: SkipReason::IfuncResolver(why),
                                });
                                continue;
                            }
                        }
                    } else {
                        f
                    };
                    wanted.push((mi, target, matched, f.display_name()));
                }
            }
            let modules = &self.modules;
            let prepared = parallel_map(&wanted, |&(mi, target, matched, _)| {
                prepare_probe(mi, &modules[mi], target, matched, spec.kind)
            });
            for (&(mi, _, _, display), result) in wanted.iter().zip(prepared) {
                match result {
                    Ok(mut item) => {
                        item.action = spec.action.clone();
                        item.tag = spec.tag;
                        if matches!(item.kind, PointKind::Syscall | PointKind::AfterSyscall) {
                            let settling = self.settled_sites();
                            items.extend(
                                per_syscall(item)
                                    .into_iter()
                                    .filter(|p| {
                                        let site = p.parts[0].points[0]
                                            - 2 * u64::from(p.kind == PointKind::AfterSyscall);
                                        self.dispatch_keeps(mi, site, p.syscall)
                                    })
                                    .filter_map(|p| match settling {
                                        true => self.settled_probe(p),
                                        false => Some(p),
                                    }),
                            );
                        } else {
                            items.push(item)
                        }
                    }
                    // A pattern for system calls means the functions that make them.
                    Err(SkipReason::NoSyscall) => {}
                    Err(why) => skipped.push(SkippedPoint {
                        module: self.modules[mi].name.clone(),
                        function: display.to_string(),
                        why,
                    }),
                }
            }
            let found = items.len() + skipped.len() > before
                || matched_before.get(si).copied().unwrap_or(false);
            matched.push(found);
            if require_match && !found {
                let module_loaded = self
                    .modules
                    .iter()
                    .any(|m| spec.pattern.matches_module(&m.name));
                if spec.pattern.module.is_some() && !module_loaded {
                    // Like a pending breakpoint: the library may be loaded later.
                    let pattern = spec.pattern.to_string();
                    if !pending.contains(&pattern) {
                        pending.push(pattern);
                    }
                    continue;
                }
                if self.part_of_workload {
                    if let Error::NoMatch { pattern, near } = self.no_match(&spec.pattern) {
                        if !unmatched.iter().any(|(p, _)| *p == pattern) {
                            unmatched.push((pattern, near));
                        }
                    }
                    continue;
                }
                return Err(self.no_match(&spec.pattern));
            }
            if let (PointKind::Instruction(offset), Some(s)) = (spec.kind, skipped.last()) {
                if let (true, SkipReason::NotABoundary { before: b, after }) =
                    (items.len() == before, &s.why)
                {
                    return Err(Error::NotABoundary {
                        function: s.function.clone(),
                        offset,
                        before: *b,
                        after: *after,
                    });
                }
            }
        }
        // Analyse the module-wide branch targets now, while the target runs.
        for item in &items {
            let _ = self.modules[item.module].branch_targets();
        }
        notes.sort();
        notes.dedup();
        Ok(Prepared {
            items,
            skipped,
            pending,
            notes,
            unmatched,
            matched,
        })
    }

    pub(super) fn no_match(&self, pattern: &Pattern) -> Error {
        let modules: Vec<&Module> = self
            .modules
            .iter()
            .filter(|m| pattern.matches_module(&m.name))
            .map(|m| &**m)
            .collect();
        let near = if modules.is_empty() {
            near_misses(
                pattern.module.as_deref().unwrap_or(""),
                self.modules.iter().map(|m| m.name.as_str()),
                5,
            )
        } else {
            let names = modules
                .iter()
                .flat_map(|m| m.image.functions().iter().map(|f| f.name.as_str()));
            near_misses(&pattern.function, names, 5)
        };
        Error::NoMatch {
            pattern: pattern.to_string(),
            near,
        }
    }
}

/// The implementation IFUNC `f` of `module` leads to in process `pid`
/// (see [`crate::ifunc`]), and the other IFUNCs of the module that lead
/// there too. `choices` caches the module's answers.
fn ifunc_implementation<'m>(
    pid: i32,
    module: &'m Module,
    f: &Function,
    choices: &mut Option<Result<std::collections::HashMap<String, FileAddr>, String>>,
) -> Result<(&'m Function, Vec<String>), String> {
    let chosen = choices.get_or_insert_with(|| crate::ifunc::choices(pid, module));
    let chosen = chosen.as_ref().map_err(Clone::clone)?;
    let at = *chosen.get(&f.name).ok_or_else(|| {
        format!(
            "weft learns an IFUNC's choice by resolving it in itself, and {} resolves \
                 elsewhere there (into the vDSO, as glibc's time does) or in a library weft \
                 has not loaded ({})",
            f.name, module.name
        )
    })?;
    let g = module
        .image
        .function_at(at)
        .filter(|g| g.addr == at)
        .ok_or_else(|| format!("no function of the file starts where {} leads", f.name))?;
    let mut shared: Vec<String> = chosen
        .iter()
        .filter(|(name, &to)| to == at && **name != f.name)
        .map(|(name, _)| name.clone())
        .collect();
    shared.sort();
    Ok((g, shared))
}

/// Resolves one function into a prepared probe, or says why not.
/// `f` of each of `xs`, in order, on up to 4 threads at once when there
/// are many (analysing every function of a large module is most of a
/// `--paths all` setup's first half).
fn parallel_map<T: Sync, R: Send>(xs: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    const MIN_EACH: usize = 64;
    // Asked once: the standard library reads the cgroup's CPU quota
    // each time (three files), and every new image asks.
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cpus = *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let threads = cpus.min(4).min(xs.len() / MIN_EACH).max(1);
    if threads == 1 {
        return xs.iter().map(f).collect();
    }
    let each = xs.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|s| {
        let running: Vec<_> = xs
            .chunks(each)
            .map(|chunk| s.spawn(move || chunk.iter().map(f).collect::<Vec<R>>()))
            .collect();
        running
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

fn prepare_probe(
    mi: usize,
    module: &Module,
    f: &Function,
    name: &str,
    kind: PointKind,
) -> Result<PreparedProbe, SkipReason> {
    if f.ifunc {
        return Err(SkipReason::IfuncResolver(
            "its implementation was not looked up".into(),
        ));
    }
    let code = module.function_code(f).ok_or(SkipReason::NotInFile)?;
    let insns = code.instructions();
    if insns.is_empty() {
        return Err(SkipReason::NoInstruction);
    }
    let start = code.start();
    let mut parts = Vec::new();
    let (points, display) = match kind {
        PointKind::Entry => {
            let p = weft_patch::place::entry_point(&code).ok_or(SkipReason::NoInstruction)?;
            (vec![p], name.to_string())
        }
        PointKind::Exit => {
            let exits = code.exits();
            for g in split_parts(module, f) {
                if let Some(part) = module.function_code(g) {
                    let points = part.exits();
                    if !points.is_empty() {
                        parts.push(Part {
                            points,
                            code: part,
                            after_end: module.bytes_after(g).to_vec(),
                        });
                    }
                }
            }
            // No exit at all (gcc saw that the function's last call never
            // returns): it can still be left by longjmp or an exception,
            // which only a hooked return sees; with no call, it loops forever.
            let calls = insns
                .iter()
                .any(|i| i.flow_control() == iced_x86::FlowControl::Call);
            if exits.is_empty() && parts.is_empty() && !calls {
                return Err(SkipReason::NeverReturns);
            }
            (exits, name.to_string())
        }
        PointKind::Instruction(off) => {
            let p = start + off;
            if code.index_of(p).is_none() {
                let before = insns
                    .iter()
                    .rev()
                    .find(|i| i.ip() < p)
                    .map(|i| i.ip() - start);
                let after = insns.iter().find(|i| i.ip() > p).map(|i| i.ip() - start);
                return Err(SkipReason::NotABoundary { before, after });
            }
            (vec![p], format!("{name}+{off:#x}"))
        }
        PointKind::Syscall | PointKind::AfterSyscall => {
            let after = kind == PointKind::AfterSyscall;
            let points: Vec<u64> = insns
                .iter()
                .filter(|i| i.code() == iced_x86::Code::Syscall)
                .filter_map(|i| match after {
                    // The return is the next instruction of the function
                    // (none after an `exit` that ends it).
                    true => code.index_of(i.next_ip()).map(|_| i.next_ip()),
                    false => Some(i.ip()),
                })
                .collect();
            if points.is_empty() {
                return Err(SkipReason::NoSyscall);
            }
            (points, name.to_string())
        }
    };
    parts.insert(
        0,
        Part {
            points,
            after_end: module.bytes_after(f).to_vec(),
            code,
        },
    );
    let arm_return = kind == PointKind::Exit
        && (parts.iter().all(|p| p.points.is_empty())
            || super::returns::needs_return_hook(
                &parts.iter().map(|p| &p.code).collect::<Vec<_>>(),
            ));
    Ok(PreparedProbe {
        module: mi,
        function_addr: f.addr,
        display,
        kind,
        action: Action::Count,
        tag: 0,
        parts,
        arm_return,
        syscall: None,
    })
}

/// A system call probe of a function, one per `syscall` instruction, each
/// with its call's number when the code says it (an instrument may record
/// each call differently).
fn per_syscall(item: PreparedProbe) -> Vec<PreparedProbe> {
    let Some(part) = item.parts.first() else {
        return vec![item];
    };
    let start = part.code.start();
    part.points
        .iter()
        .map(|&p| {
            let at = if item.kind == PointKind::AfterSyscall {
                p - 2
            } else {
                p
            };
            PreparedProbe {
                module: item.module,
                function_addr: item.function_addr,
                display: format!("{}+{:#x}", item.display, at - start),
                kind: item.kind,
                action: item.action.clone(),
                tag: item.tag,
                parts: vec![Part {
                    points: vec![p],
                    code: part.code.clone(),
                    after_end: part.after_end.clone(),
                }],
                arm_return: false,
                syscall: part.code.syscall_number(at),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parallel_map;

    #[test]
    fn parallel_map_keeps_the_order() {
        for n in [0, 1, 63, 64, 200, 1001] {
            let xs: Vec<u64> = (0..n).collect();
            let ys = parallel_map(&xs, |&x| x * x + 1);
            assert_eq!(ys, xs.iter().map(|&x| x * x + 1).collect::<Vec<_>>(), "{n}");
        }
    }
}
