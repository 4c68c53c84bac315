//! Reading an ELF file: segments, functions, bytes by virtual address.

use crate::{demangle, Error, FileAddr, Result};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a function's name and range came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FunctionSource {
    /// The static symbol table.
    Symtab,
    /// The dynamic symbol table.
    Dynsym,
    /// An `.eh_frame` FDE with no symbol (stripped code); named `sub_ADDR`.
    EhFrame,
}

/// A function of an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    /// The preferred symbol name (a global one when there are aliases).
    pub name: String,
    /// Other names at the same address.
    pub aliases: Vec<String>,
    /// Demangled form of `name`, if it is mangled: worked out at its first
    /// use ([`Function::demangled`]), since a C++ program exports tens of
    /// thousands of names (`cc1`: 29,000) and most are never shown.
    demangled: std::sync::OnceLock<Option<String>>,
    /// Link-time virtual address.
    pub addr: FileAddr,
    /// Size in bytes (never 0: unsized symbols get the distance to the next function).
    pub size: u64,
    /// Where the range came from.
    pub source: FunctionSource,
    /// An `STT_GNU_IFUNC` symbol: the address is the resolver, not the implementation.
    pub ifunc: bool,
}

impl Function {
    /// The name to show a person: demangled when possible.
    pub fn display_name(&self) -> &str {
        self.demangled().unwrap_or(&self.name)
    }

    /// The demangled form of `name`, if it is mangled.
    pub fn demangled(&self) -> Option<&str> {
        self.demangled
            .get_or_init(|| demangle(&self.name))
            .as_deref()
    }

    /// Shows the function as `name`, which is not a mangled one.
    pub fn rename(&mut self, name: String) {
        self.name = name;
        self.demangled = std::sync::OnceLock::from(None);
    }

    /// Whether a link-time address lies inside the function.
    pub fn contains(&self, addr: FileAddr) -> bool {
        addr >= self.addr && addr - self.addr < self.size
    }
}

/// A loadable segment (`PT_LOAD`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Link-time virtual address.
    pub vaddr: FileAddr,
    /// Size in memory.
    pub memsz: u64,
    /// File offset.
    pub offset: u64,
    /// Size in the file.
    pub filesz: u64,
    /// Executable.
    pub exec: bool,
}

/// File bytes for `len` bytes at link-time address `vaddr`, if they lie in
/// one segment's file-backed part. Sizes and offsets come from the file
/// (and lengths from its symbols), so every sum is checked: one past the
/// address space or the file is no bytes, not a panic.
fn file_bytes<'d>(
    segments: &[Segment],
    data: &'d [u8],
    vaddr: FileAddr,
    len: usize,
) -> Option<&'d [u8]> {
    let end = vaddr.get().checked_add(u64::try_from(len).ok()?)?;
    let seg = segments.iter().find(|s| {
        vaddr >= s.vaddr
            && s.vaddr
                .get()
                .checked_add(s.filesz)
                .is_some_and(|seg_end| end <= seg_end)
    })?;
    let off = usize::try_from(seg.offset.checked_add(vaddr - seg.vaddr)?).ok()?;
    data.get(off..off.checked_add(len)?)
}

/// The kind of ELF image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageKind {
    /// A position-dependent executable (`ET_EXEC`).
    Executable,
    /// A position-independent executable or shared object (`ET_DYN`).
    Dynamic,
}

