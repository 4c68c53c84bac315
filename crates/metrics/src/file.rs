//! User-defined metrics: the definition file of `--metrics-file`
//! (grammar in docs/metrics.md). A definition declares counters and timers,
//! places guarded primitives at entries and exits, and names its value.

use crate::expr::parse_expr_with;
use crate::{Error, Result};
use weft_plan::{Expr, Guarded, Primitive};

/// The definitions of one file.
#[derive(Debug, Clone, Default)]
pub struct Definitions {
    defs: Vec<Definition>,
}

/// One user-defined metric.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    /// Its name.
    pub name: String,
    /// The unit of its value.
    pub unit: String,
    /// Declared counters (local indices are positions here).
    pub counters: Vec<String>,
    /// Declared timers.
    pub timers: Vec<String>,
    /// Primitives at points.
    pub points: Vec<PointDef>,
    /// The value: a counter or a timer.
    pub value: Value,
}

/// Which declared name is the metric's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value {
    /// Counter by local index.
    Counter(usize),
    /// Timer by local index.
    Timer(usize),
}

/// `at entry|exit of PATTERN [if EXPR]: PRIMITIVES`, with local indices.
#[derive(Debug, Clone, PartialEq)]
pub struct PointDef {
    /// Every exit rather than the entry.
    pub at_exit: bool,
    /// The function pattern (`$fn` is the focus's function), or
    /// `FUNCTION+OFFSET` for an instruction point.
    pub pattern: String,
    /// Guarded primitives (counters and timers by local index).
    pub actions: Vec<Guarded>,
}

impl Definitions {
    /// Reads and parses a file: a regular file of at most
    /// [`MAX_DEFINITIONS_FILE`] bytes of UTF-8 (a device such as
    /// `/dev/zero`, a pipe or a directory is refused before anything is
    /// read, and at most `MAX_DEFINITIONS_FILE + 1` bytes are ever read).
    pub fn load(path: &std::path::Path) -> Result<Definitions> {
        let text = read_bounded(path)?;
        Definitions::parse(&text).map_err(|e| match e {
            Error::Definitions(m) => Error::Definitions(format!("{}: {m}", path.display())),
            other => other,
        })
    }

    /// Parses definitions.
    pub fn parse(text: &str) -> Result<Definitions> {
        let mut defs: Vec<Definition> = Vec::new();
        let mut value_names: Vec<Option<String>> = Vec::new();
        // The line of each definition's `metric NAME`, for what it lacks.
        let mut starts: Vec<usize> = Vec::new();
        for (n, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: String| Error::Definitions(format!("line {}: {why}: {raw:?}", n + 1));
            let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
            let rest = rest.trim();
            if word == "metric" {
                if rest.is_empty() || rest.contains(char::is_whitespace) || rest.contains(':') {
                    return Err(bad("a metric needs one name".into()));
                }
                defs.push(Definition {
                    name: rest.into(),
                    unit: "".into(),
                    counters: vec![],
                    timers: vec![],
                    points: vec![],
                    value: Value::Counter(0),
                });
                value_names.push(None);
                starts.push(n + 1);
                continue;
            }
            let Some(def) = defs.last_mut() else {
                return Err(bad("statement before any 'metric NAME'".into()));
            };
            match word {
                "unit" => def.unit = rest.into(),
                "counter" | "timer" => {
                    if rest.is_empty() || def.counters.iter().chain(&def.timers).any(|d| d == rest)
                    {
                        return Err(bad(format!("{word} needs a new name")));
                    }
                    if word == "counter" {
                        def.counters.push(rest.into())
                    } else {
                        def.timers.push(rest.into())
                    }
                }
                "value" => {
                    *value_names.last_mut().expect("pushed with the def") = Some(rest.into())
                }
                "at" => def.points.push(parse_point(def, rest).map_err(|e| match e {
                    Error::Definitions(why) => bad(why),
                    other => bad(other.to_string()),
                })?),
                other => {
                    return Err(bad(format!(
                        "unknown statement '{other}' (metric, unit, counter, timer, at, value)"
                    )))
                }
            }
        }
        for ((def, value), line) in defs.iter_mut().zip(value_names).zip(starts) {
            let Some(v) = value else {
                return Err(Error::Definitions(format!(
                    "line {line}: metric {} has no 'value' line",
                    def.name
                )));
            };
            def.value = if let Some(i) = def.counters.iter().position(|c| *c == v) {
                Value::Counter(i)
            } else if let Some(i) = def.timers.iter().position(|t| *t == v) {
                Value::Timer(i)
            } else {
                return Err(Error::Definitions(format!(
                    "line {line}: metric {}: value '{v}' is no declared counter or timer",
                    def.name
                )));
            };
            if def.points.is_empty() {
                return Err(Error::Definitions(format!(
                    "line {line}: metric {} has no 'at' line",
                    def.name
                )));
            }
        }
        Ok(Definitions { defs })
    }

