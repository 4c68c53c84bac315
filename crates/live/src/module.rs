//! Modules of a live process: an image, where it is loaded, and its
//! analysed code, all in runtime addresses.
//!
//! The load bias is the one way between the two kinds of address: the
//! image speaks [`FileAddr`] (link-time), the process [`RemoteAddr`], and
//! [`Module::runtime`] and [`Module::file_addr`] convert. Past this module
//! the byte-level crates (`weft-code`, `weft-patch`, which know no process)
//! take runtime addresses as plain `u64`s: what [`Module::function_code`],
//! [`Module::branch_targets`] and [`Module::padding_runs`] give is in that
//! form, as are the module's `lo` and `hi`.

use crate::Result;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use weft_code::{BranchTargets, FunctionCode};
use weft_image::{FileAddr, Function, Image};
use weft_process::{MapEntry, RemoteAddr};

pub use weft_image::VDSO_NAME;

/// The vDSO's path in the maps (and its module's [`Module::path`]).
const VDSO_PATH: &str = "[vdso]";

/// A loaded ELF file in the target.
#[derive(Debug)]
pub struct Module {
    /// File name, the name patterns match (`libc.so.6`).
    pub name: String,
    /// Path as the target's maps give it.
    pub path: PathBuf,
    /// Runtime address minus link-time address.
    pub bias: u64,
    /// Lowest mapped address.
    pub lo: u64,
    /// One past the highest mapped address.
    pub hi: u64,
    /// The file's contents, indexed (shared by every process that maps
    /// the same file, see [`opened`]).
    pub image: Arc<Image>,
    targets: OnceLock<BranchTargets>,
    foreign: OnceLock<BranchTargets>,
    /// The file's branch targets at its link-time addresses and its
    /// functions' analysed code, shared like the image.
    file_targets: Arc<PerFile>,
    padding: OnceLock<Vec<(u64, u64)>>,
    /// Per other part of a function (`.cold`), by its entry: the runtime
    /// addresses its jumps and switch cases reach (see
    /// [`Module::jumps_back_from_other_parts`], asked for several times
    /// per function).
    part_targets: std::sync::Mutex<std::collections::HashMap<u64, Arc<Vec<u64>>>>,
}

impl Module {
    /// The modules mapped in `pid` (files with an executable mapping),
    /// excluding those whose path is in `known`. Files that are not ELF
    /// (or not x86-64) are passed over: they hold no code weft can patch.
    pub fn discover(pid: i32, maps: &[MapEntry], known: &[PathBuf]) -> Result<Vec<Module>> {
        let mut by_path: BTreeMap<PathBuf, Vec<&MapEntry>> = BTreeMap::new();
        for m in maps {
            if let Some(file) = m.file() {
                by_path.entry(file).or_default().push(m);
            }
        }
        let mut out = Vec::new();
        for (path, entries) in by_path {
            if known.contains(&path) || !entries.iter().any(|m| m.exec) {
                continue;
            }
            let (image, file_targets) = match opened(&weft_process::path_in_root(pid, &path)) {
                Ok(i) => i,
                Err(weft_image::Error::NotElf { .. })
                | Err(weft_image::Error::NotX86_64 { .. }) => continue,
                Err(weft_image::Error::Io { .. }) if !weft_process::is_alive(pid) => {
                    return Err(weft_process::Error::ProcessGone(pid).into())
                }
                Err(e) => return Err(e.into()),
            };
            let first = entries
                .iter()
                .min_by_key(|m| m.offset)
                .expect("non-empty group");
            let Some(bias) = image.load_bias(first.start.0, first.offset) else {
                continue;
            };
            let lo = entries.iter().map(|m| m.start.0).min().unwrap_or(0);
            let hi = entries.iter().map(|m| m.end.0).max().unwrap_or(0);
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            out.push(Module {
                name,
                path,
                bias,
                lo,
                hi,
                image,
                targets: OnceLock::new(),
                foreign: OnceLock::new(),
                file_targets,
                padding: OnceLock::new(),
                part_targets: Default::default(),
            });
        }
        Ok(out)
    }

