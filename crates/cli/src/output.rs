//! Reports: a push-model sink per format, chosen on the command line.

use std::io::Write;
use weft_live::{Count, PointInfo};
use weft_metrics::{MetricResult, TimeHistogram};
use weft_plan::PointKind;

/// Report format.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// An aligned table for people.
    Table,
    /// `{"counts": [{"module", "function", "calls", "point"}, ...],
    /// "metrics": [{"metric", "focus", "value", "unit", "histogram",
    /// "threads"?, "approximate"?}, ...], "executions_without_thread_slot"}`,
    /// with several processes their total, and `"processes": [{"pid",
    /// "command", "counts", "metrics", "executions_without_thread_slot"},
    /// ...]` (docs/metrics.md).
    Json,
}

/// What a report holds.
pub struct Report<'a> {
    /// Counts of `--count` and `--count-exits` points.
    pub counts: &'a [Count],
    /// `--metric` results.
    pub metrics: &'a [MetricResult],
    /// Executions of per-thread instrumentation (timers, per-thread
    /// counters, events) skipped because every thread slot was taken.
    pub without_thread_slot: u64,
    /// With several processes: each one's report (the fields above are
    /// then their total, see [`total`]); empty for one process.
    pub processes: &'a [ProcessReport],
}

/// One process's part of a report of several.
pub struct ProcessReport {
    /// The process.
    pub pid: i32,
    /// Its command name.
    pub command: String,
    /// Its counts.
    pub counts: Vec<Count>,
    /// Its metrics.
    pub metrics: Vec<MetricResult>,
    /// Its executions without a thread slot.
    pub without_thread_slot: u64,
}

/// The total of several processes' reports: counts of the same point
/// (module, function, kind) and metrics of the same request (metric and
/// focus) added, histograms bucket by bucket, per-thread values side by
/// side; a total is approximate if any part is.
pub fn total(processes: &[ProcessReport]) -> (Vec<Count>, Vec<MetricResult>, u64) {
    let mut counts: Vec<Count> = Vec::new();
    let mut metrics: Vec<MetricResult> = Vec::new();
    for p in processes {
        for c in &p.counts {
            match counts
                .iter_mut()
                .find(|t| (&t.module, &t.function, t.kind) == (&c.module, &c.function, c.kind))
            {
                Some(t) => t.calls += c.calls,
                None => counts.push(c.clone()),
            }
        }
        for m in &p.metrics {
            let Some(t) = metrics
                .iter_mut()
                .find(|t| (&t.metric, &t.focus) == (&m.metric, &m.focus))
            else {
                metrics.push(m.clone());
                continue;
            };
            t.value += m.value;
            if t.histogram.bucket_ns() == m.histogram.bucket_ns() {
                let n = t.histogram.values().len().max(m.histogram.values().len());
                let at = |v: &[f64], i: usize| v.get(i).copied().unwrap_or(0.0);
                let values = (0..n)
                    .map(|i| at(t.histogram.values(), i) + at(m.histogram.values(), i))
                    .collect();
                t.histogram = TimeHistogram::from_values(t.histogram.bucket_ns(), n.max(1), values);
            }
            if let (Some(all), Some(more)) = (&mut t.threads, &m.threads) {
                all.extend(more.iter().cloned());
            }
            if t.approximate.is_none() {
                t.approximate.clone_from(&m.approximate);
            }
            if m.not_measured.is_none() {
                t.not_measured = None;
            }
        }
    }
    let without = processes.iter().map(|p| p.without_thread_slot).sum();
    (counts, metrics, without)
}

/// A destination for the final report.
pub trait ReportSink {
    /// Writes the report and flushes it to its destination, so that a
    /// full disk is an error here, not a lost report.
    fn report(&mut self, report: &Report) -> std::io::Result<()>;
}

/// The line that says per-thread instrumentation was skipped, if it was.
pub fn slot_note(without_thread_slot: u64) -> Option<String> {
    (without_thread_slot > 0).then(|| {
        format!(
            "{without_thread_slot} execution(s) of per-thread instrumentation (timers, \
             per-thread counters, events) were skipped: more threads were alive at once than \
             weft has slots for (a smaller --ring-size gives more slots); those threads' \
             events are lost, and metrics that need them are low"
        )
    })
}

/// The widest column a table pads to: longer names (a long `if=`
/// expression in a focus) overflow their column instead.
const MAX_COLUMN: usize = 120;

/// The width a table fits when it does not go to a terminal.
pub const DEFAULT_WIDTH: usize = 120;

