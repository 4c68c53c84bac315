//! Re-execution's feed (`weft_abi::feed`) in the target: the file
//! `weft syscalls reexec` builds, mapped shared into the process, and its
//! address in the counter the feed probes read it from.

use super::*;
use std::os::unix::ffi::OsStrExt;
use weft_abi::mman;

impl Session {
    /// Maps the feed file at `path` (`len` bytes) shared into the process
    /// and gives its address to the feed probes; `None` when no probe of
    /// this session asked for the feed (nothing is mapped).
    pub fn map_feed(
        &mut self,
        tracee: &mut Tracee,
        path: &std::path::Path,
        len: u64,
    ) -> Result<Option<u64>> {
        let Some((base, _)) = self.given.feed else {
            return Ok(None);
        };
        let mut name = path.as_os_str().as_bytes().to_vec();
        name.push(0);
        let fd = clusters::open_through_page(tracee, &name)?;
        let mapped = tracee.remote_mmap_far(
            len,
            mman::PROT_READ | mman::PROT_WRITE,
            mman::MAP_SHARED,
            fd,
            0,
        );
        tracee.remote_close(fd)?;
        let addr = mapped?.0;
        self.shm.store_u64(self.layout.counter_lane(base, 0), addr);
        Ok(Some(addr))
    }
}
