//! weft and the program's own signals: a target that owns SIGTRAP behaves
//! with weft as without it, and a target in a process group of its own is
//! attached like any other.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

/// A target in its own process group is attached like any other (weft
/// waits for any tracee, not only its own group's).
#[test]
fn attach_to_a_process_in_another_process_group() {
    let bin = build("sigtrap", &O2);
    let target = Waiting::start(&bin, &["block"]);
    let out = target.attach_counting("libc:printf");
    assert_eq!(out.status, 0, "{}", out.stderr);
    let (rest, code) = target.finish();
    assert_eq!(code, Some(0), "{rest}");
}

/// A thread that blocks SIGTRAP would be killed by the kernel on hitting an
/// int3: weft refuses a point only an int3 fits, says why, and leaves the
/// program (and its signal mask) as it was.
#[test]
fn int3_points_are_refused_while_a_thread_blocks_sigtrap() {
    let bin = build("sigtrap", &O2);
    let target = Waiting::start(&bin, &["block"]);
    let out = target.attach_counting("trapped");
    assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
    assert!(
        out.stderr.contains("blocks SIGTRAP"),
        "no word of the blocked SIGTRAP: {}",
        out.stderr
    );
    let (rest, code) = target.finish();
    assert_eq!(code, Some(0), "the target died: {rest}");
    assert!(rest.contains("blocked SIGTRAP throughout"), "{rest}");
}

/// A program that dies of its own SIGTRAP (default action) dies the same
/// way under weft, after the same output, and weft counted its int3 point.
#[test]
fn a_programs_own_sigtrap_keeps_its_default_action() {
    let bin = build("sigtrap", &O2);
    let plain = run(
        Command::new(&bin).args(["default", "300"]),
        Duration::from_secs(30),
    );
    assert_eq!(plain.status, 128 + 5, "{}", plain.stderr);
    let counted = count_run(
        "sigtrap-default",
        &["--count", "trapped", "--verbose"],
        &bin,
        &["default", "300"],
        Duration::from_secs(30),
    );
    assert!(
        counted.out.stderr.contains("int3"),
        "{}",
        counted.out.stderr
    );
    assert_eq!(counted.out.status, 128 + 5, "{}", counted.out.stderr);
    assert_eq!(counted.out.stdout, plain.stdout);
    assert_eq!(counted.count("trapped", "entry"), 300);
}

/// The program starts with the signal dispositions and mask it would have
/// without weft: the SIGPIPE the Rust runtime ignores in weft is not
/// ignored in the program (`yes | head -1` still ends `yes` by SIGPIPE).
#[test]
fn the_program_starts_with_its_own_signal_dispositions() {
    let grep = || {
        let mut c = Command::new("grep");
        c.args(["-E", "^Sig(Ign|Blk)", "/proc/self/status"]);
        c
    };
    let plain = run(&mut grep(), Duration::from_secs(30));
    let with = run(
        weft().args(["run", "--count", "libc:write", "--"]).args([
            "grep",
            "-E",
            "^Sig(Ign|Blk)",
            "/proc/self/status",
        ]),
        Duration::from_secs(30),
    );
    assert_eq!(with.status, 0, "{}", with.stderr);
    assert_eq!(with.stdout, plain.stdout);
}

/// A program that installs its own SIGTRAP handler while weft's int3s are
/// spliced behaves as without weft: `sigaction` answers the program's own
/// actions (never weft's handler), its handler sees exactly the signals
/// it raised, with SIGTRAP blocked as the kernel blocks it, none of weft's
/// traps; weft counts every int3 hit; and after weft leaves, the
/// program's handler is the action.
#[test]
fn a_sigtrap_handler_installed_while_spliced_is_chained_behind_weft() {
    let bin = build("sigtrap", &O2);
    let script = |target: &mut Waiting| {
        let mut said = target.say("install", "tally unblocked");
        said += &target.say("after", "after:");
        said
    };
    let mut plain = Waiting::start(&bin, &["late", "200"]);
    let mut expected = script(&mut plain);
    let (rest, code) = plain.finish();
    expected += &rest;
    assert_eq!(code, Some(0), "{expected}");

    let mut target = Waiting::start(&bin, &["late", "200"]);
    let pid = target.pid();
    let json = scratch("sigtrap-late").join("counts.json");
    let weft = {
        let (pid, json) = (pid.clone(), json.clone());
        std::thread::spawn(move || {
            run(
                weft()
                    .args(["attach", "-p", &pid, "--duration", "2s", "--verbose"])
                    .args(["--count", "trapped", "--format", "json", "--output"])
                    .arg(&json),
                Duration::from_secs(60),
            )
        })
    };
    // Spliced once weft's memory is in the target; then a moment more.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
        .unwrap()
        .contains("weft")
    {
        assert!(std::time::Instant::now() < deadline, "weft never attached");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    let mut got = target.say("install", "tally unblocked");
    let out = weft.join().unwrap();
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stderr.contains("1 int3 splice"), "{}", out.stderr);
    assert!(
        count_of(&read_counts(&json), "trapped", "entry") >= 200,
        "{}",
        out.stderr
    );
    got += &target.say("after", "after:");
    let (rest, code) = target.finish();
    got += &rest;
    assert_eq!(code, Some(0), "{got}");
    assert_eq!(got, expected);
}

/// A program with its own SIGTRAP handler forks children that set SIGTRAP
/// back to the default (a shell's subshells do) while weft is attached
/// with `int3` splices: the children share weft's memory, but their
/// `sigaction` calls are their own, so after weft leaves the parent's
/// handler is still the action and takes the parent's SIGTRAP.
#[test]
fn a_forked_child_setting_sigtrap_leaves_its_parents_handler() {
    let bin = build("sigtrap", &O2);
    let target = Waiting::start(&bin, &["forks"]);
    let pid = target.pid();
    for _ in 0..3 {
        let out = run(
            weft()
                .args([
                    "attach",
                    "-p",
                    &pid,
                    "--duration",
                    "200ms",
                    "--count",
                    "plain",
                ])
                .env("WEFT_SPLICE", "int3"),
            Duration::from_secs(60),
        );
        assert_eq!(out.status, 0, "{}", out.stderr);
    }
    let (rest, code) = target.finish();
    assert_eq!(code, Some(0), "{rest}");
    assert_eq!(rest, "forked some\nhandler ours\ntally handled 1\n");
}
