//! weft's own ABI, not the kernel's: the layout of a re-execution *feed*,
//! the file that `weft syscalls reexec` builds from a record and maps
//! `MAP_SHARED` into every process of the rerun, and that the code weft
//! generates at each `syscall` instruction (`weft_patch::mini`'s feed
//! primitive) reads and updates without a lock or a system call.
//!
//! All fields are little-endian u64, at offsets from the file's start:
//!
//! * the header ([`MAGIC`], [`VERSION`], where the tables are, the
//!   divergence block, written once by the first thread that diverges);
//! * [`THREADS`] thread feeds of [`THREAD_SIZE`] bytes: one per recorded
//!   ring (a thread, plus the calls a `vfork` child made on its parent's
//!   thread before its `execve`), each with its calls and a cursor its
//!   thread alone advances;
//! * the calls, [`CALL_SIZE`] bytes each: the recorded number, what to
//!   compare, whether to answer with the recorded result instead of
//!   making the call, the bytes to write into the program's memory then,
//!   the feed of a child it made, the calls of other threads it waits
//!   for (a list of [`WAIT_ENTRY`]-byte entries);
//! * the id map, [`MAP_ENTRY`] bytes an entry: a thread of the rerun (its
//!   kernel id) and the feed it follows. weft writes the first process's
//!   entry; a thread that makes a process or a thread adds its child's.
//!   An entry is written feed first, then id, after its index was taken
//!   with `lock xadd` on [`MAP_USED`]: a reader that sees the id sees the
//!   feed (x86 keeps stores in order).
//!
//! A call waits, at its `syscall` instruction, until each thread feed it
//! waits for has [`THREAD_DONE`] at least [`WAIT_UNTIL`]: spinning a
//! while, then sleeping on that word with `futex` (a shared one: the file
//! is mapped in every process), [`WAIT_TIMEOUT`] at a time, having said
//! so in [`THREAD_WAITERS`]; a thread whose call returns wakes the
//! sleepers only when there are some, so a rerun without waits makes no
//! system call of weft's.

/// `WEFTFEED`, the first u64.
pub const MAGIC: u64 = u64::from_le_bytes(*b"WEFTFEED");
/// Layout version, the second u64.
pub const VERSION: u64 = 8;

/// Header: the version.
pub const HEADER_VERSION: u64 = 8;
/// Header: the number of thread feeds.
pub const THREAD_COUNT: u64 = 16;
/// Header: offset of the first thread feed.
pub const THREADS: u64 = 24;
/// Header: offset of the id map.
pub const MAP: u64 = 32;
/// Header: entries the id map can hold.
pub const MAP_CAPACITY: u64 = 40;
/// Header: entries of the id map taken (`lock xadd`).
pub const MAP_USED: u64 = 48;
/// Header: 0, or 1 once a thread diverged (`lock cmpxchg`): the fields
/// from [`DIVERGENCE_KIND`] on are then its.
pub const DIVERGED: u64 = 56;
/// Divergence: what happened ([`DIFFERS`], [`BEYOND`], [`UNKNOWN_THREAD`]).
pub const DIVERGENCE_KIND: u64 = 64;
/// Divergence: the thread feed's index (for [`UNKNOWN_THREAD`], none).
pub const DIVERGENCE_FEED: u64 = 72;
/// Divergence: the index of the call in its feed.
pub const DIVERGENCE_CALL: u64 = 80;
/// Divergence: the thread's kernel id.
pub const DIVERGENCE_TID: u64 = 88;
/// Divergence: the number the program asked for (`rax`).
pub const DIVERGENCE_NR: u64 = 96;
/// Divergence: its six argument registers.
pub const DIVERGENCE_ARGS: u64 = 104;
/// Divergence: the site (the probe's number for its `syscall` instruction).
pub const DIVERGENCE_SITE: u64 = 152;
/// Divergence: `rsp` at the `syscall` instruction.
pub const DIVERGENCE_RSP: u64 = 160;
/// Divergence: `rbx`, `rbp`, `r12`, `r13`, `r14`, `r15` there (for an
/// unwinder).
pub const DIVERGENCE_CALLEE_SAVED: u64 = 168;
/// Header: the `struct timespec` a sleeping wait gives `futex` (10 ms).
pub const WAIT_TIMEOUT: u64 = 224;
/// Header: 1 when the rerun runs the program's handlers where the record
/// has their deliveries, and drops the signals its own processes send them
/// (`weft_abi::delivery::RERUN`): a call such a dropped signal interrupts
/// (`EINTR`) where the recorded one was not is then made again by the
/// feed, unseen by the program; else the program's own retry stands for
/// the recorded call.
pub const SIGNALS_FED: u64 = 240;
/// Bytes of the header.
pub const HEADER_SIZE: u64 = 256;

