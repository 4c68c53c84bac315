//! Data addresses (`--data`, `weft regen --data`) against valgrind's
//! lackey (`--trace-mem=yes`), which reports every load and store of the
//! program with the instruction that made it.

use super::*;
use crate::support::*;
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

/// One access: the instruction (ELF virtual address), `L`, `S` or `M`,
/// the address (`None`: weft says it could not regenerate it), the size.
type Access = (u64, char, Option<u64>, u64);

/// The accesses lackey saw instructions of `keep` make; its instruction
/// addresses less `base` (where valgrind loaded the program less its ELF
/// address).
fn lackey_accesses(log: &str, keep: &HashSet<u64>, base: u64) -> Vec<Access> {
    let mut out = Vec::new();
    let mut insn = None;
    for line in log.lines() {
        if let Some(rest) = line.strip_prefix("I  ") {
            let at = hex(rest.split(',').next().unwrap())
                .unwrap()
                .wrapping_sub(base);
            insn = keep.contains(&at).then_some(at);
        } else if let (Some(at), Some(kind)) = (insn, line.strip_prefix(' ')) {
            let (k, rest) = kind.split_at(1);
            let (addr, size) = rest.trim().split_once(',').unwrap();
            out.push((
                at,
                k.chars().next().unwrap(),
                hex(addr),
                size.parse().unwrap(),
            ));
        }
    }
    out
}

/// The accesses in `weft regen --data --insns` output.
fn weft_accesses(text: &str) -> Vec<Access> {
    let mut out = Vec::new();
    let mut insn = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        if let Some(access) = line.strip_prefix(' ') {
            let (k, rest) = access.split_at(1);
            let (addr, size) = rest.trim().split_once(',').unwrap();
            let addr = (addr != "?").then(|| hex(addr).unwrap());
            out.push((insn, k.chars().next().unwrap(), addr, size.parse().unwrap()));
        } else {
            insn = hex(line.rsplit_once('+').unwrap().1).unwrap();
        }
    }
    out
}

variant_test!(
    data_addresses_equal_lackeys,
    [o0_pie, o2_pie, o0_nopie, o2_nopie],
    |v| {
        if !have("valgrind") {
            skip("valgrind is not installed (apt-get install valgrind)");
            return;
        }
        let target = build("paths_data", v);
        let dir = scratch(&format!("paths-data-{}", v.name));
        let trace = dir.join("trace");
        let out = paths_run(&trace, &["--data", "--validate"], &target, &[]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert!(out.stderr.contains("validated:"), "{}", out.stderr);
        let regen = run(
            weft().args(["regen", "--data", "--insns"]).arg(&trace),
            Duration::from_secs(120),
        );
        assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
        let weft = weft_accesses(&regen.stdout);
        let log = dir.join("lackey.log");
        let lackey = run(
            std::process::Command::new("valgrind")
                .args(["--tool=lackey", "--trace-mem=yes"])
                .arg(format!("--log-file={}", log.display()))
                .arg(&target),
            Duration::from_secs(300),
        );
        assert_eq!(lackey.status, 0, "valgrind: {}", lackey.stderr);
        // Where valgrind loaded the program: main's address, as the program
        // printed it, less main's ELF address.
        let main_at = |text: &str| -> u64 {
            hex(text
                .lines()
                .find_map(|l| l.strip_prefix("main at "))
                .expect("the program says where main is"))
            .unwrap()
        };
        // The program's own load bias in the traced run.
        let meta = read_json(&trace.join("paths.json"));
        let file = target.file_name().unwrap().to_string_lossy().into_owned();
        let bias = meta["loads"][0]["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m[0].as_str().is_some_and(|p| p.ends_with(&file)))
            .and_then(|m| m[1].as_u64())
            .expect("the program's load bias");
        let main_vaddr = main_at(&out.stderr) - bias;
        let base = main_at(&lackey.stderr) - main_vaddr;
        let keep = traced_instructions(&trace, None);
        let theirs = lackey_accesses(&std::fs::read_to_string(&log).unwrap(), &keep, base);
        assert!(theirs.len() > 5000, "lackey saw {} accesses", theirs.len());
        assert_eq!(weft.len(), theirs.len(), "accesses of the traced functions");
        // The same accesses in the same order; addresses equal up to where
        // each region lies (valgrind places the stack, and a PIE program,
        // elsewhere): one shift per region, 0 for a no-PIE program's data.
        let mut shifts: BTreeMap<&str, HashSet<u64>> = BTreeMap::new();
        for (k, (w, l)) in weft.iter().zip(&theirs).enumerate() {
            assert_eq!(
                (w.0, w.1, w.3),
                (l.0, l.1, l.3),
                "access {k}: weft {w:x?}, lackey {l:x?}"
            );
            let (Some(mine), Some(real)) = (w.2, l.2) else {
                panic!("access {k} not regenerated: {w:x?}");
            };
            let region = if real >= 0x10_0000_0000 {
                "stack"
            } else {
                "program"
            };
            shifts
                .entry(region)
                .or_default()
                .insert(mine.wrapping_sub(real));
        }
        assert!(
            shifts.values().all(|s| s.len() == 1),
            "one shift per region: {shifts:x?}"
        );
        if v.name.ends_with("nopie") {
            assert_eq!(
                shifts["program"],
                HashSet::from([0]),
                "static data at its address"
            );
        }
        assert!(
            regen
                .stderr
                .contains(&format!("data: {} access(es) regenerated", weft.len())),
            "{}",
            regen.stderr
        );
        // The binary form holds the same accesses.
        let file = dir.join("data.bin");
        let bin = run(
            crate::support::weft()
                .args(["regen", "--binary", "--data", "--insns", "-o"])
                .arg(&file)
                .arg(&trace),
            Duration::from_secs(120),
        );
        assert_eq!(bin.status, 0, "weft regen --binary --data: {}", bin.stderr);
        assert_eq!(binary_accesses(&std::fs::read(&file).unwrap()), weft);
    }
);

/// The accesses in `weft regen --binary --data --insns` output, every
/// stream's one after another (docs/paths.md, "The trace and
/// regeneration").
fn binary_accesses(bytes: &[u8]) -> Vec<Access> {
    assert_eq!(&bytes[..8], b"WEFTBLK1");
    let u32_at = |o: usize| u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap());
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap());
    let mut at = 12;
    for _ in 0..u32_at(8) {
        at += 2 + u16::from_le_bytes([bytes[at], bytes[at + 1]]) as usize;
    }
    let (mut out, mut insn) = (Vec::new(), 0);
    while at < bytes.len() {
        assert_eq!(bytes[at], 1, "a stream header at {at}");
        at += 17 + u32_at(at + 13) as usize;
        loop {
            let e = u64_at(at);
            at += 8;
            match e >> 48 {
                0xFFFF => break,
                0xFFFE => {
                    let kind = ['L', 'S', 'M'][(e >> 16 & 0xFF) as usize];
                    let addr = (e & 1 << 24 == 0).then(|| u64_at(at));
                    out.push((insn, kind, addr, e & 0xFFFF));
                    at += 8;
                }
                _ => insn = e & 0xFFFF_FFFF_FFFF,
            }
        }
    }
    out
}
