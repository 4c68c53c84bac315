//! Libraries loaded while weft is attached (dlopen). A hook at the dynamic
//! loader's `_dl_debug_state` blocks the loading thread until weft has
//! instrumented the new library (protocol in `weft_patch::load_hook`), so
//! calls into it are counted from the first one, constructors aside. Its
//! rich event sites that a request asks for are enabled then too.

use super::apply::SiteError;
use super::*;
use weft_patch::choose_splice;
use weft_patch::load_hook::{ACK, GENERATION, LISTENING};

impl Session {
    /// Splices the load hook into ld.so's `_dl_debug_state`. Returns false
    /// when the process has no dynamic loader (static programs) or the
    /// hook cannot be placed; dlopen'ed libraries then go uninstrumented.
    pub fn install_load_hook(&mut self, tracee: &mut Tracee) -> Result<bool> {
        self.adopt(tracee)?;
        if self
            .sites
            .iter()
            .any(|s| s.hook == Some(Hook::Loads) && s.active)
        {
            return Ok(true);
        }
        let Some(mi) = self
            .modules
            .iter()
            .position(|m| m.name.starts_with("ld-linux"))
        else {
            return Ok(false);
        };
        let generation = self.shm.load_u32(self.sync(GENERATION));
        if !self.install_hook(tracee, mi, "_dl_debug_state", Hook::Loads)? {
            return Ok(false);
        }
        self.loads_acked = generation;
        self.shm.store_u32(self.sync(LISTENING), 1);
        Ok(true)
    }

    /// Splices `hook` at the entry of `function` in module `mi`, through
    /// an `int3` pass like every splice (the handler and the trap table
    /// are in place first). False if the function is not there or no
    /// splice fits.
    pub(super) fn install_hook(
        &mut self,
        tracee: &mut Tracee,
        mi: usize,
        function: &str,
        hook: Hook,
    ) -> Result<bool> {
        let entry = self
            .function_code_named(mi, function)
            .and_then(|(_, code)| weft_patch::place::entry_point(&code));
        match entry {
            Some(point) => self.install_hook_at(tracee, mi, function, point, hook),
            None => Ok(false),
        }
    }

