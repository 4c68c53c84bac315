//! Pairing each call's entry event with its return event, per thread.

use std::collections::HashMap;

/// One system call as captured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// The calling thread.
    pub tid: i32,
    /// The thread whose ring recorded it: the calling thread, but for a
    /// child that ran on its parent's thread (`vfork`, `posix_spawn`)
    /// before its `execve`, whose calls its parent's ring holds.
    pub ring: i32,
    /// TSC at the `syscall` instruction.
    pub entry_tsc: u64,
    /// The thread's user CPU time (ns) from its first call to this one,
    /// read from the per-thread CPU clock (preemption and time in the
    /// kernel taken out); none when the clock was not there.
    pub user_ns: Option<u64>,
    /// Made by the dynamic loader's code (`ld-linux*`): the calls that
    /// map a new image's libraries, before weft instruments them, and
    /// `dlopen`'s.
    pub loader: bool,
    /// The call's number (`rax` at the instruction).
    pub nr: u64,
    /// The vDSO answered it, in the program, without the kernel (see
    /// [`crate::VDSO_BIT`]); `strace` does not see such calls.
    pub vdso: bool,
    /// Its six argument registers.
    pub args: [u64; 6],
    /// Its return: none for a call that does not return (`exit`,
    /// `exit_group`), had not returned when the capture ended, or that its
    /// thread left without a known result ([`left_with_result`] has one).
    pub exit: Option<Return>,
    /// The program's memory the call read or wrote, as its return
    /// recorded it.
    pub buffers: Vec<Buffer>,
}

/// What a call's buffer held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// A path the call named (a string).
    Path,
    /// Bytes the call wrote out (`write`'s buffer).
    Sent,
    /// Bytes the kernel wrote into the program's memory (`read`'s).
    Filled,
    /// The `iovec` array of a vectored call (`readv`, `writev`,
    /// `recvmsg`'s and `sendmsg`'s `msg_iov`): its entries' addresses and
    /// lengths, which split its `Filled` or `Sent` bytes.
    Iovecs,
    /// A message's socket address (`msg_name`): the peer's, filled by
    /// `recvmsg`; the destination `sendmsg` read.
    Address,
    /// A message's control data (`msg_control`): what `recvmsg` filled,
    /// what `sendmsg` sent (`SCM_RIGHTS`' descriptors, credentials).
    Control,
    /// Flags the kernel set in a structure the call filled (`recvmsg`'s
    /// `msg_flags`), as eight little-endian bytes.
    Flags,
    /// The arguments an `execve` that succeeded gave its new image (each
    /// string followed by a NUL), as weft read them from the image.
    Argv,
    /// How many environment variables it gave (eight little-endian
    /// bytes).
    Environment,
}

/// One of a call's buffers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buffer {
    /// Which kind.
    pub what: Memory,
    /// The argument (0 to 5) holding its address.
    pub arg: usize,
    /// The bytes (at most [`crate::DATA_MAX`]).
    pub bytes: Vec<u8>,
    /// There were more than were recorded.
    pub truncated: bool,
}

/// How a call returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Return {
    /// TSC after the `syscall` instruction; none for an `execve` that
    /// succeeded (the new image does not come back to the old one's
    /// return, and its first call says it succeeded), and for a call its
    /// thread left, whose result its signal frame gave
    /// ([`left_with_result`]).
    pub tsc: Option<u64>,
    /// `rax`: the result, or minus the error number.
    pub result: i64,
}

/// Whether a call is one its thread left (a signal handler jumped out of
/// it) whose result the signal frame gave: it has a return without an
/// instant, as only a successful `execve` has otherwise.
pub fn left_with_result(c: &Call) -> bool {
    c.exit.is_some_and(|e| e.tsc.is_none()) && !is_exec(c.nr)
}

/// Whether `c` is the record of a signal's delivery to its thread
/// (`weft_abi::delivery`), not a call: before the program's handler ran.
pub fn is_delivery(c: &Call) -> bool {
    weft_abi::delivery::signal(c.nr).is_some()
}

