//! The instrument: a [`weft_plan::Rebuild`] that plans each matched
//! function's witnesses, lays it out again with its stores, and keeps the
//! function table that regeneration reads (ELF virtual addresses, blocks,
//! instructions, edges and their witnesses).

use crate::data::DataPlan;
use crate::rebuild::{
    call_target, check, leaves_by_returning, rebuild, splices, tail_target, through_plt, Layout,
    Role,
};
use crate::witness::{place, Cfg};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use weft_plan::{NotRebuilt, Rebuild, Rebuilding, RebuiltCode};

mod copies;
mod functions;
mod reserve;
pub use functions::{BlockInfo, FunctionInfo, ImageLoads, ResumePlace};

/// glibc's function that every new thread runs first (named from its
/// debug symbols): always laid out again, its copy clearing the thread's
/// cursor and recording nothing.
pub const THREAD_START: &str = "start_thread";

/// glibc's `_Fork` (2.34 and later): always laid out again, its copy
/// clearing the child's cursor after the system call.
pub const FORK: &str = "_Fork";

/// glibc's `pthread_sigmask`, which `sigprocmask` calls: always laid out
/// again, its copy keeping SIGSEGV unblocked (see `Role::SignalMask`).
pub const SIGNAL_MASK: &[&str] = &["pthread_sigmask", "__pthread_sigmask"];

/// Functions never traced: they run code in a new thread (before its
/// thread start) or in a child sharing the parent's memory and TCB.
const NEVER: &[&str] = &[
    "clone",
    "__clone",
    "clone3",
    "__clone3",
    "__clone_internal",
    "__clone3_internal",
    "__clone_internal_fallback",
    "vfork",
    "__vfork",
    "__spawni_child",
];

/// Functions never traced for what reads their bytes: the signal return
/// trampoline, which unwinders and debuggers recognise by its code (and
/// whose `rt_sigreturn` never returns).
const NEVER_MOVED: &[&str] = &["__restore_rt", "__restore"];

/// Functions that may return more than once: a `longjmp` (or
/// `setcontext`) comes back to their return address, a `vfork` child
/// shares its parent's memory and cursor until it execs, and a forked
/// child's stream starts with its return (so its regeneration starts in
/// the frame that called `fork`).
const RETURNS_TWICE: &[&str] = &[
    "setjmp",
    "_setjmp",
    "__setjmp",
    "sigsetjmp",
    "__sigsetjmp",
    "getcontext",
    "vfork",
    "__vfork",
    "fork",
    "__fork",
    "__libc_fork",
    "_Fork",
];

/// Functions that never return to their caller: a call to one pushes the
/// original return address (for the unwinder) and needs no way back.
const NO_RETURN: &[&str] = &[
    "__cxa_throw",
    "__cxa_rethrow",
    "_Unwind_Resume",
    "__cxa_bad_cast",
    "__cxa_bad_typeid",
    "__cxa_throw_bad_array_new_length",
    "abort",
    "exit",
    "_exit",
    "_Exit",
    "__stack_chk_fail",
    "__assert_fail",
    "__fortify_fail",
    "longjmp",
    "_longjmp",
    "siglongjmp",
    "__longjmp_chk",
    "pthread_exit",
];

/// Traces functions by laying them out again; one per weft run, shared by
/// the sessions of every process it traces.
#[derive(Debug, Default)]
pub struct PathsInstrument {
    table: Mutex<Table>,
    /// Each process's image (see [`PathsInstrument::begin_image`]).
    image_code: Mutex<HashMap<i32, ImageCode>>,
    /// Every block also writes a record (`--validate`).
    validate: bool,
    /// Registers are recorded for data addresses (`--data`).
    data: bool,
    /// Per process, what linking needs (see [`Rebuild::link`]).
    links: Mutex<HashMap<i32, crate::link::ProcessLinks>>,
    /// Copies laid out, for the next process that lays out the same.
    copies: copies::Copies,
}

