//! The descriptor of a rich event site (`struct weft_event_site` in
//! `include/weft/event.h`). It is not in the shared region: the program
//! keeps one per `WEFT_EVENT` site in its ELF section `weft_events`, and
//! weft writes into it, in the running process, what the site needs to
//! reach the region: the event id, the ring geometry, the addresses of the
//! ring-mode words (see [`super::sync`]) and, last, the address of the ring
//! function (`crate::mini::ring_function`). Every field is 8 bytes.

/// `WEFT_EVENT_MAGIC`: "WEFTEVT1" in little-endian, the first field.
pub const MAGIC: u64 = u64::from_le_bytes(*b"WEFTEVT1");
/// The program's fields: the magic, then pointers to the provider, the
/// name and the field list (NUL-terminated strings).
pub const PROVIDER: u64 = 8;
/// See [`PROVIDER`].
pub const NAME: u64 = 16;
/// See [`PROVIDER`].
pub const FIELDS: u64 = 24;
/// `void *(*ring_of_thread)(void)`: null while the site is off; weft
/// writes it last to enable the site and clears it to disable it.
pub const RING_OF_THREAD: u64 = 32;
/// The event id. weft writes [`ID`] to [`CLOCK`] in one go, before
/// [`RING_OF_THREAD`].
pub const ID: u64 = 40;
/// Most bytes copied from each string or byte array (`--string-max`).
pub const CAP: u64 = 48;
/// `Header::ring_data`.
pub const RING_DATA: u64 = 56;
/// Address of the sync word [`super::sync::RING_WAIT_UNTIL`].
pub const WAIT_UNTIL: u64 = 64;
/// Address of the sync word [`super::sync::RING_OVERWRITE`].
pub const OVERWRITE: u64 = 72;
/// 0 for TSC timestamps, else the address of the vDSO's `clock_gettime`.
pub const CLOCK: u64 = 80;
/// Bytes of one descriptor.
pub const SIZE: u64 = 88;
