//! Functions an instrument lays out again (`Action::Rebuild`): the copy is
//! placed in the code area of the function's cluster, and 5-byte jumps
//! written into the original send its entry (and its calls' return
//! addresses) into the copy. Also the generic means such an instrument
//! needs in the process: a file of its own mapped with guard pages, code
//! of its own, and a signal action.

use super::apply::SiteError;
use super::prepare::PreparedProbe;
use super::*;
use std::collections::HashMap;
use std::sync::Arc;
use weft_abi::mman;
use weft_plan::{Rebuilding, RebuiltCode};

/// A function running from its copy, and what its jumps replaced.
#[derive(Debug, Clone)]
pub(super) struct RebuiltFunction {
    /// (original address, the five bytes the jump replaced).
    pub(super) replaced: Vec<(u64, [u8; 5])>,
}

/// The PLT stubs of module `m` that reach a function of `m` itself, with
/// that function's entry (runtime addresses, sorted): the stub's symbol is
/// a function `m` exports under one version, not an IFUNC, and no other
/// module of the process exports the name, so the dynamic linker binds
/// the stub's slot to `m`'s definition, already (`BIND_NOW`) or at its
/// first call. (A library loaded later with `RTLD_GLOBAL` cannot come
/// before `m` in the lookup order unless `m` was itself loaded with
/// `RTLD_LOCAL`: such a late definition is not seen.)
fn own_plt_callees(modules: &[Arc<Module>], m: usize) -> Vec<(u64, u64)> {
    let module = &modules[m];
    let mut out: Vec<(u64, u64)> = module
        .image
        .plt_stubs()
        .into_iter()
        .filter_map(|(stub, name)| {
            let own = module.image.export(&name)?;
            if !own.function || own.ifunc || own.versions {
                return None;
            }
            let elsewhere = modules
                .iter()
                .enumerate()
                .any(|(k, other)| k != m && other.image.export(&name).is_some());
            (!elsewhere).then(|| (module.runtime(stub).get(), module.runtime(own.addr).get()))
        })
        .collect();
    out.sort_unstable();
    out
}