#[derive(Debug, Default)]
struct Table {
    functions: Vec<FunctionInfo>,
    /// Resume place ids given out.
    resumes: u32,
    /// (module path, ELF virtual address) → function id: every process
    /// running the same file traces its functions under the same ids.
    by_place: HashMap<(String, u64), u32>,
    /// (process, function id) laid out in the process's current image.
    applied: HashSet<(i32, u32)>,
    /// Per process image, in the order they began: where each traced
    /// module was loaded.
    images: Vec<ImageLoads>,
    /// Each process's current image (an index into `images`).
    current: HashMap<i32, usize>,
}

/// Why [`PathsInstrument::lay_out`] gave no layout.
enum Laid {
    /// The copy takes this many bytes, more than the room given.
    NoRoom(u64),
    /// Why the function cannot have a copy.
    Refused(String),
}

/// What the copies of the C library's functions in one process image call
/// and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageCode {
    /// The claim routine (`handler::HandlerCode::claim`), for the copy of
    /// the thread start.
    pub claim: u64,
    /// Where the pid of the process whose SIGSEGV action the pool's own
    /// page keeps lies (`Pool::program_process`), for the copy of `_Fork`.
    pub process: u64,
    /// Where a forked child keeps the cursor it inherited
    /// (`Pool::forked_cursor`), for the copy of `_Fork`.
    pub forked: u64,
    /// The restartable sequence the process's threads have registered, if
    /// any (the stores then reserve without `xadd`).
    pub rseq: Option<crate::rebuild::Rseq>,
}

impl PathsInstrument {
    /// An instrument with no function traced yet; with `validate`, every
    /// block also records itself (the expensive way, for checking); with
    /// `data`, the copies record the register values data addresses need.
    pub fn new(validate: bool, data: bool) -> PathsInstrument {
        PathsInstrument {
            validate,
            data,
            ..PathsInstrument::default()
        }
    }

    /// Process `pid` has a new image (a start, or an exec) with its pool's
    /// code and pages at `code`; nothing of its earlier image is laid out
    /// any more.
    pub fn begin_image(&self, pid: i32, code: ImageCode) {
        if let Ok(mut c) = self.image_code.lock() {
            c.insert(pid, code);
        }
        if let Ok(mut l) = self.links.lock() {
            l.remove(&pid);
        }
        if let Ok(mut t) = self.table.lock() {
            t.applied.retain(|&(p, _)| p != pid);
            let index = t.images.len();
            t.images.push(ImageLoads {
                pid,
                modules: Vec::new(),
                linked: Vec::new(),
            });
            t.current.insert(pid, index);
        }
    }

    /// Per process image, in the order they began: where its traced
    /// modules were loaded.
    pub fn images(&self) -> Vec<ImageLoads> {
        self.table
            .lock()
            .map(|t| t.images.clone())
            .unwrap_or_default()
    }

