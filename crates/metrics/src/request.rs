//! Metric requests: `NAME:FOCUS`, the focus a comma-separated list of
//! constraints (`fn=work`, `module=libc.so.6`, `thread=each`, `thread=TID`,
//! `process=PID`, `inside=flush_log`, `arg=3`, `if=EXPR`).

use crate::{parse_expr, Definition, Definitions, Error, Result};
use weft_plan::Expr;

/// The built-in metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Number of calls.
    Calls,
    /// Inclusive wall time, summed over threads.
    WallTime,
    /// CPU time of threads while inside, summed over threads.
    CpuTime,
    /// Average number of threads inside over time.
    Concurrency,
    /// Time spent inside locking functions.
    LockWait,
    /// Sum of one argument over calls.
    SumArg,
    /// A metric from a definition file.
    Defined,
}

impl MetricKind {
    /// The metric's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Calls => "calls",
            MetricKind::WallTime => "wall_time",
            MetricKind::CpuTime => "cpu_time",
            MetricKind::Concurrency => "concurrency",
            MetricKind::LockWait => "lock_wait",
            MetricKind::SumArg => "sum_arg",
            MetricKind::Defined => "defined",
        }
    }

    /// Its unit.
    pub fn unit(self) -> &'static str {
        match self {
            MetricKind::Calls => "calls",
            MetricKind::WallTime | MetricKind::CpuTime | MetricKind::LockWait => "s",
            MetricKind::Concurrency => "threads",
            MetricKind::SumArg => "sum",
            MetricKind::Defined => "",
        }
    }

    const ALL: [MetricKind; 6] = [
        MetricKind::Calls,
        MetricKind::WallTime,
        MetricKind::CpuTime,
        MetricKind::Concurrency,
        MetricKind::LockWait,
        MetricKind::SumArg,
    ];
}

/// Which threads a metric covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThreadFocus {
    /// All threads together.
    All,
    /// One thread.
    Tid(i32),
    /// One value per thread.
    Each,
}

/// Where a metric is measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Focus {
    /// `fn=PATTERN`.
    pub function: Option<String>,
    /// `module=NAME`.
    pub module: Option<String>,
    /// `thread=`.
    pub thread: ThreadFocus,
    /// `process=PID`.
    pub process: Option<i32>,
    /// `inside=PATTERN`.
    pub inside: Option<String>,
    /// `arg=N`.
    pub arg: Option<u8>,
    /// `if=EXPR` (its text and parse).
    pub predicate: Option<(String, Expr)>,
}

/// A parsed `--metric NAME:FOCUS`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRequest {
    /// As written.
    pub text: String,
    /// Which metric.
    pub kind: MetricKind,
    /// Where.
    pub focus: Focus,
    /// For [`MetricKind::Defined`], its definition.
    pub definition: Option<Definition>,
}

impl MetricRequest {
    /// Parses `NAME:FOCUS`.
    pub fn parse(text: &str) -> Result<MetricRequest> {
        MetricRequest::parse_with(text, &Definitions::default())
    }

