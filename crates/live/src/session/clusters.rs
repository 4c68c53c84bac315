//! Clusters: patch memory mapped next to each group of modules within
//! jump reach (the shared region's data area and a code area of its own),
//! code placed in them, and their removal once no thread can be inside.

use super::*;
use weft_abi::{fcntl, mman};
use weft_patch::mini::returns::Extra;
use weft_patch::mini::template::MiniTemplate;
use weft_patch::mini::{assemble_mini, ThreadTable};

/// A mini-trampoline placed in a cluster's code area.
#[derive(Debug, Clone)]
pub(super) struct PlacedMini {
    pub(super) at: u64,
    /// Where it makes its point's call (`Primitive::MakeCall`).
    pub(super) made_calls: Vec<u64>,
    /// The calls of its own a feed makes (its waits for other threads'
    /// calls), and how far above `rsp` there the point's `rsp` is.
    pub(super) own_calls: Vec<(u64, u64)>,
}

/// What a session knows of a mini-trampoline shape (see
/// `Session::place_mini`).
#[derive(Debug, Clone)]
pub(super) enum Template {
    /// One program of the shape was assembled where it went.
    SeenOnce,
    /// The shape's template, or None where copies would not be exact.
    Made(Option<MiniTemplate>),
}
use weft_plan::{Expr, Guarded, Primitive};

/// Mini-trampolines assembled once per thread table (as `Debug` prints
/// it: its addresses, which are the cluster's, and the clock, which may
/// come after the first ones) and program shape
/// (`weft_patch::mini::template`), from the shape's second program on (a
/// template costs two assemblies: a shape seen once, such as a feed's,
/// which names its site, is not worth one). Kept for every session of
/// this weft: the processes of a workload recorded without address space
/// randomisation have their clusters at the same addresses, and share
/// their templates (the dispatch function's return alone is some sixty
/// records).
static MINI_TEMPLATES: std::sync::LazyLock<std::sync::Mutex<MiniTemplates>> =
    std::sync::LazyLock::new(Default::default);

/// What [`MINI_TEMPLATES`] holds, by thread table and program shape.
type MiniTemplates = HashMap<(String, Vec<Guarded>), Template>;

#[derive(Debug, Clone, Copy)]
pub(super) struct Cluster {
    pub(super) data: u64,
    pub(super) code: u64,
    pub(super) code_offset: u64,
    pub(super) used: u64,
    pub(super) mapped: bool,
}

impl Cluster {
    pub(super) fn range(&self) -> (u64, u64) {
        (self.data, self.code + CODE_AREA)
    }

    pub(super) fn reaches(&self, lo: u64, hi: u64) -> bool {
        let (s, e) = self.range();
        e.max(hi) - s.min(lo) < REACH
    }
}

impl Session {
    /// A cluster (patch memory next to the module) that reaches `module`,
    /// mapping a new one when none does.
    pub(super) fn ensure_cluster(&mut self, tracee: &mut Tracee, module: usize) -> Result<usize> {
        let (lo, hi) = (self.modules[module].lo, self.modules[module].hi);
        if let Some(i) = self
            .clusters
            .iter()
            .position(|c| c.mapped && c.reaches(lo, hi))
        {
            return Ok(i);
        }
        let index = self.clusters.len() as u64;
        if index >= MAX_CLUSTERS {
            return Err(Error::Full {
                what: "clusters of patch memory",
            });
        }
        let maps = weft_process::maps::read(self.pid)?;
        let size = self.layout.size + CODE_AREA;
        let addr =
            weft_process::maps::free_range_below(&maps, lo, hi, size, REACH).ok_or_else(|| {
                Error::NoRoom {
                    module: self.modules[module].name.clone(),
                }
            })?;
        let fd = self.open_shared_in_target(tracee)?;
        let mapped = (|| -> Result<()> {
            let data = tracee.remote_mmap(
                Some(RemoteAddr(addr)),
                self.layout.size,
                mman::PROT_READ | mman::PROT_WRITE,
                mman::MAP_SHARED,
                fd,
                0,
            )?;
            let code = tracee.remote_mmap(
                Some(RemoteAddr(addr + self.layout.size)),
                CODE_AREA,
                mman::PROT_READ | mman::PROT_EXEC,
                mman::MAP_SHARED,
                fd,
                self.layout.size + index * CODE_AREA,
            )?;
            if data.0 != addr || code.0 != addr + self.layout.size {
                return Err(Error::NoRoom {
                    module: self.modules[module].name.clone(),
                });
            }
            Ok(())
        })();
        tracee.remote_close(fd)?;
        mapped?;
        self.clusters.push(Cluster {
            data: addr,
            code: addr + self.layout.size,
            code_offset: self.layout.size + index * CODE_AREA,
            used: 0,
            mapped: true,
        });
        self.write_unrecorded_ranges();
        self.list_unwind_area(self.clusters.len() - 1);
        Ok(self.clusters.len() - 1)
    }