/// Names are never cut shorter than this, whatever the width.
const MIN_NAME: usize = 24;

/// The width of the terminal standard error is, if it is one.
pub fn stderr_width() -> Option<usize> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` through the pointer, which
    // points to a local of that type; on a non-terminal it fails and
    // writes nothing.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}

/// `name` cut to at most `max` characters, keeping what tells functions
/// apart: for a name with parameters (C++), the function's own name before
/// them whole if it fits (its scope cut from the left), then the
/// parameters cut in the middle, so their start and the end (a `.cold`
/// suffix) stay; any other name cut in the middle.
pub fn shorten(name: &str, max: usize) -> String {
    let n = name.chars().count();
    if n <= max {
        return name.to_string();
    }
    let Some(open) = name.find('(') else {
        return shorten_middle(name, max);
    };
    let (head, params) = name.split_at(open);
    let head_len = head.chars().count();
    // At most two thirds of the room for the qualified name, the rest for
    // the parameters (at least a few characters of them).
    // The last `::` part (the function's own name) is kept whole when
    // the parameters still get a few characters.
    let own = head.rsplit("::").next().unwrap_or(head).chars().count();
    let head_room = head_len
        .min((max * 2 / 3).max(own + 1))
        .min(max.saturating_sub(6));
    let head = if head_room < head_len {
        let keep: String = head.chars().skip(head_len - (head_room - 1)).collect();
        format!("…{keep}")
    } else {
        head.to_string()
    };
    let params = shorten_middle(params, max.saturating_sub(head_room).max(3));
    format!("{head}{params}")
}

/// `name` cut in the middle to at most `max` characters (an ellipsis in
/// place of what goes).
fn shorten_middle(name: &str, max: usize) -> String {
    let n = name.chars().count();
    if n <= max || max < 3 {
        return name.to_string();
    }
    let keep = max - 1;
    let head = keep.div_ceil(2);
    let tail = keep - head;
    let start: String = name.chars().take(head).collect();
    let end: String = name.chars().skip(n - tail).collect();
    format!("{start}…{end}")
}

fn point_name(kind: PointKind) -> &'static str {
    match kind {
        PointKind::Entry => "entry",
        PointKind::Exit => "exit",
        PointKind::Instruction(_) => "instruction",
        PointKind::Syscall => "syscall",
        PointKind::AfterSyscall => "after syscall",
    }
}

/// Aligned text tables, `width` characters wide at most: long names are
/// shortened in the middle (JSON keeps them whole).
pub struct TableSink<W: Write>(pub W, pub usize);

impl<W: Write> ReportSink for TableSink<W> {
    fn report(&mut self, report: &Report) -> std::io::Result<()> {
        for p in report.processes {
            writeln!(self.0, "process {} ({})", p.pid, p.command)?;
            self.table(&p.counts, &p.metrics, p.without_thread_slot)?;
            writeln!(self.0)?;
        }
        if !report.processes.is_empty() {
            writeln!(self.0, "total of {} processes", report.processes.len())?;
        }
        self.table(report.counts, report.metrics, report.without_thread_slot)
    }
}

impl<W: Write> TableSink<W> {
    fn table(
        &mut self,
        counts: &[Count],
        metrics: &[MetricResult],
        without_thread_slot: u64,
    ) -> std::io::Result<()> {
        if !counts.is_empty() || metrics.is_empty() {
            let wm = counts
                .iter()
                .map(|c| c.module.chars().count())
                .max()
                .unwrap_or(0)
                .clamp(6, MIN_NAME);
            let room = self.1.saturating_sub(wm + 2 + 2 + 12).max(MIN_NAME);
            let wf = counts
                .iter()
                .map(|c| c.function.chars().count() + if c.kind == PointKind::Exit { 7 } else { 0 })
                .max()
                .unwrap_or(0)
                .clamp(8, room);
            writeln!(
                self.0,
                "{:<wm$}  {:<wf$}  {:>12}",
                "MODULE", "FUNCTION", "CALLS"
            )?;
            for c in counts {
                let f = if c.kind == PointKind::Exit {
                    format!("{} (exit)", shorten(&c.function, wf - 7))
                } else {
                    shorten(&c.function, wf)
                };
                let m = shorten(&c.module, wm);
                match &c.not_measured {
                    None => writeln!(self.0, "{m:<wm$}  {f:<wf$}  {:>12}", c.calls)?,
                    Some(why) => writeln!(self.0, "{m:<wm$}  {f:<wf$}  {:>12}  ({why})", "-")?,
                }
            }
        }
        if !metrics.is_empty() {
            let room = self.1.saturating_sub(12 + 2 + 2 + 16 + 2 + 8).max(MIN_NAME);
            let wf = metrics
                .iter()
                .map(|m| m.focus.chars().count())
                .max()
                .unwrap_or(0)
                .clamp(5, room.min(MAX_COLUMN));
            writeln!(
                self.0,
                "{:<12}  {:<wf$}  {:>16}  {:<8}",
                "METRIC", "FOCUS", "VALUE", "UNIT"
            )?;
            for m in metrics {
                writeln!(
                    self.0,
                    "{:<12}  {:<wf$}  {:>16}  {:<8}",
                    m.metric,
                    shorten(&m.focus, wf),
                    format_value(m.value),
                    m.unit
                )?;
                if let Some(why) = &m.approximate {
                    writeln!(self.0, "{:<12}  approximate: {why}", "")?;
                }
                if let Some(why) = &m.not_measured {
                    writeln!(self.0, "{:<12}  not measured: {why}", "")?;
                }
                for t in m.threads.iter().flatten() {
                    let who = format!("  thread {}", t.tid);
                    writeln!(
                        self.0,
                        "{:<12}  {:<wf$}  {:>16}  {:<8}",
                        "",
                        who,
                        format_value(t.value),
                        m.unit
                    )?;
                }
            }
        }
        if let Some(note) = slot_note(without_thread_slot) {
            writeln!(self.0, "weft: {note}")?;
        }
        self.0.flush()
    }
}

fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.6}")
    }
}

/// JSON document: `{"counts": [...], "metrics": [...]}`.
pub struct JsonSink<W: Write>(pub W);

impl<W: Write> ReportSink for JsonSink<W> {
    fn report(&mut self, report: &Report) -> std::io::Result<()> {
        let mut doc = json_doc(report.counts, report.metrics, report.without_thread_slot);
        if !report.processes.is_empty() {
            let processes: Vec<serde_json::Value> = report
                .processes
                .iter()
                .map(|p| {
                    let mut one = serde_json::Map::new();
                    one.insert("pid".into(), p.pid.into());
                    one.insert("command".into(), p.command.as_str().into());
                    one.extend(json_doc(&p.counts, &p.metrics, p.without_thread_slot));
                    serde_json::Value::Object(one)
                })
                .collect();
            doc.insert("processes".into(), processes.into());
        }
        serde_json::to_writer_pretty(&mut self.0, &serde_json::Value::Object(doc))?;
        writeln!(self.0)?;
        self.0.flush()
    }
}

/// The JSON of one report (or one process's part of it).
fn json_doc(
    counts: &[Count],
    metrics: &[MetricResult],
    without_thread_slot: u64,
) -> serde_json::Map<String, serde_json::Value> {
    {
        let mut doc = serde_json::Map::new();
        if !counts.is_empty() || metrics.is_empty() {
            let rows: Vec<serde_json::Value> = counts
                .iter()
                .map(|c| {
                    let mut row = serde_json::json!({
                        "module": c.module,
                        "function": c.function,
                        "calls": c.calls,
                        "point": point_name(c.kind),
                    });
                    if let Some(why) = &c.not_measured {
                        row["not_measured"] = why.as_str().into();
                    }
                    row
                })
                .collect();
            doc.insert("counts".into(), rows.into());
        }
        if !metrics.is_empty() {
            let rows: Vec<serde_json::Value> = metrics
                .iter()
                .map(|m| {
                    let mut row = serde_json::json!({
                        "metric": m.metric,
                        "focus": m.focus,
                        "value": m.value,
                        "unit": m.unit,
                        "histogram": {"bucket_ns": m.histogram.bucket_ns(), "values": m.histogram.values()},
                    });
                    if let Some(why) = &m.approximate {
                        row["approximate"] = why.as_str().into();
                    }
                    if let Some(why) = &m.not_measured {
                        row["not_measured"] = why.as_str().into();
                    }
                    if let Some(threads) = &m.threads {
                        row["threads"] =
                            threads.iter().map(|t| serde_json::json!({"tid": t.tid, "value": t.value})).collect();
                    }
                    row
                })
                .collect();
            doc.insert("metrics".into(), rows.into());
        }
        doc.insert(
            "executions_without_thread_slot".into(),
            without_thread_slot.into(),
        );
        doc
    }
}

/// Opens `--output FILE` before weft touches the target, when the command
/// line asks for a report, so that a path weft refuses (see
/// `weft_events::create_output`) is said before anything is measured.
pub fn open_report(args: &crate::ProbeArgs) -> anyhow::Result<Option<std::fs::File>> {
    let reports = !(args.count.is_empty() && args.count_exits.is_empty() && args.metric.is_empty());
    match &args.output {
        Some(path) if reports => Ok(Some(weft_events::create_output(path)?)),
        _ => Ok(None),
    }
}

/// Writes the report in the requested format to the requested place:
/// `opened` (from [`open_report`]), else `--output FILE` opened now (a
/// metric added while attached), else standard error.
pub fn write_report(
    args: &crate::ProbeArgs,
    opened: Option<std::fs::File>,
    report: &Report,
) -> anyhow::Result<()> {
    use anyhow::Context;
    if args.count.is_empty() && args.count_exits.is_empty() && report.metrics.is_empty() {
        return Ok(()); // only tracing: the events are the report
    }
    let out: Box<dyn Write> = match (opened, &args.output) {
        (Some(file), _) => Box::new(std::io::BufWriter::new(file)),
        (None, Some(path)) => Box::new(std::io::BufWriter::new(weft_events::create_output(path)?)),
        (None, None) => Box::new(std::io::BufWriter::new(std::io::stderr().lock())),
    };
    let mut sink: Box<dyn ReportSink> = match args.format {
        Format::Table => {
            let width = match args.output {
                None => stderr_width().unwrap_or(DEFAULT_WIDTH),
                Some(_) => DEFAULT_WIDTH,
            };
            Box::new(TableSink(out, width))
        }
        Format::Json => Box::new(JsonSink(out)),
    };
    let place = match &args.output {
        Some(path) => path.display().to_string(),
        None => "standard error".to_string(),
    };
    sink.report(report)
        .with_context(|| format!("the report was not written to {place}"))
}

/// `--verbose`: how each point was spliced.
pub fn print_points(points: &[PointInfo]) {
    let mut err = std::io::BufWriter::new(std::io::stderr().lock());
    for p in points {
        let how = match (&p.why_trap, p.shares_splice_of) {
            (_, Some(main)) => format!("inside the {} splice of {main:#x}", p.method),
            (Some(why), None) => format!("{} ({why})", p.method),
            (None, None) => p.method.to_string(),
        };
        let _ = writeln!(
            err,
            "weft: point {}:{} [{}] at {:#x}: {}, bytes {:#x}..{:#x}{}{}",
            p.module,
            p.function,
            point_name(p.kind),
            p.addr,
            how,
            p.window.0,
            p.window.1,
            if p.saves_state {
                ", saves flags/registers"
            } else {
                ""
            },
            if p.relocated_function {
                ", runs a relocated copy of the whole function"
            } else {
                ""
            }
        );
    }
}

/// For a pattern whose module never loaded: the loaded modules nearest to
/// it (a misspelt name), or the first few loaded ones.
pub fn loaded_hint(pattern: &str, loaded: &std::collections::BTreeSet<String>) -> String {
    let module = pattern.split_once(':').map_or(pattern, |(m, _)| m);
    let near = weft_image::near_module_names(module, loaded.iter().map(String::as_str), 3);
    if !near.is_empty() {
        return format!(" (did you mean: {}?)", near.join(", "));
    }
    const SHOWN: usize = 6;
    let mut names: Vec<&str> = loaded.iter().map(String::as_str).take(SHOWN).collect();
    if loaded.len() > SHOWN {
        names.push("...");
    }
    if names.is_empty() {
        String::new()
    } else {
        format!(" (loaded: {})", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape() {
        let counts = vec![Count {
            module: "m".into(),
            function: "f".into(),
            kind: PointKind::Entry,
            calls: 7,
            not_measured: None,
        }];
        let report = Report {
            counts: &counts,
            metrics: &[],
            without_thread_slot: 0,
            processes: &[],
        };
        let mut buf = Vec::new();
        JsonSink(&mut buf).report(&report).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["counts"][0]["calls"], 7);
        assert_eq!(v["counts"][0]["module"], "m");
        assert_eq!(v["executions_without_thread_slot"], 0);
        let mut buf = Vec::new();
        TableSink(&mut buf, DEFAULT_WIDTH).report(&report).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.lines().nth(1).unwrap().ends_with(" 7"));
        assert_eq!(
            text.lines().count(),
            2,
            "no slot note when nothing was skipped"
        );
    }

    #[test]
    fn several_processes_are_reported_apart_and_added_up() {
        let count = |calls| Count {
            module: "m".into(),
            function: "f".into(),
            kind: PointKind::Entry,
            calls,
            not_measured: None,
        };
        let metric = |value, h: Vec<f64>, approximate: Option<&str>| MetricResult {
            metric: "cpu_time".into(),
            focus: "fn=f".into(),
            value,
            unit: "s".into(),
            histogram: TimeHistogram::from_values(100, 4, h),
            threads: None,
            approximate: approximate.map(str::to_string),
            not_measured: None,
        };
        let parts = vec![
            ProcessReport {
                pid: 11,
                command: "a".into(),
                counts: vec![count(3)],
                metrics: vec![metric(0.5, vec![0.25, 0.25], None)],
                without_thread_slot: 1,
            },
            ProcessReport {
                pid: 22,
                command: "b".into(),
                counts: vec![count(4)],
                metrics: vec![metric(1.0, vec![0.5, 0.25, 0.25], Some("sampled"))],
                without_thread_slot: 0,
            },
        ];
        let (counts, metrics, without) = total(&parts);
        assert_eq!(counts[0].calls, 7);
        assert_eq!(metrics[0].value, 1.5);
        assert_eq!(metrics[0].histogram.values(), [0.75, 0.5, 0.25]);
        assert_eq!(metrics[0].approximate.as_deref(), Some("sampled"));
        assert_eq!(without, 1);
        let report = Report {
            counts: &counts,
            metrics: &metrics,
            without_thread_slot: without,
            processes: &parts,
        };
        let mut buf = Vec::new();
        JsonSink(&mut buf).report(&report).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["counts"][0]["calls"], 7);
        assert_eq!(v["processes"][1]["pid"], 22);
        assert_eq!(v["processes"][1]["command"], "b");
        assert_eq!(v["processes"][1]["counts"][0]["calls"], 4);
        let mut buf = Vec::new();
        TableSink(&mut buf, DEFAULT_WIDTH).report(&report).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert!(text.starts_with("process 11 (a)\n"), "{text}");
        assert!(text.contains("process 22 (b)\n"), "{text}");
        assert!(text.contains("total of 2 processes\n"), "{text}");
    }

    #[test]
    fn a_point_never_instrumented_reads_not_measured() {
        let counts = vec![Count {
            module: "m".into(),
            function: "f".into(),
            kind: PointKind::Entry,
            calls: 0,
            not_measured: Some("code in memory differs from the file".into()),
        }];
        let report = Report {
            counts: &counts,
            metrics: &[],
            without_thread_slot: 0,
            processes: &[],
        };
        let mut buf = Vec::new();
        TableSink(&mut buf, DEFAULT_WIDTH).report(&report).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let row = text.lines().nth(1).unwrap();
        assert!(row.contains(" -  (code in memory differs"), "{row}");
        let mut buf = Vec::new();
        JsonSink(&mut buf).report(&report).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            v["counts"][0]["not_measured"],
            "code in memory differs from the file"
        );
    }

    #[test]
    fn long_names_are_shortened_in_the_middle_to_fit() {
        let long = format!(
            "std::vector<{}>::push_back(int const&) [clone .cold]",
            "x".repeat(500)
        );
        let counts = vec![Count {
            module: "libstdc++.so.6".into(),
            function: long.clone(),
            kind: PointKind::Entry,
            calls: 42,
            not_measured: None,
        }];
        let report = Report {
            counts: &counts,
            metrics: &[],
            without_thread_slot: 0,
            processes: &[],
        };
        let mut buf = Vec::new();
        TableSink(&mut buf, 80).report(&report).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let row = text.lines().nth(1).unwrap();
        assert!(row.chars().count() <= 80, "{row}");
        assert!(row.ends_with(" 42"), "{row}");
        assert!(
            row.contains(">::push_back(") && row.contains(".cold]"),
            "{row}"
        );
        assert!(row.contains('…'));
        // JSON keeps the whole name.
        let mut buf = Vec::new();
        JsonSink(&mut buf).report(&report).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["counts"][0]["function"], long);
        assert_eq!(shorten("abcdefghij", 5), "ab…ij");
        assert_eq!(shorten("abc", 5), "abc");
        // The function's own name survives a long scope and long parameters.
        let cxx = "very_long_namespace_name_for_testing::Processor::process_item_with_long_name\
                   (std::__cxx11::basic_string<char, std::char_traits<char>, \
                   std::allocator<char> > const&, double) [clone .isra.0]";
        for width in [40, 60, 80] {
            let s = shorten(cxx, width);
            assert!(s.chars().count() <= width, "{s}");
            assert!(s.contains("process_item_with_long_name("), "{width}: {s}");
            assert!(s.ends_with(".0]"), "{width}: {s}");
        }
    }
}
