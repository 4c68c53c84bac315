//! `weft inspect` against binutils: the same function addresses as `nm`, the
//! same instruction boundaries as `objdump`.

use crate::support::*;
use std::process::Command;
use std::time::Duration;

fn nopie() -> Variant {
    variant("o2_nopie")
}

#[test]
fn function_addresses_match_nm() {
    let bin = build("basic", &nopie());
    let nm = run(Command::new("nm").arg(&bin), Duration::from_secs(30));
    let nm_addr = |name: &str| {
        nm.stdout
            .lines()
            .find_map(|l| {
                let mut w = l.split_whitespace();
                let (a, t, n) = (w.next()?, w.next()?, w.next()?);
                (n == name && (t == "T" || t == "t")).then(|| hex(a))?
            })
            .unwrap()
    };
    let out = run(
        weft().args(["inspect", "functions"]).arg(&bin).arg("*"),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    for f in ["work", "leaf", "rec", "main"] {
        let line = out
            .stdout
            .lines()
            .find(|l| l.split_whitespace().nth(3) == Some(f))
            .unwrap_or_else(|| panic!("{f}"));
        let addr = hex(line.split_whitespace().next().unwrap()).unwrap();
        assert_eq!(addr, nm_addr(f), "{f}");
    }
}

/// Debian's libc is stripped: the implementations its IFUNCs choose have
/// no symbol of their own. With its detached debug symbols installed
/// (libc6-dbg, found by build id), weft names them as nm names them in
/// the debug file, and shows the name of memcpy's choice.
#[test]
fn detached_debug_symbols_name_stripped_code() {
    let libc = "/lib/x86_64-linux-gnu/libc.so.6";
    let notes = run(
        Command::new("readelf").args(["-n", libc]),
        Duration::from_secs(30),
    );
    let id = notes
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("libc has a build id")
        .to_string();
    let debug = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    if !std::path::Path::new(&debug).exists() {
        skip("libc6-dbg missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    let out = run(
        weft().args(["inspect", "functions", libc, "*"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let chosen = out
        .stdout
        .lines()
        .find_map(|l| l.split_once(" memcpy [ifunc -> ")?.1.split(']').next())
        .expect("memcpy's implementation shown")
        .to_string();
    assert!(!chosen.starts_with("sub_"), "{chosen}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.split_whitespace().nth(3) == Some(chosen.as_str()))
        .unwrap_or_else(|| panic!("{chosen} listed"));
    let addr = hex(line.split_whitespace().next().unwrap()).unwrap();
    let nm = run(Command::new("nm").arg(&debug), Duration::from_secs(30));
    assert!(
        nm.stdout.lines().any(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() == 3 && w[2] == chosen && hex(w[0]) == Some(addr)
        }),
        "nm does not list {chosen} at {addr:#x} in {debug}"
    );
}

#[test]
fn disassembly_boundaries_match_objdump() {
    let bin = build("shapes", &nopie());
    let obj = run(
        Command::new("objdump")
            .args(["-d", "--no-show-raw-insn"])
            .arg(&bin),
        Duration::from_secs(30),
    );
    let section = obj
        .stdout
        .split("<redzone>:")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .next()
        .unwrap();
    // objdump lists the alignment padding after the `ret` under the same
    // symbol; the function (its symbol's size) ends at the `ret`.
    let through_ret = section
        .split_inclusive('\n')
        .take_while(|l| !l.contains("\tret"))
        .count()
        + 1;
    let objdump: Vec<u64> = section
        .lines()
        .take(through_ret)
        .filter_map(|l| hex(l.trim().split(':').next()?))
        .collect();
    let out = run(
        weft().args(["inspect", "disasm"]).arg(&bin).arg("redzone"),
        Duration::from_secs(30),
    );
    let weft_addrs: Vec<u64> = out
        .stdout
        .lines()
        .skip(1)
        .filter_map(|l| hex(l[2..].split_whitespace().next()?))
        .collect();
    assert_eq!(weft_addrs, objdump);
}

#[test]
fn cfg_and_liveness() {
    let bin = build("shapes", &O2);
    let out = run(
        weft()
            .args(["inspect", "cfg"])
            .arg(&bin)
            .arg("target_inside"),
        Duration::from_secs(30),
    );
    assert!(out.stdout.starts_with("digraph"), "{}", out.stdout);
    // Entry block -> loop block, loop block -> itself and -> exit block.
    assert!(out.stdout.contains("b1 -> b1"), "{}", out.stdout);
    let out = run(
        weft()
            .args(["inspect", "liveness"])
            .arg(&bin)
            .arg("redzone+10"),
        Duration::from_secs(30),
    );
    let line = out.stdout.lines().nth(1).unwrap();
    assert!(line.contains("setl"), "{line}");
    let live = line
        .split("live:")
        .nth(1)
        .unwrap()
        .split("free:")
        .next()
        .unwrap();
    assert!(
        live.contains("SF") && live.contains("OF"),
        "setl reads SF and OF: {line}"
    );
    // redzone never writes rdi or rcx: a caller compiled with -fipa-ra may
    // keep values there across the call, so they stay live.
    assert!(
        live.contains("rdi") && live.contains("rcx"),
        "rdi and rcx are kept for the caller: {line}"
    );
    let free = line.split("free:").nth(1).unwrap();
    assert!(
        free.contains("ZF") && free.contains("CF"),
        "setl reads neither ZF nor CF: {line}"
    );
}

#[test]
fn functions_of_a_running_process_at_runtime_addresses() {
    let bin = build("dlopen", &O2);
    let lib = build_shared("plugin", &O2);
    let mut child = Command::new(&bin)
        .arg(&lib)
        .arg("1")
        .arg("wait")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut first,
    )
    .unwrap();
    assert_eq!(first.trim(), "ready");
    let child = KillOnDrop(child);
    let pid = child.0.id() as i32;
    let out = run(
        weft().args(["inspect", "functions", &pid.to_string(), "libc.so.6:malloc"]),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let line = out.stdout.lines().nth(1).expect("a row for malloc");
    let addr = hex(line.split_whitespace().next().unwrap()).unwrap();
    let maps = weft_process::maps::read(pid).unwrap();
    let mapping = maps
        .iter()
        .find(|m| addr >= m.start.0 && addr < m.end.0)
        .expect("malloc's address is mapped");
    assert!(
        mapping.exec && mapping.path.ends_with("libc.so.6"),
        "{mapping:?}"
    );
}

#[test]
fn usdt_probes_match_readelf() {
    let lib = "/usr/lib/x86_64-linux-gnu/libstdc++.so.6".to_string();
    let python = "/usr/bin/python3.11".to_string();
    // Debian's postgres, whichever major version is installed.
    let postgres = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|d| d.path().join("bin/postgres").display().to_string())
        .next()
        .unwrap_or_else(|| "/usr/lib/postgresql/15/bin/postgres".into());
    // A loop over Debian's binaries, not build variants: the same check
    // against readelf for each system file that carries USDT notes.
    for binary in [&lib, &python, &postgres] {
        let binary = binary.as_str();
        if !std::path::Path::new(binary).exists() {
            skip(&format!("{binary} missing"));
            continue;
        }
        let re = run(
            Command::new("readelf").args(["-n", binary]),
            Duration::from_secs(30),
        );
        // readelf: "Provider: P" / "Name: N" / "Location: 0x..., Base: ..., Semaphore: 0x..."
        let mut want = Vec::new();
        let mut provider = String::new();
        let mut name = String::new();
        for l in re.stdout.lines().map(str::trim) {
            if let Some(p) = l.strip_prefix("Provider: ") {
                provider = p.into();
            } else if let Some(n) = l.strip_prefix("Name: ") {
                name = n.into();
            } else if let Some(loc) = l.strip_prefix("Location: ") {
                let site = hex(loc.split(',').next().unwrap()).unwrap();
                want.push((format!("{provider}:{name}"), site));
            }
        }
        assert!(!want.is_empty(), "{binary} has USDT probes");
        let out = run(
            weft().args(["inspect", "usdt", binary]),
            Duration::from_secs(30),
        );
        assert_eq!(out.status, 0, "{}", out.stderr);
        let got: Vec<(String, u64)> = out
            .stdout
            .lines()
            .skip(1)
            .map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w[1].to_string(), hex(w[2]).unwrap())
            })
            .collect();
        assert_eq!(got, want, "{binary}");
        // The spelling, `inspect --usdt`, prints the same.
        let flag = run(
            weft().args(["inspect", "--usdt", binary]),
            Duration::from_secs(30),
        );
        assert_eq!(flag.stdout, out.stdout, "{binary}");
    }
}

// `weft inspect events` lists every `WEFT_EVENT` site with its fields, at
// the addresses `nm` gives the descriptors (`_weft_site.N`), in every
// variant (pointers relocated at load time in PIE files included).
variant_test!(event_sites_match_nm, |v| {
    let bin = build("rich", v);
    let nm = run(Command::new("nm").arg(&bin), Duration::from_secs(30));
    let mut nm_sites: Vec<u64> = nm
        .stdout
        .lines()
        .filter(|l| l.contains("_weft_site"))
        .filter_map(|l| hex(l.split_whitespace().next()?))
        .collect();
    nm_sites.sort();
    let out = run(
        weft().args(["inspect", "events"]).arg(&bin),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}: {}", v.name, out.stderr);
    let mut listed: Vec<(u64, String, String)> = out
        .stdout
        .lines()
        .skip(1)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let addr = hex(w[2]).unwrap();
            (addr, w[1].to_string(), w[3..].join(" "))
        })
        .collect();
    listed.sort();
    assert_eq!(
        listed.iter().map(|l| l.0).collect::<Vec<_>>(),
        nm_sites,
        "{}",
        v.name
    );
    let mut names: Vec<(String, String)> = listed.into_iter().map(|(_, n, f)| (n, f)).collect();
    names.sort();
    assert_eq!(
        names,
        [
            ("rich:done".to_string(), "thread:i count:i".to_string()),
            (
                "rich:request".to_string(),
                "index:i label:s payload:b".to_string()
            )
        ],
        "{}",
        v.name
    );
});