/// The call is not the recorded one: another number, or a compared
/// argument differs.
pub const DIFFERS: u64 = 1;
/// The thread makes a call after its recorded calls ended.
pub const BEYOND: u64 = 2;
/// A thread the id map never named (made outside the record's order).
pub const UNKNOWN_THREAD: u64 = 3;

/// Thread feed: the recorded thread's id.
pub const THREAD_TID: u64 = 0;
/// Thread feed: offset of its first call.
pub const THREAD_CALLS: u64 = 8;
/// Thread feed: its number of calls.
pub const THREAD_COUNT_CALLS: u64 = 16;
/// Thread feed: the next call's index (its thread advances it).
pub const THREAD_CURSOR: u64 = 24;
/// Thread feed: calls answered with their recorded result.
pub const THREAD_ANSWERED: u64 = 32;
/// Thread feed: the rerun's thread that follows it (its kernel id, once
/// it made its first call).
pub const THREAD_RERUN_TID: u64 = 40;
/// Thread feed: 1 once its thread waits for weft after a divergence
/// (its own, or another thread's: every thread stops at its next call).
pub const THREAD_STOPPED: u64 = 48;
/// Thread feed: how many of its calls returned (its thread sets it to
/// [`THREAD_CURSOR`] after each call, with `xchg`).
pub const THREAD_DONE: u64 = 56;
/// Thread feed: threads asleep on its [`THREAD_DONE`] (`lock add`).
pub const THREAD_WAITERS: u64 = 64;
/// Thread feed: waits of its calls that ended without their predecessor
/// (after [`WAIT_ROUNDS`] sleeps, or a divergence elsewhere).
pub const THREAD_WAITS_GIVEN_UP: u64 = 72;
/// Thread feed: offset of its *extra call*, a call entry (flags 0) that
/// stands for a `futex` call the rerun's thread makes where its record has
/// another call: whether a thread waits on a futex, or wakes one, is
/// timing (the other thread had not let go of a lock yet, had not ended
/// yet for a join), not the program's logic. Such a call is made, and the
/// thread's next call compared with the same recorded one again.
pub const THREAD_EXTRA: u64 = 80;
/// Thread feed: futex calls made as extra calls.
pub const THREAD_EXTRAS_MADE: u64 = 88;
/// Thread feed: recorded futex calls passed over, where the rerun's
/// thread made the recorded call after them instead (the same timing, the
/// other way).
pub const THREAD_FUTEXES_SKIPPED: u64 = 96;
/// Thread feed: recorded signal deliveries its thread raised
/// ([`RAISE_DURING`]).
pub const THREAD_RAISED: u64 = 104;
/// Thread feed: the address of the delivery ([`RAISE_AT_RIP`]) that a
/// hardware breakpoint its thread armed waits to raise, 0 when none is
/// armed (version 8).
pub const THREAD_ARMED: u64 = 112;
/// Thread feed: the breakpoint's perf event descriptor, while one is
/// armed.
pub const THREAD_ARMED_FD: u64 = 120;
/// Bytes of a thread feed (a power of two).
pub const THREAD_SIZE: u64 = 128;
/// The high 16 bits of an armed breakpoint's `sig_data`, whose low 48
/// are its thread feed's address: the SIGTRAP it sends is weft's.
pub const BREAKPOINT_MARK: u64 = 0x5746 << 48;

/// Call: the recorded number.
pub const CALL_NR: u64 = 0;
/// Call: [`ANSWER`], [`HAS_CHILD`], [`TRANSLATE_IDS`], the arguments to
/// compare (bit 8 + i: argument i, from 0) and the argument to fill (bits
/// 16..24: 1 + the argument, 0 for none).
pub const CALL_FLAGS: u64 = 8;
/// Call: the six recorded argument registers.
pub const CALL_ARGS: u64 = 16;
/// Call: the recorded result.
pub const CALL_RESULT: u64 = 64;
/// Call: offset of the bytes to write into the program's memory.
pub const CALL_DATA: u64 = 72;
/// Call: how many.
pub const CALL_DATA_LEN: u64 = 80;
/// Call: with [`HAS_CHILD`], the index of the feed of the thread or
/// process it made (the program gets the recorded id, [`CALL_RESULT`],
/// as the result).
pub const CALL_CHILD: u64 = 88;
/// Call: offset of the entries of the calls it waits for.
pub const CALL_WAITS: u64 = 96;
/// Call: how many.
pub const CALL_WAIT_COUNT: u64 = 104;
/// Call: the TSC when the rerun made it (after its waits), 0 until then.
pub const CALL_RERUN_BEGAN: u64 = 112;
/// Call: the TSC when it returned in the rerun, 0 until then.
pub const CALL_RERUN_ENDED: u64 = 120;
/// Call: with [`CLAMP`], the count the rerun asked for, given back to it
/// after the call.
pub const CALL_RERUN_COUNT: u64 = 128;
/// Call: the result it returned in the rerun (valid once
/// [`CALL_RERUN_ENDED`] is).
pub const CALL_RERUN_RESULT: u64 = 136;
/// Call: the program's first three argument registers (`rdi`, `rsi`,
/// `rdx`) as it made a call whose arguments the feed changes
/// ([`TRANSLATE_IDS`], [`REAP`]), given back to it after the call: the
/// kernel keeps them across `syscall`, and code may rely on that.
pub const CALL_GIVEN_ARGS: u64 = 144;
/// Call: the call its thread had under way when this one began (its
/// slot's current call, 0 for none), put back when this one returns: a
/// signal handler's calls come between a call's return and the code
/// after its instruction.
pub const CALL_OUTER: u64 = 168;
/// Bytes of a call.
pub const CALL_SIZE: u64 = 176;

