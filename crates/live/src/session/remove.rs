//! Removal: probes taken out again, every splice restored through one
//! [`Session::take_out`], whether the whole session ends or one request's
//! probes go while the rest stay.

use super::apply::SiteError;
use super::*;

impl Session {
    /// Removes every splice, restoring the original bytes, and takes weft's
    /// memory out of the target when no thread can still be using it.
    /// Returns what was left behind, if anything, for the user to know.
    pub fn remove_all(&mut self, tracee: &mut Tracee) -> Result<Vec<String>> {
        self.adopt(tracee)?;
        let mut notes = Vec::new();
        let mut removed_traps = Vec::new();
        self.release_all_loaders();
        self.disable_event_sites(tracee)?;
        // Out of the journal before lowered (see `raise_semaphores`).
        let semaphores = std::mem::take(&mut self.semaphores);
        self.write_journal();
        for addr in semaphores {
            match add_to_semaphore(tracee, addr, -1) {
                Ok(()) => {}
                Err(Error::Process(e)) if e.is_gone() => return Err(Error::Process(e)),
                // A library unloaded since: nothing to lower.
                Err(_) => {}
            }
        }
        self.restore_rebuilt(tracee)?;
        let mut text = TextBatch::new(self.pid)?;
        let mut splices = Vec::new();
        let mut taken = Vec::new();
        for s in 0..self.sites.len() {
            // The unwinder's hook goes with weft's memory (`unmap_clusters`):
            // a thread still waiting in weft's code unwinds through it. (An
            // `int3` needs the trap handler, which goes first.)
            let kept = self.sites[s].hook == Some(Hook::FindFde)
                && self.sites[s].choice.method != SpliceMethod::Trap;
            if self.sites[s].active && !kept {
                self.take_out(tracee, &mut text, s, &mut notes, &mut splices)?;
                taken.push(s);
                if self.sites[s].choice.method == SpliceMethod::Trap {
                    removed_traps.push(self.sites[s].choice.point);
                }
            }
        }
        // The table still sends every site to its trampoline while the
        // original bytes go back in phases; only then are the sites gone.
        text.poke_in_phases(tracee.memory(), &splices)?;
        for s in taken {
            self.forget_site(s);
        }
        self.site_at.clear();
        self.spans.clear();
        self.write_trap_table();
        if self.trap.is_some_and(|t| t.installed) {
            if self.drain_removed_traps(tracee, &removed_traps)? {
                notes.push(
                    "a SIGTRAP is still queued: weft's handler stays installed to absorb it".into(),
                );
            } else {
                self.uninstall_trap_handler(tracee)?;
            }
        }
        // No call is hooked any more: frames hooked before return straight
        // to their callers.
        self.disarm_returns(tracee)?;
        self.unmap_clusters(tracee, &mut notes)?;
        self.unmap_return_stacks(tracee)?;
        self.unmap_cpu_clock(tracee)?;
        self.mark_left_behind();
        Ok(notes)
    }

    /// Removes every live probe with `tag` from the stopped process. Sites
    /// left without probes get their original bytes back; the others are
    /// rebuilt without the removed probes. Trampolines stay mapped (a
    /// thread may still be inside one); their space is not reused. Returns
    /// how many probes were removed.
    pub fn remove_tagged(&mut self, tracee: &mut Tracee, tag: u64) -> Result<usize> {
        self.adopt(tracee)?;
        let mut gone: Vec<usize> = self
            .probes
            .iter()
            .enumerate()
            .filter(|(_, p)| p.live && p.tag == tag && p.hook.is_none())
            .map(|(i, _)| i)
            .collect();
        if gone.is_empty() {
            return Ok(0);
        }
        let removed = gone.len();
        for &p in &gone {
            self.probes[p].live = false;
        }
        // A function's return stays hooked while an exit probe needs it;
        // its exit routine keeps only the live ones.
        let mut rebuild = Vec::new();
        for h in 0..self.returns.hooks.len() {
            let hook = &self.returns.hooks[h];
            if !hook.exits.iter().any(|p| gone.contains(p)) {
                continue;
            }
            rebuild.push(h);
            if hook.exits.iter().all(|&p| !self.probes[p].live) {
                if let Some(e) = self.returns.hooks[h].entry_probe.take() {
                    self.probes[e].live = false;
                    gone.push(e);
                }
            }
        }
        for h in rebuild {
            self.rebuild_exit_routine(h)?;
        }
        let mut text = TextBatch::new(self.pid)?;
        let mut rebuilt = Vec::new();
        let mut removed_traps = Vec::new();
        let mut splices = Vec::new();
        let mut taken = Vec::new();
        for s in 0..self.sites.len() {
            let site = &mut self.sites[s];
            if !site.active
                || site.hook.is_some()
                || !site
                    .points
                    .iter()
                    .any(|sp| sp.probes.iter().any(|p| gone.contains(p)))
            {
                continue;
            }
            for sp in site.points.iter_mut() {
                sp.probes.retain(|p| !gone.contains(p));
            }
            let emptied: Vec<u64> = site
                .points
                .iter()
                .filter(|sp| sp.probes.is_empty())
                .map(|sp| sp.point)
                .collect();
            site.points.retain(|sp| !sp.probes.is_empty());
            for point in emptied {
                if !site.points.iter().any(|sp| sp.point == point) {
                    self.site_at.remove(&point);
                }
            }
            if site.points.is_empty() {
                // Nothing left here: put the original bytes back.
                let mut notes = Vec::new();
                self.take_out(tracee, &mut text, s, &mut notes, &mut splices)?;
                taken.push(s);
                if self.sites[s].choice.method == SpliceMethod::Trap {
                    removed_traps.push(self.sites[s].choice.point);
                }
            } else {
                rebuilt.push(s);
            }
        }
        for s in rebuilt {
            match self.build_site(tracee, &mut text, s) {
                Ok(()) => {
                    let site = &self.sites[s];
                    for r in site.record.iter().chain(site.board.iter()) {
                        splices.push(Splice {
                            addr: r.addr,
                            bytes: r.new.clone(),
                            paired: site.board.is_some(),
                        });
                    }
                }
                Err(SiteError::Fatal(e)) => return Err(e),
                Err(SiteError::Skip(why)) => return Err(Error::Rebuild(why)),
            }
        }
        // Rebuilt sites lead to their new trampolines, sites being taken
        // out still to their old ones, while the bytes change in phases.
        self.write_trap_table();
        text.poke_in_phases(tracee.memory(), &splices)?;
        for s in taken {
            self.forget_site(s);
        }
        self.write_trap_table();
        self.rewind_removed_traps(tracee, &removed_traps)?;
        Ok(removed)
    }