    /// Prepares a tracee of a new episode: remote system calls run in the
    /// slack after a module's last code (ld.so's or libc's first, which are
    /// never unloaded), where a call resumes its thread by itself if weft
    /// dies during it, never in bytes borrowed at a thread's pc (which may
    /// lie in weft's shared, unwritable code). The first episode also takes
    /// out what earlier wefts left behind (`leftovers.rs`).
    pub(super) fn adopt(&mut self, tracee: &mut Tracee) -> Result<()> {
        self.rewind_trapped_threads(tracee)?;
        self.place_call_area(tracee);
        if !self.looked_for_leftovers {
            self.looked_for_leftovers = true;
            self.reclaim_left_behind(tracee)?;
        }
        self.reclaim_sigtrap(tracee)
    }

    /// Has the tracee run its remote system calls in the slack after a
    /// module's last code (see [`adopt`](Self::adopt)).
    pub(super) fn place_call_area(&self, tracee: &mut Tracee) {
        let rank = |m: &Module| match m.name.as_str() {
            n if n.starts_with("ld-linux") => 0,
            n if n.starts_with("libc.so") => 1,
            _ => 2,
        };
        let mut modules: Vec<&Module> = self.modules.iter().map(|m| &**m).collect();
        modules.sort_by_key(|m| rank(m));
        if let Some((addr, original)) = modules.iter().find_map(|m| {
            let len = weft_process::CALL_STUB_LEN;
            let addr = m.code_slack(len as u64)?;
            let original = m.slack_bytes(addr, len).try_into().ok()?;
            Some((addr, original))
        }) {
            tracee.set_call_area(weft_process::CallArea { addr, original });
        }
    }

    /// Places bytes in a cluster's code area; returns their target address.
    pub(super) fn alloc_code(&mut self, ci: usize, bytes: &[u8]) -> Result<u64> {
        let c = &mut self.clusters[ci];
        let at = c.code + c.used;
        let used = (c.used + bytes.len() as u64).next_multiple_of(16);
        if used > super::unwind::CODE_BYTES {
            return Err(Error::Full {
                what: "trampoline code area",
            });
        }
        self.shm.write(c.code_offset + c.used, bytes);
        c.used = used;
        Ok(at)
    }