/// An x86-64 ELF file read from disk.
#[derive(Debug)]
pub struct Image {
    path: PathBuf,
    pub(crate) data: Vec<u8>,
    kind: ImageKind,
    interp: Option<String>,
    segments: Vec<Segment>,
    functions: Vec<Function>,
    /// The PLT's sections (`.plt`, `.plt.got`, `.plt.sec`): stubs, no
    /// functions, and no `syscall` (link-time start, end).
    plt: Vec<(u64, u64)>,
    entry: FileAddr,
    usdt: Vec<crate::UsdtProbe>,
    event_sites: Vec<crate::EventSiteInfo>,
    /// GOT slot → imported symbol (`imports.rs`), read when first asked.
    pub(crate) import_slots: std::sync::OnceLock<std::collections::HashMap<u64, String>>,
    /// Landing pads (`landing_pads.rs`), read when first asked.
    pub(crate) landing_pads: std::sync::OnceLock<Vec<crate::LandingPad>>,
    /// FDE starts that are parts of another function's frame.
    pub(crate) frame_parts: std::sync::OnceLock<Vec<u64>>,
    /// Code addresses kept in data (`code_pointers.rs`), read when first asked.
    pub(crate) code_pointers: std::sync::OnceLock<Vec<u64>>,
    /// Indices into `functions` of those whose bytes hold a `syscall`
    /// (0f 05), found when first asked.
    pub(crate) syscall_functions: std::sync::OnceLock<Vec<usize>>,
    /// Symbols the dynamic symbol table defines (`imports.rs`), read when
    /// first asked.
    pub(crate) exports: std::sync::OnceLock<std::collections::HashMap<String, crate::Export>>,
}

impl Image {
    /// Reads and indexes an ELF file.
    pub fn open(path: &Path) -> Result<Image> {
        let data = crate::file::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Image::from_bytes(path, data)
    }

