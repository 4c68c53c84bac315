//! Return hooks: the calls of a function with exit probes are followed to
//! their return to the caller, past the functions it tail-calls, and to
//! `longjmp`s and exceptions that leave them (`weft_patch::mini::returns`
//! has the code and the mechanism). This file keeps, per function, its
//! return stub and exit mini-trampolines in the cluster next to its
//! module, and builds the compound mini-trampolines of its entry and
//! exits; maps the process's return stacks; hooks the unwinding functions
//! (`longjmp`, the C++ unwinder) in every module that has them; and at
//! detach puts every replaced return address back.

use super::*;
use std::collections::{HashMap, HashSet};
use weft_patch::mini::returns::{self as rh, Extra, UnwindHook};
use weft_patch::mini::{mini_trampoline, mini_trampoline_with};
use weft_patch::region::returns as stacks;
use weft_patch::Snippet;
use weft_plan::{Expr, Guarded, Primitive};

/// The functions that leave frames without returning through them, and
/// what their hook does. `longjmp`, `_longjmp` and `siglongjmp` are one
/// function in glibc; a name absent from a module is passed over.
const UNWINDERS: [(&str, UnwindHook); 11] = [
    ("_Unwind_RaiseException", UnwindHook::Disarm),
    ("_Unwind_Resume", UnwindHook::Disarm),
    ("_Unwind_Resume_or_Rethrow", UnwindHook::Disarm),
    ("_Unwind_Backtrace", UnwindHook::Disarm),
    ("_Unwind_ForcedUnwind", UnwindHook::ForcedUnwind),
    ("__cxa_begin_catch", UnwindHook::Rearm),
    ("longjmp", UnwindHook::Longjmp),
    ("_longjmp", UnwindHook::Longjmp),
    ("siglongjmp", UnwindHook::Longjmp),
    ("__longjmp_chk", UnwindHook::Longjmp),
    ("__libc_siglongjmp", UnwindHook::Longjmp),
];

/// The session's return hooks.
#[derive(Debug, Default, Clone)]
pub(super) struct Returns {
    pub(super) hooks: Vec<ReturnHook>,
    by_function: HashMap<(usize, FileAddr), usize>,
    /// The process's return stacks, once mapped.
    pub(super) stacks: Option<u64>,
    /// Modules whose unwinding functions carry their hooks.
    unwinders_hooked: HashSet<usize>,
}

/// One function whose calls are followed to their return.
#[derive(Debug, Clone)]
pub(super) struct ReturnHook {
    cluster: usize,
    /// The stub's first byte: the words with the exit routines' addresses.
    stub_word: u64,
    /// Whether its calls' return addresses are replaced (it tail-calls).
    pub(super) arm: bool,
    /// The probe at the function's entry that follows its calls.
    pub(super) entry_probe: Option<usize>,
    /// The exit probes run by its exit routines and guarded exits.
    pub(super) exits: Vec<usize>,
}

impl ReturnHook {
    /// Where a hooked return lands.
    pub(super) fn stub(&self) -> u64 {
        self.stub_word + rh::STUB_CODE
    }

    /// What the entry's mini-trampoline does after its primitives.
    pub(super) fn follow(&self) -> Extra {
        Extra::Follow {
            stub: self.stub(),
            left: self.stub_word + rh::STUB_LEFT_THUNK,
            arm: self.arm,
        }
    }
}

/// Whether the exits of a function with these exits wait for its return
/// to the caller: it leaves through something other than `ret` (a tail
/// call, a jump to a split-off part, an indirect jump).
pub(super) fn needs_return_hook(parts: &[&FunctionCode]) -> bool {
    parts.iter().any(|code| {
        code.exits().iter().any(|&p| {
            code.instruction_at(p)
                .is_some_and(|i| i.flow_control() != iced_x86::FlowControl::Return)
        })
    })
}

impl Session {
    /// The return hook of `function` of `module` (for an exit probe), made
    /// on first use, replacing its calls' return addresses with `arm`;
    /// `None` when its calls cannot be followed safely (an unwinding
    /// function weft could not hook), its exits then staying at its `ret`s
    /// and tail calls.
    pub(super) fn return_hook_for(
        &mut self,
        tracee: &mut Tracee,
        module: usize,
        function: FileAddr,
        arm: bool,
    ) -> Result<Option<usize>> {
        if let Some(&h) = self.returns.by_function.get(&(module, function)) {
            return Ok(Some(h));
        }
        if !self.hook_unwinders(tracee)? {
            return Ok(None);
        }
        self.ensure_return_stacks(tracee)?;
        let ci = self.ensure_cluster(tracee, module)?;
        let table = self.thread_table(ci);
        let left = self.place_code(ci, |at| mini_trampoline(at, table, &[]))?;
        let returned = self.place_code(ci, |at| {
            mini_trampoline_with(at, table, &[], Extra::PopReturn)
        })?;
        let stub_word = self.place_code(ci, |at| rh::return_stub(at, returned, left))?;
        self.returns.hooks.push(ReturnHook {
            cluster: ci,
            stub_word,
            arm,
            entry_probe: None,
            exits: Vec::new(),
        });
        let h = self.returns.hooks.len() - 1;
        self.returns.by_function.insert((module, function), h);
        Ok(Some(h))
    }