    /// [`Rebuild::rebuild`] for `f`: plan, take its id, lay it out, and
    /// enter it in the table.
    fn lay_out(&self, f: &Rebuilding<'_>) -> Result<RebuiltCode, Laid> {
        // An indirect jump weft could not resolve (a `switch` whose table
        // it cannot find) goes through a search over every instruction of
        // the function: slow but exact.
        let everywhere;
        let code = if f.code.has_unresolved_indirect_jump() {
            let mut c = f.code.clone();
            c.dispatch_unresolved_over_every_instruction();
            everywhere = c;
            &everywhere
        } else {
            f.code
        };
        let role = self.role_of(f, code).map_err(Laid::Refused)?;
        // Landing pads are entered from outside too (by the unwinder).
        let mut entered: Vec<u64> = f.entered_from_outside.to_vec();
        entered.extend(f.landing_pads.iter().map(|&(pad, _)| pad));
        entered.sort_unstable();
        entered.dedup();
        // A return address another part also jumps to is a resume place:
        // the frame found there is the innermost one of the function either
        // way.
        let twice_at: Vec<u64> = code
            .instructions()
            .iter()
            .filter(|i| {
                called_name(f, i).is_some_and(|n| RETURNS_TWICE.contains(&n.as_str()))
                    || (i.is_call_near() || i.is_call_near_indirect())
                        && entered.binary_search(&i.next_ip()).is_ok()
            })
            .map(|i| i.ip())
            .collect();
        // Jumps back in from other parts of the function: resume places too,
        // numbered after its calls'.
        let reentries_at: Vec<u64> = if role == Role::Traced {
            splices(code, &entered, f.branch_targets).reentries
        } else {
            Vec::new()
        };
        let no_return: Vec<u64> = code
            .instructions()
            .iter()
            .filter(|i| called_name(f, i).is_some_and(|n| NO_RETURN.contains(&n.as_str())))
            .map(|i| i.ip())
            .collect();
        let vaddr = code.start() - f.bias;
        let place_of = (f.path.to_string_lossy().into_owned(), vaddr);
        let rseq = self
            .image_code
            .lock()
            .ok()
            .and_then(|c| c.get(&f.pid).and_then(|image| image.rseq));
        let key = copies::CopyKey {
            path: place_of.0.clone(),
            start: code.start(),
            bias: f.bias,
            at: f.at,
            role,
            rseq,
            validate: self.validate,
            data: self.data,
            entry_room: f.entry_room,
            inputs: copies::inputs(
                code,
                f.image.bytes_at(
                    weft_image::FileAddr(vaddr),
                    (code.end() - code.start()) as usize,
                ),
                &[
                    &entered,
                    f.branch_targets,
                    &twice_at,
                    &reentries_at,
                    &no_return,
                ],
                f.plt_callees,
            ),
        };
        // A copy laid out before with all of this passed its check.
        let kept = self.copies.get(&key);
        let mut planned = None;
        if kept.is_none() {
            let cfg = Cfg::from_code(code);
            let plan = place(&cfg);
            check(code, &plan, &entered, f.entry_room)
                .map_err(|e| Laid::Refused(e.in_file(f.bias).to_string()))?;
            planned = Some((cfg, plan));
        }
        // The id and resume places, taken under the table's lock; the
        // layout, the longest part, runs without it, so that several
        // functions are laid out at once.
        let reserved = self
            .reserve(f, &place_of, role, twice_at.len() + reentries_at.len())
            .map_err(Laid::Refused)?;
        let number = |k: usize| {
            reserved
                .earlier
                .get(k)
                .copied()
                .unwrap_or(reserved.first_resume + k as u32)
        };
        let twice: Vec<(u64, u32)> = twice_at
            .iter()
            .enumerate()
            .map(|(k, &ip)| (ip, number(k)))
            .collect();
        let reentries: Vec<(u64, u32)> = reentries_at
            .iter()
            .enumerate()
            .map(|(k, &a)| (a, number(twice.len() + k)))
            .collect();
        let id = reserved.id;
        let data = (self.data && role == Role::Traced && reserved.known.is_none())
            .then(|| DataPlan::new(code, f.bias));
        let same = kept.filter(|k| k.id == id && k.resumes == twice && k.reentries == reentries);
        let built = match same {
            Some(k) => {
                self.copies.reused();
                Ok(k.built.clone())
            }
            None => {
                // Laid out before with other numbers: planned and checked now.
                if planned.is_none() {
                    let cfg = Cfg::from_code(code);
                    let plan = place(&cfg);
                    if let Err(e) = check(code, &plan, &entered, f.entry_room) {
                        self.unreserve(f, &place_of, &reserved, false);
                        return Err(Laid::Refused(e.in_file(f.bias).to_string()));
                    }
                    planned = Some((cfg, plan));
                }
                let (cfg, plan) = planned.as_ref().expect("planned above");
                let data_plan = match &data {
                    Some(d) => Some(d.clone()),
                    None => {
                        (self.data && role == Role::Traced).then(|| DataPlan::new(code, f.bias))
                    }
                };
                let layout = Layout {
                    data: data_plan.as_ref(),
                    id,
                    at: f.at,
                    entered_from_outside: &entered,
                    branch_targets: f.branch_targets,
                    role,
                    validate: self.validate,
                    resumes: &twice,
                    reentries: &reentries,
                    no_return: &no_return,
                    plt_callees: f.plt_callees,
                    entry_room: f.entry_room,
                    rseq,
                };
                let laid = rebuild(code, cfg, plan, &layout);
                if let Ok(b) = &laid {
                    self.copies.keep(
                        key,
                        copies::Kept {
                            id,
                            resumes: twice.clone(),
                            reentries: reentries.clone(),
                            built: b.clone(),
                        },
                    );
                }
                laid.map_err(|e| Laid::Refused(e.in_file(f.bias).to_string()))
            }
        };
        let built = match built {
            Ok(b) if b.bytes.len() as u64 > f.room => Err(Laid::NoRoom(b.bytes.len() as u64)),
            other => other,
        };
        let built = match built {
            Ok(b) => b,
            Err(why) => {
                let again = matches!(why, Laid::NoRoom(_));
                self.unreserve(f, &place_of, &reserved, again);
                return Err(why);
            }
        };
        let blocks: Vec<BlockInfo> = code
            .blocks()
            .iter()
            .enumerate()
            .map(|(bi, b)| {
                let insns = &code.instructions()[b.first..b.last];
                BlockInfo {
                    start: b.start - f.bias,
                    insns: insns.iter().map(|i| (i.ip() - b.start) as u32).collect(),
                    calls: insns
                        .iter()
                        .enumerate()
                        .filter(|(_, i)| {
                            matches!(
                                i.flow_control(),
                                iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
                            )
                        })
                        .map(|(k, _)| k as u32)
                        .collect(),
                    callees: insns
                        .iter()
                        .filter(|i| {
                            matches!(
                                i.flow_control(),
                                iced_x86::FlowControl::Call | iced_x86::FlowControl::IndirectCall
                            )
                        })
                        .map(|i| {
                            call_target(i)
                                .map_or(0, |t| through_plt(f.plt_callees, t).wrapping_sub(f.bias))
                        })
                        .collect(),
                    tail: tail_target(code, bi)
                        .map_or(0, |t| through_plt(f.plt_callees, t).wrapping_sub(f.bias)),
                }
            })
            .collect();
        let resumes = twice
            .iter()
            .filter_map(|&(ip, id)| {
                let block = code.blocks().iter().position(|b| {
                    let insns = &code.instructions()[b.first..b.last];
                    insns.iter().any(|i| i.ip() == ip)
                })?;
                let b = &code.blocks()[block];
                let insn = code.instructions()[b.first..b.last]
                    .iter()
                    .position(|i| i.ip() == ip)? as u32;
                Some(ResumePlace {
                    id,
                    block,
                    insn,
                    block_start: false,
                    unwound_to: None,
                })
            })
            .chain(reentries.iter().filter_map(|&(a, id)| {
                let block = code.blocks().iter().position(|b| b.start == a)?;
                let unwound_to = f
                    .landing_pads
                    .iter()
                    .find(|&&(pad, _)| pad == a)
                    .map(|&(_, owner)| owner.wrapping_sub(f.bias));
                Some(ResumePlace {
                    id,
                    block,
                    insn: 0,
                    block_start: true,
                    unwound_to,
                })
            }))
            .collect();
        let part_exits: Vec<usize> = code
            .blocks()
            .iter()
            .enumerate()
            .filter(|(_, b)| {
                let tail = &code.instructions()[b.last - 1];
                let jumps_out = matches!(
                    tail.flow_control(),
                    iced_x86::FlowControl::UnconditionalBranch
                        | iced_x86::FlowControl::ConditionalBranch
                ) && code.is_other_part(tail.near_branch_target());
                let switches_out = code
                    .jump_tables()
                    .iter()
                    .any(|t| t.jump == tail.ip() && !t.outside.is_empty());
                jumps_out || switches_out
            })
            .map(|(k, _)| k)
            .collect();
        let mut table = self
            .table
            .lock()
            .map_err(|_| Laid::Refused("the function table is poisoned".into()))?;
        let Table { functions, .. } = &mut *table;
        // The table keeps the callees the function's first process found.
        // Where a call through the PLT reaches another function here (a
        // library preloaded in one process and not the other), neither
        // is linked in this process: its call writes records, as the
        // regenerator, reading the table's callee, expects.
        let diverging: Vec<u64> = reserved
            .known
            .map(|id| {
                functions[id as usize]
                    .blocks
                    .iter()
                    .zip(&blocks)
                    .flat_map(|(was, now)| {
                        was.callees
                            .iter()
                            .zip(&now.callees)
                            .map(|(&a, &b)| (a, b))
                            .chain([(was.tail, now.tail)])
                    })
                    .filter(|&(a, b)| a != b)
                    .flat_map(|(a, b)| [a, b])
                    .filter(|&a| a != 0)
                    .map(|a| a.wrapping_add(f.bias))
                    .collect()
            })
            .unwrap_or_default();
        if role == Role::Traced {
            if let Ok(mut l) = self.links.lock() {
                let process = l.entry(f.pid).or_default();
                for entry in diverging {
                    process.never_link(entry);
                }
                process.pending.push(crate::link::Copy {
                    start: code.start(),
                    id,
                    linked_entry: built.linked_entry,
                    sites: built.sites.clone(),
                    leaves_by_returning: part_exits.is_empty() && leaves_by_returning(code),
                });
            }
        }
        if role == Role::Traced && reserved.known.is_none() {
            let (cfg, plan) = match planned {
                Some(p) => p,
                None => {
                    let cfg = Cfg::from_code(code);
                    let plan = place(&cfg);
                    (cfg, plan)
                }
            };
            functions[id as usize] = FunctionInfo {
                id,
                module: f.module.to_string(),
                path: f.path.to_string_lossy().into_owned(),
                name: f.function.to_string(),
                vaddr,
                blocks,
                entry: cfg.entry,
                edges: cfg
                    .edges
                    .iter()
                    .zip(&plan.witness)
                    .map(|(e, w)| (e.from, e.to, w.unwrap_or(0)))
                    .collect(),
                resumes,
                part_exits,
                data,
            };
        }
        Ok(RebuiltCode {
            jumps: built.splices(code.start()),
            bytes: built.bytes,
        })
    }