    /// Indexes ELF bytes; `path` is only used for naming and messages.
    pub fn from_bytes(path: &Path, data: Vec<u8>) -> Result<Image> {
        let path = path.to_path_buf();
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(Error::NotElf { path });
        }
        let malformed = |what: String| Error::Malformed {
            path: path.clone(),
            what,
        };
        let file = object::File::parse(&*data).map_err(|e| malformed(e.to_string()))?;
        if file.architecture() != object::Architecture::X86_64 {
            return Err(Error::NotX86_64 {
                path,
                arch: format!("{:?}", file.architecture()),
            });
        }
        let elf = ElfFile64::<Endianness>::parse(&*data).map_err(|e| malformed(e.to_string()))?;
        let endian = elf.endian();
        let header = elf.elf_header();
        let kind = match header.e_type(endian) {
            object::elf::ET_EXEC => ImageKind::Executable,
            _ => ImageKind::Dynamic,
        };
        let entry = FileAddr(header.e_entry(endian));
        let mut segments = Vec::new();
        let mut interp = None;
        for ph in elf.elf_program_headers() {
            match ph.p_type(endian) {
                object::elf::PT_LOAD => {
                    let seg = Segment {
                        vaddr: FileAddr(ph.p_vaddr(endian)),
                        memsz: ph.p_memsz(endian),
                        offset: ph.p_offset(endian),
                        filesz: ph.p_filesz(endian),
                        exec: ph.p_flags(endian) & object::elf::PF_X != 0,
                    };
                    // No kernel loads such a segment; refusing it here lets
                    // every range below add without overflow.
                    if seg.vaddr.get().checked_add(seg.memsz).is_none()
                        || seg.offset.checked_add(seg.filesz).is_none()
                    {
                        return Err(malformed(format!(
                            "the PT_LOAD segment at {} ({:#x} bytes, {:#x} from file offset \
                             {:#x}) runs past the end of the address space",
                            seg.vaddr, seg.memsz, seg.filesz, seg.offset
                        )));
                    }
                    segments.push(seg);
                }
                object::elf::PT_INTERP => {
                    if let Ok(Some(bytes)) = ph.data(endian, &*data).map(Some) {
                        interp = Some(
                            String::from_utf8_lossy(bytes)
                                .trim_end_matches('\0')
                                .to_string(),
                        );
                    }
                }
                _ => {}
            }
        }
        let functions = collect_functions(&file, &segments, &compat_versions(&elf, &data));
        let usdt = elf
            .section_by_name(".note.stapsdt")
            .and_then(|s| s.elf_section_header().notes(endian, &*data).ok().flatten())
            .map(|notes| {
                crate::usdt::probes(
                    notes,
                    endian,
                    file.section_by_name(".stapsdt.base")
                        .map(|s| FileAddr(s.address())),
                )
            })
            .unwrap_or_default();
        let event_sites = crate::event_sites::parse(&file, &|vaddr| {
            let bytes = |len: u64| file_bytes(&segments, &data, vaddr, len as usize);
            let len = (0..4096).find(|&n| bytes(n + 1).is_some_and(|b| b[n as usize] == 0))?;
            String::from_utf8(bytes(len)?.to_vec()).ok()
        });
        let plt = plt_ranges(&file);
        Ok(Image {
            path,
            data,
            kind,
            interp,
            segments,
            functions,
            plt,
            entry,
            usdt,
            event_sites,
            import_slots: std::sync::OnceLock::new(),
            exports: std::sync::OnceLock::new(),
            landing_pads: std::sync::OnceLock::new(),
            frame_parts: std::sync::OnceLock::new(),
            code_pointers: std::sync::OnceLock::new(),
            syscall_functions: std::sync::OnceLock::new(),
        })
    }

    /// The file this image was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file name (`libc.so.6`), used as the module name.
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Executable or position-independent.
    pub fn kind(&self) -> ImageKind {
        self.kind
    }

    /// The requested program interpreter (`PT_INTERP`), if any. An
    /// executable without one is statically linked.
    pub fn interp(&self) -> Option<&str> {
        self.interp.as_deref()
    }

    /// The rich event sites (`include/weft/event.h`) of section `weft_events`.
    pub fn event_sites(&self) -> &[crate::EventSiteInfo] {
        &self.event_sites
    }

    /// The USDT probes of `.note.stapsdt`.
    pub fn usdt_probes(&self) -> &[crate::UsdtProbe] {
        &self.usdt
    }

    /// Link-time entry point.
    pub fn entry(&self) -> FileAddr {
        self.entry
    }

    /// Loadable segments.
    pub fn segments(&self) -> &[Segment] {
        &self.segments
    }

    /// Functions sorted by address.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The functions whose bytes hold a `syscall` instruction's (0f 05),
    /// the only ones that can make a system call directly: found once per
    /// file, for every process that maps it. A function whose bytes are
    /// not in the file is among them.
    pub fn functions_with_syscall_bytes(&self) -> impl Iterator<Item = &Function> {
        let indices = self.syscall_functions.get_or_init(|| {
            let found = self.syscall_bytes();
            (self.functions.iter().enumerate())
                .filter(|(_, f)| match self.bytes_at(f.addr, f.size as usize) {
                    Some(_) => {
                        let first = found.partition_point(|&a| a < f.addr.get());
                        found
                            .get(first)
                            .is_some_and(|&a| a + 2 <= f.addr.get() + f.size)
                    }
                    None => true,
                })
                .map(|(i, _)| i)
                .collect()
        });
        indices.iter().map(|&i| &self.functions[i])
    }

    /// Where the code holds a `syscall` instruction's bytes (0f 05), in
    /// order: found with memmem over each executable segment (a
    /// compiler's 30 MB take some 3 ms).
    fn syscall_bytes(&self) -> Vec<u64> {
        let mut found: Vec<u64> = Vec::new();
        for seg in self.segments.iter().filter(|s| s.exec) {
            let start = seg.offset as usize;
            let Some(bytes) = self
                .data
                .get(start..start.saturating_add(seg.filesz as usize))
            else {
                continue;
            };
            found.extend(
                memchr::memmem::find_iter(bytes, &[0x0f, 0x05]).map(|i| seg.vaddr.get() + i as u64),
            );
        }
        found.sort_unstable();
        found
    }

    /// The link-time addresses of the `syscall` bytes (0f 05) of the
    /// executable segments that neither a function's range nor the PLT
    /// holds: code weft does not decode, whose calls only Syscall User
    /// Dispatch would see (or bytes that are no instruction at all). (A
    /// lazy PLT's stubs push their relocation's index: the 1,296th's is
    /// `push 0x50f`.)
    pub fn syscall_bytes_outside_functions(&self) -> Vec<u64> {
        self.syscall_bytes()
            .into_iter()
            .filter(|&a| !self.plt.iter().any(|&(lo, hi)| (lo..hi).contains(&a)))
            .filter(|&a| {
                self.function_at(FileAddr(a))
                    .is_none_or(|f| a + 2 > f.addr.get() + f.size)
            })
            .collect()
    }

    /// The function containing a link-time address.
    pub fn function_at(&self, addr: FileAddr) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.addr <= addr);
        self.functions[..i]
            .iter()
            .rev()
            .take(4)
            .find(|f| f.contains(addr))
    }

    /// Finds a function by exact name (or alias, or demangled name).
    pub fn function_named(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| {
            f.name == name || f.aliases.iter().any(|a| a == name) || f.demangled() == Some(name)
        })
    }

    /// The slots (link-time addresses) of the file's `R_X86_64_IRELATIVE`
    /// relocations: words the loader fills with what an IFUNC resolver
    /// chose, when it loads the file.
    pub fn irelative_slots(&self) -> Vec<FileAddr> {
        use object::{Object, RelocationFlags};
        let Ok(file) = object::File::parse(&*self.data) else {
            return vec![];
        };
        file.dynamic_relocations()
            .into_iter()
            .flatten()
            .filter(|(_, r)| {
                matches!(r.flags(), RelocationFlags::Elf { r_type } if r_type == object::elf::R_X86_64_IRELATIVE)
            })
            .map(|(at, _)| FileAddr(at))
            .collect()
    }

    /// `len` bytes of the file from `offset`, zeros past its end: what a
    /// page mapped from the file holds beyond a segment's last byte.
    pub fn file_bytes_from(&self, offset: u64, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        if let Ok(start) = usize::try_from(offset) {
            if let Some(rest) = self.data.get(start..) {
                let n = rest.len().min(len);
                out[..n].copy_from_slice(&rest[..n]);
            }
        }
        out
    }

    /// The link-time address of a defined symbol of any kind (data objects
    /// included), from `.symtab` or else `.dynsym`.
    pub fn symbol_address(&self, name: &str) -> Option<FileAddr> {
        let file = object::File::parse(&*self.data).ok()?;
        let found = |mut symbols: object::SymbolIterator<'_, '_>| {
            symbols.find_map(|s| {
                (s.is_definition() && s.name() == Ok(name) && s.address() != 0).then(|| s.address())
            })
        };
        found(file.symbols())
            .or_else(|| found(file.dynamic_symbols()))
            .map(FileAddr)
    }

    /// File bytes for `len` bytes at link-time address `vaddr`, if they lie
    /// in one segment's file-backed part.
    pub fn bytes_at(&self, vaddr: FileAddr, len: usize) -> Option<&[u8]> {
        file_bytes(&self.segments, &self.data, vaddr, len)
    }

    /// All executable file-backed bytes as (vaddr, bytes) runs.
    pub fn code_segments(&self) -> impl Iterator<Item = (FileAddr, &[u8])> {
        self.segments.iter().filter(|s| s.exec).filter_map(|s| {
            let off = s.offset as usize;
            self.data
                .get(off..off + s.filesz as usize)
                .map(|b| (s.vaddr, b))
        })
    }

    /// The load bias of this image in a process (process address minus
    /// file address), given one of its mappings: the mapping starts at
    /// `map_start` and holds the file from `map_offset`.
    ///
    /// `map_start` is a process address and the bias a difference of
    /// addresses; both are plain `u64`s here, since this crate knows no
    /// process (`weft_live::Module` turns them into typed addresses).
    pub fn load_bias(&self, map_start: u64, map_offset: u64) -> Option<u64> {
        let seg = self.segments.iter().find(|s| {
            let page_off = s.offset & !0xfff;
            // Saturating: a segment with no file bytes at the last offset.
            map_offset >= page_off && map_offset < s.offset.saturating_add(s.filesz.max(1))
        })?;
        // The byte at file offset `map_offset` has link-time address:
        let vaddr = seg
            .vaddr
            .get()
            .wrapping_add(map_offset)
            .wrapping_sub(seg.offset);
        Some(map_start.wrapping_sub(vaddr))
    }
}

