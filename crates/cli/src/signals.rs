//! weft's own signal handling: Ctrl-C and SIGTERM ask weft to finish
//! cleanly (detach, report); in `run` mode SIGTERM is passed to the child.
//! In flight mode SIGUSR2 asks for a dump of the event rings.

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);
static DUMP: AtomicBool = AtomicBool::new(false);
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_stop(sig: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
    let child = CHILD.load(Ordering::SeqCst);
    if child > 0 && sig == libc::SIGTERM {
        // SAFETY: kill is async-signal-safe; the pid is our own child.
        unsafe { libc::kill(child, sig) };
    }
}

fn install(sig: libc::c_int, handler: libc::sighandler_t) {
    // SAFETY: a zeroed sigaction with a valid handler address or SIG_IGN;
    // no SA_SIGINFO, so the one-argument handler signature matches.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = handler;
        act.sa_flags = libc::SA_RESTART;
        libc::sigaction(sig, &act, std::ptr::null_mut());
    }
}

/// For `attach`: SIGINT and SIGTERM set the stop flag.
pub fn catch_stop_requests() {
    let h = on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
    install(libc::SIGINT, h);
    install(libc::SIGTERM, h);
}

/// For `run`: Ctrl-C reaches the child through the terminal, so weft itself
/// ignores it and waits for the child; SIGTERM is forwarded to the child.
pub fn forward_to_child(pid: i32) {
    CHILD.store(pid, Ordering::SeqCst);
    install(libc::SIGINT, libc::SIG_IGN);
    install(
        libc::SIGTERM,
        on_stop as extern "C" fn(libc::c_int) as libc::sighandler_t,
    );
}

extern "C" fn on_dump(_: libc::c_int) {
    DUMP.store(true, Ordering::SeqCst);
}

/// Flight mode: SIGUSR2 asks weft to dump the event rings.
pub fn catch_dump_requests() {
    install(
        libc::SIGUSR2,
        on_dump as extern "C" fn(libc::c_int) as libc::sighandler_t,
    );
}

/// Whether a dump was requested since the last call.
pub fn take_dump_request() -> bool {
    DUMP.swap(false, Ordering::SeqCst)
}

/// For commands that only print (inspect, events): end quietly, as other
/// Unix tools do, when the reader of the output goes away (`| head`). Not
/// for run and attach, which must always put the target back.
pub fn die_on_closed_output() {
    install(libc::SIGPIPE, libc::SIG_DFL);
}

/// Whether a stop was requested.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::SeqCst)
}
