//! The documentation and the binary agree: every option a `weft SUBCOMMAND`
//! command line in README.md or docs/*.md uses is one that subcommand's
//! `--help` lists, so no example shows an option weft would refuse.

use crate::support::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// (subcommand, option) for every `--option` on a line after `weft SUB`,
/// up to the end of the command (a `|`, `;`, `#` comment, or `--` alone).
fn options_used(text: &str) -> BTreeSet<(String, String)> {
    const SUBCOMMANDS: [&str; 8] = [
        "run",
        "attach",
        "inspect",
        "report",
        "events",
        "calibrate",
        "regen",
        "syscalls",
    ];
    let mut used = BTreeSet::new();
    for line in text.lines() {
        let words: Vec<&str> = line
            .split(|c: char| c.is_whitespace() || c == '`')
            .filter(|w| !w.is_empty())
            .collect();
        let mut i = 0;
        while i + 1 < words.len() {
            if words[i] != "weft" || !SUBCOMMANDS.contains(&words[i + 1]) {
                i += 1;
                continue;
            }
            let sub = words[i + 1];
            let mut j = i + 2;
            while j < words.len() && !matches!(words[j], "|" | ";" | "#" | "--" | "&&") {
                let w = words[j];
                if let Some(opt) = w.strip_prefix("--") {
                    let name: String = opt
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect();
                    if !name.is_empty() {
                        used.insert((sub.to_string(), format!("--{name}")));
                    }
                }
                if w.ends_with(';') {
                    break;
                }
                j += 1;
            }
            i = j;
        }
    }
    used
}

#[test]
fn every_option_the_docs_use_is_one_the_binary_accepts() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            files.push(p);
        }
    }
    let mut help: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (sub, option) in options_used(&text) {
            let listed = help.entry(sub.clone()).or_insert_with(|| {
                let out = run(weft().args([&sub, "--help"]), Duration::from_secs(30));
                assert_eq!(out.status, 0, "weft {sub} --help: {}", out.stderr);
                out.stdout
            });
            // `inspect` and `syscalls` have subcommands of their own: their
            // options count too.
            let known = listed.contains(&option)
                || sub == "inspect" && knows(&sub, INSPECT, &option)
                || sub == "syscalls" && knows(&sub, SYSCALLS, &option);
            assert!(
                known || option == "--help",
                "{}: `weft {sub} ... {option}` but `weft {sub} --help` does not list {option}",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} options found in the docs");
}

const INSPECT: &[&str] = &["functions", "disasm", "cfg", "liveness", "usdt", "events"];
const SYSCALLS: &[&str] = &[
    "record", "show", "stats", "deps", "replay", "reexec", "actual",
];

/// Whether some `weft SUB KIND --help` of `kinds` lists `option`.
fn knows(sub: &str, kinds: &[&str], option: &str) -> bool {
    kinds.iter().any(|kind| {
        run(weft().args([sub, kind, "--help"]), Duration::from_secs(30))
            .stdout
            .contains(option)
    })
}

#[test]
fn options_are_read_from_command_lines_only() {
    let used = options_used(
        "weft run --count work --format json -- ./prog --not-weft\n\
         `weft attach -p 1 --duration 2s`; then --elsewhere\n\
         weft events --repair ev # --comment",
    );
    let want: BTreeSet<(String, String)> = [
        ("run", "--count"),
        ("run", "--format"),
        ("attach", "--duration"),
        ("events", "--repair"),
    ]
    .iter()
    .map(|(s, o)| (s.to_string(), o.to_string()))
    .collect();
    assert_eq!(used, want);
}
