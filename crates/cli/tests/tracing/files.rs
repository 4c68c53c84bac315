//! Files and crashes: events directories and reports are created private
//! (0700 and 0600) and never through a link another user could plant; an
//! earlier trace is replaced only with --force and a directory holding
//! anything else never; a stream cut short (weft killed, disk full) or
//! corrupted is read up to the damage, and `weft events --repair` makes
//! it readable by babeltrace2 again.

use crate::support::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A trace whose one stream holds many packets: one thread, 64 KiB
/// rings, block mode (nothing dropped).
fn many_packets(name: &str) -> Traced {
    let traced = trace_run(
        name,
        &[
            "--trace",
            "fn:traced",
            "--ring-mode",
            "block",
            "--ring-size",
            "64K",
        ],
        build("events", &O2),
        &["1", "50000"],
    );
    // As a weft killed before the end leaves it: no derived files, so
    // `weft events` reads the streams.
    for derived in ["events.jsonl", "trace.json"] {
        std::fs::remove_file(traced.events.join(derived)).unwrap();
    }
    traced
}

/// A packet of a stream: where it starts, its bytes, its events.
#[derive(Debug, Clone, Copy)]
struct Packet {
    at: usize,
    len: usize,
    events: usize,
}

/// The packets of a CTF stream as weft writes it (64 bytes of header and
/// context, `packet_size` in bits at byte 32; records of 16 bytes, 8 per
/// value and their text, the shape word at byte 12).
fn packets(stream: &[u8]) -> Vec<Packet> {
    let word = |at: usize| u64::from_le_bytes(stream[at..at + 8].try_into().unwrap());
    let mut packets = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        let len = (word(at + 32) / 8) as usize;
        let (mut record, mut events) = (at + 64, 0);
        while record < at + len {
            let shape = word(record + 8) >> 32;
            record += 16 + 8 * (shape & 0xffff) as usize + (shape >> 16) as usize;
            events += 1;
        }
        packets.push(Packet { at, len, events });
        at += len;
    }
    packets
}

/// The one stream file of an events directory.
fn only_stream(events: &Path) -> PathBuf {
    let streams: Vec<PathBuf> = std::fs::read_dir(events.join("ctf"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("stream_")
        })
        .collect();
    assert_eq!(streams.len(), 1, "{streams:?}");
    streams[0].clone()
}

fn weft_events(args: &[&str], events: &Path) -> Finished {
    run(
        weft().arg("events").args(args).arg(events),
        Duration::from_secs(60),
    )
}

#[test]
fn a_stream_cut_inside_its_last_packet_keeps_every_packet_before() {
    let traced = many_packets("cut-short");
    let stream = only_stream(&traced.events);
    let whole = std::fs::read(&stream).unwrap();
    let packets = packets(&whole);
    assert!(packets.len() >= 4, "{} packet(s)", packets.len());
    assert_eq!(packets.iter().map(|p| p.events).sum::<usize>(), 100_000);
    let full = events_text(&traced.events);
    assert_eq!(full.lines().count(), 100_000);
    let last = *packets.last().unwrap();
    // One thread: time order is stream order.
    let kept: Vec<&str> = full.lines().take(100_000 - last.events).collect();
    for cut in [1, 30, 56, 64, 64 + 20, last.len - 1] {
        std::fs::write(&stream, &whole[..last.at + cut]).unwrap();
        let out = weft_events(&[], &traced.events);
        assert_eq!(out.status, 0, "cut {cut}: {}", out.stderr);
        assert!(
            out.stdout.lines().eq(kept.iter().copied()),
            "cut {cut}: every earlier event, printed as before"
        );
        let said = format!(
            "weft: {}: its last packet was cut short (weft was killed or the disk filled while \
             writing it): left out its last {cut} byte(s), from byte {}",
            stream.display(),
            last.at
        );
        assert!(out.stderr.contains(&said), "cut {cut}: {}", out.stderr);
        let repaired = weft_events(&["--repair"], &traced.events);
        assert_eq!(repaired.status, 0, "cut {cut}: {}", repaired.stderr);
        assert!(
            repaired.stderr.contains(&format!(
                "cut back to {} byte(s), its last whole packet; removed {cut} byte(s)",
                last.at
            )),
            "cut {cut}: {}",
            repaired.stderr
        );
        assert_eq!(repaired.stdout.lines().count(), kept.len());
        assert!(!repaired.stderr.contains("left out"), "{}", repaired.stderr);
        assert_eq!(std::fs::metadata(&stream).unwrap().len(), last.at as u64);
        let Some(bt) = babeltrace(&traced.events) else {
            return;
        };
        assert_eq!(bt.lines().count(), kept.len(), "cut {cut}");
    }
}