/// `execve` and `execveat`.
const EXECS: [u64; 2] = [59, 322];

/// Whether call `nr` is `execve` or `execveat`.
pub fn is_exec(nr: u64) -> bool {
    EXECS.contains(&nr)
}
/// Calls that do not return to their thread when they succeed:
/// `rt_sigreturn`, `execve`, `exit`, `exit_group`, `execveat`. Any other
/// call with no return that its thread followed with others was left
/// (a signal handler's `siglongjmp` out of it, a cancellation).
pub(crate) const NO_RETURN: [u64; 5] = [15, 59, 60, 231, 322];

/// `exit` and `exit_group`, which never return.
pub(crate) const EXITS: [u64; 2] = [60, 231];
/// `clone`, `vfork` and `clone3`: a child that shares its parent's memory
/// returns 0 from them on its parent's thread pointer.
const FORKS: [u64; 3] = [56, 58, 435];

/// One captured event, as [`calls`] reads it.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// At a `syscall` instruction: `rax` and the six argument registers,
    /// and the thread's user CPU time if recorded.
    Entry(&'a [u64]),
    /// After it: `rax`, and the buffers recorded.
    Exit(u64, Vec<Buffer>),
}

/// The calls of a stream of events (thread, TSC, event) in time order, in
/// the order they were made. A thread's return belongs to its innermost
/// call still open: a signal handler's calls nest inside the call it
/// interrupted, and a restarted call returns once. A return with no call
/// open (capture began while the thread was in the kernel) is left out. An
/// `execve` followed by another call of its thread succeeded.
pub fn calls<'a>(events: impl IntoIterator<Item = (i32, u64, Event<'a>)>) -> Vec<Call> {
    calls_at_sites(events.into_iter().map(|(tid, tsc, e)| (tid, tsc, 0, e)))
}

/// [`calls`] of events that also say their site (a number per `syscall`
/// instruction: an entry and its return have the same). A return whose
/// site is not that of the call it would close is no return: the
/// instruction after a `syscall` reached by a jump (glibc's
/// `__spawni_child` has one), which runs its return probe too.
pub fn calls_at_sites<'a>(
    events: impl IntoIterator<Item = (i32, u64, u32, Event<'a>)>,
) -> Vec<Call> {
    let mut out: Vec<Call> = Vec::new();
    // The site of each call of `out`.
    let mut sites: Vec<u32> = Vec::new();
    // Per thread, its open calls; and, while a child it created with
    // `vfork` (or `clone`/`clone3` sharing its memory, as `posix_spawn`
    // does) runs on its thread pointer, that child's.
    let mut open: HashMap<i32, Vec<usize>> = HashMap::new();
    let mut children: HashMap<i32, Child> = HashMap::new();
    for (tid, tsc, site, event) in events {
        match event {
            Event::Entry(values) => {
                let value = |i: usize| values.get(i).copied().unwrap_or(0);
                let child = children.get_mut(&tid);
                let stack = match child {
                    Some(c) => {
                        c.calls.push(out.len());
                        &mut c.open
                    }
                    None => open.entry(tid).or_default(),
                };
                // Nothing runs inside an `execve`: a call after it is the
                // new image's.
                if let Some(&k) = stack.last().filter(|&&k| EXECS.contains(&out[k].nr)) {
                    out[k].exit = Some(Return {
                        tsc: None,
                        result: 0,
                    });
                    stack.pop();
                }
                stack.push(out.len());
                sites.push(site);
                out.push(Call {
                    tid,
                    ring: tid,
                    entry_tsc: tsc,
                    user_ns: values.get(7).copied(),
                    loader: false,
                    nr: value(0) & !crate::VDSO_BIT,
                    vdso: value(0) & crate::VDSO_BIT != 0,
                    args: std::array::from_fn(|i| value(i + 1)),
                    exit: None,
                    buffers: Vec::new(),
                });
            }
            Event::Exit(result, buffers) => {
                let result = result as i64;
                let returned = Return {
                    tsc: Some(tsc),
                    result,
                };
                if let Some(c) = children.get_mut(&tid) {
                    // The child's own call returns, unless it is one that
                    // never does (a successful `execve`, an exit): then
                    // this is its parent's return from the call that
                    // made it, with the child's id.
                    let own = c.open.last().copied().filter(|&k| {
                        let nr = out[k].nr;
                        sites[k] == site
                            && !(EXITS.contains(&nr) || EXECS.contains(&nr) && result >= 0)
                    });
                    if let Some(k) = own {
                        c.open.pop();
                        out[k].exit = Some(returned);
                        out[k].buffers = buffers;
                        continue;
                    }
                    // The parent's return comes at the site of the call
                    // that made the child; any other is no return.
                    if sites[c.made_by] != site {
                        continue;
                    }
                    let c = children.remove(&tid).expect("the child is there");
                    for &k in &c.open {
                        if EXECS.contains(&out[k].nr) {
                            out[k].exit = Some(Return {
                                tsc: None,
                                result: 0,
                            });
                        }
                    }
                    if let Ok(child) = i32::try_from(result).map(|r| r.max(0)) {
                        for &k in c.calls.iter().filter(|_| child > 0) {
                            out[k].tid = child;
                        }
                    }
                    out[c.made_by].exit = Some(returned);
                    continue;
                }
                let stack = open.entry(tid).or_default();
                let Some(&k) = stack.last().filter(|&&k| sites[k] == site) else {
                    continue;
                };
                // A child sharing the thread pointer returns 0 from the
                // call first, on the parent's thread: its calls follow.
                if result == 0 && FORKS.contains(&out[k].nr) {
                    children.insert(
                        tid,
                        Child {
                            made_by: k,
                            open: Vec::new(),
                            calls: Vec::new(),
                        },
                    );
                    stack.pop();
                    continue;
                }
                stack.pop();
                out[k].exit = Some(returned);
                out[k].buffers = buffers;
            }
        }
    }
    out
}

