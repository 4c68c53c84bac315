//! The auxiliary vector (`/proc/PID/auxv`): entry point, program headers,
//! base of the interpreter, the vDSO.

use crate::{proc_path, Error, Result};
use weft_abi::auxv::{AT_BASE, AT_ENTRY, AT_EXECFN, AT_PHDR, AT_SYSINFO_EHDR};

/// The entries of the auxiliary vector weft needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Auxv {
    /// `AT_ENTRY`: the program's entry point (load bias applied).
    pub entry: u64,
    /// `AT_PHDR`: the program headers in memory.
    pub phdr: u64,
    /// `AT_BASE`: where the interpreter (ld.so) is loaded, 0 for static programs.
    pub interp_base: u64,
    /// `AT_SYSINFO_EHDR`: where the vDSO's ELF image is mapped, 0 if none.
    pub vdso: u64,
    /// `AT_EXECFN`: where the file name `execve` was given lies (on the
    /// new program's stack), 0 if none.
    pub execfn: u64,
}

impl Auxv {
    /// Reads the auxiliary vector of a process.
    pub fn read(pid: i32) -> Result<Auxv> {
        let bytes =
            std::fs::read(proc_path(pid, "auxv")).map_err(|e| Error::from_proc_io(pid, e))?;
        Ok(Auxv::parse(&bytes))
    }

    /// Parses the raw vector: pairs of native-endian u64 (type, value).
    pub fn parse(bytes: &[u8]) -> Auxv {
        let mut auxv = Auxv::default();
        for pair in bytes.chunks_exact(16) {
            let key = u64::from_ne_bytes(pair[..8].try_into().expect("8 bytes"));
            let value = u64::from_ne_bytes(pair[8..].try_into().expect("8 bytes"));
            match key {
                AT_PHDR => auxv.phdr = value,
                AT_BASE => auxv.interp_base = value,
                AT_ENTRY => auxv.entry = value,
                AT_SYSINFO_EHDR => auxv.vdso = value,
                AT_EXECFN => auxv.execfn = value,
                _ => {}
            }
        }
        auxv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_auxv() {
        let auxv = Auxv::read(std::process::id() as i32).unwrap();
        assert!(auxv.entry != 0 && auxv.phdr != 0);
        assert!(auxv.vdso != 0, "Linux maps a vDSO into every process");
        // SAFETY: AT_EXECFN points to a NUL-terminated string on this
        // process's stack, which lives as long as the process.
        let name = unsafe { std::ffi::CStr::from_ptr(auxv.execfn as *const libc::c_char) };
        let exe = std::env::args().next().unwrap();
        assert_eq!(
            name.to_str().unwrap(),
            exe,
            "the name the test was started by"
        );
    }
}
