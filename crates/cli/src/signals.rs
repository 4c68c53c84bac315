//! weft's own signal handling: Ctrl-C and SIGTERM ask weft to finish
//! cleanly (detach, report); in `run` mode SIGTERM is passed to the child.
//! In flight mode SIGUSR2 asks for a dump of the event rings.
//!
//! Handlers are `signal-hook`'s (flags set from the handler, with
//! `SA_RESTART`); the two plain dispositions it does not offer, ignoring a
//! signal and restoring the default, go through `nix`.

use nix::sys::signal::{signal, SigHandler, Signal};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, LazyLock};
use weft_abi::signal::{SIGINT, SIGTERM, SIGUSR2};

static STOP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);
static DUMP: LazyLock<Arc<AtomicBool>> = LazyLock::new(Arc::default);
static CHILD: AtomicI32 = AtomicI32::new(0);

/// Sets `flag` whenever `sig` arrives.
fn set_flag_on(sig: i32, flag: &Arc<AtomicBool>) {
    // Fails only for signals that cannot be caught, which these are not.
    let _ = signal_hook::flag::register(sig, Arc::clone(flag));
}

/// Sets the disposition of `sig` to `SIG_IGN` or `SIG_DFL`.
fn set_disposition(sig: Signal, handler: SigHandler) {
    debug_assert!(matches!(handler, SigHandler::SigIgn | SigHandler::SigDfl));
    // SAFETY: no handler function is installed, only the kernel's ignore
    // or default action, so nothing runs in signal context.
    let _ = unsafe { signal(sig, handler) };
}

/// For `attach`: SIGINT and SIGTERM set the stop flag.
pub fn catch_stop_requests() {
    set_flag_on(SIGINT, &STOP);
    set_flag_on(SIGTERM, &STOP);
}

/// For `run`: Ctrl-C reaches the child through the terminal, so weft itself
/// ignores it and waits for the child; SIGTERM is forwarded to the child.
pub fn forward_to_child(pid: i32) {
    CHILD.store(pid, Ordering::SeqCst);
    set_disposition(Signal::SIGINT, SigHandler::SigIgn);
    set_flag_on(SIGTERM, &STOP);
    // SAFETY: the action only loads an atomic and calls kill(2), both
    // async-signal-safe; it neither allocates nor takes locks.
    let _ = unsafe {
        signal_hook::low_level::register(SIGTERM, || {
            let child = CHILD.load(Ordering::SeqCst);
            if child > 0 {
                // The pid is our own child.
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), Signal::SIGTERM);
            }
        })
    };
}

/// Flight mode: SIGUSR2 asks weft to dump the event rings.
pub fn catch_dump_requests() {
    set_flag_on(SIGUSR2, &DUMP);
}

/// Whether a dump was requested since the last call.
pub fn take_dump_request() -> bool {
    DUMP.swap(false, Ordering::SeqCst)
}

/// For commands that only print (inspect, events): end quietly, as other
/// Unix tools do, when the reader of the output goes away (`| head`). Not
/// for run and attach, which must always put the target back.
pub fn die_on_closed_output() {
    set_disposition(Signal::SIGPIPE, SigHandler::SigDfl);
}

/// The flag SIGINT and SIGTERM set after [`catch_stop_requests`].
pub fn stop_flag() -> &'static AtomicBool {
    &STOP
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
