//! Whether the files of an events directory belong together: `meta.json`
//! consistent in itself, and `ctf/metadata` whole (not cut short) and
//! describing the same clock and event ids as `meta.json`. weft writes both
//! whole (under a temporary name, renamed over) and from the same
//! description, so any disagreement means a file was cut, changed, or
//! taken from another trace; `weft events` then says which file and what
//! is wrong instead of printing events under the wrong names.

use crate::{Error, Meta, Result};
use std::io::Read;
use std::path::{Path, PathBuf};
use weft_live::ring::MAX_ARGS;

/// The most bytes weft reads of `meta.json` or `ctf/metadata` (about 300
/// per event id: millions of ids).
const MAX_DESCRIPTION: u64 = 1 << 30;

/// What to do about a `meta.json` that is not weft's.
pub(crate) const META_TODO: &str =
    "weft writes it whole and in step with the streams, so it was changed or comes from another \
     trace: put back the one weft wrote, or take the trace again";

/// What to do about files that describe different traces.
pub(crate) const MISMATCH_TODO: &str =
    "the files are not of the same trace: put back the ones weft wrote, or take the trace again";

/// The text of `path`, a regular file of weft's that describes the trace
/// (read with a bound: not through a device or a pipe).
pub(crate) fn read_description(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let st = file.metadata()?;
    if !st.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut bytes = Vec::new();
    file.take(MAX_DESCRIPTION + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_DESCRIPTION {
        return Err(std::io::Error::other(format!(
            "larger than the {MAX_DESCRIPTION} bytes weft reads"
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::other(format!(
            "not UTF-8 text from byte {}",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// An [`Error::Inconsistent`] about `file`.
pub(crate) fn inconsistent(file: &Path, why: String, todo: impl Into<String>) -> Error {
    Error::Inconsistent {
        file: file.to_path_buf(),
        why,
        todo: todo.into(),
    }
}

/// Checks that `meta` (read from `path`) is consistent in itself: a
/// positive clock rate, and for every event id a known kind, at most
/// [`MAX_ARGS`] values (one for an exit), string and byte-array masks and
/// value names within its values, and no list longer than `events`.
pub(crate) fn check_meta(meta: &Meta, path: &Path) -> Result<()> {
    let bad = |why: String| inconsistent(path, why, META_TODO);
    if meta.format > crate::ctf::PACKET_FORMAT {
        return Err(inconsistent(
            path,
            format!(
                "its format is {}, newer than the {} this weft reads",
                meta.format,
                crate::ctf::PACKET_FORMAT
            ),
            "read it with the weft that wrote it, or a newer one",
        ));
    }
    if !(meta.ticks_per_ns.is_finite() && meta.ticks_per_ns > 0.0) {
        return Err(bad(format!(
            "ticks_per_ns is {}, not a positive clock rate",
            meta.ticks_per_ns
        )));
    }
    let ids = meta.events.len();
    for (list, len) in [
        ("strings", meta.strings.len()),
        ("binary", meta.binary.len()),
        ("names", meta.names.len()),
    ] {
        if len > ids {
            return Err(bad(format!(
                "\"{list}\" describes {len} event ids, \"events\" only {ids}"
            )));
        }
    }
    for (id, (_, _, kind, values)) in meta.events.iter().enumerate() {
        let values = usize::from(*values);
        match kind.as_str() {
            "entry" | "probe" | "syscall" | "sysret" => {}
            "exit" if values <= 1 => {}
            "exit" => {
                return Err(bad(format!(
                    "event {id}, an exit, has {values} value(s) (an exit records its return value \
                     only)"
                )))
            }
            other => {
                return Err(bad(format!(
                    "event {id} is of kind {other:?}, not entry, exit, probe, syscall or sysret"
                )))
            }
        }
        if values > MAX_ARGS {
            return Err(bad(format!(
                "event {id} has {values} value(s), more than the {MAX_ARGS} a record holds"
            )));
        }
        let (strings, binary) = meta.string_masks(id as u32);
        if u32::from(strings) >> values != 0 {
            return Err(bad(format!(
                "event {id} has {values} value(s), but its string mask {strings:#x} names value {}",
                16 - strings.leading_zeros()
            )));
        }
        if binary & !strings != 0 {
            return Err(bad(format!(
                "event {id}'s byte-array mask {binary:#x} is not among its strings ({strings:#x})"
            )));
        }
        let names = meta.names.get(id).map_or(0, Vec::len);
        if names > values {
            return Err(bad(format!(
                "event {id} has {values} value(s), but {names} value names"
            )));
        }
    }
    Ok(())
}

/// A token of TSDL text, with the line it starts on.
#[derive(Debug, Clone, PartialEq)]
enum Token {
    /// A word or a number.
    Word(String),
    /// A string literal's contents, escapes resolved.
    Str(String),
    /// Any other character.
    Punct(char),
}

/// Splits TSDL text into tokens (comments left out), or says on which line
/// a comment or a string is left open.
fn tokens(text: &str) -> std::result::Result<Vec<(Token, usize)>, String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    let mut line = 1;
    while let Some((at, c)) = chars.next() {
        match c {
            '\n' => line += 1,
            c if c.is_whitespace() => {}
            '/' if text[at..].starts_with("/*") => {
                let start = line;
                chars.next();
                let mut closed = false;
                while let Some((at, c)) = chars.next() {
                    if c == '\n' {
                        line += 1;
                    } else if c == '*' && text[at..].starts_with("*/") {
                        chars.next();
                        closed = true;
                        break;
                    }
                }
                if !closed {
                    return Err(format!("ends inside the comment begun at line {start}"));
                }
            }
            '/' if text[at..].starts_with("//") => {
                while chars.next_if(|&(_, c)| c != '\n').is_some() {}
            }
            '"' => {
                let start = line;
                let mut s = String::new();
                let mut closed = false;
                while let Some((_, c)) = chars.next() {
                    match c {
                        '"' => {
                            closed = true;
                            break;
                        }
                        '\\' => match chars.next() {
                            Some((_, e)) => s.push(e),
                            None => break,
                        },
                        '\n' => {
                            line += 1;
                            s.push(c);
                        }
                        c => s.push(c),
                    }
                }
                if !closed {
                    return Err(format!("ends inside the string begun at line {start}"));
                }
                out.push((Token::Str(s), start));
            }
            c if c.is_alphanumeric() || c == '_' || c == '.' => {
                let mut w = String::from(c);
                while let Some((_, c)) =
                    chars.next_if(|&(_, c)| c.is_alphanumeric() || c == '_' || c == '.')
                {
                    w.push(c);
                }
                out.push((Token::Word(w), line));
            }
            c => out.push((Token::Punct(c), line)),
        }
    }
    Ok(out)
}

/// A top-level block of TSDL (`trace { ... };`, `event { ... };`) and the
/// simple assignments (`name = value;`) directly inside it.
#[derive(Debug)]
struct Block {
    kind: String,
    line: usize,
    fields: Vec<(String, Token)>,
}

/// The top-level blocks of TSDL text, or why it is not whole: a block, a
/// statement, a comment or a string left open at the end (cut short), or
/// a `}` that closes nothing.
fn blocks(text: &str) -> std::result::Result<Vec<Block>, String> {
    let mut out = Vec::new();
    // Open braces: the statement keyword they belong to and their line.
    let mut open: Vec<(String, usize)> = Vec::new();
    // The current statement at each depth (tokens since its start).
    let mut statement: Vec<Vec<Token>> = vec![Vec::new()];
    let mut top_start: Option<(String, usize)> = None;
    let mut current: Option<Block> = None;
    for (token, line) in tokens(text)? {
        let depth = open.len();
        match token {
            Token::Punct('{') => {
                let kind = match &top_start {
                    Some((kind, _)) => kind.clone(),
                    None => "?".into(),
                };
                if depth == 0 {
                    current = Some(Block {
                        kind: kind.clone(),
                        line,
                        fields: Vec::new(),
                    });
                }
                open.push((kind, line));
                statement.push(Vec::new());
            }
            Token::Punct('}') => {
                if open.pop().is_none() {
                    return Err(format!("line {line}: a '}}' closes no block"));
                }
                statement.pop();
                if let Some(s) = statement.last_mut() {
                    s.push(Token::Punct('}'));
                }
            }
            Token::Punct(';') => {
                let tokens = std::mem::take(statement.last_mut().expect("one per depth"));
                if depth == 0 {
                    if let Some(block) = current.take() {
                        out.push(block);
                    }
                    top_start = None;
                } else if depth == 1 {
                    if let (Some(block), [Token::Word(key), Token::Punct('='), value]) =
                        (current.as_mut(), tokens.as_slice())
                    {
                        block.fields.push((key.clone(), value.clone()));
                    }
                }
            }
            token => {
                if depth == 0 && top_start.is_none() {
                    let kind = match &token {
                        Token::Word(w) => w.clone(),
                        _ => "?".into(),
                    };
                    top_start = Some((kind, line));
                }
                statement.last_mut().expect("one per depth").push(token);
            }
        }
    }
    if let Some((kind, line)) = open.first() {
        return Err(format!(
            "ends inside the `{kind}` block begun at line {line}"
        ));
    }
    if let Some((kind, line)) = top_start {
        return Err(format!(
            "ends inside the `{kind}` statement begun at line {line}, before its ';'"
        ));
    }
    Ok(out)
}

/// The value of field `key` of `block`, if it has one.
fn field<'b>(block: &'b Block, key: &str) -> Option<&'b Token> {
    block.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// How `ctf/metadata` (at `path`, `text`) fails to describe the trace of
/// `meta` (from `meta_path`): not whole (`Err(Damaged)`: weft can write it
/// again from `meta.json`), or describing another trace (`Err(Mismatch)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MetadataFault {
    /// Cut short or unreadable as TSDL.
    Damaged(String),
    /// Whole, but its clock or events are not those of `meta.json`.
    Mismatch(String),
}

/// Checks `ctf/metadata` against `meta` (see [`MetadataFault`]).
pub(crate) fn check_metadata(
    text: &str,
    meta: &Meta,
    meta_path: &Path,
) -> std::result::Result<(), MetadataFault> {
    use MetadataFault::{Damaged, Mismatch};
    if !text.starts_with("/* CTF 1.8") {
        return Err(Damaged(
            "does not start with the CTF 1.8 mark `/* CTF 1.8 */`".into(),
        ));
    }
    let blocks = blocks(text).map_err(|why| Damaged(format!("{why} (cut short?)")))?;
    let one = |kind: &str| -> std::result::Result<&Block, MetadataFault> {
        let mut of_kind = blocks.iter().filter(|b| b.kind == kind);
        match (of_kind.next(), of_kind.next()) {
            (Some(b), None) => Ok(b),
            (None, _) => Err(Damaged(format!("declares no `{kind}` block"))),
            (Some(_), Some(b)) => Err(Damaged(format!(
                "declares a second `{kind}` block at line {}",
                b.line
            ))),
        }
    };
    one("trace")?;
    one("stream")?;
    let clock = one("clock")?;
    let meta_shown = meta_path.display();
    let (name, freq) = match (field(clock, "name"), field(clock, "freq")) {
        (Some(Token::Str(name)), Some(Token::Word(freq))) => (name, freq),
        _ => {
            return Err(Damaged(format!(
                "its `clock` block at line {} has no name or no freq",
                clock.line
            )))
        }
    };
    let want_name = match meta.clock {
        crate::ClockKind::Monotonic => "monotonic",
        crate::ClockKind::Tsc => "tsc",
    };
    if name != want_name {
        return Err(Mismatch(format!(
            "its clock is {name:?}, {meta_shown}'s {want_name:?}"
        )));
    }
    let want_freq = (meta.ticks_per_ns * 1e9).round() as u64;
    if freq.parse::<u64>().ok() != Some(want_freq) {
        return Err(Mismatch(format!(
            "its clock ticks at {freq} Hz, {meta_shown}'s at {want_freq} Hz"
        )));
    }
    let mut names: Vec<Option<&str>> = vec![None; meta.events.len()];
    for event in blocks.iter().filter(|b| b.kind == "event") {
        let (Some(Token::Word(id)), Some(Token::Str(name))) =
            (field(event, "id"), field(event, "name"))
        else {
            return Err(Damaged(format!(
                "the `event` block at line {} has no id or no name",
                event.line
            )));
        };
        let Some(slot) = id.parse::<usize>().ok().and_then(|id| names.get_mut(id)) else {
            return Err(Mismatch(format!(
                "declares event id {id} (line {}), which {meta_shown} does not describe: it \
                 describes {} event id(s)",
                event.line,
                meta.events.len()
            )));
        };
        if slot.replace(name).is_some() {
            return Err(Damaged(format!(
                "declares event id {id} a second time, at line {}",
                event.line
            )));
        }
    }
    let want = |id: usize| {
        let (module, function, kind, _) = &meta.events[id];
        format!("{module}:{function}:{kind}")
    };
    for (id, name) in names.iter().enumerate() {
        if let Some(name) = name.filter(|&name| name != want(id)) {
            return Err(Mismatch(format!(
                "names event id {id} {name:?}, {meta_shown} {:?}",
                want(id)
            )));
        }
    }
    let declared = names
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |last| last + 1);
    if let Some(id) = names[..declared].iter().position(Option::is_none) {
        return Err(Mismatch(format!(
            "declares no event id {id}, which {meta_shown} describes as {:?}",
            want(id)
        )));
    }
    if declared < names.len() {
        // The ones it has agree: its last ones are missing, as in a copy
        // cut at the end of a block.
        return Err(Damaged(format!(
            "declares {declared} event id(s), {meta_shown} {} (cut short?)",
            names.len()
        )));
    }
    Ok(())
}

/// Reads and checks `DIR/ctf/metadata` against `meta` (from `meta_path`);
/// `dir` names the directory in what to do.
pub(crate) fn check_metadata_file(dir: &Path, meta: &Meta, meta_path: &Path) -> Result<()> {
    let path: PathBuf = dir.join("ctf").join("metadata");
    let repair = format!(
        "`weft events --repair {}` writes it again from meta.json",
        dir.display()
    );
    let text = read_description(&path)
        .map_err(|e| inconsistent(&path, format!("cannot be read: {e}"), repair.clone()))?;
    check_metadata(&text, meta, meta_path).map_err(|fault| match fault {
        MetadataFault::Damaged(why) => inconsistent(&path, why, repair),
        MetadataFault::Mismatch(why) => inconsistent(&path, why, MISMATCH_TODO),
    })
}

/// The number of event ids of `DIR/meta.json` if it is consistent in
/// itself and `DIR/ctf/metadata` does not describe another trace (it
/// agrees, or it is cut short and weft will write it again): then a record
/// with another id is damage, not a sign that `meta.json` is another
/// trace's.
pub(crate) fn trusted_ids(dir: &Path) -> Option<usize> {
    let meta_path = dir.join("meta.json");
    let meta = read_description(&meta_path)
        .ok()
        .and_then(|text| serde_json::from_str::<Meta>(&text).ok())
        .filter(|meta| check_meta(meta, &meta_path).is_ok())?;
    let agrees = match read_description(&dir.join("ctf").join("metadata")) {
        Err(_) => true,
        Ok(text) => !matches!(
            check_metadata(&text, &meta, &meta_path),
            Err(MetadataFault::Mismatch(_))
        ),
    };
    agrees.then_some(meta.events.len())
}

/// `weft events --repair`: writes `DIR/ctf/metadata` again from
/// `meta.json` when it is missing, cut short or unreadable as TSDL (weft
/// writes it from `meta.json`'s description, so that is the same file).
/// Returns why it was written again, or None when it is whole, when
/// `meta.json` cannot be read or is not consistent in itself, or when the
/// two describe different traces (which weft cannot decide between).
pub fn repair_metadata(dir: &Path) -> Result<Option<String>> {
    let meta_path = dir.join("meta.json");
    let Some(meta) = read_description(&meta_path)
        .ok()
        .and_then(|text| serde_json::from_str::<Meta>(&text).ok())
        .filter(|meta| check_meta(meta, &meta_path).is_ok())
    else {
        return Ok(None);
    };
    let root = crate::files::SafeDir::open(dir)
        .map_err(crate::files::io(format!("opening {}", dir.display())))?;
    let ctf = match root.open_dir("ctf") {
        Ok(ctf) => ctf,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(crate::files::io(format!(
                "opening {}",
                root.join("ctf").display()
            ))(e))
        }
    };
    let why = match read_description(&ctf.join("metadata")) {
        Err(e) => format!("it could not be read: {e}"),
        Ok(text) => match check_metadata(&text, &meta, &meta_path) {
            Ok(()) | Err(MetadataFault::Mismatch(_)) => return Ok(None),
            Err(MetadataFault::Damaged(why)) => format!("it {why}"),
        },
    };
    ctf.replace_with_bytes("metadata", crate::ctf::metadata(&meta).as_bytes())?;
    Ok(Some(why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctf::tests::meta;

    fn fault(text: &str) -> MetadataFault {
        check_metadata(text, &meta(), Path::new("ev/meta.json")).unwrap_err()
    }

    fn damaged(text: &str) -> String {
        match fault(text) {
            MetadataFault::Damaged(why) => why,
            other => panic!("not damaged: {other:?}"),
        }
    }

    fn mismatch(text: &str) -> String {
        match fault(text) {
            MetadataFault::Mismatch(why) => why,
            other => panic!("not a mismatch: {other:?}"),
        }
    }

    #[test]
    fn a_meta_of_a_newer_format_is_refused() {
        let mut m = meta();
        check_meta(&m, Path::new("ev/meta.json")).unwrap();
        m.format = crate::ctf::PACKET_FORMAT + 1;
        let why = check_meta(&m, Path::new("ev/meta.json"))
            .unwrap_err()
            .to_string();
        assert!(why.contains("newer than the"), "{why}");
        assert!(why.contains("the weft that wrote it"), "{why}");
    }

    #[test]
    fn weft_metadata_describes_its_meta() {
        let m = meta();
        let text = crate::ctf::metadata(&m);
        check_metadata(&text, &m, Path::new("meta.json")).unwrap();
        let blocks = blocks(&text).unwrap();
        let kinds: Vec<&str> = blocks.iter().map(|b| b.kind.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "typealias",
                "typealias",
                "typealias",
                "typealias",
                "typealias",
                "typealias",
                "typealias",
                "trace",
                "env",
                "clock",
                "typealias",
                "stream",
                "event",
                "event",
                "event"
            ]
        );
        // Strings with escapes, and no events at all.
        let mut odd = m.clone();
        odd.events[0].1 = "f\"q\\".into();
        check_metadata(&crate::ctf::metadata(&odd), &odd, Path::new("meta.json")).unwrap();
        odd.events.clear();
        odd.strings.clear();
        check_metadata(&crate::ctf::metadata(&odd), &odd, Path::new("meta.json")).unwrap();
    }

    #[test]
    fn metadata_cut_anywhere_is_damaged() {
        let text = crate::ctf::metadata(&meta());
        // Cut at every character: never whole, never a panic.
        for cut in 0..text.trim_end().len() - 1 {
            let cut = &text[..cut];
            match check_metadata(cut, &meta(), Path::new("meta.json")) {
                Err(MetadataFault::Damaged(_)) => {}
                other => panic!("cut at {}: {other:?}", cut.len()),
            }
        }
        // Where it stops is said.
        let last_event = text.rfind("event {").unwrap();
        let line = text[..last_event].lines().count() + 1;
        assert_eq!(
            damaged(&text[..last_event + 40]),
            format!("ends inside the `event` block begun at line {line} (cut short?)")
        );
        let before_semicolon = text.trim_end().len() - 1;
        assert_eq!(
            damaged(&text[..before_semicolon]),
            format!(
                "ends inside the `event` statement begun at line {line}, before its ';' (cut \
                 short?)"
            )
        );
        assert_eq!(
            damaged(""),
            "does not start with the CTF 1.8 mark `/* CTF 1.8 */`"
        );
        assert_eq!(
            damaged("/* CTF 1.8 "),
            "ends inside the comment begun at line 1 (cut short?)"
        );
        assert!(damaged(&format!("{text}}};\n")).contains("a '}' closes no block"));
    }

    #[test]
    fn metadata_of_another_trace_is_a_mismatch() {
        let m = meta();
        let text = crate::ctf::metadata(&m);
        let mut other = m.clone();
        other.events[1].1 = "h".into();
        assert_eq!(
            mismatch(&crate::ctf::metadata(&other)),
            "names event id 1 \"m:h:exit\", ev/meta.json \"m:f:exit\""
        );
        other = m.clone();
        other.events.pop();
        other.strings.pop();
        assert_eq!(
            damaged(&crate::ctf::metadata(&other)),
            "declares 2 event id(s), ev/meta.json 3 (cut short?)"
        );
        let no_middle = text.replace("id = 1;", "id = 9;");
        assert!(mismatch(&no_middle).starts_with("declares event id 9 (line "));
        let gap = text
            .replacen("event {", "event_x {", 2)
            .replacen("event_x {", "event {", 1);
        assert_eq!(
            mismatch(&gap),
            "declares no event id 1, which ev/meta.json describes as \"m:f:exit\""
        );
        other = m.clone();
        other
            .events
            .push(("m".into(), "k".into(), "entry".into(), 0));
        assert!(mismatch(&crate::ctf::metadata(&other)).starts_with("declares event id 3 (line "));
        other = m.clone();
        other.ticks_per_ns = 3.0;
        assert_eq!(
            mismatch(&crate::ctf::metadata(&other)),
            "its clock ticks at 3000000000 Hz, ev/meta.json's at 2500000000 Hz"
        );
        other = m.clone();
        other.clock = crate::ClockKind::Monotonic;
        assert_eq!(
            mismatch(&crate::ctf::metadata(&other)),
            "its clock is \"monotonic\", ev/meta.json's \"tsc\""
        );
        let twice = text.replace("id = 2;", "id = 1;");
        assert!(damaged(&twice).starts_with("declares event id 1 a second time"));
        let no_clock = text.replace("clock {", "clocks {");
        assert_eq!(damaged(&no_clock), "declares no `clock` block");
    }

    #[test]
    fn meta_must_be_consistent_in_itself() {
        let path = Path::new("ev/meta.json");
        let why = |m: &Meta| match check_meta(m, path) {
            Err(Error::Inconsistent { why, .. }) => why,
            other => panic!("consistent: {other:?}"),
        };
        check_meta(&meta(), path).unwrap();
        let mut m = meta();
        m.ticks_per_ns = 0.0;
        assert_eq!(why(&m), "ticks_per_ns is 0, not a positive clock rate");
        m.ticks_per_ns = f64::NAN;
        assert_eq!(why(&m), "ticks_per_ns is NaN, not a positive clock rate");
        let mut m = meta();
        m.events[1].2 = "exot".into();
        assert_eq!(
            why(&m),
            "event 1 is of kind \"exot\", not entry, exit, probe, syscall or sysret"
        );
        m.events[1].2 = "exit".into();
        m.events[1].3 = 2;
        assert!(why(&m).starts_with("event 1, an exit, has 2 value(s)"));
        let mut m = meta();
        m.events[0].3 = 13;
        assert_eq!(
            why(&m),
            "event 0 has 13 value(s), more than the 12 a record holds"
        );
        let mut m = meta();
        m.strings.push(0);
        assert_eq!(
            why(&m),
            "\"strings\" describes 4 event ids, \"events\" only 3"
        );
        let mut m = meta();
        m.strings[2] = 0b100;
        assert_eq!(
            why(&m),
            "event 2 has 2 value(s), but its string mask 0x4 names value 3"
        );
        let mut m = meta();
        m.binary = vec![0, 0, 0b01];
        assert_eq!(
            why(&m),
            "event 2's byte-array mask 0x1 is not among its strings (0x2)"
        );
        let mut m = meta();
        m.names = vec![vec![], vec!["a".into(), "b".into()]];
        assert_eq!(why(&m), "event 1 has 1 value(s), but 2 value names");
        let e = check_meta(&m, path).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "ev/meta.json: event 1 has 1 value(s), but 2 value names; weft writes it whole"
            ),
            "{e}"
        );
    }
}
