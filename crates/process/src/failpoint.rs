//! Fault injection for the kill-anywhere tests. With `WEFT_KILL_AT_STEP=N`
//! in its environment, weft kills itself with SIGKILL just before its Nth
//! change to a target: a write to its memory (through `/proc/PID/mem` or
//! the shared region), a write to a thread's registers, or a resume into a
//! remote system call. A test walks N over every step of an episode and
//! checks after each that the target runs on correctly, as if weft had
//! been killed from outside at that instant; `WEFT_KILL_SAY_WHERE` also
//! prints where the step was. Unset, a step costs one relaxed atomic load.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The step at which to die, read once from the environment.
fn kill_at() -> Option<u64> {
    static AT: OnceLock<Option<u64>> = OnceLock::new();
    *AT.get_or_init(|| {
        std::env::var("WEFT_KILL_AT_STEP")
            .ok()
            .and_then(|v| v.parse().ok())
    })
}

/// Counts one change to the target, and dies before it if it is the one.
pub fn step() {
    static DONE: AtomicU64 = AtomicU64::new(0);
    if let Some(at) = kill_at() {
        if DONE.fetch_add(1, Ordering::Relaxed) + 1 == at {
            if std::env::var_os("WEFT_KILL_SAY_WHERE").is_some() {
                eprintln!(
                    "weft: killed before step {at}:\n{}",
                    std::backtrace::Backtrace::force_capture()
                );
            }
            let _ =
                nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

/// Kills weft with SIGKILL here if `WEFT_KILL_AT` names this place (a
/// test switch, like `WEFT_KILL_AT_STEP`, for moments that are no change
/// to a target: `fork` is weft holding a new child stopped).
pub fn kill_at_place(place: &str) {
    if std::env::var("WEFT_KILL_AT").is_ok_and(|p| p == place) {
        let _ = nix::sys::signal::kill(nix::unistd::getpid(), nix::sys::signal::Signal::SIGKILL);
    }
}
