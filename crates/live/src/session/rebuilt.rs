//! Functions an instrument lays out again (`Action::Rebuild`): the copy is
//! placed in the code area of the function's cluster, and 5-byte jumps
//! written into the original send its entry (and its calls' return
//! addresses) into the copy. Also the generic means such an instrument
//! needs in the process: a file of its own mapped with guard pages, code
//! of its own, and a signal action.

use super::apply::SiteError;
use super::prepare::PreparedProbe;
use super::*;
use iced_x86::{FlowControl, Mnemonic};
use std::collections::HashMap;
use std::sync::Arc;
use weft_abi::mman;
use weft_code::{BranchTargets, FunctionCode};
use weft_plan::{NotRebuilt, Rebuilding, RebuiltCode};

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
        // What each function's layout needs, in the order applied.
        let mut jobs = Vec::new();
        let mut plt_callees: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
        for item in &items {
            let Action::Rebuild(rebuild) = &item.action else {
                continue;
            };
            let Some(part) = item.parts.first() else {
                continue;
            };
            let code = &part.code;
            let module = self.modules[item.module].clone();
            if self.rebuilt_at.contains_key(&code.start()) {
                continue;
            }
            if let Some(pc) = pcs.iter().find(|&&pc| pc > code.start() && pc < code.end()) {
                report.skipped.push(SkippedPoint {
                    module: module.name.clone(),
                    function: item.display.clone(),
                    why: SkipReason::Rebuild(format!(
                        "a thread is inside it (at {pc:#x}); weft traces a function from a \
                         call made after it is in place"
                    )),
                });
                continue;
            }
            let ci = self.ensure_cluster(tracee, item.module)?;
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
            plt_callees
                .entry(item.module)
                .or_insert_with(|| own_plt_callees(&self.modules, item.module));
            jobs.push(Job {
                rebuild,
                code,
                display: &item.display,
                module_index: item.module,
                pads: module.landing_pads_in(code),
                entry_room: self.entry_room(code, &part.after_end, targets),
                module,
                ci,
                outside,
                inside,
            });
        }
        let laid = self.lay_out(&jobs, &plt_callees);
        // Per instrument, the entries of the functions it laid out here.
        let mut placed: Vec<(Arc<dyn weft_plan::Rebuild>, Vec<u64>)> = Vec::new();
        for (job, result) in jobs.iter().zip(laid) {
            let skip = |why: SkipReason| SkippedPoint {
                module: job.module.name.clone(),
                function: job.display.to_string(),
                why,
            };
            let (at, built) = match result {
                Ok(b) => b,
                Err(NotRebuilt::Refused(why)) => {
                    report.skipped.push(skip(SkipReason::Rebuild(why)));
                    continue;
                }
                Err(NotRebuilt::NoRoom { .. }) => {
                    // Traced what fits; the rest of the module runs as it is.
                    report.skipped.push(skip(SkipReason::Rebuild(format!(
                        "weft's code area near {} is full ({} MiB of laid-out functions)",
                        job.module.name,
                        super::unwind::CODE_BYTES >> 20
                    ))));
                    continue;
                }
            };
            match self.write_rebuilt(tracee, &mut text, &job.module, job.ci, at, &built) {
                Ok(replaced) => {
                    self.rebuilt_at
                        .insert(job.code.start(), RebuiltFunction { replaced });
                    report.probes += 1;
                    report.jumps += built.jumps.len();
                    match placed.iter_mut().find(|(r, _)| Arc::ptr_eq(r, job.rebuild)) {
                        Some((_, starts)) => starts.push(job.code.start()),
                        None => placed.push((job.rebuild.clone(), vec![job.code.start()])),
                    }
                }
                Err(SiteError::Skip(why)) => report.skipped.push(skip(why)),
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

    /// Lays out `jobs`, each cluster's in shards that a few threads take
    /// in turn, each shard in a region of the cluster of its own: the
    /// address of each copy, and its bytes, in the jobs' order. A shard's
    /// region is as large as its functions' [`Job::budget`]; a copy that
    /// does not fit its shard's region is laid out again after the last
    /// one. Advances each cluster's `used` past what it holds.
    fn lay_out(
        &mut self,
        jobs: &[Job<'_>],
        plt_callees: &HashMap<usize, Vec<(u64, u64)>>,
    ) -> Vec<Placed> {
        let pid = self.pid;
        let mut laid: Vec<Option<Placed>> = (0..jobs.len()).map(|_| None).collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let clusters: std::collections::BTreeSet<usize> = jobs.iter().map(|j| j.ci).collect();
        for ci in clusters {
            let mine: Vec<usize> = (0..jobs.len()).filter(|&k| jobs[k].ci == ci).collect();
            let (code, used) = (self.clusters[ci].code, self.clusters[ci].used);
            let end = code + super::unwind::CODE_BYTES;
            let start = code + used;
            let budget: u64 = mine.iter().map(|&k| jobs[k].budget()).sum();
            let shards = if threads > 1 && mine.len() >= MIN_SHARD * 2 && budget < end - start {
                let pieces = (mine.len() / MIN_SHARD).clamp(threads, SHARDS_PER_THREAD * threads);
                shards(jobs, &mine, pieces, start, end)
            } else {
                vec![Shard {
                    jobs: mine.clone(),
                    start,
                    limit: end,
                }]
            };
            // The threads take shards in turn, the largest first: a shard's
            // work follows its code, not its budget, so each thread takes
            // the next one when it is done with its own.
            let mut order: Vec<usize> = (0..shards.len()).collect();
            order.sort_by_key(|&k| {
                std::cmp::Reverse(
                    shards[k]
                        .jobs
                        .iter()
                        .map(|&j| jobs[j].budget())
                        .sum::<u64>(),
                )
            });
            let next_shard = std::sync::atomic::AtomicUsize::new(0);
            let mut done: Vec<Option<ShardDone>> = std::thread::scope(|s| {
                let running: Vec<_> = (0..threads.min(shards.len()))
                    .map(|_| {
                        s.spawn(|| {
                            let mut mine = Vec::new();
                            loop {
                                let k =
                                    next_shard.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                let Some(&shard) = order.get(k) else {
                                    return mine;
                                };
                                mine.push((shard, shards[shard].lay_out(jobs, plt_callees, pid)));
                            }
                        })
                    })
                    .collect();
                let mut done: Vec<Option<ShardDone>> = shards.iter().map(|_| None).collect();
                for h in running {
                    // A thread that panicked leaves its shards undone:
                    // laid out again below, after the last one.
                    for (k, d) in h.join().unwrap_or_default() {
                        done[k] = Some(d);
                    }
                }
                done
            });
            let done: Vec<ShardDone> = done
                .iter_mut()
                .zip(&shards)
                .map(|(d, shard)| {
                    d.take().unwrap_or_else(|| ShardDone {
                        laid: Vec::new(),
                        again: shard.jobs.clone(),
                        next: shard.start,
                    })
                })
                .collect();
            let mut next = start;
            let mut again = Vec::new();
            for d in done {
                next = next.max(d.next);
                again.extend(d.again);
                for (k, r) in d.laid {
                    laid[k] = Some(r);
                }
            }
            // What did not fit its shard's region, after the last one.
            again.sort_unstable();
            let tail = Shard {
                jobs: again,
                start: next,
                limit: end,
            }
            .lay_out(jobs, plt_callees, pid);
            for (k, r) in tail.laid {
                laid[k] = Some(r);
            }
            for k in tail.again {
                laid[k] = Some(Err(NotRebuilt::NoRoom { needs: 0 }));
            }
            self.clusters[ci].used = tail.next.max(next) - code;
        }
        laid.into_iter()
            .map(|r| r.unwrap_or(Err(NotRebuilt::Refused("not laid out".into()))))
            .collect()
    }

    /// Bytes from `code`'s entry that a jump there may cover (see
    /// [`weft_plan::Rebuilding::entry_room`]): past a short function's
    /// end, the padding in `after_end` that no branch reaches and no
    /// springboard holds, when its last instruction does not fall into it.
    fn entry_room(&self, code: &FunctionCode, after_end: &[u8], targets: &BranchTargets) -> u64 {
        let own = code.end() - code.start();
        let want = code.start() + weft_patch::JMP_LEN;
        let leaves = code.instructions().last().is_some_and(|i| {
            matches!(
                i.flow_control(),
                FlowControl::Return
                    | FlowControl::UnconditionalBranch
                    | FlowControl::IndirectBranch
            )
        });
        if own >= weft_patch::JMP_LEN || !leaves {
            return own;
        }
        let mut end = code.end();
        for i in weft_code::decode_all(code.end(), after_end) {
            if end >= want
                || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
                || targets.contains(i.ip())
            {
                break;
            }
            end = i.next_ip();
        }
        if self.overlaps_active(code.end(), end) {
            return own;
        }
        end - code.start()
    }

    /// Whether a jump written for a rebuilt function covers a byte of
    /// `[start, end)` (a short function's jump runs into the padding
    /// after it, where a springboard could otherwise go).
    pub(super) fn rebuilt_covers(&self, start: u64, end: u64) -> bool {
        self.rebuilt_at
            .range(..end)
            .flat_map(|(_, f)| &f.replaced)
            .any(|&(at, _)| at < end && at + weft_patch::JMP_LEN > start)
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
            None => {
                let was = text.read(tracee.memory(), addr, bytes.len())?;
                self.linked_text.push((addr, was));
                text.write(tracee.memory(), addr, bytes)
            }
        }
    }

    /// Places a copy at `at` (in cluster `ci`, laid out by
    /// [`Session::lay_out`]) and writes its jumps; returns what they
    /// replaced.
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
        let c = &self.clusters[ci];
        self.shm.write(c.code_offset + (at - c.code), &built.bytes);
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
        // Linking's writes first, the last first: some lie inside the jumps
        // put back next.
        for (addr, was) in std::mem::take(&mut self.linked_text).into_iter().rev() {
            text.write(tracee.memory(), addr, &was)?;
        }
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

/// A copy placed at an address, or why there is none.
type Placed = Result<(u64, RebuiltCode), NotRebuilt>;

/// Fewest functions a shard lays out (fewer, and one thread does all).
const MIN_SHARD: usize = 32;

/// Shards a thread's share of a batch is cut into, for the threads to
/// take in turn (see [`Session::lay_out`]).
const SHARDS_PER_THREAD: usize = 4;

/// A function to lay out, with what its layout needs (see
/// [`Session::apply_rebuilds`]).
struct Job<'a> {
    rebuild: &'a Arc<dyn weft_plan::Rebuild>,
    code: &'a FunctionCode,
    display: &'a str,
    module_index: usize,
    module: Arc<Module>,
    ci: usize,
    outside: Vec<u64>,
    inside: Vec<u64>,
    pads: Vec<(u64, u64)>,
    entry_room: u64,
}

impl Job<'_> {
    /// Bytes the copy is given in a shard's region: more than most copies
    /// take. python3.11's take 4.8 times their code on average (up to 12
    /// times, with a witness store every few instructions, which the
    /// slack of the others in the shard then holds); each case of a
    /// `switch` adds its stub (a restore, a store, its restartable
    /// sequence's descriptor) and its step in the search, up to 161 bytes
    /// (`_PyEval_EvalFrameDefault`: 55,644 bytes of code, 50,017 cases
    /// over its computed `goto`s, an 8 MB copy). A copy larger than what
    /// is left of its shard's region is laid out again after the shards.
    fn budget(&self) -> u64 {
        let cases: u64 = self
            .code
            .jump_tables()
            .iter()
            .map(|t| (t.targets.len() + t.outside.len()) as u64)
            .sum();
        (8 * (self.code.end() - self.code.start()) + 176 * cases + 512).next_multiple_of(16)
    }
}