    /// Code generated for address `at` placed in cluster `ci`.
    fn place_code(
        &mut self,
        ci: usize,
        generate: impl FnOnce(u64) -> weft_patch::Result<Vec<u8>>,
    ) -> Result<u64> {
        let c = self.clusters[ci];
        let bytes = generate(c.code + c.used)?;
        self.alloc_code(ci, &bytes)
    }

    /// Maps the process's return stacks (private memory, so a forked child
    /// gets its own copy) and tells generated code where they are.
    fn ensure_return_stacks(&mut self, tracee: &mut Tracee) -> Result<u64> {
        if let Some(at) = self.returns.stacks {
            return Ok(at);
        }
        use weft_abi::mman;
        let len = stacks::area_size(self.layout.header.thread_slots);
        let at = tracee.remote_mmap_far(
            len,
            mman::PROT_READ | mman::PROT_WRITE,
            mman::MAP_PRIVATE | mman::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        self.returns.stacks = Some(at.0);
        self.shm.store_u64(
            self.layout.header.sync_offset + weft_patch::region::sync::RETURN_STACKS,
            at.0,
        );
        Ok(at.0)
    }

    /// Hooks the unwinding functions of every module not yet seen; false
    /// if one of them could not be hooked (then no return may be hooked).
    pub(super) fn hook_unwinders(&mut self, tracee: &mut Tracee) -> Result<bool> {
        for mi in 0..self.modules.len() {
            if self.returns.unwinders_hooked.contains(&mi) {
                continue;
            }
            for (name, kind) in UNWINDERS {
                let Some(f) = self.modules[mi].image.function_named(name) else {
                    continue;
                };
                let hooked_already = self.sites.iter().any(|s| {
                    s.active
                        && s.module == mi
                        && s.hook == Some(Hook::Unwind(kind))
                        && self.modules[mi]
                            .function_code(f)
                            .and_then(|c| weft_patch::place::entry_point(&c))
                            == Some(s.choice.point)
                });
                if hooked_already {
                    continue;
                }
                if !self.install_hook(tracee, mi, name, Hook::Unwind(kind))? {
                    return Ok(false);
                }
                // A backtrace unwinds nothing: the frames are armed again
                // when it returns (an exception is re-armed by its catch).
                if name == "_Unwind_Backtrace"
                    && !self.install_hook_at_returns(
                        tracee,
                        mi,
                        name,
                        Hook::Unwind(UnwindHook::Rearm),
                    )?
                {
                    return Ok(false);
                }
            }
            self.returns.unwinders_hooked.insert(mi);
        }
        Ok(true)
    }

    /// Whether returns are hooked and a module not yet seen has unwinding
    /// functions to hook (a library loaded later).
    pub(super) fn unhooked_unwinders(&self) -> bool {
        !self.returns.hooks.is_empty()
            && self.modules.iter().enumerate().any(|(mi, m)| {
                !self.returns.unwinders_hooked.contains(&mi)
                    && UNWINDERS
                        .iter()
                        .any(|(name, _)| m.image.function_named(name).is_some())
            })
    }

    /// The probe at the entry of hooked function `h`, made and placed if
    /// it has none; the site it joined or made is added to `dirty`.
    pub(super) fn place_return_entry(
        &mut self,
        threads: &mut super::place::Stopped<'_>,
        item: &super::prepare::PreparedProbe,
        h: usize,
        dirty: &mut Vec<usize>,
    ) -> Result<()> {
        if self.returns.hooks[h].entry_probe.is_some() {
            return Ok(());
        }
        let main = &item.parts[0];
        let Some(point) = weft_patch::place::entry_point(&main.code) else {
            return Ok(());
        };
        self.probes.push(Probe {
            module: item.module,
            display: item.display.clone(),
            kind: PointKind::Entry,
            action: Action::Program(Vec::new()),
            counter: None,
            tag: item.tag,
            live: true,
            skipped: None,
            hook: Some(h),
            returns: None,
        });
        let probe = self.probes.len() - 1;
        let entry = super::prepare::PreparedProbe {
            module: item.module,
            function_addr: item.function_addr,
            display: item.display.clone(),
            kind: PointKind::Entry,
            action: Action::Program(Vec::new()),
            tag: item.tag,
            parts: vec![super::prepare::Part {
                points: vec![point],
                code: main.code.clone(),
                after_end: main.after_end.clone(),
            }],
            arm_return: false,
            syscall: None,
        };
        // The flags are dead at an entry (the ABI), which spares their save.
        let flags = RegSet(weft_code::STATUS_FLAGS);
        let live = if weft_code::flags_dead_by_scan(&main.code, point, flags) == Some(true) {
            RegSet::ALL - flags
        } else {
            main.code
                .liveness()
                .live_before(point)
                .unwrap_or(RegSet::ALL)
        };
        match self.place(threads, &entry, &entry.parts[0], point, probe, live)? {
            super::place::Placed::Site(s) => {
                dirty.push(s);
                self.returns.hooks[h].entry_probe = Some(probe);
            }
            // Unhooked: the exits run at the function's own exits.
            _ => self.probes[probe].live = false,
        }
        Ok(())
    }

    /// Builds hooked function `h`'s exit mini-trampolines from its live
    /// exit probes and points its stub at them: one for a call that
    /// returned (which pops the call's entry), one for a call left without
    /// returning, which runs the same probes but the plain exit counts
    /// (they count returns).
    pub(super) fn rebuild_exit_routine(&mut self, h: usize) -> Result<()> {
        let ci = self.returns.hooks[h].cluster;
        let table = self.thread_table(ci);
        let (mut returned, mut left) = (Vec::new(), Vec::new());
        for p in self.returns.hooks[h].exits.clone() {
            if !self.probes[p].live {
                continue;
            }
            let program = self.probe_program(ci, p)?;
            if !matches!(self.probes[p].action, Action::Count) {
                left.extend(program.iter().cloned());
            }
            returned.extend(program);
        }
        let returned = self.place_code(ci, |at| {
            mini_trampoline_with(at, table, &returned, Extra::PopReturn)
        })?;
        let left = self.place_code(ci, |at| mini_trampoline(at, table, &left))?;
        let c = self.clusters[ci];
        let word = self.returns.hooks[h].stub_word;
        self.shm
            .store_u64(c.code_offset + (word - c.code), returned);
        self.shm
            .store_u64(c.code_offset + (word + 8 - c.code), left);
        Ok(())
    }

    /// The primitives probe `p` runs, as one compound mini-trampoline of a
    /// point takes them (a count becomes an add of 1 in the CPU's lane).
    pub(super) fn probe_program(&mut self, ci: usize, p: usize) -> Result<Vec<Guarded>> {
        let cluster = self.clusters[ci];
        let probe = &self.probes[p];
        Ok(match (&probe.action, probe.counter) {
            (Action::Count, Some(c)) => vec![Guarded {
                predicate: None,
                primitive: Primitive::AddCounter(
                    cluster.data + self.layout.counter(c),
                    Expr::Const(1),
                ),
            }],
            (Action::Program(program), _) => self.resolve_program(program, &cluster),
            // Expansions are stored as programs; counts always have a
            // counter; rebuilt functions have no probe.
            (Action::Count, None) | (Action::Expand(_), _) | (Action::Rebuild(_), _) => Vec::new(),
        })
    }

    /// The compound mini-trampoline of one point where calls are followed:
    /// the primitives of `probes`, then `extra`, called with the fixed
    /// frame (without saving the flags where `live` says they are dead,
    /// as at a function's entry and exits).
    pub(super) fn follow_snippet(
        &mut self,
        ci: usize,
        probes: &[usize],
        extra: Extra,
        live: RegSet,
    ) -> Result<Snippet> {
        let mut program = Vec::new();
        for &p in probes {
            program.extend(self.probe_program(ci, p)?);
        }
        let table = self.thread_table(ci);
        let mini = self.place_code(ci, |at| mini_trampoline_with(at, table, &program, extra))?;
        Ok(if live.flags_live(weft_code::STATUS_FLAGS) {
            Snippet::call_mini_fixed_frame(mini)
        } else {
            Snippet::call_mini_fixed_frame_flags_dead(mini)
        })
    }

    /// Puts back every return address a hook replaced, in every thread
    /// slot's return stack, so no frame returns into weft's code once it
    /// is gone. Threads must be stopped.
    pub(super) fn disarm_returns(&self, tracee: &Tracee) -> Result<()> {
        let Some(area) = self.returns.stacks else {
            return Ok(());
        };
        let stubs: HashSet<u64> = self.returns.hooks.iter().map(ReturnHook::stub).collect();
        disarm_stacks(tracee, area, self.layout.header.thread_slots, &|s| {
            stubs.contains(&s)
        })
    }

    /// Unmaps the return stacks once nothing can use them (the clusters
    /// are gone).
    pub(super) fn unmap_return_stacks(&mut self, tracee: &mut Tracee) -> Result<()> {
        if self.clusters.iter().any(|c| c.mapped) {
            return Ok(());
        }
        if let Some(at) = self.returns.stacks.take() {
            let len = stacks::area_size(self.layout.header.thread_slots);
            tracee.remote_munmap(RemoteAddr(at), len)?;
        }
        Ok(())
    }

    /// The snippet probe `p` runs at a point of cluster `ci` where `live`
    /// may be live, if any.
    /// A program that calls its function (`Primitive::CallFunction`) calls
    /// it at `code`; one that hands its call to the SIGSYS handler
    /// (`Primitive::ThroughHandler`) names its site, `point`. The unwinder's frames of the `syscall`s its
    /// mini-trampoline makes (the point's, at `point`, or a feed's own) are
    /// added to `frames`.
    pub(super) fn probe_snippet(
        &mut self,
        ci: usize,
        p: usize,
        live: RegSet,
        code: Option<u64>,
        point: u64,
        frames: &mut Vec<weft_patch::unwind::Frame>,
    ) -> Result<Option<Snippet>> {
        let cluster = self.clusters[ci];
        let probe = &self.probes[p];
        Ok(match (&probe.action, probe.counter) {
            (Action::Count, Some(c)) => {
                let counter = cluster.data + self.layout.counter(c);
                let literal = self.lane_literal(ci, counter)?;
                Some(Snippet::count_in_lane(counter, literal, &self.lanes()))
            }
            (Action::Program(program), _) => {
                let mut program = self.resolve_program(program, &cluster);
                for g in program.iter_mut() {
                    match &mut g.primitive {
                        weft_plan::Primitive::CallFunction { code: at } => {
                            *at = code.ok_or(weft_patch::Error::NotRelocatable {
                                addr: 0,
                                why: "a function called by a probe has no relocated code",
                            })?;
                        }
                        weft_plan::Primitive::ThroughHandler { site } => *site = point,
                        _ => {}
                    }
                }
                // An unguarded constant addCounter needs no mini-trampoline.
                if let [weft_plan::Guarded {
                    predicate: None,
                    primitive: weft_plan::Primitive::AddCounter(addr, weft_plan::Expr::Const(k)),
                }] = program.as_slice()
                {
                    if let Ok(k) = i32::try_from(*k) {
                        let literal = self.lane_literal(ci, *addr)?;
                        return Ok(Some(Snippet::add_in_lane(*addr, literal, k, &self.lanes())));
                    }
                }
                let mini = self.place_mini(ci, &program)?;
                frames.extend(super::unwind::frames_of(&mini, point));
                let mini = mini.at;
                Some(match weft_plan::reads_point_registers(&program) {
                    false => Snippet::call_mini(mini),
                    true if live.flags_live(weft_code::STATUS_FLAGS) => {
                        Snippet::call_mini_fixed_frame(mini)
                    }
                    true => Snippet::call_mini_fixed_frame_flags_dead(mini),
                })
            }
            // Expansions are stored as programs; counts always have a
            // counter; rebuilt functions have no probe.
            (Action::Count, None) | (Action::Expand(_), _) | (Action::Rebuild(_), _) => None,
        })
    }
}

/// Puts back the return addresses in the return stacks at `area` (of
/// `slots` thread slots) whose slot still holds a stub (`is_stub`).
pub(super) fn disarm_stacks(
    tracee: &Tracee,
    area: u64,
    slots: u64,
    is_stub: &dyn Fn(u64) -> bool,
) -> Result<()> {
    let memory = tracee.memory();
    for slot in 0..slots {
        let stack = area + slot * stacks::BYTES_PER_THREAD;
        let depth = memory.read_u64(RemoteAddr(stack + stacks::DEPTH))?;
        for i in 0..depth.min(stacks::CAPACITY) {
            let e = stack + stacks::ENTRIES + i * stacks::ENTRY_SIZE;
            let fields = memory.read_vec(RemoteAddr(e), stacks::ENTRY_SIZE as usize)?;
            let word = |at: u64| {
                u64::from_le_bytes(fields[at as usize..at as usize + 8].try_into().unwrap())
            };
            let (slot_addr, ret, stub) = (
                word(stacks::E_SLOT),
                word(stacks::E_RET),
                word(stacks::E_STUB),
            );
            if !is_stub(stub) {
                continue;
            }
            // A frame's slot on a stack since unmapped cannot be read: nothing returns there.
            if memory
                .read_u64(RemoteAddr(slot_addr))
                .is_ok_and(|now| now == stub)
            {
                memory.write(RemoteAddr(slot_addr), &ret.to_le_bytes())?;
            }
        }
    }
    Ok(())
}
