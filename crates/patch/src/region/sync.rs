//! The sync page: words weft and the target's generated code use to wait
//! for each other (the library-load handshake, `crate::load_hook`) and to
//! choose what a writer does with a full ring (see [`super::ring`]).

/// Library-load handshake: the generation (u32) the hook increments, and
/// wakes weft on (`FUTEX_WAKE`), once per library load.
pub const GENERATION: u64 = 0;
/// Library-load handshake: the generation (u32) weft has instrumented; the
/// hook waits (`FUTEX_WAIT`) until it reaches its own.
pub const ACK: u64 = 4;
/// Library-load handshake: 1 (u32) while weft answers, 0 once it has
/// detached, so a forked child that keeps the hook loads libraries without
/// waiting.
pub const LISTENING: u64 = 8;
/// A word (u64) that code after a call a program made for its point
/// writes 0 to when the thread has no block of its own: such a program
/// returns with r11 at this word less `threads::RETURNED`, where a thread
/// with a block has its block (see `threads::RETURNED`). Version 15.
pub const RETURNED_SCRATCH: u64 = 16;
/// Block mode: a TSC value until which a writer that finds its ring
/// full waits for weft to make room (yielding the processor with
/// `sched_yield` between looks); 0 means
/// discard mode. weft moves it forward at every drain, so writers stop
/// waiting soon after weft stops draining or dies.
pub const RING_WAIT_UNTIL: u64 = 64;
/// Flight mode when non-zero: a writer that finds its ring full
/// overwrites the oldest records (counting them as dropped) instead of
/// dropping the new one. weft then never consumes while tracing; it
/// reads the rings when it dumps them.
pub const RING_OVERWRITE: u64 = 72;
/// Executions of per-thread instrumentation that found every thread
/// slot taken, so recorded nothing (counted with `lock add`).
pub const NO_SLOT: u64 = 80;
/// 1 once weft has finished with the region but left it mapped (its
/// SIGTRAP handler kept for a queued trap, rich event rings, code a thread
/// was still inside): no weft uses it again, and the next attach takes it
/// out once nothing in the target can. 0 while a weft uses it, or if weft
/// died before finishing (its splices may still lead into it).
pub const LEFT_BEHIND: u64 = 88;
/// The pid of the weft that owns the region (u64), written when weft
/// creates it. With [`OWNER_START`] it tells a region whose weft died
/// (its splices still in place, [`LEFT_BEHIND`] 0) from one in use.
pub const OWNER_PID: u64 = 96;
/// When the owner started: field 22 of `/proc/PID/stat` (clock ticks since
/// boot), so a pid reused by another process is not taken for the owner.
pub const OWNER_START: u64 = 104;
/// The inode of the owner's pid namespace: a weft in another namespace
/// reads [`OWNER_PID`] as another process, so it leaves the region alone.
pub const OWNER_PIDNS: u64 = 112;
/// Address (u64) of the process's return stacks (see [`super::returns`]),
/// private memory that weft maps when a function first needs its return
/// hooked; 0 until then. Version 7.
pub const RETURN_STACKS: u64 = 120;
/// Address (u64) at which the process maps the per-thread CPU clock
/// (`weft_abi::vclock`, [`weft_abi::vclock::MAP_SIZE`] bytes), which weft
/// maps when a CPU timer is first placed; 0 until then. Version 8.
pub const CPU_CLOCK: u64 = 128;
/// Where the C library keeps a thread's kernel id (u32, an offset from the
/// thread pointer like `ThreadTable::tid_offset`), for code weft placed
/// before the program had set up its thread pointer: 0 until weft has
/// found it (at the program's entry), and that code then takes each
/// thread's id from `gettid` and its slot without checking the id.
/// Version 9.
pub const TID_OFFSET: u64 = 136;
/// 1 + the index of the slot claimed under the start-up thread control
/// block ([`STARTUP_TCB`]), 0 if none or once handed over: the first slot
/// the same thread claims under its real thread pointer takes over that
/// slot's timers and counters (its CPU time, its place in a re-execution
/// feed), so the thread's state goes on across the switch. Version 9.
pub const STARTUP_SLOT: u64 = 144;
/// Syscall User Dispatch (`crate::dispatch`): the start (u64) of the
/// range whose system calls the kernel runs, the code area of the cluster
/// holding weft's SIGSYS handler; every call made from outside it goes to
/// that handler. Version 10.
pub const DISPATCH_START: u64 = 152;
/// The length (u64) of that range; 0 while the process's calls are not
/// dispatched. A new thread or process, which the kernel does not give its
/// creator's setting, turns dispatch on with these two words.
pub const DISPATCH_LEN: u64 = 160;
/// The SIGSYS handler's table, at the trap table's offsets
/// (`super::trap_table`): the program's own SIGSYS action at
/// `DISPATCH_TABLE + OLD_ACTION` (kept here, never given to the kernel,
/// which keeps weft's), a default action at `DISPATCH_TABLE +
/// DEFAULT_ACTION`. Version 10.
pub const DISPATCH_TABLE: u64 = 168;
/// Ranges whose system calls the SIGSYS handler runs without recording
/// them: [`UNRECORDED_RANGE_COUNT`] pairs of u64 (start, end; 0, 0 unused),
/// the code areas of weft's other clusters (whose code records the calls
/// it makes, or makes its own) and the vDSO. Version 10.
pub const UNRECORDED_RANGES: u64 = 288;
/// Entries of [`UNRECORDED_RANGES`].
pub const UNRECORDED_RANGE_COUNT: u64 = 16;
/// The calls the SIGSYS handler recorded (u64): the handler adds 1 for
/// each (`lock xadd`) and writes the address it was made from at entry
/// `count % DISPATCH_SEEN_COUNT` of [`DISPATCH_SEEN`], so weft sees which
/// sites are busy and rewrites them. Version 10.
pub const DISPATCH_SEEN_HEAD: u64 = 544;
/// The last [`DISPATCH_SEEN_COUNT`] sites (u64 each) of dispatched calls.
pub const DISPATCH_SEEN: u64 = 552;
/// Entries of [`DISPATCH_SEEN`] (a power of two).
pub const DISPATCH_SEEN_COUNT: u64 = 128;
/// The code areas whose unwind tables the unwinder's hook reads
/// ([`crate::unwind`]): [`UNWIND_AREA_COUNT`] u64, each the first byte of
/// a cluster's code area, 0 after the last. Version 11.
pub const UNWIND_AREAS: u64 = 1576;
/// Entries of [`UNWIND_AREAS`].
pub const UNWIND_AREA_COUNT: u64 = 16;
/// The start-up thread control block: a program starts with no thread
/// pointer (`fs` base 0) until its dynamic loader, or a static program's
/// start-up code, sets one up. weft points `fs` here when it places
/// probes before that, at the program's first instruction: its first word
/// is its own address (the key a thread's slot is found by), the rest is
/// zero, up to the end of the page. Version 9.
pub const STARTUP_TCB: u64 = 2048;
/// Bytes of the start-up thread control block that generated code may
/// read (`fs:0` up to the thread-id offsets it tries).
pub const STARTUP_TCB_SIZE: u64 = 2048;