/// Functions laid out one after another from `start`, below `limit`.
struct Shard {
    jobs: Vec<usize>,
    start: u64,
    limit: u64,
}

/// What a shard laid out: (job, address and copy, or why none); the jobs
/// that did not fit; and the first free byte after its copies.
struct ShardDone {
    laid: Vec<(usize, Placed)>,
    again: Vec<usize>,
    next: u64,
}

impl Shard {
    fn lay_out(
        &self,
        jobs: &[Job<'_>],
        plt_callees: &HashMap<usize, Vec<(u64, u64)>>,
        pid: i32,
    ) -> ShardDone {
        let mut at = self.start;
        let mut done = ShardDone {
            laid: Vec::with_capacity(self.jobs.len()),
            again: Vec::new(),
            next: self.start,
        };
        for &k in &self.jobs {
            let j = &jobs[k];
            let plt = plt_callees
                .get(&j.module_index)
                .map_or(&[][..], Vec::as_slice);
            let r = j.rebuild.rebuild(&Rebuilding {
                module: &j.module.name,
                path: &j.module.path,
                function: j.display,
                code: j.code,
                bias: j.module.bias,
                entered_from_outside: &j.outside,
                branch_targets: &j.inside,
                landing_pads: &j.pads,
                at,
                image: &j.module.image,
                pid,
                plt_callees: plt,
                room: self.limit.saturating_sub(at),
                entry_room: j.entry_room,
            });
            match r {
                Ok(built) => {
                    let here = at;
                    at = (at + built.bytes.len() as u64).next_multiple_of(16);
                    done.laid.push((k, Ok((here, built))));
                }
                Err(NotRebuilt::NoRoom { .. }) => done.again.push(k),
                Err(why) => done.laid.push((k, Err(why))),
            }
        }
        done.next = at;
        done
    }
}

/// `mine` (jobs of one cluster, in order) cut into `pieces` runs of
/// about equal budget, each with a region from `start` on as large as its
/// budget (the last one's up to `end`).
fn shards(jobs: &[Job<'_>], mine: &[usize], pieces: usize, start: u64, end: u64) -> Vec<Shard> {
    let total: u64 = mine.iter().map(|&k| jobs[k].budget()).sum();
    let share = total.div_ceil(pieces as u64);
    let mut out: Vec<Shard> = Vec::new();
    let mut current = Vec::new();
    let mut size = 0;
    let mut at = start;
    for &k in mine {
        current.push(k);
        size += jobs[k].budget();
        if size >= share && out.len() + 1 < pieces {
            out.push(Shard {
                jobs: std::mem::take(&mut current),
                start: at,
                limit: at + size,
            });
            at += size;
            size = 0;
        }
    }
    out.push(Shard {
        jobs: current,
        start: at,
        limit: end,
    });
    out
}