    /// What the copy of `f` does: record (a traced function), or a role
    /// of its own in weft's bookkeeping; or why it is not laid out.
    fn role_of(&self, f: &Rebuilding<'_>, code: &weft_code::FunctionCode) -> Result<Role, String> {
        Ok(match f.function {
            THREAD_START | FORK => {
                let Some(image) = self
                    .image_code
                    .lock()
                    .ok()
                    .and_then(|c| c.get(&f.pid).copied())
                else {
                    return Err("weft's buffer pool is not in this process".into());
                };
                if f.function == FORK {
                    Role::Fork {
                        process: image.process,
                        forked: image.forked,
                    }
                } else {
                    Role::ThreadStart { claim: image.claim }
                }
            }
            name if SIGNAL_MASK.contains(&name) => Role::SignalMask,
            _ if starts_a_frame_chain(code) => {
                return Err(
                    "it is the first code of a new thread or process (it clears rbp to \
                     end the frame chain), which runs before weft can give it a buffer"
                        .into(),
                )
            }
            name if NEVER_MOVED.contains(&name) => {
                return Err(
                    "it is the signal return trampoline, which unwinders and debuggers \
                            recognise by its bytes"
                        .into(),
                )
            }
            name if NEVER.contains(&name) => {
                return Err(
                    "it runs code in a new thread or process before weft can give it a buffer"
                        .into(),
                )
            }
            _ => Role::Traced,
        })
    }