/// Wait entry: the index of the thread feed waited for.
pub const WAIT_FEED: u64 = 0;
/// Wait entry: the [`THREAD_DONE`] it waits for (the index of the call
/// waited for, plus one).
pub const WAIT_UNTIL: u64 = 8;
/// Bytes of a wait entry.
pub const WAIT_ENTRY: u64 = 16;
/// Sleeps of [`WAIT_TIMEOUT`] a wait takes at most (10 s) before its
/// call goes on without its predecessor.
pub const WAIT_ROUNDS: u32 = 1000;
/// Spins (`pause`) before a wait sleeps.
pub const WAIT_SPINS: u32 = 1 << 12;

/// Flag: the call is not made; the program gets the recorded result and
/// bytes.
pub const ANSWER: u64 = 1;
/// Flag: the call made a thread or a process, followed by feed
/// [`CALL_CHILD`].
pub const HAS_CHILD: u64 = 2;
/// Flag: the first two arguments may be thread or process ids (`kill`,
/// `tgkill`, `wait4`, ...): a recorded id the rerun has a thread for
/// becomes that thread's.
pub const TRANSLATE_IDS: u64 = 4;
/// Flag: the result is a process or thread id (`wait4`, `waitid`): the
/// rerun's id of a thread the record has becomes the recorded one.
pub const TRANSLATE_RESULT: u64 = 8;
/// Flag: a read from a pipe or a stream between the workload's processes
/// that took some bytes: the rerun asks for no more than it took (its
/// third argument, lowered for the call only), and one that gets fewer
/// reads on until it has them (or the end, or an error), so that each
/// read takes the recorded bytes.
pub const CLAMP: u64 = 16;
/// Flag: the argument to fill is an array of `struct iovec`, with as
/// many entries as the next argument says (`readv`): the recorded bytes
/// go through it, each entry taking its length's share in turn.
pub const SCATTER: u64 = 32;
/// Flag: a `wait4` that reaped a child in the record: the rerun's waits
/// for that child alone (the recorded id, [`CALL_RESULT`], as its first
/// argument, translated; `WNOHANG` cleared), so that it reaps the same
/// child the record did, once that child has ended, whichever ended
/// first in the rerun.
pub const REAP: u64 = 64;
/// Flag: a call the thread left in the record without returning (a
/// signal handler's `siglongjmp` out of it, a cancellation): the rerun
/// makes `pause` instead, which waits for the rerun's signal to take the
/// thread out of it as the record's did, and neither takes input nor
/// does anything else the recorded call had not done.
pub const LEFT: u64 = 128;
/// The call the rerun makes for a [`LEFT`] one: `pause`.
pub const PAUSE: u64 = 34;
/// Flag: a call that made a process the way `fork` does (`fork`, or
/// `clone` with no stack and without `CLONE_VM`, `CLONE_VFORK` or
/// `CLONE_THREAD`), whose child is to get its recorded pid: the call is
/// made as `clone3` with `set_tid` pointing at [`CALL_RESULT`], from the
/// `clone_args` ([`CLONE_ARGS_SIZE`] bytes) at [`CALL_DATA`]; the
/// program's `rdi`, `rsi` and number are kept in [`CALL_GIVEN_ARGS`] to
/// give back, and to make the call as the program asked when the kernel
/// refuses the id (taken, or weft is not root). Above the compared
/// arguments' and the filled argument's bytes.
pub const EXACT_CHILD: u64 = 1 << 24;
/// Flags of a recorded signal delivery (a call whose number is
/// `weft_abi::delivery::BASE` plus the signal, its arguments the
/// delivery's record), which the thread raises itself when its cursor
/// reaches it (`rt_tgsigqueueinfo` of the signal to itself, with the
/// recorded `si_code` and sender, `si_errno` `weft_abi::delivery::RAISED`,
/// so that the delivery stub runs the program's handler): before the call
/// before it in the feed is made, when the signal came while that call
/// was under way (interrupted and restarted, or left).
pub const RAISE_DURING: u64 = 1 << 25;
/// A delivery raised at the return of the call before it (the signal came
/// as that call returned: with its result, or `EINTR`).
pub const RAISE_AT_RETURN: u64 = 1 << 26;
/// A delivery raised before the thread's next call (the signal came while
/// it ran its own code).
pub const RAISE_NEXT: u64 = 1 << 27;
/// A delivery raised where the record's signal interrupted the program's
/// own code, after the call before it returned and before the next: at
/// that call's return the thread arms a hardware breakpoint at the
/// recorded `rip` (the delivery's first argument) and the SIGTRAP handler
/// raises the delivery when the thread gets there, before the instruction
/// runs. The thread's next call, if it comes first, takes the breakpoint
/// off and raises it there; a breakpoint that cannot be armed raises it
/// at once (version 8).
pub const RAISE_AT_RIP: u64 = 1 << 29;
/// A delivery raised right after the one before it in the feed, once
/// that one's handler returned, by the code that raised that one (the
/// second signal came where the first did, as the first's handler
/// returned: the same interrupted `rip` and `rax`), whatever calls that
/// handler made between (version 8).
pub const RAISE_WITH_PREVIOUS: u64 = 1 << 30;
/// Flag of a wait that installs a signal mask (`rt_sigsuspend`, `ppoll`,
/// ...) which the delivery after it cut short (`EINTR`), raised before it
/// ([`RAISE_DURING`]): if that signal came at once (the program does not
/// block it), the wait would wait for another, so it is answered with its
/// recorded `EINTR` instead; if it is still pending, the wait's own mask
/// lets it in, as in the record.
pub const MASKED_WAIT: u64 = 1 << 28;
/// Bytes of `struct clone_args` up to `cgroup` (`CLONE_ARGS_SIZE_VER2`).
pub const CLONE_ARGS_SIZE: u64 = 88;
/// Flags: first bit of the compared arguments' mask.
pub const COMPARE_SHIFT: u64 = 8;
/// Flags: first bit of 1 + the argument to fill.
pub const FILL_SHIFT: u64 = 16;