    /// Opens the shared file inside the target and returns the target's fd.
    pub(super) fn open_shared_in_target(&mut self, tracee: &mut Tracee) -> Result<i32> {
        let first = !self.clusters.iter().any(|c| c.mapped);
        match self.try_open_in_target(tracee) {
            Ok(fd) => Ok(fd),
            Err(Error::Process(weft_process::Error::RemoteSyscall { source, .. }))
                if first
                    && matches!(
                        source.raw_os_error(),
                        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::ENOENT)
                    ) =>
            {
                // The target (another user, or another pid namespace) cannot open
                // weft's /proc/PID/fd: share a /dev/shm file it owns instead.
                let (uid, gid) = weft_process::process_ids(self.pid)?;
                let shm = SharedMemory::create_in_dev_shm(self.shm.size(), uid, gid)?;
                shm.write(0, &self.layout.header_bytes());
                super::journal::stamp_owner(&shm, &self.layout, self.pid);
                self.shm = shm;
                self.try_open_in_target(tracee)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn try_open_in_target(&mut self, tracee: &mut Tracee) -> Result<i32> {
        let mut path = self.shm.target_path().as_bytes().to_vec();
        path.push(0);
        if let Some(c) = self.clusters.iter().find(|c| c.mapped) {
            let scratch = self.layout.header.scratch_offset;
            self.shm.write(scratch, &path);
            return Ok(tracee.remote_open(
                RemoteAddr(c.data + scratch),
                fcntl::O_RDWR | fcntl::O_CLOEXEC,
            )?);
        }
        open_through_page(tracee, &path)
    }
}

/// Opens `path` (NUL-terminated) inside the target through a page of its
/// own, mapped for the call; returns the target's fd.
pub(super) fn open_through_page(tracee: &mut Tracee, path: &[u8]) -> Result<i32> {
    let page = tracee.remote_mmap(
        None,
        mman::PAGE_SIZE,
        mman::PROT_READ | mman::PROT_WRITE,
        mman::MAP_PRIVATE | mman::MAP_ANONYMOUS,
        -1,
        0,
    )?;
    let opened = tracee
        .memory()
        .write(page, path)
        .map_err(Error::from)
        .and_then(|_| {
            tracee
                .remote_open(page, fcntl::O_RDWR | fcntl::O_CLOEXEC)
                .map_err(Error::from)
        });
    tracee.remote_munmap(page, mman::PAGE_SIZE)?;
    opened
}

impl Session {
    /// Unmaps weft's memory from the target unless a thread's pc, or a
    /// word near the top of its stack (a signal frame's saved pc), points
    /// into it.
    pub(super) fn unmap_clusters(
        &mut self,
        tracee: &mut Tracee,
        notes: &mut Vec<String>,
    ) -> Result<()> {
        if self.trap.is_some_and(|t| t.installed) {
            return Ok(());
        }
        if self.rich.ever_used {
            notes.push(
                "rich events were traced: weft's memory stays mapped in the target, since a \
                 thread may still be writing an event into it"
                    .into(),
            );
            return Ok(());
        }
        let mapped = self.clusters.iter().filter(|c| c.mapped);
        let ranges: Vec<(u64, u64)> = mapped.clone().map(|c| c.range()).collect();
        let code: Vec<(u64, u64)> = mapped.map(|c| (c.code, c.code + CODE_AREA)).collect();
        if ranges.is_empty() {
            return Ok(());
        }
        // The splices are gone, so a thread inside a trampoline leaves it
        // within nanoseconds of running again: let them run briefly.
        const ATTEMPTS: u32 = 50;
        for attempt in 1..=ATTEMPTS {
            // A thread that was inside a return hook may have hooked a
            // call since the last look.
            self.disarm_returns(tracee)?;
            match self.memory_in_use(tracee, &ranges, &code)? {
                None => break,
                Some(why) if attempt == ATTEMPTS => {
                    notes.push(format!("{why}; weft's memory stays mapped in the target"));
                    return Ok(());
                }
                Some(_) => {
                    tracee.let_run(std::time::Duration::from_micros(200 * u64::from(attempt)))?
                }
            }
        }
        self.unhook_fde_finders(tracee)?;
        disarm_restartable_sequences(tracee, &code)?;
        for c in self.clusters.iter_mut().filter(|c| c.mapped) {
            tracee.remote_munmap(RemoteAddr(c.data), self.layout.size)?;
            tracee.remote_munmap(RemoteAddr(c.code), CODE_AREA)?;
            c.mapped = false;
        }
        Ok(())
    }

    /// Why weft's memory (`ranges`, of which `code` is its code) may still
    /// be in use: a thread's pc in it, or a word on a thread's stack that
    /// leads back into it. On the stack, a word pointing into the data is
    /// taken as a use; one pointing into the code only if it is a return
    /// address (an address right after a call) or the pc saved in a signal
    /// frame. Any other such word is a stale value in a frame's unused
    /// slot, which no thread will ever jump to.
    pub(super) fn memory_in_use(
        &self,
        tracee: &Tracee,
        ranges: &[(u64, u64)],
        code: &[(u64, u64)],
    ) -> Result<Option<String>> {
        let inside = |v: u64, rs: &[(u64, u64)]| rs.iter().any(|&(s, e)| v >= s && v < e);
        let maps = weft_process::maps::read(self.pid)?;
        let mut in_code = Vec::new();
        for tid in tracee.threads() {
            if inside(tracee.registers(tid)?.rip, ranges) {
                in_code.push(tid.to_string());
            }
        }
        match in_code.as_slice() {
            [] => {}
            [one] => return Ok(Some(format!("thread {one} is inside weft's code"))),
            many => {
                let tids = many.join(", ");
                return Ok(Some(format!("threads {tids} are inside weft's code")));
            }
        }
        for tid in tracee.threads() {
            let words = stacks::stack_of(tracee, &maps, tid, 64 << 10)?;
            for (i, &w) in words.iter().enumerate() {
                if !inside(w, ranges) {
                    continue;
                }
                if !inside(w, code) || stacks::leads_back(tracee, &words, i) {
                    return Ok(Some(format!("thread {tid}'s stack refers to weft's code")));
                }
            }
        }
        Ok(None)
    }

    /// Runtime address ranges of weft's memory in the target (data, code) per cluster.
    pub fn mapped_ranges(&self) -> Vec<(u64, u64)> {
        self.clusters
            .iter()
            .filter(|c| c.mapped)
            .map(|c| c.range())
            .collect()
    }

    /// Counter indices in a program replaced by their addresses in a cluster's view.
    pub(super) fn resolve_program(&self, program: &[Guarded], cluster: &Cluster) -> Vec<Guarded> {
        let base = cluster.data + self.layout.header.counters_offset;
        let addr = |i: u64| base + i * 8;
        fn expr(e: &Expr, addr: &dyn Fn(u64) -> u64) -> Expr {
            match e {
                Expr::Counter(i) => Expr::Counter(addr(*i)),
                Expr::Bin(op, a, b) => Expr::bin(*op, expr(a, addr), expr(b, addr)),
                other => other.clone(),
            }
        }
        program
            .iter()
            .map(|g| Guarded {
                predicate: g.predicate.as_ref().map(|p| expr(p, &addr)),
                primitive: match &g.primitive {
                    Primitive::SetCounter(i, e) => Primitive::SetCounter(addr(*i), expr(e, &addr)),
                    Primitive::AddCounter(i, e) => Primitive::AddCounter(addr(*i), expr(e, &addr)),
                    Primitive::SubCounter(i, e) => Primitive::SubCounter(addr(*i), expr(e, &addr)),
                    Primitive::AddThreadCounter(n, e) => {
                        Primitive::AddThreadCounter(*n, expr(e, &addr))
                    }
                    Primitive::Emit(id, args, strings) => Primitive::Emit(
                        *id,
                        args.iter().map(|e| expr(e, &addr)).collect(),
                        *strings,
                    ),
                    Primitive::Feed(f) => Primitive::Feed(weft_plan::Feed {
                        base: addr(f.base),
                        ..*f
                    }),
                    other => other.clone(),
                },
            })
            .collect()
    }

    /// Generates a mini-trampoline in a cluster's code area; returns its
    /// address and where it makes its point's call.
    pub(super) fn place_mini(&mut self, ci: usize, program: &[Guarded]) -> Result<PlacedMini> {
        let c = self.clusters[ci];
        let at = c.code + c.used;
        let table = self.thread_table(ci);
        let key = (
            format!("{table:?}"),
            weft_patch::mini::template::shape(program),
        );
        let assemble = || assemble_mini(at, table, program, Extra::None);
        let mut templates = MINI_TEMPLATES.lock().unwrap_or_else(|e| e.into_inner());
        let mini = match templates.get(&key) {
            None => {
                templates.insert(key, Template::SeenOnce);
                assemble()?
            }
            Some(Template::SeenOnce) => {
                let made = MiniTemplate::new(table, program)?;
                let mini = match &made {
                    Some(t) => t.mini_of(program),
                    None => assemble()?,
                };
                templates.insert(key, Template::Made(made));
                mini
            }
            Some(Template::Made(Some(t))) => t.mini_of(program),
            Some(Template::Made(None)) => assemble()?,
        };
        drop(templates);
        let at = self.alloc_code(ci, &mini.bytes)?;
        let feeds = program
            .iter()
            .any(|g| matches!(g.primitive, Primitive::Feed(_)));
        Ok(PlacedMini {
            at,
            made_calls: mini.made_calls.iter().map(|off| at + off).collect(),
            own_calls: match feeds {
                true => weft_patch::mini::system_calls_in(at, &mini.bytes),
                false => Vec::new(),
            },
        })
    }

    /// Where the thread table and the ring-mode words are, as cluster `ci`'s
    /// code sees them.
    pub(super) fn thread_table(&self, ci: usize) -> ThreadTable {
        let c = self.clusters[ci];
        ThreadTable {
            addr: c.data + self.layout.header.threads_offset,
            slots: self.layout.header.thread_slots,
            ring_wait_until: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::RING_WAIT_UNTIL,
            ring_overwrite: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::RING_OVERWRITE,
            ring_data: self.layout.header.ring_data,
            no_slot: c.data + self.layout.header.sync_offset + weft_patch::region::sync::NO_SLOT,
            dispatch: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::DISPATCH_START,
            return_stacks: c.data
                + self.layout.header.sync_offset
                + weft_patch::region::sync::RETURN_STACKS,
            clock_gettime: self.clock_gettime,
            tid_offset: self.tid_offset.unwrap_or(0),
            startup: self.startup_view(ci),
            vclock: self.cpu_clock_view(),
            lanes: self.lanes(),
        }
    }

    /// The counters' lanes, spread by the CPU source found at the first
    /// `apply` (none before).
    pub(super) fn lanes(&self) -> weft_patch::lanes::Lanes {
        weft_patch::lanes::Lanes {
            source: self
                .cpu_source
                .unwrap_or(weft_patch::lanes::CpuSource::None),
            count: self.layout.header.counter_lanes,
            stride: self.layout.header.counter_lane_bytes,
        }
    }

    /// Where generated code learns its CPU: the rseq area the C library
    /// registered (`__rseq_offset`, with `__rseq_size` non-zero once it
    /// registered), else `rdpid` where the processor has it, else nowhere.
    pub(super) fn find_cpu_source(&self, tracee: &Tracee) -> weft_patch::lanes::CpuSource {
        use weft_patch::lanes::CpuSource;
        // glibc defines the two in ld.so (in the program itself when it
        // is static): looked up there first, since reading a module's
        // symbols takes a while and the process is stopped.
        let mut modules: Vec<&crate::module::Module> = self.modules.iter().map(|m| &**m).collect();
        modules.sort_by_key(|m| !m.name.starts_with("ld-"));
        for m in modules {
            let (Some(offset), Some(size)) = (
                m.image.symbol_address("__rseq_offset"),
                m.image.symbol_address("__rseq_size"),
            ) else {
                continue;
            };
            let mem = tracee.memory();
            let (Ok(offset), Ok(size)) = (
                mem.read_u64(m.runtime(offset)),
                mem.read_vec(m.runtime(size), 4),
            ) else {
                continue;
            };
            let registered = u32::from_le_bytes(size.try_into().unwrap_or([0; 4])) > 0;
            if let (true, Ok(offset)) = (registered, i32::try_from(offset as i64)) {
                if offset.checked_add(4).is_some() {
                    return CpuSource::Rseq { offset };
                }
            }
            // The one C library of the process defines them: not
            // registered (yet), there is no other to look in.
            break;
        }
        if weft_process::cpu_flags().iter().any(|f| f == "rdpid") {
            CpuSource::Rdpid
        } else {
            CpuSource::None
        }
    }

    /// The address, in code memory of cluster `ci`, of a word holding
    /// `counter` (a counter's first lane in that cluster's view), which
    /// inline counting adds its lane offset to; 0 when threads are not
    /// spread over lanes, which needs none.
    pub(super) fn lane_literal(&mut self, ci: usize, counter: u64) -> Result<u64> {
        if !self.lanes().spread() {
            return Ok(0);
        }
        if let Some(&at) = self.lane_literals.get(&(ci, counter)) {
            return Ok(at);
        }
        let at = self.alloc_code(ci, &counter.to_le_bytes())?;
        self.lane_literals.insert((ci, counter), at);
        Ok(at)
    }
}

/// Clears each stopped thread's `rseq_cs` that still points at a critical
/// section weft's copies armed (see `weft_paths::rebuild::Rseq`): the
/// kernel reads it at the thread's next preemption or signal, and a
/// descriptor in unmapped memory would get the thread killed.
pub(super) fn disarm_restartable_sequences(tracee: &mut Tracee, code: &[(u64, u64)]) -> Result<()> {
    /// `rseq_cs` in the kernel's `struct rseq`.
    const CS_FIELD: u64 = 8;
    for tid in tracee.threads() {
        let Ok(config) = tracee.rseq(tid) else {
            continue;
        };
        if config.area == 0 {
            continue;
        }
        let field = RemoteAddr(config.area + CS_FIELD);
        let mut word = [0u8; 8];
        tracee.memory().read(field, &mut word)?;
        let armed = u64::from_le_bytes(word);
        if code
            .iter()
            .any(|&(start, end)| (start..end).contains(&armed))
        {
            tracee.memory().write(field, &0u64.to_le_bytes())?;
        }
    }
    Ok(())
}
