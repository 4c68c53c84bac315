//! A forked child's own session. After `fork` the child has a private copy
//! of the program (with weft's splices in it) but shares weft's region
//! with its parent, since the region is mapped shared: its counts would be
//! added to the parent's. Before the child runs its first instruction,
//! weft gives it a region of its own at the same addresses (trampolines
//! reach their data RIP-relative): a new file with the parent's code, trap
//! table, journal and sync page, counters zeroed, and the forking thread's
//! block alone in the thread table, since the child's one thread is that
//! thread's copy. The child's session is the parent's, with the new file.

use super::*;
use weft_abi::mman;
use weft_patch::region::sync;
use weft_plan::Primitive;

impl Session {
    /// The session of `tracee`, a child this session's process forked,
    /// stopped before its first instruction; its copy of weft's memory is
    /// replaced by one of its own (see the module's comment). `cpu_entry`
    /// is the child's entry in the CPU clock, if weft claimed one for it
    /// (`weft_vclock::VirtualClock::claim`): CPU timers running at the
    /// fork then go on in the child from its first instruction.
    /// `thread` is the parent's thread that forked.
    pub fn fork_child(
        &self,
        tracee: &mut Tracee,
        thread: i32,
        cpu_entry: Option<u64>,
    ) -> Result<Session> {
        let child = tracee.pid();
        let (uid, gid) = weft_process::process_ids(child)?;
        let shm = self.shm.create_like(uid, gid)?;
        let header = &self.layout.header;
        // Header; then, past the counters, the trap table, journal,
        // scratch, sync page and the thread table's keys.
        shm.copy_data_from(&self.shm, 0..header.counters_offset)?;
        shm.copy_data_from(
            &self.shm,
            header.trap_offset..header.threads_offset + header.thread_slots * 8,
        )?;
        for c in &self.clusters {
            shm.copy_data_from(&self.shm, c.code_offset..c.code_offset + c.used)?;
            shm.copy_data_from(&self.shm, self.unwind_table(c))?;
        }
        super::journal::stamp_owner(&shm, &self.layout, child);
        shm.store_u64(header.sync_offset + sync::NO_SLOT, 0);
        // The child's signal actions are its own from now on.
        shm.store_u64(header.sync_offset + sync::SIGNAL_OWNER, child as u64);
        self.keep_forking_thread(&shm, tracee, thread, cpu_entry)?;
        // Re-execution's feed is mapped shared, so the child has it at the
        // same address: it goes on following it.
        if let Some((base, _)) = self.given.feed {
            let at = self.layout.counter_lane(base, 0);
            shm.store_u64(at, self.shm.load_u64(at));
        }

        let mut session = Session {
            pid: child,
            shm,
            layout: self.layout,
            modules: self.modules.clone(),
            clusters: self.clusters.clone(),
            probes: self.probes.clone(),
            sites: self.sites.clone(),
            site_at: self.site_at.clone(),
            spans: self.spans.clone(),
            probe_keys: self.probe_keys.clone(),
            loads_acked: self.loads_acked,
            given: self.given.clone(),
            trap: self.trap,
            kept_actions: self.kept_actions.clone(),
            clock_gettime: self.clock_gettime,
            rich: self.rich.clone(),
            semaphores: self.semaphores.clone(),
            tid_offset: self.tid_offset,
            cpu_source: self.cpu_source,
            lane_literals: self.lane_literals.clone(),
            force_int3: self.force_int3,
            looked_for_leftovers: true,
            returns: self.returns.clone(),
            cpu_clock: match &self.cpu_clock {
                Some(c) => Some(c.copy()?),
                None => None,
            },
            part_of_workload: self.part_of_workload,
            rebuilt_at: self.rebuilt_at.clone(),
            linked_text: self.linked_text.clone(),
            startup: self.startup.clone(),
            dispatch: self.dispatch.clone(),
            settle_pending: None,
            fde_finders_tried: self.fde_finders_tried.clone(),
        };
        session.map_own_region(tracee)?;
        Ok(session)
    }

