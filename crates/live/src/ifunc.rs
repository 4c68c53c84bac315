//! IFUNC symbols (`memcpy`, `strlen`, ... in glibc): the symbol's address
//! is a resolver, which the dynamic loader runs once to choose an
//! implementation for this CPU; calls go to that implementation. A
//! pattern naming an IFUNC instruments the implementation the process
//! uses, reported under the name asked for.
//!
//! weft finds the choice by resolving the same symbol in itself: the
//! resolver of the very same file (same device and inode) on the same
//! machine, under the same `GLIBC_TUNABLES` (the one input a user can
//! change), chooses the same implementation. A target that maps another
//! copy of the library (a container's), or runs with other tunables, gets
//! no guess: its IFUNCs are passed over with the reason.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use weft_image::FileAddr;

/// Where each of `symbols`, IFUNCs of the library at `path` (as weft sees
/// the target's file), leads in process `pid`: the link-time address of
/// the implementation chosen. The whole answer is an error when weft cannot
/// stand in for the process (another copy of the library, other tunables);
/// a symbol weft's own library lacks is left out.
pub fn choices<'s>(
    pid: i32,
    path: &Path,
    symbols: impl IntoIterator<Item = &'s str>,
) -> Result<HashMap<String, FileAddr>, String> {
    let tunables = weft_process::environ_var(pid, "GLIBC_TUNABLES");
    if tunables != std::env::var("GLIBC_TUNABLES").ok() {
        return Err("the process runs with other GLIBC_TUNABLES than weft".into());
    }
    let target = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    let mut elsewhere = None;
    for symbol in symbols {
        let Some((file, base, at)) = resolve_here(symbol) else {
            continue;
        };
        let same = std::fs::metadata(&file)
            .is_ok_and(|own| own.dev() == target.dev() && own.ino() == target.ino());
        if same {
            out.insert(symbol.to_string(), FileAddr(at.wrapping_sub(base)));
        } else {
            // Another library than the target's copy: weft's own copy is
            // another file, or this IFUNC leads out of the library (glibc's
            // `time` and `gettimeofday` lead into the vDSO).
            elsewhere.get_or_insert(file);
        }
    }
    if let (true, Some(file)) = (out.is_empty(), elsewhere) {
        return Err(format!(
            "the process maps another copy of the library than weft's ({})",
            file.display()
        ));
    }
    Ok(out)
}

/// `symbol` resolved in weft itself: the file it is in, that file's load
/// base and the address.
fn resolve_here(symbol: &str) -> Option<(PathBuf, u64, u64)> {
    let name = CString::new(symbol).ok()?;
    // SAFETY: dlsym only looks a NUL-terminated name up in the objects
    // weft has loaded; a null result means none defines it.
    let at = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if at.is_null() {
        return None;
    }
    // SAFETY: a zeroed Dl_info is valid (null pointers); dladdr fills it
    // for an address inside a loaded object, which `at` is, through a
    // pointer to this local of the type it writes.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(at, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set dli_fname to the NUL-terminated path of a loaded
    // object, which stays loaded (weft never unloads its C library).
    let file = unsafe { CStr::from_ptr(info.dli_fname) };
    let file = Path::new(std::ffi::OsStr::from_bytes(file.to_bytes())).to_path_buf();
    Some((file, info.dli_fbase as u64, at as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ifunc_leads_to_a_function_of_the_library() {
        let me = std::process::id() as i32;
        let (libc_path, _, _) = resolve_here("strlen").expect("weft's strlen");
        let image = weft_image::Image::open(&libc_path).unwrap();
        let symbols = ["strlen", "memcpy", "memmove", "strcmp"];
        let chosen = choices(me, &libc_path, symbols).unwrap();
        for symbol in symbols {
            let resolver = image.function_named(symbol).expect(symbol);
            assert!(resolver.ifunc, "{symbol} is an IFUNC in glibc");
            let at = chosen[symbol];
            assert_ne!(at, resolver.addr, "{symbol}: the resolver itself");
            let f = image.function_at(at).expect("an implementation");
            assert_eq!(f.addr, at, "{symbol}: an implementation starts there");
        }
        assert!(choices(me, Path::new("/bin/sh"), ["strlen"]).is_err());
    }
}