    /// Splices `hook` before each `ret` of `function` in module `mi`; false
    /// if the function is not there, has no `ret`, or a splice does not fit.
    pub(super) fn install_hook_at_returns(
        &mut self,
        tracee: &mut Tracee,
        mi: usize,
        function: &str,
        hook: Hook,
    ) -> Result<bool> {
        let Some((_, code)) = self.function_code_named(mi, function) else {
            return Ok(false);
        };
        let returns: Vec<u64> = code
            .exits()
            .into_iter()
            .filter(|&p| {
                code.instruction_at(p)
                    .is_some_and(|i| i.flow_control() == iced_x86::FlowControl::Return)
            })
            .collect();
        if returns.is_empty() {
            return Ok(false);
        }
        for point in returns {
            if !self.install_hook_at(tracee, mi, function, point, hook)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Function `name` of module `mi` and its code, if both are there.
    fn function_code_named(
        &self,
        mi: usize,
        name: &str,
    ) -> Option<(&weft_image::Function, FunctionCode)> {
        let module = &self.modules[mi];
        let f = module.image.function_named(name)?;
        Some((f, module.function_code(f)?))
    }

    /// Splices `hook` before the instruction at `point` of `function`.
    fn install_hook_at(
        &mut self,
        tracee: &mut Tracee,
        mi: usize,
        function: &str,
        point: u64,
        hook: Hook,
    ) -> Result<bool> {
        let Some((f, code)) = self.function_code_named(mi, function) else {
            return Ok(false);
        };
        let module = &self.modules[mi];
        if self.span_at(point).is_some() {
            return Ok(false);
        }
        let pcs = stacks::thread_pcs(tracee)?;
        let after_end = module.bytes_after(f).to_vec();
        let ctx = SpliceContext {
            func: &code,
            targets: module.branch_targets(),
            thread_pcs: &pcs,
            after_end: &after_end,
        };
        let Some(Ok(choice)) = choose_splice(&ctx, point) else {
            return Ok(false);
        };
        let sigtrap_blocked = || {
            tracee
                .threads()
                .into_iter()
                .any(|t| tracee.signal_blocked(t, weft_abi::signal::SIGTRAP))
        };
        if choice.method == SpliceMethod::Trap && sigtrap_blocked() {
            return Ok(false);
        }
        let span = match choice.method {
            SpliceMethod::Trap => (point, point + 1),
            _ => (choice.start, choice.end),
        };
        let s = self.sites.len();
        self.sites.push(Site {
            module: mi,
            choice,
            points: vec![],
            record: None,
            entry: 0,
            saves_state: false,
            active: false,
            whole_function: None,
            hook: Some(hook),
            board: None,
        });
        let mut text = TextBatch::new(self.pid)?;
        match self.build_site(tracee, &mut text, s) {
            Ok(()) => {}
            Err(SiteError::Skip(_)) => {
                self.sites.pop();
                return Ok(false);
            }
            Err(SiteError::Fatal(e)) => return Err(e),
        }
        let ci = self.ensure_cluster(tracee, mi)?;
        self.install_trap_handler(tracee, ci)?;
        self.sites[s].active = true;
        self.write_trap_table();
        self.spans.insert(span.0, (span.1, s));
        self.site_at.insert(point, s);
        let record = self.sites[s].record.as_ref().expect("built");
        let splice = Splice {
            addr: record.addr,
            bytes: record.new.clone(),
            paired: false,
        };
        text.poke_in_phases(tracee.memory(), &[splice])?;
        Ok(true)
    }

    fn sync(&self, word: u64) -> u64 {
        self.layout.header.sync_offset + word
    }

    /// Whether a thread of the target waits in the load hook for weft.
    pub fn loads_waiting(&self) -> bool {
        self.shm.load_u32(self.sync(GENERATION)) != self.loads_acked
    }

    /// The word the load hook bumps, to wait on with other processes'
    /// (see [`crate::wait_any`]).
    pub fn load_word(&self) -> crate::Waited<'_> {
        crate::Waited {
            word: self.shm.atomic_u32(self.sync(GENERATION)),
            unchanged: self.loads_acked,
            shared: true,
        }
    }

    /// Instruments the libraries that appeared (with the same requests),
    /// then lets the threads waiting in the hook go on. `None` when nothing
    /// new matched.
    pub fn handle_loads(&mut self, specs: &[PointSpec]) -> Result<Option<AddReport>> {
        let generation = self.shm.load_u32(self.sync(GENERATION));
        let first = self.modules.len();
        let result = (|| -> Result<Option<AddReport>> {
            if self.refresh_modules()? == 0 {
                return Ok(None);
            }
            let prepared = self.prepare_modules(specs, first, false, &[])?;
            let sites = self.requested_sites_from(first);
            let unwinders = self.unhooked_unwinders();
            // Weft's code unwinds through a C unwinder loaded now (glibc
            // loads libgcc_s at the first `pthread_cancel` or `backtrace`):
            // `apply` hooks it.
            let fde_finders = !self.unhooked_fde_finders().is_empty();
            if prepared.is_empty() && sites.is_empty() && !unwinders && !fde_finders {
                return Ok(None);
            }
            let mut tracee = Tracee::attach(self.pid)?;
            if unwinders {
                // Frames whose return is hooked may be unwound through the
                // new library (the C++ runtime, libgcc_s for pthread_exit).
                self.hook_unwinders(&mut tracee)?;
            }
            let report = self.apply(&mut tracee, prepared)?;
            let cap = self.event_cap();
            self.enable_event_sites(&mut tracee, &sites, cap)?;
            tracee.detach()?;
            Ok(Some(report))
        })();
        self.release_loaders(generation);
        result
    }

    /// The patterns of `specs` that name a module no library loaded so far
    /// matches: they were never instrumented, and their counts and metrics
    /// read 0 for that reason (once each).
    pub fn never_loaded(&self, specs: &[PointSpec]) -> Vec<String> {
        let mut out: Vec<String> = specs
            .iter()
            .filter(|s| s.pattern.module.is_some())
            .filter(|s| {
                !self
                    .modules
                    .iter()
                    .any(|m| s.pattern.matches_module(&m.name))
            })
            .map(|s| s.pattern.to_string())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// For a process let run through its dynamic loader with the load hook
    /// in place (see `install_load_hook`), once a thread waits in the hook:
    /// whether the loader has said its libraries are consistent
    /// (`_r_debug.r_state` is `RT_CONSISTENT`: the C library mapped,
    /// relocated and set up, no constructor run yet), read while the
    /// process runs. `None` when the loader has no `_r_debug`.
    pub fn libraries_consistent(&self) -> Result<Option<bool>> {
        /// `struct r_debug`'s `r_state`, and its value once the loader is done.
        const R_STATE: u64 = 24;
        const RT_CONSISTENT: u32 = 0;
        let Some(loader) = self.modules.iter().find(|m| m.name.starts_with("ld-linux")) else {
            return Ok(None);
        };
        let Some(debug) = loader.image.symbol_address("_r_debug") else {
            return Ok(None);
        };
        let memory = weft_process::ProcMemory::open(self.pid)?;
        let mut word = [0u8; 4];
        memory.read(RemoteAddr(loader.runtime(debug).0 + R_STATE), &mut word)?;
        Ok(Some(u32::from_le_bytes(word) == RT_CONSISTENT))
    }

    /// Lets the threads waiting in the load hook go on, with nothing
    /// instrumented for what they reported.
    pub fn release_loads(&mut self) {
        let generation = self.shm.load_u32(self.sync(GENERATION));
        self.release_loaders(generation);
    }

    /// Acknowledges every load up to `generation` and wakes the waiters.
    pub(super) fn release_loaders(&mut self, generation: u32) {
        self.loads_acked = generation;
        self.shm.store_u32(self.sync(ACK), generation);
        self.shm.futex_wake(self.sync(ACK));
    }

    /// Stops answering and releases every thread waiting in the hook
    /// (before removing it).
    pub(super) fn release_all_loaders(&mut self) {
        self.shm.store_u32(self.sync(LISTENING), 0);
        let generation = self.shm.load_u32(self.sync(GENERATION));
        self.release_loaders(generation);
    }
}

impl Drop for Session {
    /// A session that ends (weft exiting, even on an error) stops answering
    /// the load hook, and lets go the threads waiting in it (a new image
    /// waits there for its libraries), so no thread of the target waits
    /// for it.
    fn drop(&mut self) {
        self.release_all_loaders();
    }
}
