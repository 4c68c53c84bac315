//! Tests of the streaming reader: its output against the reader it
//! replaced, on random traces, and on damaged ones.
use super::*;
use crate::ctf::tests::meta;
use proptest::prelude::*;

/// What `weft events` printed before it streamed, verbatim: every
/// event held and sorted in memory, then rendered. The reference the
/// streamed lines must equal.
mod old {
    use crate::{shown_values, Meta};
    use weft_live::EventRecord;

    #[derive(Debug, Default)]
    pub struct Durations<'m> {
        stacks: std::collections::HashMap<i32, Vec<(&'m str, &'m str, u64)>>,
    }

    impl<'m> Durations<'m> {
        pub fn see(&mut self, meta: &'m Meta, e: &EventRecord) -> Option<u64> {
            let (module, function, kind, _) = meta.events.get(e.event as usize)?;
            let stack = self.stacks.entry(e.tid).or_default();
            match kind.as_str() {
                "entry" => {
                    stack.push((module, function, e.tsc));
                    None
                }
                "exit" => {
                    let at = stack
                        .iter()
                        .rposition(|(m, f, _)| *m == module.as_str() && *f == function.as_str())?;
                    let (_, _, start) = stack[at];
                    stack.truncate(at);
                    Some((e.tsc.saturating_sub(start) as f64 / meta.ticks_per_ns).round() as u64)
                }
                _ => None,
            }
        }
    }

    pub fn render_text(meta: &Meta, events: &[EventRecord]) -> String {
        let mut sorted: Vec<&EventRecord> = events.iter().collect();
        sorted.sort_by_key(|e| e.tsc);
        let mut out = String::new();
        let mut durations = Durations::default();
        for e in sorted {
            let duration = durations
                .see(meta, e)
                .map(|ns| format!(" duration_ns={ns}"))
                .unwrap_or_default();
            let (module, function, kind) = meta
                .events
                .get(e.event as usize)
                .map(|(m, f, k, _)| (m.as_str(), f.as_str(), k.as_str()))
                .unwrap_or(("?", "?", "?"));
            let ns = e.tsc.saturating_sub(meta.start_tsc) as f64 / meta.ticks_per_ns;
            let values = if kind == "exit" {
                e.args
                    .first()
                    .map(|r| format!("ret={}", *r as i64))
                    .unwrap_or_default()
            } else {
                shown_values(meta.string_masks(e.event), e)
                    .iter()
                    .enumerate()
                    .map(|(i, v)| format!("{}={v}", meta.value_name(e.event, i)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            out.push_str(&format!(
                "{ns:>16.0} {:>7} {module}:{function} {kind} {values}{duration}\n",
                e.tid
            ));
        }
        out
    }
}

/// A ring record: `tsc`, event `id`, integer `values`, and for event 2
/// (whose second value is a string) the string `text` as its second.
fn record(tsc: u64, id: u32, values: &[u64], text: Option<&str>) -> Vec<u8> {
    let mut words = values.to_vec();
    let mut texts = Vec::new();
    if let Some(t) = text {
        words.push(t.len() as u64);
        texts.extend_from_slice(t.as_bytes());
        texts.resize(t.len().div_ceil(8) * 8, 0);
    }
    let mut r = Vec::new();
    r.extend_from_slice(&tsc.to_le_bytes());
    r.extend_from_slice(&id.to_le_bytes());
    r.extend_from_slice(&(words.len() as u32 | (texts.len() as u32) << 16).to_le_bytes());
    for w in &words {
        r.extend_from_slice(&w.to_le_bytes());
    }
    r.extend_from_slice(&texts);
    r
}

/// An event of `meta()` at `tsc`, `kind` choosing which (0: f's entry,
/// 1: f's exit, 2: g's entry with a string).
fn event(tsc: u64, kind: u8, n: u64) -> Vec<u8> {
    match kind % 3 {
        0 => record(tsc, 0, &[n, n + 1], None),
        1 => record(tsc, 1, &[n * 3], None),
        _ => record(tsc, 2, &[n], Some(&"text".repeat(n as usize % 5))),
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-read-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Writes an events directory as weft does: `streams` (thread, its
/// packets' records) into ctf/, then meta.json, ctf/metadata and (with
/// `finished`) events.jsonl and trace.json; returns every event in file
/// order (streams in name order).
fn write_trace(dir: &Path, streams: &[(i32, Vec<Vec<u8>>)], finished: bool) -> Vec<EventRecord> {
    let m = meta();
    let trace = crate::TraceDir::prepare(dir, true).unwrap();
    for (tid, packets) in streams {
        let mut bytes = Vec::new();
        for records in packets {
            bytes.extend_from_slice(&crate::ctf::packet(7, *tid, 0, records).0);
        }
        std::fs::write(dir.join(format!("ctf/stream_{tid}")), bytes).unwrap();
    }
    if finished {
        crate::store::finish_dir(&trace, &m).unwrap();
    } else {
        crate::store::write_meta(&trace, &m).unwrap();
    }
    let mut names: Vec<(String, &Vec<Vec<u8>>)> = streams
        .iter()
        .map(|(tid, p)| (format!("stream_{tid}"), p))
        .collect();
    names.sort();
    let mut all = Vec::new();
    for (name, packets) in names {
        let tid: i32 = name["stream_".len()..].parse().unwrap();
        for records in packets {
            weft_live::decode_records(tid, records, &|id| m.string_masks(id), &mut all);
        }
    }
    all
}

/// What `weft events` prints for `dir`, streamed.
fn streamed(dir: &Path) -> String {
    let reader = TraceReader::open(dir).unwrap();
    let mut lines = crate::TextLines::new(reader.meta());
    let mut out = String::new();
    reader
        .each_in_time_order(&mut |e| {
            out.push_str(lines.line(e));
            Ok(())
        })
        .unwrap();
    out
}

/// Threads of a few packets each, timestamps drawn from a small range
/// (ties across threads, and now and then one going back in a stream).
fn threads() -> impl Strategy<Value = Vec<(i32, Vec<Vec<u8>>)>> {
    proptest::collection::vec(
        proptest::collection::vec(
            proptest::collection::vec((0u64..8, any::<u8>(), 0u64..20), 1..12),
            1..5,
        ),
        1..5,
    )
    .prop_map(|threads| {
        threads
            .into_iter()
            .enumerate()
            .map(|(i, packets)| {
                let mut tsc = 0u64;
                let packets = packets
                    .into_iter()
                    .map(|events| {
                        events
                            .into_iter()
                            .flat_map(|(step, kind, n)| {
                                // Mostly forward; a step of 7 goes back.
                                tsc = if step == 7 {
                                    tsc.saturating_sub(5)
                                } else {
                                    tsc + step
                                };
                                event(tsc, kind, n)
                            })
                            .collect()
                    })
                    .collect();
                // Thread ids whose names sort unlike their numbers.
                ([7, 12, 100, 3, 45][i], packets)
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Streamed, the lines are those of sorting every event in memory
    /// (a stable sort by time), read from the streams or from
    /// events.jsonl.
    #[test]
    fn streamed_lines_are_the_sorted_ones(streams in threads(), finished in any::<bool>()) {
        let dir = scratch(&format!("prop-{}", u8::from(finished)));
        let all = write_trace(&dir, &streams, finished);
        let want = old::render_text(&meta(), &all);
        prop_assert_eq!(streamed(&dir), want);
        prop_assert_eq!(TraceReader::open(&dir).unwrap().events(), all.len() as u64);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn many_runs_reopen_their_files_and_read_the_same() {
    // One thread whose timestamps go back every other event: more runs
    // than kept open, several in each packet.
    let packets: Vec<Vec<u8>> = (0..20u64)
        .map(|p| {
            (0..30u64)
                .flat_map(|i| {
                    let tsc = 1000 * p + if i % 2 == 0 { i } else { 100 - i };
                    event(tsc, i as u8, i)
                })
                .collect()
        })
        .collect();
    for finished in [false, true] {
        let dir = scratch(&format!("runs-{finished}"));
        let all = write_trace(
            &dir,
            &[(5, packets.clone()), (6, packets.clone())],
            finished,
        );
        let reader = TraceReader::open(&dir).unwrap();
        assert!(reader.runs.len() > MAX_OPEN, "{} runs", reader.runs.len());
        assert_eq!(streamed(&dir), old::render_text(&meta(), &all));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn damage_is_noted_and_the_packets_before_are_read() {
    let dir = scratch("damage");
    let packets: Vec<Vec<u8>> = (0..3u64)
        .map(|p| (0..4).flat_map(|i| event(10 * p + i, i as u8, i)).collect())
        .collect();
    let all = write_trace(&dir, &[(1, packets.clone()), (2, packets)], false);
    let stream = dir.join("ctf/stream_2");
    let bytes = std::fs::read(&stream).unwrap();
    std::fs::write(&stream, &bytes[..bytes.len() - 3]).unwrap();
    let reader = TraceReader::open(&dir).unwrap();
    assert_eq!(reader.damage().len(), 1);
    assert!(!reader.damage()[0].is_corrupt());
    // Thread 2's last packet (4 events) left out.
    assert_eq!(reader.events(), all.len() as u64 - 4);
    let kept: Vec<EventRecord> = all
        .iter()
        .filter(|e| e.tid == 1 || e.tsc < 20)
        .cloned()
        .collect();
    assert_eq!(streamed(&dir), old::render_text(&meta(), &kept));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The one-line error `TraceReader::open` refuses `dir` with.
fn refused(dir: &Path) -> String {
    match TraceReader::open(dir) {
        Err(e @ Error::Inconsistent { .. }) => e.to_string(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn files_that_disagree_are_refused_naming_the_file() {
    let dir = scratch("disagree");
    let records: Vec<u8> = (0..4).flat_map(|i| event(i, i as u8, i)).collect();
    write_trace(&dir, &[(9, vec![records.clone()])], false);
    let meta_path = dir.join("meta.json");
    let good = std::fs::read_to_string(&meta_path).unwrap();
    // meta.json describing fewer events than the streams hold.
    let mut fewer = meta();
    fewer.events.truncate(2);
    fewer.strings.truncate(2);
    std::fs::write(&meta_path, serde_json::to_string(&fewer).unwrap()).unwrap();
    let metadata = dir.join("ctf/metadata");
    std::fs::write(&metadata, crate::ctf::metadata(&fewer)).unwrap();
    // The record with an id meta.json does not describe: its packet is
    // corrupt (the one packet: no event read).
    let reader = TraceReader::open(&dir).unwrap();
    assert_eq!(reader.events(), 0);
    assert_eq!(reader.damage().len(), 1);
    assert!(reader.damage()[0].is_corrupt());
    assert_eq!(
        reader.damage()[0].to_string(),
        format!(
            "{}: unreadable from byte 0: the record at byte {} has event id 2, which \
             meta.json does not describe (it describes 2)",
            dir.join("ctf/stream_9").display(),
            crate::ctf::PACKET_HEADER + 32 + 24,
        )
    );
    // ... and ctf/metadata of the full trace beside it: a mismatch.
    std::fs::write(&metadata, crate::ctf::metadata(&meta())).unwrap();
    assert!(refused(&dir).starts_with(&format!(
        "{}: declares event id 2 (line ",
        metadata.display()
    )));
    // Back as weft wrote it, but ctf/metadata cut short.
    std::fs::write(&meta_path, &good).unwrap();
    let text = crate::ctf::metadata(&meta());
    std::fs::write(&metadata, &text[..text.len() - 20]).unwrap();
    let e = refused(&dir);
    assert!(
        e.starts_with(&format!(
            "{}: ends inside the `event` block begun at line",
            metadata.display()
        )) && e.ends_with(&format!(
            "(cut short?); `weft events --repair {}` writes it again from meta.json",
            dir.display()
        )),
        "{e}"
    );
    // --repair writes it again, and then it reads.
    let why = crate::repair_metadata(&dir).unwrap().unwrap();
    assert!(why.starts_with("it ends inside the `event` block"), "{why}");
    assert_eq!(std::fs::read_to_string(&metadata).unwrap(), text);
    assert_eq!(crate::repair_metadata(&dir).unwrap(), None, "whole now");
    assert_eq!(streamed(&dir).lines().count(), 4);
    // A missing one too.
    std::fs::remove_file(&metadata).unwrap();
    assert!(refused(&dir).contains("cannot be read: No such file or directory"));
    assert!(crate::repair_metadata(&dir)
        .unwrap()
        .unwrap()
        .starts_with("it could not be read"));
    // meta.json inconsistent in itself.
    let mut bad = meta();
    bad.ticks_per_ns = -1.0;
    std::fs::write(&meta_path, serde_json::to_string(&bad).unwrap()).unwrap();
    assert_eq!(
        refused(&dir),
        format!(
            "{}: ticks_per_ns is -1, not a positive clock rate; weft writes it whole and in \
             step with the streams, so it was changed or comes from another trace: put back \
             the one weft wrote, or take the trace again",
            meta_path.display()
        )
    );
    assert_eq!(
        crate::repair_metadata(&dir).unwrap(),
        None,
        "nothing to write it from"
    );
    // A finished trace: events.jsonl's ids are checked too.
    std::fs::remove_dir_all(&dir).unwrap();
    write_trace(&dir, &[(9, vec![records])], true);
    std::fs::write(&meta_path, serde_json::to_string(&fewer).unwrap()).unwrap();
    std::fs::write(&metadata, crate::ctf::metadata(&fewer)).unwrap();
    assert!(refused(&dir).starts_with(&format!(
        "{}: line 3 has event id 2, but {} describes 2 event id(s) only",
        dir.join("events.jsonl").display(),
        meta_path.display()
    )));
    std::fs::remove_dir_all(&dir).unwrap();
}