    /// Parses `NAME:FOCUS`, NAME built in or defined in `defs`.
    pub fn parse_with(text: &str, defs: &Definitions) -> Result<MetricRequest> {
        let bad = |why: String| Error::BadRequest {
            request: text.into(),
            why,
        };
        let (name, focus_text) = text.split_once(':').unwrap_or((text, ""));
        let definition = defs.get(name.trim()).cloned();
        let kind = match &definition {
            Some(_) => MetricKind::Defined,
            None => MetricKind::ALL
                .into_iter()
                .find(|k| k.name() == name.trim())
                .ok_or_else(|| {
                    let mut known: Vec<&str> = MetricKind::ALL.map(|k| k.name()).to_vec();
                    known.extend(defs.names());
                    bad(format!(
                        "unknown metric '{name}' (known: {})",
                        known.join(", ")
                    ))
                })?,
        };
        let mut focus = Focus {
            function: None,
            module: None,
            thread: ThreadFocus::All,
            process: None,
            inside: None,
            arg: None,
            predicate: None,
        };
        for part in focus_text
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
        {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| bad(format!("'{part}' is not KEY=VALUE")))?;
            let value = value.trim();
            match key.trim() {
                "fn" => focus.function = Some(value.into()),
                "module" => focus.module = Some(value.into()),
                "inside" => focus.inside = Some(value.into()),
                "thread" => {
                    focus.thread = if value == "each" {
                        ThreadFocus::Each
                    } else {
                        ThreadFocus::Tid(value.parse().map_err(|_| bad(format!("thread={value}: a tid or 'each'")))?)
                    }
                }
                "process" => focus.process = Some(value.parse().map_err(|_| bad(format!("process={value}: a pid")))?),
                "arg" => match value.parse::<u8>() {
                    Ok(n @ 1..=6) => focus.arg = Some(n),
                    _ => return Err(bad(format!("arg={value}: arguments are 1 to 6"))),
                },
                "if" => {
                    let e = parse_expr(value)?;
                    if e.reads_ret() {
                        return Err(bad(format!(
                            "if={value}: a focus is tested at the function's entry, where \
                             'ret' (the return value) is not known yet; use argN or tid"
                        )));
                    }
                    focus.predicate = Some((value.into(), e));
                }
                other => {
                    return Err(bad(format!(
                        "unknown constraint '{other}' (known: fn, module, thread, process, inside, arg, if)"
                    )))
                }
            }
        }
        let needs_fn = match &definition {
            Some(d) => d.points.iter().any(|p| p.pattern.contains("$fn")),
            None => kind != MetricKind::LockWait,
        };
        if focus.function.is_none() && needs_fn {
            return Err(bad(format!("{} needs fn=PATTERN", name.trim())));
        }
        if kind == MetricKind::SumArg && focus.arg.is_none() {
            return Err(bad("sum_arg needs arg=N (1 to 6)".into()));
        }
        Ok(MetricRequest {
            text: text.into(),
            kind,
            focus,
            definition,
        })
    }

    /// The metric's name.
    pub fn name(&self) -> String {
        self.definition
            .as_ref()
            .map_or_else(|| self.kind.name().to_string(), |d| d.name.clone())
    }

    /// The unit of its value.
    pub fn unit(&self) -> String {
        match &self.definition {
            Some(d) if matches!(d.value, crate::Value::Timer(_)) => "s".into(),
            Some(d) => d.unit.clone(),
            None => self.kind.unit().into(),
        }
    }

    /// The focus as written, normalised (for reports).
    pub fn focus_text(&self) -> String {
        self.text
            .split_once(':')
            .map_or(String::new(), |(_, f)| f.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_issue_examples() {
        let r = MetricRequest::parse("wall_time:fn=work").unwrap();
        assert_eq!(
            (r.kind, r.focus.function.as_deref()),
            (MetricKind::WallTime, Some("work"))
        );
        let r = MetricRequest::parse("calls:fn=write,inside=flush_log").unwrap();
        assert_eq!(r.focus.inside.as_deref(), Some("flush_log"));
        let r = MetricRequest::parse("sum_arg:fn=write,arg=3").unwrap();
        assert_eq!(r.focus.arg, Some(3));
        let r = MetricRequest::parse("cpu_time:fn=compute,thread=each").unwrap();
        assert_eq!(r.focus.thread, ThreadFocus::Each);
        let r = MetricRequest::parse("calls:fn=work,if=arg1 == 3").unwrap();
        assert!(r.focus.predicate.is_some());
        assert!(MetricRequest::parse("lock_wait").is_ok());
        assert_eq!(r.focus_text(), "fn=work,if=arg1 == 3");
    }

    #[test]
    fn clear_errors() {
        let e = |t: &str| MetricRequest::parse(t).unwrap_err().to_string();
        assert!(e("walltime:fn=x").contains("unknown metric 'walltime'"));
        assert!(e("calls").contains("calls needs fn=PATTERN"));
        assert!(e("sum_arg:fn=write").contains("needs arg=N"));
        assert!(e("calls:fn=x,arg=9").contains("arguments are 1 to 6"));
        assert!(e("calls:fn=x,colour=red").contains("unknown constraint 'colour'"));
    }
}