/// Functions from both symbol tables and from `.eh_frame`, deduplicated by address.
/// The version of every dynamic symbol that is not its name's default
/// (`posix_spawn@GLIBC_2.2.5` beside `posix_spawn@@GLIBC_2.15`): a
/// compatibility version, kept for programs linked long ago, by symbol index.
fn compat_versions(
    elf: &ElfFile64<'_, Endianness>,
    data: &[u8],
) -> std::collections::HashMap<usize, String> {
    use object::read::elf::{FileHeader, SectionTable};
    let endian = elf.endian();
    let Ok(sections): std::result::Result<
        SectionTable<'_, object::elf::FileHeader64<Endianness>>,
        _,
    > = elf.elf_header().sections(endian, data) else {
        return Default::default();
    };
    let Ok(Some(versions)) = sections.versions(endian, data) else {
        return Default::default();
    };
    let mut out = std::collections::HashMap::new();
    for sym in elf.dynamic_symbols() {
        let index = versions.version_index(endian, sym.index());
        if !index.is_hidden() {
            continue;
        }
        if let Ok(Some(v)) = versions.version(index) {
            out.insert(
                sym.index().0,
                String::from_utf8_lossy(v.name()).into_owned(),
            );
        }
    }
    out
}

/// Function names (with their ranks, as [`collect_functions`] ranks them)
/// by address from the detached debug file of `file`, if one is installed
/// under `/usr/lib/debug/.build-id/`.
fn debug_file_names(file: &object::File<'_>) -> BTreeMap<FileAddr, (Vec<(u8, String)>, u64)> {
    let mut out: BTreeMap<FileAddr, (Vec<(u8, String)>, u64)> = BTreeMap::new();
    let Ok(Some(id)) = file.build_id() else {
        return out;
    };
    if id.len() < 2 {
        return out;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let path = format!("/usr/lib/debug/.build-id/{}/{}.debug", &hex[..2], &hex[2..]);
    let Ok(data) = crate::file::read(Path::new(&path)) else {
        return out;
    };
    let Ok(debug) = object::File::parse(&*data) else {
        return out;
    };
    if debug.build_id().ok().flatten() != Some(id) {
        return out;
    }
    for sym in debug.symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.kind() != SymbolKind::Text || !sym.is_definition() || name.is_empty() {
            continue;
        }
        let binding = match (sym.is_global(), sym.is_weak()) {
            (true, false) => 0,
            (_, true) => 1,
            _ => 2,
        };
        let rank = name.bytes().take_while(|&b| b == b'_').count().min(3) as u8 * 4 + binding;
        let (names, size) = out.entry(FileAddr(sym.address())).or_default();
        if !names.iter().any(|(_, n)| n == name) {
            names.push((rank, name.to_string()));
        }
        *size = (*size).max(sym.size());
    }
    out
}

