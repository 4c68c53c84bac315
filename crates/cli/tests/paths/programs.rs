//! Single programs: the regenerated instructions equal QEMU's for the
//! test targets (six builds, C++ exceptions), Debian's gzip and sqlite3,
//! with tiny buffers, and in the `--din` and binary forms.

use super::*;
use crate::support::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

/// Functions of `tests/targets/paths.c`.
const OWN: &[&str] = &[
    "classify",
    "fib",
    "by_cmp",
    "twice",
    "thrice",
    "apply",
    "mark",
    "hidden_switch",
    "work",
    "main",
    "dive",
    "bail_out",
    "on_signal",
    "on_signal_leave",
    "handlers",
];

variant_test!(regenerates_what_qemu_ran, |v| {
    if !have_qemu() {
        return;
    }
    let target = build("paths", v);
    let dir = scratch(&format!("paths-qemu-{}", v.name));
    let trace = dir.join("trace");
    let plain = run(
        std::process::Command::new(&target).arg("300"),
        Duration::from_secs(30),
    );
    let out = paths_run(&trace, &[], &target, &["300"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the traced program's output");
    // A static program is traced from main (its start-up code sets up the
    // thread pointer); its libc's IFUNCs choose by the CPU, and QEMU's is
    // not this one, so only the target's own functions are compared.
    let static_build = v.name.contains("static");
    let only = static_build.then_some(OWN);
    let keep = traced_instructions(&trace, only);
    for f in OWN {
        let meta = read_json(&trace.join("paths.json"));
        assert!(
            meta["functions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["name"] == *f),
            "{f} traced"
        );
    }
    // fib's recursive calls go straight to its copy, without records: the
    // image linked it (and QEMU's trace below says regeneration still
    // follows every call).
    let meta = read_json(&trace.join("paths.json"));
    let fib = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "fib")
        .and_then(|g| g["id"].as_u64());
    let linked = meta["loads"][0]["linked"].as_array().cloned();
    assert!(
        linked
            .unwrap_or_default()
            .iter()
            .any(|id| id.as_u64() == fib),
        "fib (id {fib:?}) is linked in {}",
        meta["loads"]
    );
    let weft_trace: Vec<u64> = regenerated(&trace)
        .into_iter()
        .filter(|a| keep.contains(a))
        .collect();
    let main = read_json(&trace.join("paths.json"))["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "main")
        .and_then(|g| g["vaddr"].as_u64());
    let qemu = qemu_instructions(
        &target,
        &["300"],
        &keep,
        main.filter(|_| static_build),
        &dir,
    );
    assert!(
        qemu.len() > 10_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &weft_trace, v.name);
});

#[test]
fn four_kib_buffers_lose_nothing() {
    if !have_qemu() {
        return;
    }
    let target = build("paths", &O2);
    let dir = scratch("paths-tiny-buffers");
    let trace = dir.join("trace");
    let tiny = ["--paths-buffer-size", "4K", "--paths-buffers", "2"];
    let out = paths_run(&trace, &tiny, &target, &["3000"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let chunks: u64 = out
        .stderr
        .split(" in ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no buffer count in {}", out.stderr));
    assert!(
        chunks >= 5,
        "4 KiB buffers filled and handed over: {chunks}"
    );
    assert!(!out.stderr.contains("lost"), "{}", out.stderr);
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(&target, &["3000"], &keep, None, &dir);
    assert_same_trace(&qemu, &regenerated(&trace), "4 KiB buffers");
}

#[test]
fn gzip_regenerates_what_qemu_ran() {
    if !have_qemu() {
        return;
    }
    let gzip = Path::new("/usr/bin/gzip");
    let dir = scratch("paths-gzip");
    let input = dir.join("input.txt");
    let text: String = (0..3000)
        .map(|i| format!("line {i} of some text {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let trace = dir.join("trace");
    let input_arg = input.to_str().unwrap();
    let args = ["-n", "-k", "-f", input_arg];
    let out = paths_run(&trace, &[], gzip, &args);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    let plain = std::process::Command::new(gzip)
        .args(["-n", "-c", input_arg])
        .output()
        .unwrap();
    let traced = std::fs::read(dir.join("input.txt.gz")).unwrap();
    assert!(
        traced == plain.stdout,
        "gzip's output under --paths differs"
    );
    let keep = traced_instructions(&trace, None);
    let names: BTreeSet<String> = read_json(&trace.join("paths.json"))["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        names.len() > 50,
        "most of gzip's functions traced: {names:?}"
    );
    // The same run again under QEMU: from the same start (no .gz yet).
    std::fs::remove_file(dir.join("input.txt.gz")).unwrap();
    let qemu = qemu_instructions(gzip, &args, &keep, None, &dir);
    assert!(
        qemu.len() > 100_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &regenerated(&trace), "gzip");
}

#[test]
fn sqlite3_regenerates_what_qemu_ran() {
    if !have_qemu() {
        return;
    }
    let sqlite3 = Path::new("/usr/bin/sqlite3");
    let dir = scratch("paths-sqlite3");
    let script = dir.join("script.sql");
    std::fs::write(
        &script,
        "create table t(a integer primary key, b text, c real);\n\
         with recursive n(i) as (select 1 union all select i+1 from n where i < 500)\n\
           insert into t select i, 'row' || i, i * 1.5 from n;\n\
         create index tb on t(b);\n\
         select count(*), sum(c), max(b) from t where a % 7 = 3;\n\
         select b from t where b like 'row4%' order by c desc limit 3;\n",
    )
    .unwrap();
    let read = format!(".read {}", script.display());
    let args = [":memory:", read.as_str()];
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], sqlite3, &args);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, "72|27162.0|row94\nrow499\nrow498\nrow497\n");
    // The shell's own functions, called back from the library for each row.
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(sqlite3, &args, &keep, None, &dir);
    assert!(
        qemu.len() > 5_000,
        "qemu ran {} traced instructions",
        qemu.len()
    );
    assert_same_trace(&qemu, &regenerated(&trace), "sqlite3");
}

#[test]
fn din_and_binary_forms_give_the_addresses_the_program_ran() {
    if !have_qemu() {
        return;
    }
    let target = build("paths_din", &O2);
    let dir = scratch("paths-din");
    let trace = dir.join("trace");
    let out = paths_run(&trace, &[], &target, &["200"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    // The program's own word for where `work` runs.
    let printed = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("work at "))
        .and_then(hex)
        .unwrap_or_else(|| panic!("the target prints work's address: {}", out.stderr));
    let meta = read_json(&trace.join("paths.json"));
    let work = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "work")
        .and_then(|f| f["vaddr"].as_u64())
        .expect("work traced");
    let bias = printed - work;
    let din = run(
        weft().arg("regen").arg("--din").arg(&trace),
        Duration::from_secs(60),
    );
    assert_eq!(din.status, 0, "weft regen --din: {}", din.stderr);
    let fetched: Vec<u64> = din
        .stdout
        .lines()
        .map(|l| {
            let a = l
                .strip_prefix("2 ")
                .unwrap_or_else(|| panic!("a din instruction fetch: {l:?}"));
            u64::from_str_radix(a, 16).unwrap()
        })
        .collect();
    assert_eq!(
        fetched.iter().filter(|&&a| a == printed).count(),
        200,
        "work's first instruction fetched once per call, at the address it printed"
    );
    let vaddrs: Vec<u64> = fetched.iter().map(|a| a - bias).collect();
    let keep = traced_instructions(&trace, None);
    let qemu = qemu_instructions(&target, &["200"], &keep, None, &dir);
    assert_same_trace(&qemu, &vaddrs, "--din less the program's own load bias");
    // The binary form: the same instructions, module index << 48 | vaddr.
    let file = dir.join("insns.bin");
    let bin = run(
        weft()
            .args(["regen", "--binary", "--insns", "-o"])
            .arg(&file)
            .arg(&trace),
        Duration::from_secs(60),
    );
    assert_eq!(bin.status, 0, "weft regen --binary: {}", bin.stderr);
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[..8], b"WEFTBLK1");
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let mut at = 12;
    let mut modules = Vec::new();
    for _ in 0..u32_at(8) {
        let n = u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
        modules.push(String::from_utf8(bytes[at + 2..at + 2 + n].to_vec()).unwrap());
        at += 2 + n;
    }
    assert_eq!(bytes[at], 1, "a stream header");
    let command_len = u32_at(at + 13) as usize;
    at += 17 + command_len;
    let mut decoded = Vec::new();
    loop {
        let e = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        at += 8;
        if e == u64::MAX {
            break;
        }
        assert!(modules[(e >> 48) as usize].starts_with("paths_din"));
        decoded.push(e & 0xffff_ffff_ffff);
    }
    assert_eq!(at, bytes.len(), "one thread, one stream");
    assert_same_trace(&qemu, &decoded, "--binary --insns");
}

variant_test!(
    cpp_exceptions_regenerate_what_qemu_ran,
    [o0_pie, o2_pie],
    |v| {
        if !have_qemu() {
            return;
        }
        // A throw from deep recursion, a destructor on the way, a catch
        // further up: the unwinder finds the original callers (the copies
        // leave original return addresses) and enters landing pads, which
        // write resume records.
        let target = build("paths_throw", v);
        let dir = scratch(&format!("paths-throw-{}", v.name));
        let trace = dir.join("trace");
        let plain = run(
            std::process::Command::new(&target).arg("40"),
            Duration::from_secs(30),
        );
        assert_eq!(plain.stdout, "sum -40 tally 40\n");
        let out = paths_run(&trace, &["--validate"], &target, &["40"]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "the program under --paths");
        assert!(out.stderr.contains("validated:"), "{}", out.stderr);
        let keep = traced_instructions(&trace, None);
        let qemu = qemu_instructions(&target, &["40"], &keep, None, &dir);
        assert!(
            qemu.len() > 1_000,
            "qemu ran {} traced instructions",
            qemu.len()
        );
        assert_same_trace(&qemu, &regenerated(&trace), v.name);
        // The unwinder itself traced, validated: it reads the shadow stack
        // pointer (`rdssp`, a no-op here) into a register it zeroed and
        // tests it; a store in between that took the register for free
        // sent it into `incssp` and SIGILL (a new-user trial, session 33).
        let out = paths_run(
            &dir.join("trace-unwinder"),
            &["--paths", "libgcc_s", "--validate"],
            &target,
            &["40"],
        );
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "the program, its unwinder traced");
        assert!(out.stderr.contains("validated:"), "{}", out.stderr);
    }
);

/// A static program stripped of its symbols (like Debian's `ldconfig`):
/// weft finds `main` where the entry code hands it to the C library, runs
/// there before tracing (the start-up code sets up the thread pointer),
/// and the target's own functions regenerate as QEMU ran them. `nm` of
/// the unstripped build names them. (The target uses no `setjmp` or
/// `fork`, which weft knows by their names only.)
/// Functions of `tests/targets/paths_data.c`.
const DATA_OWN: &[&str] = &["sum_every", "scatter", "chase", "trim", "link", "main"];

#[test]
fn a_stripped_static_program_is_traced_from_main() {
    if !have_qemu() {
        return;
    }
    let built = build("paths_data", &O2_STATIC);
    let dir = scratch("paths-stripped");
    let target = dir.join("paths-stripped");
    let strip = run(
        std::process::Command::new("strip")
            .arg("-o")
            .arg(&target)
            .arg(&built),
        Duration::from_secs(30),
    );
    assert_eq!(strip.status, 0, "strip: {}", strip.stderr);
    let nm = run(
        std::process::Command::new("nm").arg(&built),
        Duration::from_secs(30),
    );
    let own: HashSet<u64> = nm
        .stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.len() == 3 && DATA_OWN.contains(&w[2])).then(|| hex(w[0]).unwrap())
        })
        .collect();
    let main = nm
        .stdout
        .lines()
        .find_map(|l| l.strip_suffix(" T main"))
        .map(|a| hex(a).unwrap())
        .expect("main in nm's list");
    let trace = dir.join("trace");
    let plain = run(
        std::process::Command::new(&target).arg("50"),
        Duration::from_secs(30),
    );
    let out = paths_run(&trace, &["--validate"], &target, &["50"]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the traced program's output");
    assert!(out.stderr.contains("validated:"), "{}", out.stderr);
    assert!(out.stderr.contains("no symbols"), "{}", out.stderr);
    let keep = instructions_of_functions(&trace, |f| own.contains(&f["vaddr"].as_u64().unwrap()));
    let weft_trace: Vec<u64> = regenerated(&trace)
        .into_iter()
        .filter(|a| keep.contains(a))
        .collect();
    assert_eq!(weft_trace.first(), Some(&main), "the trace starts at main");
    let qemu = qemu_instructions(&target, &["50"], &keep, Some(main), &dir);
    assert!(qemu.len() > 1_000, "qemu ran {} instructions", qemu.len());
    assert_same_trace(&qemu, &weft_trace, "stripped static");
}
