//! When the workload ran on its own and when weft held it: the times weft
//! held the workload's only live process, and where the workload began,
//! which `syscalls reexec` reads for its prediction.

/// The times weft held the workload's only live process, as TSC
/// intervals: a library load instrumented while the process waited in
/// the load hook, a new image instrumented while it was stopped at its
/// exec. The workload did nothing then that it would do without weft:
/// `syscalls reexec` takes them out of the rerun's span for its
/// prediction.
pub static SOLE_HOLDS: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// When the workload's first process stood at its `exec` (TSC), before
/// weft instrumented it: where `syscalls reexec`'s prediction begins, so
/// that the dynamic loader's work (reading the libraries, perhaps from the
/// disk under a memory limit) counts as it does in the program's own run.
pub static WORKLOAD_START: std::sync::Mutex<Option<u64>> = std::sync::Mutex::new(None);

/// Notes that the workload's first process stood at its `exec` at TSC
/// `at` (the first note only).
pub fn note_workload_start(at: u64) {
    WORKLOAD_START
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert(at);
}

/// Notes a hold of the workload's only live process, from TSC `from` to
/// now.
pub fn note_sole_hold(from: u64) {
    let to = weft_live::clock::tsc();
    SOLE_HOLDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((from, to));
}