    /// The edits that put the original bytes of site `s` back (its splice,
    /// then its springboard), added to `splices` for
    /// [`TextBatch::poke_in_phases`], unless the bytes changed since weft
    /// wrote them. What cannot be restored is said in `notes`. The site
    /// stays active (its trap table entry with it) until [`Session::forget_site`].
    pub(super) fn take_out(
        &self,
        tracee: &Tracee,
        text: &mut TextBatch,
        s: usize,
        notes: &mut Vec<String>,
        splices: &mut Vec<Splice>,
    ) -> Result<()> {
        let mem = tracee.memory();
        let site = &self.sites[s];
        for r in site.record.iter().chain(site.board.iter()) {
            match text.read(mem, r.addr, r.new.len()) {
                Ok(bytes) if bytes == r.old => {}
                // weft's bytes, or a mix of them and the original ones that
                // an episode cut short left (the int3 first): all go back.
                Ok(bytes) if part_written(&bytes, &r.old, &r.new) => splices.push(Splice {
                    addr: r.addr,
                    bytes: r.old.clone(),
                    paired: site.board.is_some(),
                }),
                Ok(_) => notes.push(format!(
                    "code at {:#x} changed since weft spliced it; left as it is",
                    r.addr
                )),
                Err(Error::Process(e)) if e.is_gone() => return Err(Error::Process(e)),
                Err(_) => notes.push(format!(
                    "code at {:#x} is no longer mapped (library unloaded?)",
                    r.addr
                )),
            }
        }
        Ok(())
    }

    /// Site `s` is out of the code: it no longer claims its bytes, and the
    /// next trap table lists it as removed.
    pub(super) fn forget_site(&mut self, s: usize) {
        self.sites[s].active = false;
        self.site_at.retain(|_, v| *v != s);
        self.spans.retain(|_, (_, v)| *v != s);
    }
}

/// Whether `bytes` are what a phased write between `old` and `new` (either
/// way, int3 first) can leave: each byte is its old or its new value, the
/// first byte possibly an int3.
pub(super) fn part_written(bytes: &[u8], old: &[u8], new: &[u8]) -> bool {
    bytes.len() == old.len()
        && bytes.len() == new.len()
        && bytes
            .iter()
            .enumerate()
            .all(|(i, &b)| b == old[i] || b == new[i] || (i == 0 && b == 0xcc))
}

#[cfg(test)]
mod tests {
    use super::part_written;

    #[test]
    fn a_splice_cut_short_in_any_phase_is_recognised() {
        let old = [0x55, 0x48, 0x89, 0xe5, 0x53];
        let new = [0xe9, 0x10, 0x20, 0x30, 0x40];
        assert!(part_written(&new, &old, &new));
        assert!(part_written(&[0xcc, 0x48, 0x89, 0xe5, 0x53], &old, &new));
        assert!(part_written(&[0xcc, 0x10, 0x20, 0x30, 0x40], &old, &new));
        assert!(part_written(&[0x55, 0x10, 0x89, 0xe5, 0x53], &old, &new));
        // Someone else's bytes are not weft's to overwrite.
        assert!(!part_written(&[0x90, 0x48, 0x89, 0xe5, 0x53], &old, &new));
        assert!(!part_written(&[0xcc, 0x48], &old, &new));
    }
}