fn collect_functions(
    file: &object::File<'_>,
    segments: &[Segment],
    compat: &std::collections::HashMap<usize, String>,
) -> Vec<Function> {
    let in_code = |addr: FileAddr| {
        segments
            .iter()
            .any(|s| s.exec && addr >= s.vaddr && addr < s.vaddr + s.memsz)
    };
    // addr -> (candidates: (rank, name), size, source, ifunc)
    struct Entry {
        names: Vec<(u8, String)>,
        size: u64,
        source: FunctionSource,
        ifunc: bool,
    }
    let mut by_addr: BTreeMap<FileAddr, Entry> = BTreeMap::new();
    let tables = [
        (FunctionSource::Symtab, file.symbols()),
        (FunctionSource::Dynsym, file.dynamic_symbols()),
    ];
    for (source, symbols) in tables {
        for sym in symbols {
            let ifunc_type = matches!(sym.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info & 0xf == object::elf::STT_GNU_IFUNC);
            // object counts an IFUNC as no definition: it is one when it
            // has a section.
            let defined = sym.is_definition() || ifunc_type && !sym.is_undefined();
            if !(sym.kind() == SymbolKind::Text || ifunc_type) || !defined {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            // A compatibility version is named with it, never as the name
            // alone, which means the default version.
            let versioned;
            let name = match compat.get(&sym.index().0) {
                Some(v) if source == FunctionSource::Dynsym => {
                    versioned = format!("{name}@{v}");
                    versioned.as_str()
                }
                _ => name,
            };
            let addr = FileAddr(sym.address());
            if name.is_empty() || !in_code(addr) {
                continue;
            }
            let ifunc = matches!(sym.flags(), object::SymbolFlags::Elf { st_info, .. } if st_info & 0xf == object::elf::STT_GNU_IFUNC);
            // Prefer global names, then weak, then local; and names without leading underscores.
            // Prefer public-looking names (glibc's `puts` is a weak alias of
            // `_IO_puts`), then global over weak over local bindings.
            let binding = match (sym.is_global(), sym.is_weak()) {
                (true, false) => 0,
                (_, true) => 1,
                _ => 2,
            };
            let rank = name.bytes().take_while(|&b| b == b'_').count().min(3) as u8 * 4 + binding;
            let e = by_addr.entry(addr).or_insert(Entry {
                names: vec![],
                size: 0,
                source,
                ifunc,
            });
            if !e.names.iter().any(|(_, n)| n == name) {
                e.names.push((rank, name.to_string()));
            }
            e.size = e.size.max(sym.size());
            e.source = e.source.min(source);
            e.ifunc |= ifunc;
        }
    }
    // The PLT has unwind information but holds no function: its stubs are
    // entered by jumps, and its first one with a relocation index where a
    // return address would be.
    let plt = plt_ranges(file);
    // Functions the symbols name: an FDE that starts inside one, or just
    // before one (glibc's signal trampoline `__restore_rt` has its FDE
    // start a byte early, so unwinders find it from a return address
    // minus one), is not a function of its own.
    let named: Vec<(u64, u64)> = by_addr.iter().map(|(a, e)| (a.get(), e.size)).collect();
    let inside_named = |start: u64, len: u64| {
        let k = named.partition_point(|&(a, _)| a <= start);
        let within = k > 0 && {
            let (a, size) = named[k - 1];
            a < start && start < a.saturating_add(size)
        };
        let covers = named
            .get(k)
            .is_some_and(|&(a, _)| a < start.saturating_add(len));
        within || covers
    };
    for (start, len) in eh_frame_ranges(file) {
        if !in_code(start)
            || len == 0
            || plt.iter().any(|&(a, b)| (a..b).contains(&start.0))
            || (!by_addr.contains_key(&start) && inside_named(start.get(), len))
        {
            continue;
        }
        let e = by_addr.entry(start).or_insert(Entry {
            names: vec![(255, format!("sub_{start:x}"))],
            size: len,
            source: FunctionSource::EhFrame,
            ifunc: false,
        });
        if e.size == 0 {
            e.size = len;
        }
    }
    // A stripped file whose detached debug symbols are installed (Debian's
    // -dbg and -dbgsym packages, found by build id) names the code its own
    // tables leave as sub_ADDR: glibc's IFUNC implementations, static
    // functions. Names only: the functions stay those the file shows.
    // A debug symbol longer than its FDE (glibc's `clone3` ends its
    // unwind information before its `syscall`; the child's side has an FDE
    // of its own) gives the function its length, up to the next function.
    if file.symbols().next().is_none() {
        let names = debug_file_names(file);
        let starts: Vec<u64> = by_addr.keys().map(|a| a.get()).collect();
        for (addr, e) in by_addr.iter_mut() {
            if e.source == FunctionSource::EhFrame {
                if let Some((names, size)) = names.get(addr) {
                    e.names = names.clone();
                    let next = starts
                        .get(starts.partition_point(|&a| a <= addr.get()))
                        .copied()
                        .unwrap_or(u64::MAX);
                    let room = next.saturating_sub(addr.get());
                    e.size = e.size.max((*size).min(room));
                }
            }
        }
    }
    let addrs: Vec<FileAddr> = by_addr.keys().copied().collect();
    // Code sections: an unsized function ends with its section (`_init`,
    // zero-sized in `.init`, is not followed by `.plt`'s stubs).
    let text_sections: Vec<(u64, u64)> = file
        .sections()
        .filter(|s| s.kind() == object::SectionKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect();
    let mut out = Vec::with_capacity(by_addr.len());
    for (i, (addr, mut e)) in by_addr.into_iter().enumerate() {
        // Every function starts in an executable segment (`in_code`).
        let seg_end = segments
            .iter()
            .find(|s| s.exec && addr >= s.vaddr && addr < s.vaddr + s.memsz)
            .map_or(addr + 1, |s| s.vaddr + s.memsz);
        if e.size == 0 {
            // Unsized (hand-written assembly): up to the next function or
            // the end of its section (or segment).
            let section_end = text_sections
                .iter()
                .find(|&&(a, b)| (a..b).contains(&addr.get()))
                .map_or(seg_end, |&(_, b)| FileAddr(b));
            e.size = addrs
                .get(i + 1)
                .copied()
                .unwrap_or(seg_end)
                .min(seg_end)
                .min(section_end)
                - addr;
        }
        // A size the file gives (a symbol's, an FDE's) ends there at most,
        // so that `addr + size` is an address of the segment, never past
        // the end of the address space.
        e.size = e.size.min(seg_end - addr);
        e.names.sort();
        let mut names = e.names.into_iter().map(|(_, n)| n);
        let name = names.next().unwrap_or_default();
        out.push(Function {
            name,
            aliases: names.collect(),
            demangled: std::sync::OnceLock::new(),
            addr,
            size: e.size,
            source: e.source,
            ifunc: e.ifunc,
        });
    }
    out
}

/// The file's `.eh_frame` and the base addresses its pointers are
/// relative to; none if it has no such section.
pub(crate) fn eh_frame<'d>(
    file: &object::File<'d>,
) -> Option<(
    gimli::EhFrame<gimli::EndianSlice<'d, gimli::LittleEndian>>,
    gimli::BaseAddresses,
)> {
    let section = file.section_by_name(".eh_frame")?;
    let data = section.data().ok()?;
    let eh_frame = gimli::EhFrame::new(data, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    Some((eh_frame, bases))
}

/// (start, length) of every FDE in `.eh_frame` but signal trampolines.
fn eh_frame_ranges(file: &object::File<'_>) -> Vec<(FileAddr, u64)> {
    use gimli::UnwindSection;
    let Some((eh_frame, bases)) = eh_frame(file) else {
        return vec![];
    };
    let mut out = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) =
                partial.parse(|section, bases, offset| section.cie_from_offset(bases, offset))
            {
                // A signal trampoline (`__restore_rt`) is entered by the
                // kernel's return address only, and unwinders know it by
                // its bytes: never a function to instrument.
                if !fde.is_signal_trampoline() {
                    out.push((FileAddr(fde.initial_address()), fde.len()));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests;

/// The PLT's sections: link-time (start, end) of `.plt`, `.plt.got` and
/// `.plt.sec`.
fn plt_ranges(file: &object::File<'_>) -> Vec<(u64, u64)> {
    file.sections()
        .filter(|s| matches!(s.name(), Ok(".plt" | ".plt.got" | ".plt.sec")))
        .map(|s| (s.address(), s.address().saturating_add(s.size())))
        .collect()
}