/// A child running on its parent's thread pointer, its calls recorded on
/// the parent's thread until the parent returns from the call that made it.
struct Child {
    /// The parent's call that made it.
    made_by: usize,
    /// Its own open calls.
    open: Vec<usize>,
    /// All of its calls, given the child's id at the end.
    calls: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each call's thread, number and result.
    fn brief(calls: &[Call]) -> Vec<(i32, u64, Option<i64>)> {
        calls
            .iter()
            .map(|c| (c.tid, c.nr, c.exit.map(|e| e.result)))
            .collect()
    }

    #[test]
    fn a_vfork_childs_calls_on_its_parents_thread_are_the_childs() {
        let vfork = [58u64, 0, 0, 0, 0, 0, 0];
        let close = [3u64, 3, 0, 0, 0, 0, 0];
        let exec = [59u64, 0x1000, 0x2000, 0x3000, 0, 0, 0];
        let got = calls([
            (7, 1, Event::Entry(&vfork)),
            (7, 2, Event::Exit(0, vec![])),
            (7, 3, Event::Entry(&close)),
            (7, 4, Event::Exit(0, vec![])),
            (7, 5, Event::Entry(&exec)),
            (7, 6, Event::Exit((-2i64) as u64, vec![])),
            (7, 7, Event::Entry(&exec)),
            (7, 8, Event::Exit(9, vec![])),
            (7, 9, Event::Entry(&close)),
            (7, 10, Event::Exit((-9i64) as u64, vec![])),
        ]);
        assert_eq!(
            brief(&got),
            [
                (7, 58, Some(9)),
                (9, 3, Some(0)),
                (9, 59, Some(-2)),
                (9, 59, Some(0)),
                (7, 3, Some(-9)),
            ]
        );
        assert_eq!(got[0].exit.and_then(|e| e.tsc), Some(8));
    }