    /// The vDSO of `pid` as a module named [`VDSO_NAME`] (path `[vdso]`),
    /// its image read from the process's memory (the kernel maps no file
    /// for it): none if the process has none. Linked at 0, its load bias
    /// is where it is mapped.
    pub fn vdso(pid: i32, maps: &[MapEntry]) -> Result<Option<Module>> {
        use weft_process::ProcessMemory;
        let base = weft_process::Auxv::read(pid)?.vdso;
        let Some(m) = maps.iter().find(|m| m.start.0 == base && base != 0) else {
            return Ok(None);
        };
        let bytes = weft_process::ProcMemory::open(pid)?
            .read_vec(m.start, (m.end.0 - m.start.0) as usize)?;
        // Every process of a workload has the same vDSO: indexed and
        // analysed once, like a file.
        type Seen = Vec<(Vec<u8>, Arc<Image>, Arc<PerFile>)>;
        static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());
        let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
        let (image, file_targets) = match seen.iter().find(|(b, _, _)| *b == bytes) {
            Some((_, image, shared)) => (Arc::clone(image), Arc::clone(shared)),
            None => {
                let image = Arc::new(Image::from_bytes(
                    std::path::Path::new(VDSO_PATH),
                    bytes.clone(),
                )?);
                let shared: Arc<PerFile> = Arc::default();
                seen.push((bytes, Arc::clone(&image), Arc::clone(&shared)));
                (image, shared)
            }
        };
        drop(seen);
        Ok(Some(Module {
            name: VDSO_NAME.to_string(),
            path: PathBuf::from(VDSO_PATH),
            bias: m.start.0,
            lo: m.start.0,
            hi: m.end.0,
            image,
            targets: OnceLock::new(),
            foreign: OnceLock::new(),
            file_targets,
            padding: OnceLock::new(),
            part_targets: Default::default(),
        }))
    }

    /// A module weft generated and mapped at `base` (`image` linked at 0,
    /// `size` bytes), named `name`, its path `[name]` as the kernel names
    /// memory that is no file.
    pub fn generated(name: &str, image: Image, base: u64, size: u64) -> Module {
        Module {
            name: name.to_string(),
            path: PathBuf::from(format!("[{name}]")),
            bias: base,
            lo: base,
            hi: base + size,
            image: Arc::new(image),
            targets: OnceLock::new(),
            foreign: OnceLock::new(),
            file_targets: Arc::default(),
            padding: OnceLock::new(),
            part_targets: Default::default(),
        }
    }

    /// Whether this is the process's vDSO ([`Module::vdso`]).
    pub fn is_vdso(&self) -> bool {
        self.path.as_os_str() == VDSO_PATH
    }

    /// A module read straight from a file, at its link-time addresses (bias 0).
    pub fn from_file(path: &std::path::Path) -> Result<Module> {
        let (image, file_targets) = opened(path)?;
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let lo = image.segments().iter().map(|s| s.vaddr).min();
        let hi = image.segments().iter().map(|s| s.vaddr + s.memsz).max();
        Ok(Module {
            name,
            path: path.to_path_buf(),
            bias: 0,
            // With bias 0, runtime addresses are the file's own.
            lo: lo.map_or(0, FileAddr::get),
            hi: hi.map_or(0, FileAddr::get),
            image,
            targets: OnceLock::new(),
            foreign: OnceLock::new(),
            file_targets,
            padding: OnceLock::new(),
            part_targets: Default::default(),
        })
    }

    /// Runtime address of a link-time address: the address plus the load bias.
    pub fn runtime(&self, vaddr: FileAddr) -> RemoteAddr {
        RemoteAddr(vaddr.get().wrapping_add(self.bias))
    }

    /// Link-time address of a runtime address: the address minus the load bias.
    pub fn file_addr(&self, addr: RemoteAddr) -> FileAddr {
        FileAddr(addr.get().wrapping_sub(self.bias))
    }

    /// Executable bytes that no code runs, at least `len` of them: from the
    /// end of an executable segment to the end of its last page, mapped
    /// with it. Their target address.
    pub fn code_slack(&self, len: u64) -> Option<RemoteAddr> {
        const PAGE: u64 = weft_abi::mman::PAGE_SIZE;
        self.image
            .segments()
            .iter()
            .filter(|s| s.exec)
            .map(|s| s.vaddr + s.memsz)
            .filter(|end| end.get().next_multiple_of(PAGE) - end.get() >= len)
            .max()
            .map(|end| self.runtime(end))
    }

    /// What the program has at `addr`, slack that [`Module::code_slack`]
    /// gave, when nobody has written there: the file's bytes that the last
    /// page of the executable segment maps.
    pub fn slack_bytes(&self, addr: RemoteAddr, len: usize) -> Vec<u8> {
        let at = self.file_addr(addr).get();
        self.image
            .segments()
            .iter()
            .find(|s| s.exec && s.vaddr.get() + s.memsz == at && s.filesz == s.memsz)
            .map_or_else(
                || vec![0; len],
                |s| self.image.file_bytes_from(s.offset + s.filesz, len),
            )
    }

    /// File bytes at a runtime address.
    pub fn bytes_at_runtime(&self, addr: RemoteAddr, len: usize) -> Option<&[u8]> {
        self.image.bytes_at(self.file_addr(addr), len)
    }

    /// Every direct branch and call target of the module's functions
    /// (runtime addresses), computed once.
    pub fn branch_targets(&self) -> &BranchTargets {
        self.targets
            .get_or_init(|| self.file_targets().all.rebased(self.bias))
    }

    /// The targets of branches made from outside the function holding
    /// them (another function's tail call, a `.cold` part coming back):
    /// places reached without going through the function's own code.
    pub fn foreign_targets(&self) -> &BranchTargets {
        self.foreign
            .get_or_init(|| self.file_targets().foreign.rebased(self.bias))
    }

    /// Decoded once per file, at link-time addresses.
    fn file_targets(&self) -> &FileTargets {
        self.file_targets.targets.get_or_init(|| {
            let mut all = BranchTargets::new();
            let mut foreign = BranchTargets::new();
            for f in self.image.functions() {
                if let Some(bytes) = self.image.bytes_at(f.addr, f.size as usize) {
                    let insns = weft_code::decode_all(f.addr.get(), bytes);
                    all.add_instructions(&insns);
                    let (lo, hi) = (f.addr.get(), f.addr.get() + f.size);
                    let mut outside = BranchTargets::new();
                    outside.add_instructions(&insns);
                    for t in outside.iter().filter(|&t| t < lo || t >= hi) {
                        foreign.insert(t);
                    }
                }
            }
            FileTargets { all, foreign }
        })
    }

    /// Runs of at least five bytes of inter-function padding (`nop` and
    /// `int3` instructions no branch reaches), runtime addresses, sorted:
    /// where springboards may go.
    pub fn padding_runs(&self) -> &[(u64, u64)] {
        self.padding.get_or_init(|| {
            let targets = self.branch_targets();
            let functions = self.image.functions();
            let mut runs = Vec::new();
            for pair in functions.windows(2) {
                let end = pair[0].addr + pair[0].size;
                let next = pair[1].addr;
                if next <= end || next - end > 4096 {
                    continue;
                }
                let Some(bytes) = self.image.bytes_at(end, (next - end) as usize) else {
                    continue;
                };
                let mut run: Option<u64> = None;
                let mut at = self.runtime(end).get();
                let mut flush = |run: &mut Option<u64>, at: u64| {
                    if let Some(s) = run.take() {
                        if at - s >= weft_patch::JMP_LEN {
                            runs.push((s, at));
                        }
                    }
                };
                for i in weft_code::decode_all(self.runtime(end).get(), bytes) {
                    let padding = matches!(
                        i.mnemonic(),
                        iced_x86::Mnemonic::Nop | iced_x86::Mnemonic::Int3
                    ) && !targets.contains(i.ip());
                    if padding {
                        run.get_or_insert(i.ip());
                    } else {
                        flush(&mut run, at);
                    }
                    at = i.next_ip();
                }
                flush(&mut run, at);
            }
            runs
        })
    }

    /// The analysed code of a function, in runtime addresses: analysed
    /// once per file, for every process that maps the file, wherever (each
    /// `exec` of a build asks for the C library's `clone`, `fork` and
    /// `vfork`, and each `cc1` of it for 45,000 functions at a new
    /// address): code analysed at another load address is moved here
    /// ([`FunctionCode::rebased`]).
    pub fn function_code(&self, f: &Function) -> Option<FunctionCode> {
        let key = (f.addr.get(), f.size);
        let codes = &self.file_targets.codes;
        let known = codes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned();
        if let Some((bias, code)) = known {
            return Some(if bias == self.bias {
                FunctionCode::clone(&code)
            } else {
                code.rebased(self.bias.wrapping_sub(bias))
            });
        }
        let code = self.analyse(f)?;
        (codes.lock().unwrap_or_else(|e| e.into_inner()))
            .insert(key, (self.bias, Arc::new(code.clone())));
        Some(code)
    }

    fn analyse(&self, f: &Function) -> Option<FunctionCode> {
        let bytes = self.image.bytes_at(f.addr, f.size as usize)?;
        let data = |addr: u64, len: usize| {
            self.bytes_at_runtime(RemoteAddr(addr), len)
                .map(|b| b.to_vec())
        };
        let mut code = FunctionCode::analyze(self.runtime(f.addr).get(), bytes, &data);
        // Indirect jumps no table describes go to the code addresses the
        // module keeps in its data (a computed `goto`'s labels).
        if code.has_unresolved_indirect_jump() {
            let end = FileAddr(f.addr.get() + f.size);
            let taken: Vec<u64> = self
                .image
                .code_pointers(f.addr, end)
                .iter()
                .map(|&a| self.runtime(FileAddr(a)).get())
                .collect();
            // With no label kept in data, a jump with the frame gone is a
            // tail call through a pointer (sqlite's `sqlite3_free`).
            if !taken.iter().any(|&a| a > code.start() && a < code.end()) {
                code.mark_indirect_tail_calls();
            }
            code.add_computed_targets(&taken);
        }
        let parts = self.other_parts_reached(&code);
        code.set_other_parts(parts);
        // The ways back from those parts, and the landing pads the unwinder
        // jumps to, start blocks of their own.
        let mut entries = self.jumps_back_from_other_parts(&code);
        entries.extend(self.landing_pads_in(&code).iter().map(|&(pad, _)| pad));
        if !entries.is_empty() {
            code.add_entries(&entries);
        }
        Some(code)
    }

    /// The C++ landing pads inside `code`, in runtime addresses: (pad,
    /// start of the function whose call sites lead there).
    pub fn landing_pads_in(&self, code: &FunctionCode) -> Vec<(u64, u64)> {
        let vaddr = |a: u64| FileAddr(a.wrapping_sub(self.bias));
        self.image
            .landing_pads_in(vaddr(code.start()), vaddr(code.end()))
            .iter()
            .map(|p| (self.runtime(p.pad).get(), self.runtime(p.owner).get()))
            .collect()
    }

    /// Addresses inside `code` that the code of its other parts (the
    /// functions holding the targets of [`FunctionCode::set_other_parts`])
    /// jumps to, directly or through a jump table.
    pub fn jumps_back_from_other_parts(&self, code: &FunctionCode) -> Vec<u64> {
        let mut seen = std::collections::BTreeSet::new();
        let mut back = Vec::new();
        for t in code.other_parts() {
            let Some(part) = self.image.function_at(FileAddr(t.wrapping_sub(self.bias))) else {
                continue;
            };
            if !seen.insert(part.addr) {
                continue;
            }
            let Some(reached) = self.part_targets(part) else {
                continue;
            };
            back.extend(
                reached
                    .iter()
                    .copied()
                    .filter(|&a| a > code.start() && a < code.end()),
            );
        }
        back
    }

    /// The runtime addresses the jumps of function `part` reach, and the
    /// cases of its switches (computed once per part).
    fn part_targets(&self, part: &Function) -> Option<Arc<Vec<u64>>> {
        let at = self.runtime(part.addr).get();
        if let Some(known) = self.part_targets.lock().ok()?.get(&at) {
            return Some(known.clone());
        }
        let bytes = self.image.bytes_at(part.addr, part.size as usize)?;
        let data = |addr: u64, len: usize| {
            self.bytes_at_runtime(RemoteAddr(addr), len)
                .map(|b| b.to_vec())
        };
        let reached = Arc::new(weft_code::jump_targets(at, bytes, &data));
        self.part_targets.lock().ok()?.insert(at, reached.clone());
        Some(reached)
    }

    /// Targets of `code`'s jumps out of its range that are not the entry of
    /// a function: a `.cold` part of the same function (named so, or an
    /// FDE whose first row keeps the frame of the function it was split
    /// from), or code reached in the middle. A PLT stub is the entry of the
    /// function it imports (a tail call through the PLT).
    fn other_parts_reached(&self, code: &FunctionCode) -> std::collections::BTreeSet<u64> {
        code.instructions()
            .iter()
            .filter(|i| {
                matches!(
                    i.flow_control(),
                    iced_x86::FlowControl::UnconditionalBranch
                        | iced_x86::FlowControl::ConditionalBranch
                )
            })
            .map(|i| i.near_branch_target())
            .chain(
                code.jump_tables()
                    .iter()
                    .flat_map(|t| t.outside.iter().copied()),
            )
            .filter(|&t| t < code.start() || t >= code.end())
            .filter(|&t| {
                let vaddr = FileAddr(t.wrapping_sub(self.bias));
                let entry = self.image.function_at(vaddr).is_some_and(|g| {
                    g.addr == vaddr
                        && !self.image.is_frame_part(vaddr)
                        && !crate::session::is_split_part(&g.name)
                });
                !entry && self.image.imported_name(vaddr).is_none()
            })
            .collect()
    }

    /// Up to 16 bytes after a function, before the next one starts: padding
    /// a splice window may cover.
    pub fn bytes_after(&self, f: &Function) -> &[u8] {
        let end = f.addr + f.size;
        let functions = self.image.functions();
        let next = functions
            .get(functions.partition_point(|g| g.addr < end))
            .map_or(end + 16, |g| g.addr);
        let len = (next - end).min(16) as usize;
        self.image.bytes_at(end, len).unwrap_or(&[])
    }
}