/// Id map entry: the rerun thread's kernel id.
pub const ENTRY_TID: u64 = 0;
/// Id map entry: 1 + the index of the feed it follows.
pub const ENTRY_FEED: u64 = 8;
/// Bytes of an id map entry.
pub const MAP_ENTRY: u64 = 16;

// The parts of each record do not overlap.
const _: () = assert!(DIVERGENCE_CALLEE_SAVED + 6 * 8 <= WAIT_TIMEOUT);
const _: () = assert!(WAIT_TIMEOUT + 16 <= SIGNALS_FED && SIGNALS_FED + 8 <= HEADER_SIZE);
const _: () = assert!(THREAD_WAITS_GIVEN_UP + 8 <= THREAD_SIZE);
const _: () = assert!(THREAD_SIZE.is_power_of_two());
const _: () = assert!(EXACT_CHILD >= 1 << (FILL_SHIFT + 8) && LEFT < 1 << COMPARE_SHIFT);
const _: () = assert!(DIVERGENCE_ARGS + 6 * 8 == DIVERGENCE_SITE);
const _: () = assert!(THREAD_STOPPED + 8 <= THREAD_SIZE);
const _: () = assert!(THREAD_RAISED + 8 <= THREAD_SIZE && THREAD_FUTEXES_SKIPPED < THREAD_RAISED);
const _: () = assert!(THREAD_RAISED < THREAD_ARMED && THREAD_ARMED_FD + 8 <= THREAD_SIZE);
const _: () = assert!(RAISE_DURING > EXACT_CHILD && RAISE_WITH_PREVIOUS < 1 << 31);
const _: () = assert!(CALL_ARGS + 6 * 8 == CALL_RESULT);
const _: () = assert!(CALL_CHILD + 8 <= CALL_WAITS);
const _: () = assert!(CALL_WAIT_COUNT + 8 <= CALL_RERUN_BEGAN);
const _: () = assert!(CALL_RERUN_ENDED + 8 <= CALL_RERUN_COUNT);
const _: () = assert!(CALL_RERUN_COUNT + 8 <= CALL_RERUN_RESULT);
const _: () = assert!(CALL_RERUN_RESULT + 8 <= CALL_GIVEN_ARGS);
const _: () = assert!(CALL_GIVEN_ARGS + 3 * 8 <= CALL_OUTER);
const _: () = assert!(CALL_OUTER + 8 <= CALL_SIZE);
