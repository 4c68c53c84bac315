//! ELF images: what a file says about its functions, independent of any process.
//!
//! * [`Image`]: an x86-64 ELF executable or shared object loaded from disk,
//!   with its functions from `.symtab`, `.dynsym` and (for stripped code)
//!   `.eh_frame`, its loadable segments and file bytes by virtual address.
//! * [`Pattern`]: `[MODULE:]FUNCTION` globs such as `work`, `str*`,
//!   `libc.so.6:malloc`, `*:free`, with [`near_misses`] for error messages.
//! * [`demangle`]: C++ and Rust names made readable.
//! * [`FileAddr`]: a link-time virtual address.
//!
//! Every address this crate hands out or takes is a [`FileAddr`]; adding a
//! module's load bias (see [`Image::load_bias`]) gives the address in a
//! process, which is another type.

mod addr;
mod code_pointers;
mod demangle;
mod elf;
mod error;
mod event_sites;
mod file;
mod imports;
mod landing_pads;
mod pattern;
mod unwind;
mod usdt;

pub use addr::FileAddr;
pub use demangle::demangle;
pub use elf::{Function, FunctionSource, Image, ImageKind, Segment};
pub use error::{Error, Result};
pub use event_sites::{EventSiteInfo, EVENT_SITES, SITE_MAGIC, SITE_SIZE};
pub use file::leave_page_cache_as_found;
pub use imports::Export;
pub use landing_pads::LandingPad;
pub use pattern::{glob_match, near_misses, near_module_names, Pattern, VDSO_NAME};
pub use unwind::Frame;
pub use usdt::{parse_notes, UsdtProbe};