    /// The definition of `name`.
    pub fn get(&self, name: &str) -> Option<&Definition> {
        self.defs.iter().find(|d| d.name == name)
    }

    /// The names defined.
    pub fn names(&self) -> Vec<&str> {
        self.defs.iter().map(|d| d.name.as_str()).collect()
    }
}

/// The most bytes a definitions file may hold: definitions are a few
/// lines each, so a larger file is a wrong path.
pub const MAX_DEFINITIONS_FILE: u64 = 1 << 20;

/// What a file that is not regular is, for messages.
fn file_kind(ty: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ty.is_dir() {
        "a directory"
    } else if ty.is_char_device() {
        "a character device"
    } else if ty.is_block_device() {
        "a block device"
    } else if ty.is_fifo() {
        "a named pipe"
    } else if ty.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The text of the definitions file `path`, read with bounds: refused
/// unless it is a regular file of at most [`MAX_DEFINITIONS_FILE`] bytes
/// of UTF-8. Opened without blocking (a named pipe would wait for a
/// writer), checked again on the opened file (not only the path), and read
/// through a `MAX_DEFINITIONS_FILE + 1` byte limit, so a file growing
/// meanwhile cannot make weft read on.
fn read_bounded(path: &std::path::Path) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = path.display();
    let refuse = |why: String| {
        Error::Definitions(format!(
            "cannot read {shown}: {why}; give a file of metric definitions (format: \
             docs/metrics.md)"
        ))
    };
    let failed = |e: std::io::Error| refuse(e.to_string());
    // A path that is not a regular file is refused before it is opened:
    // opening a tape or a terminal can do things.
    let st = std::fs::metadata(path).map_err(failed)?;
    if !st.file_type().is_file() {
        return Err(refuse(format!(
            "it is {}, not a regular file",
            file_kind(st.file_type())
        )));
    }
    let too_big = |len: Option<u64>| {
        let len = len.map_or(String::new(), |n| format!("{n} bytes, "));
        refuse(format!(
            "it holds {len}more than the 1 MiB ({MAX_DEFINITIONS_FILE} bytes) a definitions \
             file may hold"
        ))
    };
    if st.len() > MAX_DEFINITIONS_FILE {
        return Err(too_big(Some(st.len())));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(failed)?;
    // Replaced meanwhile by something else: the opened file decides.
    let st = file.metadata().map_err(failed)?;
    if !st.file_type().is_file() {
        return Err(refuse(format!(
            "it is {}, not a regular file",
            file_kind(st.file_type())
        )));
    }
    // A file can hold more than its size says (files in /proc), or grow.
    let Some(bytes) = read_at_most(file, MAX_DEFINITIONS_FILE).map_err(failed)? else {
        return Err(too_big(None));
    };
    String::from_utf8(bytes).map_err(|e| {
        refuse(format!(
            "it is not UTF-8 text (byte {} is not part of a UTF-8 character)",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// The bytes of `input` if it holds at most `limit` of them, else None;
/// reads at most `limit + 1` bytes either way.
fn read_at_most(input: impl std::io::Read, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    input.take(limit + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// `entry|exit of PATTERN [if EXPR]: PRIMITIVE[; PRIMITIVE...]`
fn parse_point(def: &Definition, text: &str) -> Result<PointDef> {
    let err = |why: &str| Error::Definitions(why.into());
    let (head, body) = text
        .split_once(':')
        .ok_or_else(|| err("'at' needs ':' before its primitives"))?;
    // A module-qualified pattern has a ':' of its own: split on the last ': '.
    let (head, body) = match text.rfind(": ") {
        Some(i) if i > head.len() => (&text[..i], &text[i + 2..]),
        _ => (head, body),
    };
    let mut words = head.split_whitespace().peekable();
    let (at_exit, pattern) = match words.next() {
        Some(w @ ("entry" | "exit")) => {
            if words.next() != Some("of") {
                return Err(err("expected 'of' after entry/exit"));
            }
            let pattern = words
                .next()
                .ok_or_else(|| err("missing function pattern"))?
                .to_string();
            (w == "exit", pattern)
        }
        // An instruction point, such as a call site: FUNCTION+OFFSET.
        Some(p) if p.contains('+') => (false, p.to_string()),
        _ => {
            return Err(err(
                "write 'at entry of PATTERN', 'at exit of PATTERN' or 'at FUNCTION+OFFSET'",
            ))
        }
    };
    let rest: Vec<&str> = words.collect();
    let names = |n: &str| {
        def.counters
            .iter()
            .position(|c| c == n)
            .map(|i| Expr::Counter(i as u64))
    };
    let predicate = match rest.split_first() {
        None => None,
        Some((&"if", e)) if !e.is_empty() => Some(parse_expr_with(&e.join(" "), &names)?),
        _ => return Err(err("after the pattern only 'if EXPR' may come")),
    };
    let mut actions = Vec::new();
    for p in body.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let (op, arg) = p.split_once(char::is_whitespace).unwrap_or((p, ""));
        let arg = arg.trim();
        let counter = |s: &str| def.counters.iter().position(|c| c == s).map(|i| i as u64);
        let timer = |s: &str| def.timers.iter().position(|t| t == s).map(|i| i as u64);
        let primitive = match op {
            "start" | "stop" => {
                let t = timer(arg).ok_or_else(|| err(&format!("'{arg}' is no declared timer")))?;
                if op == "start" {
                    Primitive::StartTimer(t)
                } else {
                    Primitive::StopTimer(t)
                }
            }
            "set" | "add" | "sub" => {
                let (c, e) = arg
                    .split_once(char::is_whitespace)
                    .ok_or_else(|| err(&format!("{op} needs a counter and an expression")))?;
                let c = counter(c).ok_or_else(|| err(&format!("'{c}' is no declared counter")))?;
                let e = parse_expr_with(e.trim(), &names)?;
                match op {
                    "set" => Primitive::SetCounter(c, e),
                    "add" => Primitive::AddCounter(c, e),
                    _ => Primitive::SubCounter(c, e),
                }
            }
            other => {
                return Err(err(&format!(
                    "unknown primitive '{other}' (set, add, sub, start, stop)"
                )))
            }
        };
        actions.push(Guarded {
            predicate: predicate.clone(),
            primitive,
        });
    }
    if actions.is_empty() {
        return Err(err("no primitive after ':'"));
    }
    let reads = |f: fn(&Expr) -> bool| {
        actions.iter().any(|g| {
            g.predicate.as_ref().is_some_and(f)
                || match &g.primitive {
                    Primitive::SetCounter(_, e)
                    | Primitive::AddCounter(_, e)
                    | Primitive::SubCounter(_, e) => f(e),
                    _ => false,
                }
        })
    };
    if !at_exit && reads(Expr::reads_ret) {
        return Err(err(
            "'ret' is the return value, known only 'at exit of' a function",
        ));
    }
    if at_exit && reads(Expr::reads_args) {
        return Err(err(
            "argN at an exit would read registers the function has since reused; \
             save the argument in a counter at its entry",
        ));
    }
    Ok(PointDef {
        at_exit,
        pattern,
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "
# a comment
metric big_writes
  unit bytes
  counter bytes
  at entry of libc.so.6:write if arg3 > 4096: add bytes arg3
  value bytes

metric io_time
  unit s
  timer t
  at entry of $fn: start t
  at exit of $fn: stop t
  value t
";

    #[test]
    fn parses_the_documented_example() {
        let d = Definitions::parse(EXAMPLE).unwrap();
        assert_eq!(d.names(), vec!["big_writes", "io_time"]);
        let big = d.get("big_writes").unwrap();
        assert_eq!(big.points[0].pattern, "libc.so.6:write");
        assert_eq!(
            big.points[0].actions[0].primitive,
            Primitive::AddCounter(0, Expr::Arg(3))
        );
        assert!(big.points[0].actions[0].predicate.is_some());
        let io = d.get("io_time").unwrap();
        assert_eq!((io.value, io.points[1].at_exit), (Value::Timer(0), true));
    }

    #[test]
    fn errors_name_the_line() {
        let e = |t: &str| Definitions::parse(t).unwrap_err().to_string();
        assert!(
            e("metric m\n  counter c\n  at entry of f: set c ret\n  value c")
                .contains("line 3: 'ret' is the return value, known only 'at exit of'")
        );
        assert!(
            e("metric m\n  counter c\n  at exit of f if arg1 > 0: add c 1\n  value c")
                .contains("line 3: argN at an exit")
        );
        assert!(
            Definitions::parse("metric m\n  counter c\n  at exit of f: add c ret\n  value c")
                .is_ok()
        );
        assert!(e("counter x").contains("line 1: statement before any 'metric NAME'"));
        assert!(
            e("metric m\n  counter c\n  at entry of f: add d 1\n  value c")
                .contains("'d' is no declared counter")
        );
        assert!(
            e("metric m\n  counter c\n  at entry of f: add c 1").contains("has no 'value' line")
        );
        assert!(
            e("metric m\n  timer t\n  at middle of f: start t\n  value t")
                .contains("at entry of PATTERN")
        );
        let d = Definitions::parse(
            "metric m\n  counter c\n  at work+0x1c if arg1 > 2: add c arg1\n  value c\n",
        )
        .unwrap();
        let p = &d.get("m").unwrap().points[0];
        assert_eq!((p.pattern.as_str(), p.at_exit), ("work+0x1c", false));
    }

    /// The message `Definitions::load` refuses `path` with.
    fn refusal(path: &std::path::Path) -> String {
        match Definitions::load(path) {
            Err(Error::Definitions(m)) => m,
            other => panic!("{}: not refused: {other:?}", path.display()),
        }
    }

    #[test]
    fn only_a_bounded_regular_file_is_read() {
        let dir = std::env::temp_dir().join(format!("weft-defs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        // Devices are refused without being read: /dev/zero never ends.
        let started = std::time::Instant::now();
        let m = refusal(std::path::Path::new("/dev/zero"));
        assert_eq!(
            m,
            "cannot read /dev/zero: it is a character device, not a regular file; give a file \
             of metric definitions (format: docs/metrics.md)"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert!(refusal(&dir).contains("it is a directory, not a regular file"));
        // A named pipe without a writer: refused, not waited on.
        let fifo = dir.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(refusal(&fifo).contains("it is a named pipe, not a regular file"));
        // Exactly the limit is read (comments only: no metric); one byte
        // more is refused.
        let limit = MAX_DEFINITIONS_FILE as usize;
        let mut text = "# a comment\n".repeat(limit / 12);
        text.push_str(&"#".repeat(limit - text.len()));
        let file = dir.join("big.weft");
        std::fs::write(&file, &text).unwrap();
        assert!(Definitions::load(&file).unwrap().names().is_empty());
        text.push('#');
        std::fs::write(&file, &text).unwrap();
        assert!(
            refusal(&file).contains(&format!(
                "it holds {} bytes, more than the 1 MiB (1048576 bytes) a definitions file may \
                 hold",
                limit + 1
            )),
            "{}",
            refusal(&file)
        );
        // Input that never ends is read only to one byte past the limit.
        let mut endless = std::io::repeat(b'#');
        assert_eq!(read_at_most(&mut endless, 10).unwrap(), None);
        let mut twelve = &b"0123456789ab"[..];
        assert_eq!(read_at_most(&mut twelve, 10).unwrap(), None);
        assert_eq!(twelve, b"b", "11 bytes read, not 12");
        assert_eq!(
            read_at_most(&b"0123456789"[..], 10).unwrap().as_deref(),
            Some(&b"0123456789"[..])
        );
        // Not UTF-8; missing; and a good file read whole.
        std::fs::write(&file, b"metric m\n\xff\n").unwrap();
        assert!(refusal(&file).contains("it is not UTF-8 text (byte 9"));
        assert!(refusal(&dir.join("missing")).contains("No such file or directory"));
        std::fs::write(&file, EXAMPLE).unwrap();
        assert_eq!(
            Definitions::load(&file).unwrap().names(),
            ["big_writes", "io_time"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    proptest::proptest! {
        /// Any definition file made of the language's words parses or is
        /// refused with a line number, never a panic.
        #[test]
        fn any_file_parses_or_names_its_line(
            lines in proptest::collection::vec(
                proptest::collection::vec(
                    proptest::sample::select(vec![
                        "metric", "m", "unit", "s", "counter", "c", "timer", "t", "at",
                        "entry", "exit", "of", "f", "$fn", "f+0x3", "if", "arg1", "ret",
                        ">", "0", ":", "add", "set", "sub", "start", "stop", "value", ";",
                    ]),
                    0..10,
                ),
                0..12,
            )
        ) {
            let text: Vec<String> = lines.iter().map(|l| l.join(" ")).collect();
            if let Err(e) = Definitions::parse(&text.join("\n")) {
                proptest::prop_assert!(e.to_string().contains("line "), "{}", e);
            }
        }
    }
}
