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

use crate::Module;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use weft_image::FileAddr;

/// Where each IFUNC of `module` leads in process `pid`: the link-time
/// address of the implementation chosen. The whole answer is an error when
/// weft cannot stand in for the process: another copy of the library, other
/// GLIBC_TUNABLES in its environment, or (when the environment no longer
/// tells, a program that rewrote it) a choice the loader made for the
/// process, in the library's IRELATIVE slots, that differs from weft's. An
/// IFUNC weft cannot resolve in itself is left out.
pub fn choices(pid: i32, module: &Module) -> Result<HashMap<String, FileAddr>, String> {
    let tunables = weft_process::environ_var(pid, "GLIBC_TUNABLES");
    if tunables != std::env::var("GLIBC_TUNABLES").ok() {
        return Err("the process runs with other GLIBC_TUNABLES than weft".into());
    }
    let path = weft_process::path_in_root(pid, &module.path);
    let target = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    let mut elsewhere = None;
    let mut own_base = None;
    for f in module.image.functions().iter().filter(|f| f.ifunc) {
        let Some((file, base, at)) = resolve_here(&f.name) else {
            // Left out: the caller says why it has no answer.
            continue;
        };
        let same = std::fs::metadata(&file)
            .is_ok_and(|own| own.dev() == target.dev() && own.ino() == target.ino());
        if same {
            out.insert(f.name.clone(), FileAddr(at.wrapping_sub(base)));
            own_base = Some(base);
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
    // weft itself (inspecting a file) has nothing to check against.
    if let (Some(base), false) = (own_base, pid == std::process::id() as i32) {
        same_choices_as_the_loader(pid, module, base)?;
    }
    Ok(out)
}

/// Checks that the process's loader chose what weft's did for every
/// IRELATIVE slot of the library: both map the same file, so the slots lie
/// at the same offsets, and each holds the address of an implementation.
fn same_choices_as_the_loader(pid: i32, module: &Module, own_base: u64) -> Result<(), String> {
    let slots = module.image.irelative_slots();
    if slots.is_empty() {
        return Ok(());
    }
    let mem = weft_process::ProcMemory::open(pid).map_err(|e| e.to_string())?;
    for slot in slots {
        use weft_process::ProcessMemory;
        let Ok(theirs) = mem.read_u64(module.runtime(slot)) else {
            continue;
        };
        let own_slot = own_base.wrapping_add(slot.get()) as *const u64;
        // SAFETY: weft maps the same file at `own_base` (checked by device
        // and inode); the loader relocated this IRELATIVE slot of its data
        // when it loaded the library, and the word stays mapped (RELRO
        // makes it read-only, never unmapped) while weft runs.
        let own = unsafe { std::ptr::read_unaligned(own_slot) };
        // A resolver may choose nothing (0, a feature the CPU lacks); any
        // other choice is an address in the library.
        let same = match (own, theirs) {
            (0, _) | (_, 0) => own == theirs,
            _ => theirs.wrapping_sub(module.bias) == own.wrapping_sub(own_base),
        };
        if !same {
            return Err(format!(
                "the process's loader chose other implementations than weft's would \
                 (the word at {:#x} of {}): it runs with other GLIBC_TUNABLES or CPU features",
                slot.get(),
                module.name
            ));
        }
    }
    Ok(())
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
        let module = Module::from_file(&libc_path).unwrap();
        let chosen = choices(me, &module).unwrap();
        for symbol in ["strlen", "memcpy", "memmove", "strcmp"] {
            let resolver = module.image.function_named(symbol).expect(symbol);
            assert!(resolver.ifunc, "{symbol} is an IFUNC in glibc");
            let at = chosen[symbol];
            assert_ne!(at, resolver.addr, "{symbol}: the resolver itself");
            let f = module.image.function_at(at).expect("an implementation");
            assert_eq!(f.addr, at, "{symbol}: an implementation starts there");
        }
        assert!(!module.image.irelative_slots().is_empty());
    }
}
