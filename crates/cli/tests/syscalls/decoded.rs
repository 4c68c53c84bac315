//! What `weft syscalls show` prints of a call from beyond its registers
//! and the bytes its return recorded, against strace's line for the same
//! call: an `execve` that succeeded (its new image's arguments and
//! environment's size, which no return records).

use super::*;

/// A shell runs programs with arguments (one with a space, one with an
/// empty environment): each `execve` reads as strace shows it, but for
/// the address of the environment, which differs between the two runs.
#[test]
fn an_execve_shows_its_arguments_as_strace_does() {
    if !have("strace") {
        skip("strace is not installed (apt-get install strace)");
        return;
    }
    let dir = scratch("syscalls-execve-argv");
    let script = "/bin/true 1 'two words'; env -i /bin/true";
    let out = dir.join("rec");
    let recorded = run(
        weft()
            .args(["syscalls", "record", "-o"])
            .arg(&out)
            .args(["--", "sh", "-c", script]),
        Duration::from_secs(120),
    );
    assert_eq!(recorded.status, 0, "{}", recorded.stderr);
    let shown = run(
        weft().args(["syscalls", "show"]).arg(&out),
        Duration::from_secs(60),
    );
    assert_eq!(shown.status, 0, "{}", shown.stderr);
    let log = dir.join("strace.log");
    let traced = run(
        std::process::Command::new("strace")
            .args(["-f", "-e", "trace=execve", "-o"])
            .arg(&log)
            .args(["sh", "-c", script]),
        Duration::from_secs(60),
    );
    assert_eq!(traced.status, 0, "strace: {}", traced.stderr);
    // `execve(...], 0x55d1e5d3bce8 /* 35 vars */) = 0`, without the address.
    let without_address = |line: &str| -> Option<String> {
        let call = &line[line.find("execve(")?..];
        let (before, after) = call.rsplit_once("], 0x")?;
        let (_, rest) = after.split_once(' ')?;
        Some(format!("{before}], {rest}"))
    };
    let strace: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter_map(without_address)
        .skip(1) // strace's own start of sh: weft started sh itself
        .collect();
    let weft: Vec<String> = shown.stdout.lines().filter_map(without_address).collect();
    assert_eq!(strace.len(), 3, "{strace:?}");
    assert_eq!(weft, strace, "weft's (left), strace's (right)");
    assert!(
        weft[2].ends_with("/* 0 vars */) = 0"),
        "env -i's program: {}",
        weft[2]
    );
}