    /// Writes into `shm` the block of the thread that forked (the one whose
    /// thread pointer the child's thread has), if it has one, as the
    /// child's: its tid, its CPU clock entry (`cpu_entry`, else none yet:
    /// the thread claims one at its first CPU timer), timers with no time
    /// yet. Timers running at the fork stay running, as the calls they
    /// time continue in the child: a wall timer from its start in the
    /// parent, a CPU timer from the child's first instruction (its entry
    /// counts from zero). The block is read when weft handles the fork,
    /// while the parent runs on: a timer the parent started or stopped in
    /// between is taken as it is then.
    fn keep_forking_thread(
        &self,
        shm: &SharedMemory,
        tracee: &Tracee,
        thread: i32,
        cpu_entry: Option<u64>,
    ) -> Result<()> {
        let header = &self.layout.header;
        let pointer = tracee.registers(tracee.pid())?.fs_base;
        let keys = header.threads_offset;
        // The slot of that thread pointer and that thread: a finished
        // thread's slot may have the same pointer (glibc reuses thread
        // control blocks).
        let mine = (0..header.thread_slots).find(|&slot| {
            pointer != 0
                && self.shm.load_u64(keys + slot * 8) == pointer
                && self
                    .shm
                    .load_u64(self.layout.thread_block(slot) + threads::TID)
                    == thread as u64
        });
        // The others are the parent's threads': retired, not free, so that
        // probing from the child's thread pointer still reaches its slot.
        for slot in 0..header.thread_slots {
            let key = match self.shm.load_u64(keys + slot * 8) {
                _ if Some(slot) == mine => pointer,
                threads::FREE => threads::FREE,
                _ => threads::RETIRED,
            };
            shm.store_u64(keys + slot * 8, key);
        }
        let Some(slot) = mine else {
            return Ok(());
        };
        let block = self.layout.thread_block(slot);
        shm.copy_data_from(&self.shm, block..block + threads::RING)?;
        shm.store_u64(block + threads::TID, tracee.pid() as u64);
        // Copied while the parent runs on: a record it was writing then is
        // none of the child's, whose records would all be dropped as
        // begun inside it.
        shm.store_u64(block + threads::WRITING, 0);
        // So is a call it keeps open now (the `wait4` after its `fork`):
        // the child would find it left and record it as its own. Calls a
        // thread keeps open across a `fork` (one a handler that forks
        // interrupted) are not told from those, and are forgotten.
        shm.store_u64(block + threads::OPEN_DEPTH, 0);
        let entry = self
            .cpu_clock
            .as_ref()
            .and_then(|c| c.entry_address(cpu_entry?));
        shm.store_u64(block + threads::VCLOCK, entry.unwrap_or(0));
        let cpu_timers = self.cpu_timers();
        for t in 0..threads::TIMERS {
            let at = block + threads::timer(t);
            // Copied while the parent runs on: one it was updating reads
            // as settled in the child.
            let seq = shm.load_u64(at + threads::TIMER_SEQ);
            shm.store_u64(at + threads::TIMER_SEQ, seq + seq % 2);
            shm.store_u64(at + threads::TIMER_TOTAL, 0);
            if cpu_timers.contains(&t) {
                shm.store_u64(at + threads::TIMER_START, 0);
            }
        }
        // The system call capture's user-time timer: the child resumes
        // inside the call that made it, where the timer is stopped, and its
        // return starts it. The parent's count now may be another (it has
        // returned and runs on): the child's user time never grew.
        if let Some(t) = self.given.user_timer {
            let at = block + threads::timer(t);
            shm.store_u64(at + threads::TIMER_COUNT, 0);
            shm.store_u64(at + threads::TIMER_START, 0);
        }
        Ok(())
    }

    /// The timers the session's probes run on the CPU clock.
    fn cpu_timers(&self) -> Vec<u64> {
        let mut out = Vec::new();
        for p in &self.probes {
            if let Action::Program(program) = &p.action {
                for g in program {
                    if let Primitive::StartCpuTimer(t)
                    | Primitive::StopCpuTimer(t)
                    | Primitive::ResumeCpuTimer(t)
                    | Primitive::PauseCpuTimer(t) = g.primitive
                    {
                        out.push(t);
                    }
                }
            }
        }
        out
    }

    /// Maps this session's file over every cluster the child inherited.
    fn map_own_region(&mut self, tracee: &mut Tracee) -> Result<()> {
        self.place_call_area(tracee);
        let mut path = self.shm.target_path().as_bytes().to_vec();
        path.push(0);
        let fd = clusters::open_through_page(tracee, &path)?;
        let mapped = (|| -> Result<()> {
            for c in self.clusters.iter().filter(|c| c.mapped) {
                tracee.remote_mmap_over(
                    RemoteAddr(c.data),
                    self.layout.size,
                    mman::PROT_READ | mman::PROT_WRITE,
                    mman::MAP_SHARED,
                    fd,
                    0,
                )?;
                tracee.remote_mmap_over(
                    RemoteAddr(c.code),
                    CODE_AREA,
                    mman::PROT_READ | mman::PROT_EXEC,
                    mman::MAP_SHARED,
                    fd,
                    c.code_offset,
                )?;
            }
            Ok(())
        })();
        tracee.remote_close(fd)?;
        mapped
    }
}
