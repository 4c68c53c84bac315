//! Counts, errors and time per call, as `strace -c -w` gives them (time is
//! the wall-clock time from the `syscall` instruction to the return,
//! blocking included, measured by the TSC).

use crate::{name, Call};
use std::collections::{BTreeMap, HashMap};

/// One call's totals.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The call's name.
    pub name: String,
    /// Calls made.
    pub calls: u64,
    /// Of which returned an error.
    pub errors: u64,
    /// Seconds from instruction to return, summed over the calls that
    /// returned.
    pub seconds: f64,
    /// Calls that returned (the ones `seconds` sums).
    pub timed: u64,
}

/// The totals per call name, most time first (then most calls, then
/// name); the calls the vDSO answered apart, as `clock_gettime (vDSO)`.
pub fn stats(calls: &[Call], ticks_per_ns: f64) -> Vec<Row> {
    let mut rows: BTreeMap<u64, Row> = BTreeMap::new();
    // Each thread's last call: one with no return there is where the
    // record ended; before it, one the thread left, an error as strace
    // counts it (`ERESTARTSYS`), its time unknown.
    let last: HashMap<i32, usize> = calls.iter().enumerate().map(|(k, c)| (c.tid, k)).collect();
    for (k, c) in calls.iter().enumerate() {
        // A signal's delivery is no call.
        if crate::calls::is_delivery(c) {
            continue;
        }
        // A call the vDSO answered is a row of its own.
        let key = c.nr | if c.vdso { crate::VDSO_BIT } else { 0 };
        let row = rows.entry(key).or_insert_with(|| Row {
            name: match c.vdso {
                true => format!("{} (vDSO)", name(c.nr)),
                false => name(c.nr),
            },
            calls: 0,
            errors: 0,
            seconds: 0.0,
            timed: 0,
        });
        row.calls += 1;
        let left = c.exit.is_none()
            && last.get(&c.tid) != Some(&k)
            && !crate::calls::NO_RETURN.contains(&c.nr);
        row.errors += u64::from(left);
        if let Some(r) = c.exit {
            if (-4095..0).contains(&r.result) {
                row.errors += 1;
            }
            if let Some(tsc) = r.tsc {
                row.seconds += tsc.saturating_sub(c.entry_tsc) as f64 / ticks_per_ns / 1e9;
                row.timed += 1;
            }
        }
    }
    let mut rows: Vec<Row> = rows.into_values().collect();
    rows.sort_by(|a, b| {
        b.seconds
            .total_cmp(&a.seconds)
            .then(b.calls.cmp(&a.calls))
            .then(a.name.cmp(&b.name))
    });
    rows
}

/// The table, in `strace -c`'s columns.
pub fn render(rows: &[Row]) -> String {
    let rule = "------ ----------- ----------- --------- --------- ----------------\n";
    let total: f64 = rows.iter().map(|r| r.seconds).sum();
    let mut out =
        String::from("% time     seconds  usecs/call     calls    errors syscall\n") + rule;
    let share = |s: f64| if total > 0.0 { 100.0 * s / total } else { 0.0 };
    for r in rows {
        let per_call = if r.timed > 0 {
            (r.seconds * 1e6 / r.timed as f64).round().to_string()
        } else {
            String::new()
        };
        let errors = if r.errors > 0 {
            r.errors.to_string()
        } else {
            String::new()
        };
        out += &format!(
            "{:>6.2} {:>11.6} {:>11} {:>9} {:>9} {}\n",
            share(r.seconds),
            r.seconds,
            per_call,
            r.calls,
            errors,
            r.name
        );
    }
    out += rule;
    let calls: u64 = rows.iter().map(|r| r.calls).sum();
    let errors: u64 = rows.iter().map(|r| r.errors).sum();
    out += &format!(
        "{:>6.2} {:>11.6} {:>11} {:>9} {:>9} total\n",
        100.0, total, "", calls, errors
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Return;

    fn call(nr: u64, entry: u64, exit: Option<(Option<u64>, i64)>) -> Call {
        Call {
            tid: 1,
            ring: 1,
            entry_tsc: entry,
            user_ns: None,
            loader: false,
            nr,
            vdso: false,
            args: [0; 6],
            exit: exit.map(|(tsc, result)| Return { tsc, result }),
            buffers: Vec::new(),
        }
    }

    #[test]
    fn calls_errors_and_time_add_up_per_name() {
        // 1 tick a nanosecond: 2000 and 4000 ns of read, one failed open.
        let calls = [
            call(0, 0, Some((Some(2_000), 5))),
            call(0, 10_000, Some((Some(14_000), -11))),
            call(257, 20_000, Some((Some(21_000), -2))),
            call(59, 30_000, Some((None, 0))),
            call(231, 40_000, None),
        ];
        let rows = stats(&calls, 1.0);
        assert_eq!(rows[0].name, "read");
        assert_eq!((rows[0].calls, rows[0].errors, rows[0].timed), (2, 1, 2));
        assert!((rows[0].seconds - 6e-6).abs() < 1e-12);
        assert_eq!((rows[1].name.as_str(), rows[1].errors), ("openat", 1));
        let text = render(&rows);
        assert!(text.contains("  3 "), "{text}");
        assert!(
            text.lines().last().unwrap().contains("5         2 total"),
            "{text}"
        );
    }

    /// A read the thread left (no return, calls after it) is an error, as
    /// strace counts its `ERESTARTSYS`, and not timed; the thread's last
    /// call with no return, where the record ended, is neither.
    #[test]
    fn a_call_the_thread_left_counts_as_an_error() {
        let calls = [
            call(0, 0, None),
            call(1, 10, Some((Some(20), 6))),
            call(0, 30, None),
        ];
        let rows = stats(&calls, 1.0);
        let read = rows.iter().find(|r| r.name == "read").unwrap();
        assert_eq!((read.calls, read.errors, read.timed), (2, 1, 0));
    }
}