impl Session {
    /// Lays out the prepared `Rebuild` items again and writes their jumps.
    /// A function a thread is stopped inside, or whose bytes in memory are
    /// not the file's, is passed over (in `report.skipped`).
    pub(super) fn apply_rebuilds(
        &mut self,
        tracee: &mut Tracee,
        items: Vec<PreparedProbe>,
        report: &mut AddReport,
    ) -> Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let pcs: Vec<u64> = tracee.thread_pcs()?.iter().map(|(_, a)| a.0).collect();
        // Return addresses on the threads' stacks (attach): places the
        // original code is entered by, like branches from outside.
        let words = super::stacks::stack_words(tracee, self.pid, 1 << 20)?;
        let mut text = TextBatch::new(self.pid)?;
        // Per instrument, the entries of the functions it laid out here.
        let mut placed: Vec<(Arc<dyn weft_plan::Rebuild>, Vec<u64>)> = Vec::new();
        let mut plt_callees: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        for item in items {
            let Action::Rebuild(rebuild) = &item.action else {
                continue;
            };
            let Some(part) = item.parts.first() else {
                continue;
            };
            let code = &part.code;
            let module = self.modules[item.module].clone();
            let skip = |why: String| SkippedPoint {
                module: module.name.clone(),
                function: item.display.clone(),
                why: SkipReason::Rebuild(why),
            };
            if self.rebuilt_at.contains_key(&code.start()) {
                continue;
            }
            if let Some(pc) = pcs.iter().find(|&&pc| pc > code.start() && pc < code.end()) {
                report.skipped.push(skip(format!(
                    "a thread is inside it (at {pc:#x}); weft traces a function from a call \
                     made after it is in place"
                )));
                continue;
            }
            let ci = self.ensure_cluster(tracee, item.module)?;
            let at = {
                let c = &self.clusters[ci];
                c.code + c.used
            };
            let internal = code.internal_targets();
            let targets = module.branch_targets();
            let inside: Vec<u64> = targets.within(code.start() + 1..code.end()).collect();
            // Reached from outside: targets no jump of the function makes,
            // those other functions' branches reach (maybe as well as its
            // own), and those its other parts (a `.cold` part) jump back to.
            let foreign = module.foreign_targets();
            let mut outside: Vec<u64> = inside
                .iter()
                .copied()
                .filter(|&a| !internal.contains(&a) || foreign.contains(a))
                .collect();
            outside.extend(module.jumps_back_from_other_parts(code));
            let lo = words.partition_point(|&w| w <= code.start());
            let hi = words.partition_point(|&w| w < code.end());
            outside.extend_from_slice(&words[lo..hi]);
            // (`Module::function_code` starts a block at each of them.)
            outside.sort_unstable();
            outside.dedup();
            let plt = plt_callees
                .entry(item.module)
                .or_insert_with(|| own_plt_callees(&self.modules, item.module));
            let built = match rebuild.rebuild(&Rebuilding {
                module: &module.name,
                path: &module.path,
                function: &item.display,
                code,
                bias: module.bias,
                entered_from_outside: &outside,
                branch_targets: &inside,
                landing_pads: &module.landing_pads_in(code),
                at,
                image: &module.image,
                pid: self.pid,
                plt_callees: plt,
                room: CODE_AREA.saturating_sub(self.clusters[ci].used),
            }) {
                Ok(b) => b,
                Err(why) => {
                    report.skipped.push(skip(why));
                    continue;
                }
            };
            let c = &self.clusters[ci];
            if (c.used + built.bytes.len() as u64).next_multiple_of(16) > CODE_AREA {
                // Traced what fits; the rest of the module runs as it is.
                report.skipped.push(skip(format!(
                    "weft's code area near {} is full ({} MiB of laid-out functions)",
                    module.name,
                    CODE_AREA >> 20
                )));
                continue;
            }
            match self.write_rebuilt(tracee, &mut text, &module, ci, at, &built) {
                Ok(replaced) => {
                    self.rebuilt_at
                        .insert(code.start(), RebuiltFunction { replaced });
                    report.probes += 1;
                    report.jumps += built.jumps.len();
                    match placed.iter_mut().find(|(r, _)| Arc::ptr_eq(r, rebuild)) {
                        Some((_, starts)) => starts.push(code.start()),
                        None => placed.push((rebuild.clone(), vec![code.start()])),
                    }
                }
                Err(SiteError::Skip(why)) => report.skipped.push(SkippedPoint {
                    module: module.name.clone(),
                    function: item.display.clone(),
                    why,
                }),
                Err(SiteError::Fatal(e)) => return Err(e),
            }
        }
        for (rebuild, starts) in placed {
            for (addr, bytes) in rebuild.link(self.pid, &starts) {
                self.write_link(tracee, &mut text, addr, &bytes)?;
            }
        }
        text.flush(tracee.memory())?;
        Ok(())
    }

    /// Writes bytes of a link (see [`weft_plan::Rebuild::link`]): into a
    /// copy through the shared file that holds it, over a jump in the
    /// original code through the batch.
    fn write_link(
        &mut self,
        tracee: &mut Tracee,
        text: &mut TextBatch,
        addr: u64,
        bytes: &[u8],
    ) -> Result<()> {
        let end = addr + bytes.len() as u64;
        match self
            .clusters
            .iter()
            .find(|c| addr >= c.code && end <= c.code + c.used)
        {
            Some(c) => {
                self.shm.write(c.code_offset + (addr - c.code), bytes);
                Ok(())
            }
            None => text.write(tracee.memory(), addr, bytes),
        }
    }

    /// Places a copy at `at` (the next free byte of cluster `ci`) and
    /// writes its jumps; returns what they replaced.
    fn write_rebuilt(
        &mut self,
        tracee: &mut Tracee,
        text: &mut TextBatch,
        module: &Module,
        ci: usize,
        at: u64,
        built: &RebuiltCode,
    ) -> Result<Vec<(u64, [u8; 5])>, SiteError> {
        let mut writes = Vec::with_capacity(built.jumps.len());
        for &(addr, target) in &built.jumps {
            let rel = target.wrapping_sub(addr + 5) as i64;
            if i32::try_from(rel).is_err() {
                return Err(SiteError::Skip(SkipReason::OutOfReach(target)));
            }
            let old = text
                .read(tracee.memory(), addr, 5)
                .map_err(SiteError::Fatal)?;
            if module.bytes_at_runtime(RemoteAddr(addr), 5) != Some(old.as_slice()) {
                return Err(SiteError::Skip(SkipReason::CodeChanged));
            }
            let mut jump = [0xe9u8, 0, 0, 0, 0];
            jump[1..].copy_from_slice(&(rel as i32).to_le_bytes());
            let mut was = [0u8; 5];
            was.copy_from_slice(&old);
            writes.push((addr, was, jump));
        }
        let placed = self
            .alloc_code(ci, &built.bytes)
            .map_err(SiteError::Fatal)?;
        debug_assert_eq!(placed, at);
        let mut replaced = Vec::with_capacity(writes.len());
        for (addr, was, jump) in writes {
            text.write(tracee.memory(), addr, &jump)
                .map_err(SiteError::Fatal)?;
            replaced.push((addr, was));
        }
        Ok(replaced)
    }

    /// Puts back the bytes of every rebuilt function's jumps.
    pub(super) fn restore_rebuilt(&mut self, tracee: &mut Tracee) -> Result<()> {
        if self.rebuilt_at.is_empty() {
            return Ok(());
        }
        let mut text = TextBatch::new(self.pid)?;
        for f in std::mem::take(&mut self.rebuilt_at).into_values() {
            for (addr, was) in f.replaced {
                text.write(tracee.memory(), addr, &was)?;
            }
        }
        text.flush(tracee.memory())?;
        Ok(())
    }

    /// Whether some function runs from a copy an instrument laid out.
    pub fn has_rebuilt(&self) -> bool {
        !self.rebuilt_at.is_empty()
    }

    /// Maps `file` (a [`SharedMemory`] of the instrument's) into the
    /// process, read-write and shared; makes the pages at each offset of
    /// `guards` inaccessible there, the range `code` (offset, length)
    /// read-execute, and the range `own` (offset, length) memory of the
    /// process's own (private and anonymous: zero, copied on fork, seen by
    /// no other process). Returns where it is mapped. weft leaves it
    /// mapped when it detaches.
    pub fn map_into_process(
        &mut self,
        tracee: &mut Tracee,
        file: &SharedMemory,
        guards: &[u64],
        code: (u64, u64),
        own: (u64, u64),
    ) -> Result<u64> {
        let mut path = file.target_path().as_bytes().to_vec();
        path.push(0);
        let fd = super::clusters::open_through_page(tracee, &path)?;
        let addr = tracee.remote_mmap(
            None,
            file.size() as u64,
            mman::PROT_READ | mman::PROT_WRITE,
            mman::MAP_SHARED,
            fd,
            0,
        )?;
        tracee.remote_close(fd)?;
        for &g in guards {
            tracee.remote_syscall(
                "mprotect",
                weft_abi::syscall::MPROTECT.into(),
                [addr.0 + g, mman::PAGE_SIZE, mman::PROT_NONE as u64, 0, 0, 0],
            )?;
        }
        tracee.remote_syscall(
            "mprotect",
            weft_abi::syscall::MPROTECT.into(),
            [
                addr.0 + code.0,
                code.1,
                (mman::PROT_READ | mman::PROT_EXEC) as u64,
                0,
                0,
                0,
            ],
        )?;
        tracee.remote_mmap_over(
            RemoteAddr(addr.0 + own.0),
            own.1,
            mman::PROT_READ | mman::PROT_WRITE,
            mman::MAP_PRIVATE | mman::MAP_ANONYMOUS,
            -1,
            0,
        )?;
        Ok(addr.0)
    }

    /// Sets the process's action for `sig` to the kernel `sigaction` at
    /// `new` (in memory the process maps), saving the old one at `old`.
    pub fn set_signal_action(
        &mut self,
        tracee: &mut Tracee,
        sig: i32,
        new: u64,
        old: u64,
    ) -> Result<()> {
        tracee.remote_sigaction(sig, RemoteAddr(new), RemoteAddr(old))?;
        Ok(())
    }
}
