//! Recorded signal deliveries in a feed (`weft_abi::delivery`): where the
//! rerun raises each (`raise_at`), what it waits for first
//! (`delivery_waits`), and the calls a signal's own mask lets in
//! (`MASKING`). docs/syscalls.md, "Signals".

use super::EINTR;
use crate::Call;
use std::collections::HashMap;
use weft_abi::feed as f;

/// The waits of each recorded signal delivery: for every other thread
/// feed, its newest call that had returned when the signal came (the call
/// that sent it, the exit of the child a `SIGCHLD` reports, and anything
/// its handler may find done), so that the rerun never raises it before
/// what caused it (a cancellation raised before the canceller installed
/// the handler killed the process). Added to `waits_of` (call: feed: the
/// count of its calls done waited for).
pub(super) fn delivery_waits(
    calls: &[Call],
    per_feed: &[Vec<usize>],
    waits_of: &mut HashMap<usize, std::collections::BTreeMap<usize, usize>>,
) {
    let deliveries: Vec<(usize, usize)> = per_feed
        .iter()
        .enumerate()
        .flat_map(|(i, ks)| ks.iter().map(move |&k| (i, k)))
        .filter(|&(_, k)| crate::calls::is_delivery(&calls[k]))
        .collect();
    if deliveries.is_empty() {
        return;
    }
    // A delivery is no call another thread's done count says is done.
    let returned = |k: usize| -> Option<u64> {
        let c = &calls[k];
        if crate::calls::is_delivery(c) {
            return None;
        }
        match c.exit.and_then(|e| e.tsc) {
            Some(t) => Some(t),
            // An exit_group is done once its thread is gone (`ended`).
            None if c.nr == crate::fds::EXIT_GROUP => Some(c.entry_tsc),
            None => None,
        }
    };
    for (i, d) in deliveries {
        let at = calls[d].entry_tsc;
        for (j, ks) in per_feed.iter().enumerate().filter(|&(j, _)| j != i) {
            // Calls entered before the signal came, the newest first: the
            // first of them that had returned by then (a few steps back at
            // most past calls still under way).
            let entered = ks.partition_point(|&k| calls[k].entry_tsc < at);
            let Some(p) = (0..entered)
                .rev()
                .take(64)
                .find(|&p| returned(ks[p]).is_some_and(|t| t < at))
            else {
                continue;
            };
            let newest = waits_of.entry(d).or_default().entry(j).or_default();
            *newest = (*newest).max(p + 1);
        }
    }
}

/// Where the program goes on after the `syscall` of the point `at`
/// (0 for another point, or a vDSO function's): the rerun's return there
/// is where a signal that came at that instruction in the record comes.
pub(super) fn returns_to(at: &weft_plan::Resolved<'_>, vdso: bool) -> u64 {
    match at.kind {
        weft_plan::PointKind::AfterSyscall if !vdso => at.addr.unwrap_or(0),
        _ => 0,
    }
}

/// Calls that install a signal mask while they wait (`rt_sigsuspend`,
/// `pselect6`, `ppoll`, `epoll_pwait`, `epoll_pwait2`): a signal their
/// mask lets in ends them. One the record shows interrupted by a delivery
/// is made, its delivery raised before it while the signal is still
/// blocked, so that the call's own mask lets it in, as in the record.
pub(super) const MASKING: [u64; 5] = [130, 270, 271, 281, 441];