    #[test]
    fn a_handlers_calls_nest_inside_the_call_they_interrupt() {
        let read = [0u64, 3, 0x1000, 64, 0, 0, 0];
        let write = [1u64, 1, 0x2000, 5, 0, 0, 0];
        let exit = [231u64, 0, 0, 0, 0, 0, 0];
        let exec = [59u64, 0x1000, 0x2000, 0x3000, 0, 0, 0];
        let got = calls([
            (7, 1, Event::Exit(0, vec![])),
            (7, 2, Event::Entry(&read)),
            (8, 3, Event::Entry(&write)),
            (7, 4, Event::Entry(&write)),
            (7, 5, Event::Exit(5, vec![])),
            (8, 6, Event::Exit((-4i64) as u64, vec![])),
            (
                7,
                7,
                Event::Exit(
                    64,
                    vec![Buffer {
                        what: Memory::Filled,
                        arg: 1,
                        bytes: vec![b'x'; 64],
                        truncated: false,
                    }],
                ),
            ),
            (7, 8, Event::Entry(&exit)),
            (9, 9, Event::Entry(&exec)),
            (9, 10, Event::Entry(&write)),
        ]);
        assert_eq!(
            brief(&got),
            [
                (7, 0, Some(64)),
                (8, 1, Some(-4)),
                (7, 1, Some(5)),
                (7, 231, None),
                (9, 59, Some(0)),
                (9, 1, None),
            ]
        );
        assert_eq!(got[0].args, [3, 0x1000, 64, 0, 0, 0]);
        assert_eq!(got[0].buffers[0].bytes.len(), 64);
        assert_eq!(got[0].exit.and_then(|e| e.tsc), Some(7));
        assert_eq!(got[4].exit.and_then(|e| e.tsc), None);
    }

    /// The jump in glibc's `__spawni_child` to the instruction after a
    /// `syscall` runs that return's probe with no call: it closes nothing.
    #[test]
    fn a_return_at_another_site_is_no_return() {
        let clone3 = [435u64, 0x1000, 88, 0, 0, 0, 0];
        let mask = [14u64, 0, 0, 0, 0, 0, 0];
        let exec = [59u64, 0x1000, 0x2000, 0x3000, 0, 0, 0];
        let got = calls_at_sites([
            (7, 1, 1, Event::Entry(&clone3)),
            (7, 2, 1, Event::Exit(0, vec![])),
            (7, 3, 2, Event::Entry(&mask)),
            (7, 4, 2, Event::Exit(0, vec![])),
            (7, 5, 3, Event::Exit(0, vec![])), // no call at site 3
            (7, 6, 4, Event::Entry(&exec)),
            (7, 7, 1, Event::Exit(9, vec![])),
            (7, 8, 2, Event::Entry(&mask)),
            (7, 9, 5, Event::Exit(0, vec![])), // nor at site 5
            (7, 10, 2, Event::Exit(0, vec![])),
        ]);
        assert_eq!(
            brief(&got),
            [
                (7, 435, Some(9)),
                (9, 14, Some(0)),
                (9, 59, Some(0)),
                (7, 14, Some(0))
            ]
        );
    }

    #[test]
    fn a_posix_spawn_child_made_by_clone3_is_its_own() {
        let clone3 = [435u64, 0x1000, 88, 0, 0, 0, 0];
        let mask = [14u64, 0, 0, 0, 0, 0, 0];
        let exec = [59u64, 0x1000, 0x2000, 0x3000, 0, 0, 0];
        let wait = [61u64, u64::MAX, 0, 1, 0, 0, 0];
        let got = calls([
            (7, 1, Event::Entry(&clone3)),
            (7, 2, Event::Exit(0, vec![])),
            (7, 3, Event::Entry(&mask)),
            (7, 4, Event::Exit(0, vec![])),
            (7, 5, Event::Entry(&exec)),
            (7, 6, Event::Exit(9, vec![])),
            (7, 7, Event::Entry(&wait)),
            (7, 8, Event::Exit(0, vec![])),
        ]);
        assert_eq!(
            brief(&got),
            [
                (7, 435, Some(9)),
                (9, 14, Some(0)),
                (9, 59, Some(0)),
                (7, 61, Some(0))
            ]
        );
    }
}