/// A file's branch targets at link-time addresses: all of them, and those
/// of branches made from outside the function holding the target.
#[derive(Debug, Default)]
struct FileTargets {
    all: BranchTargets,
    foreign: BranchTargets,
}

/// A function's analysed code and the load bias it was analysed at.
type AnalysedAt = (u64, Arc<FunctionCode>);

/// What weft works out once per file (or vDSO image) for every process
/// that maps it.
#[derive(Debug, Default)]
struct PerFile {
    /// Branch targets at link-time addresses.
    targets: OnceLock<FileTargets>,
    /// Analysed functions by (link-time address, size), with the load
    /// bias they were analysed at.
    codes: std::sync::Mutex<std::collections::HashMap<(u64, u64), AnalysedAt>>,
}

/// The image of the file at `path`, read and indexed once per weft for
/// each version of each file (by device, inode, size and modification
/// time), with its branch targets' shared slot: every process of a
/// workload that maps the C library or runs the same compiler shares
/// them.
fn opened(
    path: &std::path::Path,
) -> std::result::Result<(Arc<Image>, Arc<PerFile>), weft_image::Error> {
    use std::os::unix::fs::MetadataExt;
    type Cache = BTreeMap<(u64, u64, u64, i64, i64), (Arc<Image>, Arc<PerFile>)>;
    static CACHE: Mutex<Cache> = Mutex::new(BTreeMap::new());
    let key = std::fs::metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()));
    if let Some(k) = key {
        let cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((image, targets)) = cache.get(&k) {
            return Ok((Arc::clone(image), Arc::clone(targets)));
        }
    }
    let image = Arc::new(Image::open(path)?);
    let targets: Arc<PerFile> = Arc::default();
    if let Some(k) = key {
        let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        cache.insert(k, (Arc::clone(&image), Arc::clone(&targets)));
    }
    Ok((image, targets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bias_converts_both_ways() {
        let exe = std::env::current_exe().unwrap();
        let mut m = Module::from_file(&exe).unwrap();
        m.bias = 0x5555_0000_0000;
        let f = m.image.functions().iter().find(|f| f.size >= 8).unwrap();
        let at = m.runtime(f.addr);
        assert_eq!(at.get(), f.addr.get() + 0x5555_0000_0000);
        assert_eq!(m.file_addr(at), f.addr);
        assert_eq!(m.bytes_at_runtime(at, 8), m.image.bytes_at(f.addr, 8));
        assert_eq!(m.function_code(f).map(|c| c.start()), Some(at.get()));
    }
}