    /// How many copies were taken from an earlier process's layout of
    /// the same function at the same place (see `copies`).
    pub fn copies_reused(&self) -> u64 {
        self.copies.reuses()
    }

    /// Whether any function is traced yet.
    pub fn has_functions(&self) -> bool {
        self.table.lock().is_ok_and(|t| !t.functions.is_empty())
    }

    /// Every function traced so far.
    pub fn functions(&self) -> Vec<FunctionInfo> {
        self.table
            .lock()
            .map(|t| t.functions.clone())
            .unwrap_or_default()
    }
}

impl Rebuild for PathsInstrument {
    fn rebuild(&self, f: &Rebuilding<'_>) -> Result<RebuiltCode, NotRebuilt> {
        self.lay_out(f).map_err(|e| match e {
            Laid::NoRoom(needs) => NotRebuilt::NoRoom { needs },
            Laid::Refused(why) => NotRebuilt::Refused(why),
        })
    }

    fn link(&self, pid: i32, placed: &[u64]) -> Vec<(u64, Vec<u8>)> {
        let Ok(mut links) = self.links.lock() else {
            return Vec::new();
        };
        let Some(process) = links.get_mut(&pid) else {
            return Vec::new();
        };
        let Ok(mut table) = self.table.lock() else {
            return Vec::new();
        };
        let Table {
            images, current, ..
        } = &mut *table;
        let Some(image) = current.get(&pid).and_then(|&i| images.get_mut(i)) else {
            // No image of its own (a forked child): nothing is linked.
            process.pending.clear();
            return Vec::new();
        };
        let (patches, ids) = process.link(placed);
        image.linked.extend(ids);
        image.linked.sort_unstable();
        image.linked.dedup();
        patches
    }
}

