//! The instrument: a [`weft_plan::Rebuild`] that plans each matched
//! function's witnesses, lays it out again with its stores, and keeps the
//! function table that regeneration reads (ELF virtual addresses, blocks,
//! instructions, edges and their witnesses).

use crate::data::DataPlan;
use crate::rebuild::{
    call_target, leaves_by_returning, rebuild, splices, tail_target, through_plt, Layout, Role,
};
use crate::witness::{place, Cfg};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use weft_plan::{Rebuild, Rebuilding, RebuiltCode};

/// One block of a traced function, as regeneration needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockInfo {
    /// ELF virtual address of its first instruction.
    pub start: u64,
    /// Offset of each instruction from `start`.
    pub insns: Vec<u32>,
    /// Indexes (into `insns`) of its calls.
    pub calls: Vec<u32>,
    /// For each call, the ELF virtual address a direct call goes to (0
    /// for an indirect one): a call to a function the process image
    /// linked ([`ImageLoads::linked`]) writes no record.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callees: Vec<u64>,
    /// The entry (ELF virtual address) of the function its last
    /// instruction tail-calls directly, or 0: the edge to `EXIT` goes on
    /// in that function's frame if the image linked it.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tail: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// A traced function: where it is and the plan its copy records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionInfo {
    /// Its number in the entry records.
    pub id: u32,
    /// Module file name.
    pub module: String,
    /// The module's path when traced.
    pub path: String,
    /// Its name.
    pub name: String,
    /// ELF virtual address of its entry.
    pub vaddr: u64,
    /// Its blocks; the vertex `blocks.len()` is `EXIT`.
    pub blocks: Vec<BlockInfo>,
    /// The entry block.
    pub entry: usize,
    /// Edges: (from, to, witness or 0).
    pub edges: Vec<(usize, usize, u32)>,
    /// Its calls that may return more than once (`setjmp`), whose
    /// returns write a resume record, and the blocks code outside jumps
    /// back into (its other parts), which write one too.
    #[serde(default)]
    pub resumes: Vec<ResumePlace>,
    /// Blocks whose jump out of the function goes on in another part of it
    /// (a `.cold` part): the frame stays, and the part comes back through a
    /// resume place or returns for it.
    #[serde(default)]
    pub part_exits: Vec<usize>,
    /// With `--data`: how its copy records registers and how its accesses'
    /// addresses are computed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<crate::data::DataPlan>,
}

/// A call whose returns write [`crate::record::Record::Resumed`]: a
/// `longjmp` comes back there, past the frames it skips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResumePlace {
    /// The id in the records (unique in the trace).
    pub id: u32,
    /// The block of the call.
    pub block: usize,
    /// The call's index in the block's instructions.
    pub insn: u32,
    /// The place is the block's start (a jump back in from outside), not
    /// the return of a call.
    #[serde(default)]
    pub block_start: bool,
    /// For a C++ landing pad: the ELF virtual address of the function
    /// whose frame catches there (its call site led to the pad), in the
    /// same module.
    #[serde(default)]
    pub unwound_to: Option<u64>,
}

impl FunctionInfo {
    /// The CFG the plan was made for.
    pub fn cfg(&self) -> Cfg {
        Cfg {
            blocks: self.blocks.len(),
            entry: self.entry,
            edges: self
                .edges
                .iter()
                .map(|&(from, to, _)| crate::witness::Edge { from, to })
                .collect(),
            calls: self
                .blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| !b.calls.is_empty())
                .map(|(i, _)| i)
                .collect(),
        }
    }
}

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
}

/// Where one process image has its traced modules.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageLoads {
    /// The process.
    pub pid: i32,
    /// (module path, load bias: runtime address minus ELF virtual address).
    pub modules: Vec<(String, u64)>,
    /// The functions (ids) that every direct call and tail call of the
    /// image's copies reaches without a record (see `rebuild::link`),
    /// sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub linked: Vec<u32>,
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

    /// Every function traced so far.
    pub fn functions(&self) -> Vec<FunctionInfo> {
        self.table
            .lock()
            .map(|t| t.functions.clone())
            .unwrap_or_default()
    }
}

