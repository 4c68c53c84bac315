//! Endless attach cycles: weft comes and goes a thousand times, every
//! splice an `int3`, and the target is left exactly as it was.

use crate::support::*;
use std::time::{Duration, Instant};

/// 1,000 attach/detach cycles on a target whose four threads call the
/// spliced functions nonstop, with every splice forced to an `int3`
/// (`WEFT_SPLICE=int3`), so that threads are often caught on a trap and
/// SIGTRAPs are queued at detach: every attach succeeds and leaves nothing
/// behind (or only the handler, for a SIGTRAP still queued, which the next
/// attach takes out), the threads compute correctly throughout, and at the end the
/// target's mappings and code are byte for byte those it had before.
#[test]
fn a_thousand_int3_attach_cycles_leave_the_target_as_it_was() {
    const CYCLES: usize = 1000;
    let bin = build("sigtrap", &O2);
    let target = Waiting::start(&bin, &["spin", "4"]);
    let pid = target.pid();
    let before = maps_and_text(&pid);
    let started = Instant::now();
    let json = scratch("int3-cycles").join("counts.json");
    let mut hits = 0u64;
    let mut kept = 0;
    for cycle in 0..CYCLES {
        let out = run(
            weft()
                .args(["attach", "-p", &pid, "--duration", "2ms", "--verbose"])
                .args(["--count", "trapped", "--count", "plain"])
                .args(["--format", "json", "--output"])
                .arg(&json)
                .env("WEFT_SPLICE", "int3"),
            Duration::from_secs(60),
        );
        assert_eq!(out.status, 0, "cycle {cycle}: {}", out.stderr);
        assert!(
            out.stderr
                .contains("0 jmp, 0 springboard and 2 int3 splice(s)"),
            "cycle {cycle}: not every splice was an int3: {}",
            out.stderr
        );
        // On a loaded machine a SIGTRAP may stay queued past weft's wait:
        // weft then keeps its handler and says so, and the next attach
        // takes that memory out. Nothing else may be left.
        for note in out.stderr.lines().filter(|l| l.contains("note:")) {
            assert!(
                note.contains("a SIGTRAP is still queued"),
                "cycle {cycle}: {}",
                out.stderr
            );
            kept += 1;
        }
        hits += read_counts(&json).iter().map(|c| c.calls).sum::<u64>();
    }
    // One more attach takes out what the last cycles left, if anything.
    let last = run(
        weft().args([
            "attach",
            "-p",
            &pid,
            "--duration",
            "2ms",
            "--count",
            "plain",
        ]),
        Duration::from_secs(60),
    );
    assert_eq!(last.status, 0, "{}", last.stderr);
    assert!(!last.stderr.contains("note:"), "{}", last.stderr);
    let after = maps_and_text(&pid);
    assert_eq!(before.0, after.0, "the target's mappings changed");
    assert_same_code(&before, &after, "after 1,000 cycles");
    let (rest, code) = target.finish();
    assert_eq!(code, Some(0), "{rest}");
    assert_eq!(rest, "spun OK\n");
    assert!(hits > 0, "no call was counted in {CYCLES} cycles");
    eprintln!(
        "{CYCLES} int3 attach cycles in {:.1} s, {hits} calls counted, \
         {kept} left weft's handler for a queued SIGTRAP",
        started.elapsed().as_secs_f64()
    );
}