#[test]
fn a_corrupt_packet_in_the_middle_stops_its_stream_with_an_error() {
    let traced = many_packets("corrupt");
    let stream = only_stream(&traced.events);
    let whole = std::fs::read(&stream).unwrap();
    let packets = packets(&whole);
    let bad = packets[packets.len() / 2];
    let before: usize = packets
        .iter()
        .take_while(|p| p.at < bad.at)
        .map(|p| p.events)
        .sum();
    let full = events_text(&traced.events);
    let kept: Vec<&str> = full.lines().take(before).collect();
    // A bad magic number; sizes that disagree.
    let content_size = ((bad.len + 8) * 8) as u64;
    let damages: [(usize, &[u8], &str); 2] = [
        (bad.at, b"\xde\xad\xbe\xef", "bad packet magic 0xefbeadde"),
        (
            bad.at + 24,
            &content_size.to_le_bytes(),
            "packet content size",
        ),
    ];
    for (at, bytes, why) in damages {
        let mut damaged = whole.clone();
        damaged[at..at + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&stream, &damaged).unwrap();
        let out = weft_events(&[], &traced.events);
        assert_eq!(out.status, 1, "{why}: {}", out.stderr);
        assert!(!out.stderr.contains("panicked"), "{}", out.stderr);
        assert!(
            out.stdout.lines().eq(kept.iter().copied()),
            "{why}: the events before the damage"
        );
        let said = format!(
            "weft: {}: unreadable from byte {}: {why}",
            stream.display(),
            bad.at
        );
        assert!(out.stderr.contains(&said), "{}", out.stderr);
    }
    // --repair cuts the stream there: then weft and babeltrace2 read it.
    let repaired = weft_events(&["--repair"], &traced.events);
    assert_eq!(repaired.status, 0, "{}", repaired.stderr);
    assert_eq!(repaired.stdout.lines().count(), before);
    if let Some(bt) = babeltrace(&traced.events) {
        assert_eq!(bt.lines().count(), before);
    }
}

/// `weft run --trace fn:traced ARGS --events-out EVENTS` on the events
/// target, ten calls on one thread.
fn trace_into(events: &Path, args: &[&str]) -> Finished {
    run(
        weft()
            .args(["run", "--trace", "fn:traced"])
            .args(args)
            .arg("--events-out")
            .arg(events)
            .arg("--")
            .arg(build("events", &O2))
            .args(["1", "10"]),
        Duration::from_secs(60),
    )
}

/// The names in a directory, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn events_out_refuses_links_and_other_contents() {
    let dir = scratch("events-out-refused");
    // A symbolic link, even with --force: its target stays untouched.
    let target = dir.join("target");
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, dir.join("link")).unwrap();
    for link in [dir.join("link"), dir.join("link/")] {
        let out = trace_into(&link, &["--force"]);
        assert_clear_error(
            &out,
            1,
            "is a symbolic link; give the directory itself",
            "a symlinked --events-out",
        );
        assert!(out.stdout.is_empty(), "the program never ran");
    }
    assert!(names(&target).is_empty());
    // A directory that is not a weft trace, with --force or not.
    let other = dir.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "mine").unwrap();
    for force in [&[][..], &["--force"]] {
        let out = trace_into(&other, force);
        assert_clear_error(
            &out,
            1,
            &format!(
                "events directory {} is not empty and is not a weft trace (it holds \
                 \"notes.txt\"); give a new or empty directory",
                other.display()
            ),
            "a non-weft directory",
        );
    }
    assert_eq!(names(&other), ["notes.txt"]);
    assert_eq!(
        std::fs::read_to_string(other.join("notes.txt")).unwrap(),
        "mine"
    );
    // A file.
    let out = trace_into(&other.join("notes.txt"), &[]);
    assert_clear_error(&out, 1, "is not a directory", "a file as --events-out");
}

#[test]
fn an_earlier_trace_is_replaced_only_with_force() {
    let ev = scratch("events-out-earlier").join("ev");
    assert_eq!(trace_into(&ev, &[]).status, 0);
    let first = names(&ev.join("ctf"));
    let meta = std::fs::read(ev.join("meta.json")).unwrap();
    let out = trace_into(&ev, &[]);
    assert_clear_error(
        &out,
        1,
        "holds an earlier weft trace; give --force to replace it, or another directory",
        "an earlier trace without --force",
    );
    assert_eq!(names(&ev.join("ctf")), first, "nothing removed");
    assert_eq!(std::fs::read(ev.join("meta.json")).unwrap(), meta);
    let out = trace_into(&ev, &["--force"]);
    assert_eq!(out.status, 0, "{}", out.stderr);
    let second = names(&ev.join("ctf"));
    assert_eq!(second.len(), 2, "metadata and one stream: {second:?}");
    assert!(
        first.iter().all(|s| s == "metadata" || !second.contains(s)),
        "the earlier streams are gone: {first:?} {second:?}"
    );
    assert_eq!(lines_with(&events_text(&ev), ":traced "), 20);
}