impl Rebuild for PathsInstrument {
    fn rebuild(&self, f: &Rebuilding<'_>) -> Result<RebuiltCode, String> {
        let code = f.code;
        let cfg = Cfg::from_code(code);
        let plan = place(&cfg);
        let mut table = self
            .table
            .lock()
            .map_err(|_| "the function table is poisoned".to_string())?;
        let Table {
            functions,
            resumes: next_resume,
            by_place,
            applied,
            images,
            current,
        } = &mut *table;
        if let Some(image) = current.get(&f.pid).and_then(|&i| images.get_mut(i)) {
            let path = f.path.to_string_lossy();
            if !image.modules.iter().any(|(p, _)| *p == path) {
                image.modules.push((path.into_owned(), f.bias));
            }
        }
        // The same code reached under two names (an alias) is one function;
        // the same file in another process is the same function again.
        let vaddr = code.start() - f.bias;
        let place = (f.path.to_string_lossy().into_owned(), vaddr);
        let known = by_place.get(&place).copied();
        if known.is_some_and(|id| applied.contains(&(f.pid, id))) {
            return Err("traced already under another name".into());
        }
        let role = match f.function {
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
        };
        let id = known.unwrap_or(functions.len() as u32);
        // Resume places keep their ids in every process (same code, same
        // calls, in order).
        let earlier: Vec<u32> = known
            .map(|id| {
                functions[id as usize]
                    .resumes
                    .iter()
                    .map(|r| r.id)
                    .collect()
            })
            .unwrap_or_default();
        // Landing pads are entered from outside too (by the unwinder).
        let mut entered: Vec<u64> = f.entered_from_outside.to_vec();
        entered.extend(f.landing_pads.iter().map(|&(pad, _)| pad));
        entered.sort_unstable();
        entered.dedup();
        // A return address another part also jumps to is a resume place:
        // the frame found there is the innermost one of the function either
        // way.
        let twice: Vec<(u64, u32)> = code
            .instructions()
            .iter()
            .filter(|i| {
                called_name(f, i).is_some_and(|n| RETURNS_TWICE.contains(&n.as_str()))
                    || (i.is_call_near() || i.is_call_near_indirect())
                        && entered.binary_search(&i.next_ip()).is_ok()
            })
            .enumerate()
            .map(|(k, i)| {
                let place = earlier.get(k).copied().unwrap_or(*next_resume + k as u32);
                (i.ip(), place)
            })
            .collect();
        // Jumps back in from other parts of the function: resume places too,
        // numbered after its calls'.
        let reentries: Vec<(u64, u32)> = if role == Role::Traced {
            let first = *next_resume + twice.len() as u32;
            splices(code, &entered, f.branch_targets)
                .reentries
                .into_iter()
                .enumerate()
                .map(|(k, a)| {
                    let place = earlier
                        .get(twice.len() + k)
                        .copied()
                        .unwrap_or(first + k as u32);
                    (a, place)
                })
                .collect()
        } else {
            Vec::new()
        };
        let no_return: Vec<u64> = code
            .instructions()
            .iter()
            .filter(|i| called_name(f, i).is_some_and(|n| NO_RETURN.contains(&n.as_str())))
            .map(|i| i.ip())
            .collect();
        let data = (self.data && role == Role::Traced).then(|| DataPlan::new(code, f.bias));
        let layout = Layout {
            data: data.as_ref(),
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
        };
        let built = rebuild(code, &cfg, &plan, &layout).map_err(|e| e.to_string())?;
        if built.bytes.len() as u64 > f.room {
            return Err(format!(
                "weft's code area near {} is full ({} bytes left, the copy takes {})",
                f.module,
                f.room,
                built.bytes.len()
            ));
        }
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
        // The table keeps the callees the function's first process found.
        // Where a call through the PLT reaches another function here (a
        // library preloaded in one process and not the other), neither
        // is linked in this process: its call writes records, as the
        // regenerator, reading the table's callee, expects.
        let diverging: Vec<u64> = known
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
            applied.insert((f.pid, id));
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
        if role != Role::Traced || known.is_some() {
            // It records nothing, so it needs no place in the table; or it
            // has one already.
            return Ok(RebuiltCode {
                jumps: built.splices(code.start()),
                bytes: built.bytes,
            });
        }
        functions.push(FunctionInfo {
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
        });
        *next_resume += (twice.len() + reentries.len()) as u32;
        by_place.insert(place, id);
        Ok(RebuiltCode {
            jumps: built.splices(code.start()),
            bytes: built.bytes,
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