/// Where the rerun raises a recorded delivery `d` (`weft_abi::delivery`)
/// in its thread, whose last call before it in the feed is `before` (past
/// deliveries between: a second signal that came during the first one's
/// handler is delivered as it returns, where the first came):
/// - before that call is made (after its waits), if the signal came while
///   the call was under way (interrupted and restarted, or left), or ended
///   a wait whose own mask let it in (`MASKING`);
/// - at that call's return, if it came as the call returned or in weft's
///   code after it (`AFTER_CALL`: its record being written);
/// - where the program's own code was (`RAISE_AT_RIP`: a hardware
///   breakpoint armed at that call's return), if it came there: the
///   first time the thread reaches that instruction after the call (the
///   record holds no count of instructions to tell a loop's rounds
///   apart). A handler run at the return instead found a loop counter one
///   short; one run before the next call found `dash`'s `gotsigchld`
///   cleared after `fork` returned, and its wait skipped. [`rips_unknown`]
///   falls back to the return where the rerun's addresses are not the
///   record's;
/// - before the thread's next call, if it came in weft's code for that
///   call, before the call (`dash` clears its flag, then calls `wait4`:
///   a handler run at the previous return found the flag cleared after);
/// - before the thread's first call, if it has none before.
fn raise_at(d: &Call, before: Option<&Call>) -> u64 {
    let kind = d.args[2] >> 32;
    let under_way = |b: &Call| b.exit.and_then(|e| e.tsc).is_none_or(|t| t > d.entry_tsc);
    let Some(b) = before else {
        return f::RAISE_NEXT;
    };
    match kind {
        _ if MASKING.contains(&b.nr) && d.args[1] as i64 == EINTR => f::RAISE_DURING,
        weft_abi::delivery::AFTER_SYSCALL | weft_abi::delivery::AFTER_CALL => f::RAISE_AT_RETURN,
        // A vDSO function does nothing the handler could see: before it
        // or at its return is the same place.
        _ if under_way(b) && b.vdso => f::RAISE_AT_RETURN,
        _ if under_way(b) => f::RAISE_DURING,
        weft_abi::delivery::IN_WEFT => f::RAISE_NEXT,
        // Only the program's own code is where the rerun has it too: a
        // `syscall` that is not under way may be weft's (its SIGSYS
        // handler's return), whose place differs from run to run.
        weft_abi::delivery::ELSEWHERE => f::RAISE_AT_RIP,
        _ => f::RAISE_AT_RETURN,
    }
}