/// The sync area's second page (version 14): the signal actions the
/// program installed, where weft's SIGSYS handler puts its delivery stub
/// in front of them (`crate::dispatch`, `weft_abi::delivery`). What the
/// stub does: `weft_abi::delivery::OFF`, `RECORD` or `RERUN` (u64).
pub const SIGNAL_MODE: u64 = 4096;
/// The pid (u64) of the process whose actions [`SIGNAL_ACTIONS`] holds: a
/// `vfork` child, which shares the memory but has actions of its own,
/// installs its own as they are.
pub const SIGNAL_OWNER: u64 = 4104;
/// Where the delivery stub finds the thread's block, to put off a signal
/// that comes while the thread writes a record (`threads::DEFERRED`): the
/// thread table's address (its keys; 0: not known), its slots and the
/// bytes of a block (u64 each).
pub const SIGNAL_THREADS: u64 = 4112;
/// See [`SIGNAL_THREADS`].
pub const SIGNAL_SLOTS: u64 = 4120;
/// See [`SIGNAL_THREADS`].
pub const SIGNAL_BLOCK: u64 = 4128;
/// The SIGSYS handler's direct entry (u64; 0 while there is none): code
/// that a rewritten site's program calls to hand its call to the handler
/// as if dispatch had sent it there (`weft_plan::Primitive::ThroughHandler`,
/// `crate::dispatch`). Version 16.
pub const DISPATCH_DIRECT: u64 = 4136;
/// Non-zero once the process is *settled* (u64, version 16): every
/// `syscall` site weft found is rewritten and dispatch is off, so a new
/// thread or process leaves it off (`Primitive::EnableDispatch`).
pub const DISPATCH_SETTLED: u64 = 4144;
/// The program's action of signal `s` at `SIGNAL_ACTIONS + 32 * s`, as
/// it last installed it (a kernel `struct sigaction`): the stub chains to
/// its handler. A handler of 0 or 1 (`SIG_DFL`, `SIG_IGN`): the kernel
/// holds the program's action itself.
pub const SIGNAL_ACTIONS: u64 = 4160;
/// Bytes of the sync area: two pages.
pub const SIZE: u64 = 8192;
