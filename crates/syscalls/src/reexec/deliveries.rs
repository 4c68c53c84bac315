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
/// - at that call's return, if it came as the call returned, and also if
///   it came in the program's own code after it: where in that code the
///   record cannot say, and as soon as it can is where a flag the handler
///   sets is seen by everything the program does next (`dash` clears its
///   `gotsigchld` after `fork` returns and before it waits: a handler run
///   later found the flag cleared and the wait skipped);
/// - before the thread's next call, if it came in weft's code for that
///   call, before the call (`dash` clears its flag, then calls `wait4`:
///   a handler run at the previous return found the flag cleared after);
/// - before the thread's first call, if it has none before.
pub(super) fn raise_at(d: &Call, before: Option<&Call>) -> u64 {
    let kind = d.args[2] >> 32;
    let under_way = |b: &Call| b.exit.and_then(|e| e.tsc).is_none_or(|t| t > d.entry_tsc);
    let Some(b) = before else {
        return f::RAISE_NEXT;
    };
    match kind {
        _ if MASKING.contains(&b.nr) && d.args[1] as i64 == EINTR => f::RAISE_DURING,
        weft_abi::delivery::AFTER_SYSCALL => f::RAISE_AT_RETURN,
        _ if under_way(b) => f::RAISE_DURING,
        weft_abi::delivery::IN_WEFT => f::RAISE_NEXT,
        _ => f::RAISE_AT_RETURN,
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
            // In the program's code after the read: at its return too.
            (
                delivered(1, 40, 17, elsewhere, 0),
                Some(&read),
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