/// Where each delivery of thread feed `ks` (indices into `calls`) is
/// raised ([`raise_at`]'s flag), and the `rip` a breakpoint for it waits
/// at: its own, but for a delivery that came in weft's code with another
/// right after it and no call between (the second signal's stub was
/// running, before it recorded its delivery: the two came at one place),
/// which is raised where the other is, just before it; and for one that
/// came where the delivery before it came (`f::RAISE_WITH_PREVIOUS`).
pub(super) fn raise_places(calls: &[Call], ks: &[usize]) -> HashMap<usize, (u64, u64)> {
    let mut places = HashMap::new();
    let mut after: Option<(u64, u64)> = None;
    for p in (0..ks.len()).rev() {
        let d = &calls[ks[p]];
        if !crate::calls::is_delivery(d) {
            after = None;
            continue;
        }
        let place = match after {
            Some(next) if d.args[2] >> 32 == weft_abi::delivery::IN_WEFT => next,
            _ => {
                let before = (ks[..p].iter().rev())
                    .map(|&q| &calls[q])
                    .find(|b| !crate::calls::is_delivery(b));
                (raise_at(d, before), d.args[0])
            }
        };
        places.insert(ks[p], place);
        after = Some(place);
    }
    // A signal that came where the one before it did, as that one's
    // handler returned, whatever calls that handler made, right after
    // that handler: the same `rip` and `rax`, inside the same call of the
    // thread's, under way at both (a loop's calls between would have
    // returned before; a call the first handler left with `siglongjmp`,
    // as a timeout does, never returns, and the same place again is the
    // next round's). The calls under way at each point, innermost last:
    // a handler's own calls, which come between the two in the feed,
    // returned before the second signal.
    let mut previous: Option<(&Call, Option<&Call>, Option<&Call>)> = None;
    let mut last_call: Option<&Call> = None;
    let mut under_way: Vec<&Call> = Vec::new();
    let returned_by = |c: &Call, t: u64| c.exit.and_then(|e| e.tsc).is_none_or(|x| x <= t);
    for &k in ks {
        let d = &calls[k];
        while under_way
            .last()
            .is_some_and(|c| returned_by(c, d.entry_tsc))
        {
            under_way.pop();
        }
        if !crate::calls::is_delivery(d) {
            last_call = Some(d);
            if !returned_by(d, d.entry_tsc) {
                under_way.push(d);
            }
            continue;
        }
        let covering = under_way.last().copied();
        // One more signal in the program's own code with no call since the
        // one before (a loop with none): no return comes to arm its
        // breakpoint, so it is raised after the one before's handler.
        let same_call = |p: Option<&Call>| match (p, last_call) {
            (Some(a), Some(b)) => std::ptr::eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if previous.is_some_and(|(_, around, _)| same_call(around))
            && places
                .get(&k)
                .is_some_and(|&(flag, _)| flag == f::RAISE_AT_RIP)
        {
            places.insert(k, (f::RAISE_WITH_PREVIOUS, d.args[0]));
        }
        let again = previous.is_some_and(|(p, _, covered)| {
            p.args[..2] == d.args[..2]
                && matches!((covered, covering), (Some(a), Some(b)) if std::ptr::eq(a, b))
        });
        if again {
            places.insert(k, (f::RAISE_WITH_PREVIOUS, d.args[0]));
        }
        previous = Some((d, last_call, covering));
    }
    places
}

/// For a record whose addresses a rerun does not share (a process weft
/// attached to, its layout randomised): the deliveries to raise where the
/// program's code was (`RAISE_AT_RIP`) are raised at the return of the
/// call before them instead, as soon as the handler can run after the
/// record's place.
pub fn rips_unknown(bytes: &mut [u8]) {
    let word = |b: &[u8], at: u64| {
        let at = at as usize;
        u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
    };
    let threads = word(bytes, f::THREADS);
    for i in 0..word(bytes, f::THREAD_COUNT) {
        let t = threads + f::THREAD_SIZE * i;
        let calls = word(bytes, t + f::THREAD_CALLS);
        for k in 0..word(bytes, t + f::THREAD_COUNT_CALLS) {
            let at = calls + f::CALL_SIZE * k + f::CALL_FLAGS;
            let flags = word(bytes, at);
            if flags & f::RAISE_AT_RIP != 0 {
                let flags = flags & !f::RAISE_AT_RIP | f::RAISE_AT_RETURN;
                bytes[at as usize..at as usize + 8].copy_from_slice(&flags.to_le_bytes());
            }
        }
    }
}

/// Says in a feed's bytes that the rerun runs the program's handlers where
/// the record has their deliveries (`f::SIGNALS_FED`).
pub fn feed_signals(bytes: &mut [u8]) {
    bytes[f::SIGNALS_FED as usize..f::SIGNALS_FED as usize + 8]
        .copy_from_slice(&1u64.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_calls::call;
    use weft_abi::delivery;

    /// A delivery of `signal` at `tsc`, where the stub found the thread
    /// (`at`), `rax` there.
    fn delivered(tid: i32, tsc: u64, signal: u64, at: u64, rax: i64) -> Call {
        let args = [0x1000, rax as u64, signal | at << 32, 1, 7, 0];
        call(tid, tsc, tsc + 1, delivery::BASE + signal, &args, -38)
    }

    #[test]
    fn a_delivery_is_raised_where_it_came() {
        let read = call(1, 10, 20, 0, &[3], 5);
        let blocked = call(1, 10, 90, 0, &[3], 5);
        let suspend = call(1, 10, 60, 130, &[0x2000, 8], EINTR);
        let after = delivery::AFTER_SYSCALL;
        let elsewhere = delivery::ELSEWHERE;
        for (d, before, flag) in [
            // As the read returned, with its result.
            (
                delivered(1, 21, 17, after, 5),
                Some(&read),
                f::RAISE_AT_RETURN,
            ),
            // In the program's code after the read: where it was.
            (
                delivered(1, 40, 17, elsewhere, 0),
                Some(&read),
                f::RAISE_AT_RIP,
            ),
            // At a `syscall` not under way (weft's SIGSYS handler
            // returning, say): at the return before it.
            (
                delivered(1, 40, 17, delivery::AT_SYSCALL, 0),
                Some(&read),
                f::RAISE_AT_RETURN,
            ),
            // In weft's code after the read returned: at its return.
            (
                delivered(1, 21, 17, delivery::AFTER_CALL, 0),
                Some(&read),
                f::RAISE_AT_RETURN,
            ),
            // While a vDSO function ran: at its return, the same place to
            // the program as before it.
            (
                delivered(1, 15, 17, delivery::IN_WEFT, 0),
                Some(&Call {
                    vdso: true,
                    ..read.clone()
                }),
                f::RAISE_AT_RETURN,
            ),
            // While the read was under way (restarted after the handler).
            (
                delivered(1, 50, 17, delivery::AT_SYSCALL, 0),
                Some(&blocked),
                f::RAISE_DURING,
            ),
            // Into sigsuspend: before it, for its own mask to let it in.
            (
                delivered(1, 55, 17, after, EINTR),
                Some(&suspend),
                f::RAISE_DURING,
            ),
            (delivered(1, 5, 17, elsewhere, 0), None, f::RAISE_NEXT),
            // In weft's code for the next call, before it.
            (
                delivered(1, 40, 17, delivery::IN_WEFT, 0),
                Some(&read),
                f::RAISE_NEXT,
            ),
        ] {
            assert_eq!(raise_at(&d, before), flag, "{:?}", d.args);
        }
    }

    /// A signal that came while the stub of another ran (in weft's code,
    /// the other's delivery right after it) is raised where the other is,
    /// at the other's `rip`; one that came alone in weft's code before a
    /// call, before that call.
    #[test]
    fn a_signal_inside_anothers_stub_is_raised_where_the_other_came() {
        let calls = vec![
            call(1, 10, 20, 0, &[3], 1),
            delivered(1, 30, 14, delivery::IN_WEFT, 0),
            Call {
                args: [0x5555, 0, 14 | delivery::ELSEWHERE << 32, 0x80, 0, 0],
                ..delivered(1, 31, 14, delivery::ELSEWHERE, 0)
            },
            call(1, 40, 50, 1, &[4], 1),
            delivered(1, 60, 14, delivery::IN_WEFT, 0),
            call(1, 70, 80, 0, &[3], 1),
        ];
        let places = raise_places(&calls, &[0, 1, 2, 3, 4, 5]);
        assert_eq!(places[&1], (f::RAISE_AT_RIP, 0x5555));
        // Raised right after it (no call between to arm a breakpoint).
        assert_eq!(places[&2], (f::RAISE_WITH_PREVIOUS, 0x5555));
        assert_eq!(places[&4], (f::RAISE_NEXT, 0x1000));
        assert_eq!(places.len(), 3);
    }

    /// A second signal that came where the first did, as the first's
    /// handler returned (the same interrupted `rip` and `rax`), is raised
    /// right after that handler, not at the return of its `write`.
    #[test]
    fn a_signal_where_the_one_before_came_is_raised_after_that_ones_handler() {
        let calls = vec![
            call(1, 10, 90, 228, &[1], 0),
            delivered(1, 30, 14, delivery::IN_WEFT, 0),
            call(1, 40, 50, 1, &[4], 1),
            delivered(1, 60, 14, delivery::IN_WEFT, 0),
            call(1, 70, 80, 1, &[4], 1),
            call(1, 100, 110, 110, &[], 1),
        ];
        let calls: Vec<Call> = calls
            .into_iter()
            .enumerate()
            .map(|(k, c)| Call { vdso: k == 0, ..c })
            .collect();
        let places = raise_places(&calls, &[0, 1, 2, 3, 4, 5]);
        assert_eq!(places[&1].0, f::RAISE_AT_RETURN, "in the vDSO function");
        assert_eq!(places[&3].0, f::RAISE_WITH_PREVIOUS);
        // The same place again after the call returned: a loop's next
        // round, not the first signal's place.
        let mut later = calls.clone();
        later[3].entry_tsc = 95;
        let places = raise_places(&later, &[0, 1, 2, 3, 4, 5]);
        assert_ne!(places[&3].0, f::RAISE_WITH_PREVIOUS);
        // Nor when the call was left, its handler jumping out of it.
        let mut left = calls.clone();
        left[0].exit = None;
        let places = raise_places(&left, &[0, 1, 2, 3, 4, 5]);
        assert_ne!(places[&3].0, f::RAISE_WITH_PREVIOUS);
    }

    /// Three signals at one place inside a vDSO function, each pending as
    /// the handler before returned (a handler that runs longer than the
    /// timer's period): the second and the third are raised after the
    /// handler before them, though that handler's calls come between.
    #[test]
    fn a_chain_of_signals_at_one_place_is_raised_one_handler_after_another() {
        let mut calls = vec![
            call(1, 10, 200, 228, &[1], 0),
            delivered(1, 30, 14, delivery::IN_WEFT, 7),
            call(1, 40, 50, 228, &[1], 0),
            delivered(1, 60, 14, delivery::IN_WEFT, 7),
            call(1, 70, 80, 228, &[1], 0),
            delivered(1, 90, 14, delivery::IN_WEFT, 7),
            call(1, 100, 110, 1, &[4], 1),
            call(1, 210, 220, 110, &[], 1),
        ];
        calls[0].vdso = true;
        let places = raise_places(&calls, &[0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(places[&1].0, f::RAISE_AT_RETURN, "in the vDSO function");
        assert_eq!(places[&3].0, f::RAISE_WITH_PREVIOUS);
        assert_eq!(places[&5].0, f::RAISE_WITH_PREVIOUS);
    }

    /// A record whose addresses the rerun does not share raises at the
    /// return what it would raise where the program's code was.
    #[test]
    fn without_the_records_addresses_a_delivery_in_the_programs_code_comes_at_the_return() {
        let calls = vec![
            call(1, 10, 20, 0, &[3], 1),
            delivered(1, 40, 17, delivery::ELSEWHERE, 0),
            call(1, 50, 60, 0, &[3], 1),
        ];
        let resources = crate::fds::resolve(&calls, &Default::default());
        let mut feed = super::super::build_feed(&calls, &resources, &[]);
        let flags = |bytes: &[u8]| -> Vec<u64> {
            let word = |at: u64| {
                u64::from_le_bytes(bytes[at as usize..at as usize + 8].try_into().unwrap())
            };
            let t = word(f::THREADS);
            (0..3)
                .map(|k| word(word(t + f::THREAD_CALLS) + f::CALL_SIZE * k + f::CALL_FLAGS))
                .collect()
        };
        let mask = f::RAISE_AT_RIP | f::RAISE_AT_RETURN;
        assert_eq!(flags(&feed.bytes)[1] & mask, f::RAISE_AT_RIP);
        rips_unknown(&mut feed.bytes);
        let after = flags(&feed.bytes);
        assert_eq!(after[1] & mask, f::RAISE_AT_RETURN);
        assert_eq!((after[0] & mask, after[2] & mask), (0, 0));
    }

    #[test]
    fn a_delivery_waits_for_what_other_threads_had_done_when_it_came() {
        let calls = vec![
            call(1, 10, 20, 0, &[3], 1),
            call(2, 12, 18, 1, &[4], 1),
            call(2, 25, 300, 61, &[0], 9),
            delivered(2, 30, 17, delivery::AFTER_SYSCALL, 0),
            delivered(1, 100, 10, delivery::ELSEWHERE, 0),
        ];
        let per_feed = vec![vec![0, 4], vec![1, 2, 3]];
        let mut waits = HashMap::new();
        delivery_waits(&calls, &per_feed, &mut waits);
        // Feed 1's write had returned; its wait4 was under way, and a
        // delivery is no call: until 1 call of feed 1 is done.
        assert_eq!(waits.get(&4).map(|w| w.get(&1).copied()), Some(Some(1)));
        // The delivery in feed 1 waits for feed 0's read, returned by then.
        assert_eq!(waits.get(&3).map(|w| w.get(&0).copied()), Some(Some(1)));
    }
}
