//! CTF 1.8 output (the Common Trace Format read by babeltrace2 and Trace
//! Compass): `DIR/ctf/metadata` in TSDL and one stream file per thread,
//! each a single packet of byte-aligned little-endian records. Timestamps
//! are the raw TSC values on a clock declared at the TSC's measured rate.

use crate::{shown_values, Error, Meta, Result, Shown};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use weft_live::EventRecord;

const MAGIC: u32 = 0xC1FC_1FC1;

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The TSDL metadata.
fn metadata(meta: &Meta) -> String {
    let mut m = String::from("/* CTF 1.8 */\n\n");
    m.push_str(
        "typealias integer { size = 32; align = 8; signed = false; } := uint32_t;\n\
         typealias integer { size = 64; align = 8; signed = false; } := uint64_t;\n\
         typealias integer { size = 64; align = 8; signed = true; } := int64_t;\n\n\
         trace {\n\tmajor = 1;\n\tminor = 8;\n\tbyte_order = le;\n\
         \tpacket.header := struct {\n\t\tuint32_t magic;\n\t\tuint32_t stream_id;\n\t};\n};\n\n",
    );
    let _ = write!(
        m,
        "env {{\n\ttracer_name = \"weft\";\n\tpid = {};\n}};\n\n\
         clock {{\n\tname = \"tsc\";\n\tdescription = \"time-stamp counter\";\n\tfreq = {};\n\toffset = 0;\n}};\n\n\
         typealias integer {{ size = 64; align = 8; signed = false; map = clock.tsc.value; }} := tsc_t;\n\n",
        meta.pid,
        (meta.ticks_per_ns * 1e9).round() as u64
    );
    m.push_str(
        "stream {\n\tid = 0;\n\
         \tpacket.context := struct {\n\t\ttsc_t timestamp_begin;\n\t\ttsc_t timestamp_end;\n\
         \t\tuint64_t content_size;\n\t\tuint64_t packet_size;\n\t\tuint64_t events_discarded;\n\t};\n\
         \tevent.header := struct {\n\t\tuint32_t id;\n\t\ttsc_t timestamp;\n\t};\n\
         \tevent.context := struct {\n\t\tint64_t tid;\n\t};\n};\n\n",
    );
    for (id, (module, function, kind, nargs)) in meta.events.iter().enumerate() {
        let fields = if kind == "exit" {
            "\t\tint64_t ret;\n".to_string()
        } else {
            let mask = meta.string_mask(id as u32);
            (1..=*nargs)
                .map(|i| {
                    if mask & (1 << (i - 1)) != 0 {
                        format!("\t\tstring arg{i};\n")
                    } else {
                        format!("\t\tint64_t arg{i};\n")
                    }
                })
                .collect()
        };
        let _ = write!(
            m,
            "event {{\n\tname = \"{}:{}:{}\";\n\tid = {id};\n\tstream_id = 0;\n\tfields := struct {{\n{fields}\t}};\n}};\n\n",
            escape(module),
            escape(function),
            kind
        );
    }
    m
}

/// Writes `dir/ctf/`.
pub fn write_ctf(dir: &Path, meta: &Meta, events: &[EventRecord]) -> Result<()> {
    let ctf = dir.join("ctf");
    let io = |what: String| {
        move |source| Error::Io {
            what: what.clone(),
            source,
        }
    };
    std::fs::create_dir_all(&ctf).map_err(io(format!("creating {}", ctf.display())))?;
    // Streams of an earlier trace in the same directory are not this one's.
    if let Ok(entries) = std::fs::read_dir(&ctf) {
        for entry in entries.flatten() {
            if entry.file_name().to_string_lossy().starts_with("stream_") {
                std::fs::remove_file(entry.path())
                    .map_err(io(format!("removing {}", entry.path().display())))?;
            }
        }
    }
    std::fs::write(ctf.join("metadata"), metadata(meta))
        .map_err(io(format!("writing {}/metadata", ctf.display())))?;
    let mut by_thread: BTreeMap<i32, Vec<&EventRecord>> = BTreeMap::new();
    for e in events {
        by_thread.entry(e.tid).or_default().push(e);
    }
    for (tid, evs) in by_thread {
        let mut body: Vec<u8> = Vec::new();
        for e in &evs {
            let Some((_, _, kind, nargs)) = meta.events.get(e.event as usize) else {
                continue;
            };
            body.extend_from_slice(&e.event.to_le_bytes());
            body.extend_from_slice(&e.tsc.to_le_bytes());
            body.extend_from_slice(&(tid as i64).to_le_bytes());
            let want = if kind == "exit" { 1 } else { *nargs as usize };
            let shown = shown_values(meta.string_mask(e.event), e);
            for i in 0..want {
                match shown.get(i) {
                    Some(Shown::Int(v)) => body.extend_from_slice(&v.to_le_bytes()),
                    Some(Shown::Str(text, _)) => {
                        // CTF strings end at the first NUL.
                        body.extend(text.bytes().filter(|&b| b != 0));
                        body.push(0);
                    }
                    Some(Shown::Null) => body.push(0),
                    None => body.extend_from_slice(&0u64.to_le_bytes()),
                }
            }
        }
        let header_len = 8 + 5 * 8;
        let size_bits = ((header_len + body.len()) * 8) as u64;
        let mut packet = Vec::with_capacity(header_len + body.len());
        packet.extend_from_slice(&MAGIC.to_le_bytes());
        packet.extend_from_slice(&0u32.to_le_bytes());
        packet.extend_from_slice(&evs.first().map_or(0, |e| e.tsc).to_le_bytes());
        packet.extend_from_slice(&evs.last().map_or(0, |e| e.tsc).to_le_bytes());
        packet.extend_from_slice(&size_bits.to_le_bytes());
        packet.extend_from_slice(&size_bits.to_le_bytes());
        packet.extend_from_slice(&0u64.to_le_bytes());
        packet.extend_from_slice(&body);
        let path = ctf.join(format!("stream_{tid}"));
        std::fs::write(&path, packet).map_err(io(format!("writing {}", path.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_declares_every_event_and_the_clock() {
        let meta = Meta {
            pid: 7,
            ticks_per_ns: 2.5,
            start_tsc: 0,
            dropped: 0,
            ring_mode: "discard".into(),
            tsc_invariant: Some(true),
            events: vec![
                ("m".into(), "f".into(), "entry".into(), 2),
                ("m".into(), "f".into(), "exit".into(), 1),
                ("m".into(), "g".into(), "entry".into(), 2),
            ],
            strings: vec![0, 0, 0b10],
        };
        let text = metadata(&meta);
        assert!(text.starts_with("/* CTF 1.8 */"));
        assert!(text.contains("freq = 2500000000;"));
        assert!(
            text.contains("name = \"m:f:entry\";\n\tid = 0;") && text.contains("int64_t arg2;")
        );
        assert!(text.contains("name = \"m:f:exit\";\n\tid = 1;") && text.contains("int64_t ret;"));
        assert!(text.contains("\t\tint64_t arg1;\n\t\tstring arg2;\n"));
    }
}