/// The name of the function a call instruction reaches, where the module
/// tells: a function of its own, or an import through the PLT or GOT.
fn called_name(f: &Rebuilding<'_>, call: &iced_x86::Instruction) -> Option<String> {
    use iced_x86::{Code, FlowControl};
    if !matches!(
        call.flow_control(),
        FlowControl::Call | FlowControl::IndirectCall
    ) {
        return None;
    }
    let vaddr = |runtime: u64| weft_image::FileAddr(runtime.wrapping_sub(f.bias));
    if call.code() == Code::Call_rel32_64 {
        let target = vaddr(call.near_branch_target());
        if let Some(name) = f.image.imported_name(target) {
            return Some(name.to_string());
        }
        let g = f.image.function_at(target).filter(|g| g.addr == target)?;
        return std::iter::once(&g.name)
            .chain(&g.aliases)
            .find(|n| RETURNS_TWICE.contains(&n.as_str()))
            .or(Some(&g.name))
            .cloned();
    }
    if call.is_ip_rel_memory_operand() {
        return f
            .image
            .imported_name(vaddr(call.ip_rel_memory_address()))
            .map(str::to_string);
    }
    None
}

/// Whether the function starts with `xor ebp, ebp`: the ABI's mark of a
/// thread's or process's outermost frame (`_start`, the child side of
/// glibc's `clone`), code that runs before the thread has a buffer.
fn starts_a_frame_chain(code: &weft_code::FunctionCode) -> bool {
    code.instructions().first().is_some_and(|i| {
        matches!(
            i.code(),
            iced_x86::Code::Xor_r32_rm32 | iced_x86::Code::Xor_rm32_r32
        ) && i.op0_register() == iced_x86::Register::EBP
            && i.op1_register() == iced_x86::Register::EBP
    })
}
