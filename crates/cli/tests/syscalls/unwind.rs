//! Unwinding a thread blocked in a captured call: it waits in weft's
//! code (the program that makes the call, a relocated `syscall`, the
//! SIGSYS handler's call), whose unwind entries weft gives the C
//! unwinder. Ground truth: the same program without weft.

use super::*;

/// A backtrace taken in a signal handler while the thread is blocked in
/// `read()` and in `syscall(SYS_read)`, and the destructors that
/// `pthread_cancel` runs there: as without weft, one frame of weft's code
/// (no module) between the signal frame and the C library's function
/// added. Each way the call is made: through the SIGSYS handler (the
/// first calls of a site), and rewritten (`--no-dispatch`: `read` made by
/// its program, `syscall()` relocated); dynamic and static (libgcc's
/// unwinder linked in).
#[test]
fn a_thread_blocked_in_a_call_unwinds_as_without_weft() {
    for variant in [&O2, &O2_STATIC] {
        let target = build("syscalls_unwind", variant);
        let plain = run(
            &mut std::process::Command::new(&target),
            Duration::from_secs(60),
        );
        assert_eq!(plain.status, 0, "{}", plain.stderr);
        assert!(
            plain.stdout.contains("tally destroyed 2"),
            "{}",
            plain.stdout
        );
        for options in [&[][..], &["--no-dispatch"][..]] {
            let dir = scratch(&format!("syscalls-unwind-{}", variant.name));
            let out = dir.join("rec");
            let _ = std::fs::remove_dir_all(&out);
            let recorded = run(
                weft()
                    .args(["syscalls", "record"])
                    .args(options)
                    .arg("-o")
                    .arg(&out)
                    .arg("--")
                    .arg(&target),
                Duration::from_secs(120),
            );
            assert_eq!(recorded.status, 0, "{options:?}: {}", recorded.stderr);
            let tallies = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| l.starts_with("tally"))
                    .map(String::from)
                    .collect()
            };
            assert_eq!(
                tallies(&recorded.stdout),
                tallies(&plain.stdout),
                "{options:?}"
            );
            for mode in ["read", "syscall"] {
                let frames = |s: &str| -> Vec<String> {
                    s.lines()
                        .filter_map(|l| l.strip_prefix(&format!("frame {mode} ")))
                        .filter_map(|l| l.split_once(' ').map(|(_, at)| at.to_string()))
                        .collect()
                };
                let (want, mut got) = (frames(&plain.stdout), frames(&recorded.stdout));
                assert!(want.len() >= 5, "{mode}: {want:?}");
                assert_eq!(
                    got.len(),
                    want.len() + 1,
                    "{mode} {options:?}: {got:?} {want:?}"
                );
                // The handler, the signal frame, then weft's frame.
                let weft_frame = got.remove(2);
                assert!(!want.contains(&weft_frame), "{weft_frame} {want:?}");
                assert_eq!(got, want, "{mode} {} {options:?}", variant.name);
            }
        }
    }
}