/// Checks that every directory under `dir` (itself included) is 0700 and
/// every file 0600.
fn assert_private(dir: &Path) {
    let mode = |p: &Path| std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(dir), 0o700, "{}", dir.display());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            assert_private(&path);
        } else {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
    }
}

#[test]
fn traces_and_reports_are_private() {
    let traced = trace_run(
        "private-files",
        &["--trace", "fn:traced"],
        build("events", &O2),
        &["2", "100"],
    );
    assert_private(&traced.events);
    let dir = traced.events.parent().unwrap();
    let report = dir.join("report.json");
    let out = run(
        weft()
            .args(["run", "--count", "traced", "--format", "json", "--output"])
            .arg(&report)
            .arg("--")
            .arg(build("events", &O2))
            .args(["1", "10"]),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let html = dir.join("report.html");
    let out = run(
        weft().arg("report").arg(&report).arg("--html").arg(&html),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    for file in [&report, &html] {
        let mode = std::fs::metadata(file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", file.display());
    }
}

#[test]
fn reports_refuse_a_link_another_user_planted() {
    let dir = scratch("output-link");
    let victim = dir.join("victim");
    std::fs::write(&victim, "keep").unwrap();
    if std::fs::metadata(&victim).unwrap().uid() != 0 {
        skip("giving a link to another user needs root");
        return;
    }
    let link = dir.join("report.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
    let count_into = |output: &Path| {
        run(
            weft()
                .args(["run", "--count", "traced", "--output"])
                .arg(output)
                .arg("--")
                .arg(build("events", &O2))
                .args(["1", "10"]),
            Duration::from_secs(60),
        )
    };
    let out = count_into(&link);
    assert_clear_error(
        &out,
        1,
        &format!(
            "output file {} is a symbolic link owned by user 65534, not by weft's user 0 or \
             root, so weft does not follow it; remove it or give another path",
            link.display()
        ),
        "--output to another user's link",
    );
    assert!(out.stdout.is_empty(), "refused before the program ran");
    let json = dir.join("counts.json");
    std::fs::write(&json, r#"{"counts": []}"#).unwrap();
    let out = run(
        weft().arg("report").arg(&json).arg("--html").arg(&link),
        Duration::from_secs(60),
    );
    assert_clear_error(&out, 1, "is a symbolic link owned by user 65534", "--html");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    // weft's own link is followed, and /dev/stdout (root's) works.
    std::os::unix::fs::lchown(&link, Some(0), Some(0)).unwrap();
    let out = count_into(&link);
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(std::fs::read_to_string(&victim).unwrap().contains("traced"));
    let out = count_into(Path::new("/dev/stdout"));
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(out.stdout.contains("traced"), "{}", out.stdout);
}

/// A small tmpfs mounted for one test, unmounted when dropped.
struct SmallDisk(PathBuf);

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_full_disk_leaves_streams_of_whole_packets() {
    let disk = scratch("full-disk").join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&disk)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        skip("mounting a small tmpfs needs root and mount");
        return;
    }
    let disk = SmallDisk(disk);
    let events = disk.0.join("ev");
    let out = run(
        weft()
            .args(["run", "--trace", "fn:traced", "--ring-mode", "block"])
            .args(["--ring-size", "64K", "--events-out"])
            .arg(&events)
            .arg("--")
            .arg(build("events", &O2))
            .args(["1", "50000"]),
        Duration::from_secs(120),
    );
    // Usually a stream fills the disk; on a loaded machine block mode may
    // have dropped enough events that only the files written at the end
    // do: meta.json (its copy from the start stays, replaced atomically)
    // or trace.json.
    assert_clear_error(
        &out,
        1,
        "No space left on device (os error 28)",
        "a full disk",
    );
    assert!(
        out.stderr.contains("weft wrote no more events, and the")
            || out.stderr.contains("trace.json")
            || out.stderr.contains("meta.json"),
        "{}",
        out.stderr
    );
    assert_eq!(tallies(&out.stdout)["traced"], 50_000, "the program ran on");
    let read = weft_events(&[], &events);
    assert_eq!(read.status, 0, "{}", read.stderr);
    assert!(
        !read.stderr.contains("left out"),
        "whole packets only: {}",
        read.stderr
    );
    let bytes = std::fs::read(only_stream(&events)).unwrap();
    let written: usize = packets(&bytes).iter().map(|p| p.events).sum();
    assert!(
        written > 1000,
        "{written} event(s) before the disk was full"
    );
    assert_eq!(read.stdout.lines().count(), written);
    if let Some(bt) = babeltrace(&events) {
        assert_eq!(bt.lines().count(), written);
    }
}
