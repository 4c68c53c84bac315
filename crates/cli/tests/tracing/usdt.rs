//! USDT probes: sys/sdt.h probes with arguments and semaphores, weft's own
//! probe header (`<weft/probe.h>`), and libstdc++'s throw and catch.

use crate::support::*;
use std::time::Duration;

variant_test!(usdt_probes_with_arguments_and_semaphores, dynamic, |v| {
    if !std::path::Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
        && !std::path::Path::new("/usr/include/sys/sdt.h").exists()
    {
        skip("sys/sdt.h missing (bash scripts/install-deps.sh installs systemtap-sdt-dev)");
        return;
    }
    let bin = build("usdt", v);
    let plain = run(
        std::process::Command::new(&bin).arg("700"),
        Duration::from_secs(30),
    );
    assert_eq!(
        tallies(&plain.stdout)["guarded_enabled"],
        0,
        "semaphore down without weft"
    );
    let traced = trace_run(
        &format!("usdt-{}", v.name),
        &[
            "--trace",
            "usdt:weft_test:tick",
            "--trace",
            "usdt:weft_test:guarded",
        ],
        &bin,
        &["700"],
    );
    assert_eq!(
        traced.tallies()["guarded_enabled"],
        700,
        "{}: weft raised the semaphore",
        v.name
    );
    let text = traced.text();
    let ticks: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("usdt-") && l.contains(":weft_test:tick probe"))
        .collect();
    assert_eq!(ticks.len(), 700, "{}", v.name);
    for (i, l) in ticks.iter().enumerate() {
        let want = format!("arg1={i} arg2={} arg3={}", 3 * i, i % 5);
        assert!(l.ends_with(&want), "{}: {l} should end with {want}", v.name);
    }
    assert_eq!(
        lines_with(&text, ":weft_test:guarded probe"),
        700,
        "{}",
        v.name
    );
});

variant_test!(weft_probe_header_sites_trace_exactly, |v| {
    let bin = build("probes", v);
    let n = 500;
    let listing = run(
        weft().args(["inspect", "usdt"]).arg(&bin),
        Duration::from_secs(30),
    );
    // The loop over variants asserted that some variant described a global
    // as symbol(%rip), so that decoding was tested: gcc -O2 does so in
    // every -O2 build (and -O0 in none), so each -O2 variant asserts it.
    if v.flags.contains(&"-O2") {
        assert!(
            listing.stdout.contains("(%rip)"),
            "{}: no global described as symbol(%rip), so that decoding went untested\n{}",
            v.name,
            listing.stdout
        );
    }
    let requests: Vec<String> = ["step", "wide", "idle", "totals"]
        .iter()
        .flat_map(|probe| ["--trace".into(), format!("usdt:weft_probe:{probe}")])
        .collect();
    let requests: Vec<&str> = requests.iter().map(String::as_str).collect();
    let traced = trace_run(
        &format!("probes-{}", v.name),
        &requests,
        &bin,
        &[&n.to_string()],
    );
    let tally = traced.tallies();
    assert_eq!(tally["steps"], n, "{}", v.name);
    let text = traced.text();
    let args_of = |probe: &str| -> Vec<Vec<i64>> {
        let tag = format!(":weft_probe:{probe} probe");
        text.lines()
            .filter(|l| l.contains(&tag))
            .map(|l| {
                l.split_whitespace()
                    .filter_map(|w| w.split_once('=').map(|(_, x)| x.parse().unwrap()))
                    .collect()
            })
            .collect()
    };
    let steps = args_of("step");
    assert_eq!(steps.len() as u64, n, "{}", v.name);
    for (i, a) in steps.iter().enumerate() {
        let i = i as i64;
        // The third argument points into a four-slot array.
        let slot = a[2] - steps[0][2];
        assert_eq!(
            (a[0], a[1], slot, a[3]),
            (i, 3 * i, 8 * (i % 4), 7),
            "{}",
            v.name
        );
    }
    let wide = args_of("wide");
    assert_eq!(wide.len() as u64, n, "{}", v.name);
    for (i, a) in wide.iter().enumerate() {
        let i = i as i64;
        let mut want: Vec<i64> = (0..11).map(|k| i + k).collect();
        want.push(-i);
        assert_eq!(a, &want, "{}: all twelve arguments", v.name);
    }
    assert_eq!(args_of("idle").len() as u64, tally["idles"], "{}", v.name);
    let totals = args_of("totals");
    assert_eq!(totals.len() as u64, n, "{}", v.name);
    for (i, a) in totals.iter().enumerate() {
        let i = i as i64;
        assert_eq!(a, &[i * (i + 1) / 2, 2 * i], "{}: globals", v.name);
    }
});

#[test]
fn libstdcxx_throw_and_catch_fire_once_each() {
    let bin = build("throws", &O2);
    let traced = trace_run(
        "usdt-throw",
        &[
            "--trace",
            "usdt:libstdcxx:throw",
            "--trace",
            "usdt:libstdcxx:catch",
        ],
        &bin,
        &["300"],
    );
    let (tally, text) = (traced.tallies(), traced.text());
    assert_eq!((tally["throws"], tally["caught"]), (100, 100));
    let count = |probe: &str| lines_with(&text, &format!(":libstdcxx:{probe} probe")) as u64;
    assert_eq!(count("throw"), tally["throws"], "{text}");
    assert_eq!(count("catch"), tally["caught"], "{text}");
}
