//! Changing metrics while attached: commands read from weft's standard
//! input, one per line.
//!
//! ```text
//! add METRIC:FOCUS   insert a metric now (prints "added ID: ...")
//! remove ID          take a metric's instrumentation out (its value is kept)
//! list               the metrics with their ids and current values
//! ```

use crate::requests::Requests;
use anyhow::{bail, Result};
use std::io::BufRead;
use std::sync::mpsc;
use weft_live::Session;
use weft_process::Tracee;

/// Lines arriving on standard input.
pub struct Control {
    lines: mpsc::Receiver<String>,
}

impl Control {
    /// Starts reading standard input in the background.
    pub fn start() -> Control {
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin()
                .lock()
                .lines()
                .map_while(std::result::Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Control { lines }
    }

    /// The next command line, if one arrived.
    pub fn next(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

/// Carries out one command against the process `pid`.
pub fn handle(line: &str, pid: i32, session: &mut Session, req: &mut Requests) -> Result<()> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match word {
        "" => {}
        "add" => {
            if rest.is_empty() {
                bail!("add needs METRIC:FOCUS");
            }
            let (tag, specs) = req.add_metric(rest, session)?;
            let prepared = session.prepare(&specs)?;
            let mut tracee = Tracee::attach(pid)?;
            let report = session.apply(&mut tracee, prepared);
            tracee.detach()?;
            let report = report?;
            req.sampler.live_from_now();
            println!("added {tag}: {rest} ({} probe(s))", report.probes);
        }
        "remove" => {
            let Ok(tag) = rest.parse::<u64>() else {
                bail!("remove needs a metric id (see 'list')")
            };
            let mut tracee = Tracee::attach(pid)?;
            let removed = session.remove_tagged(&mut tracee, tag);
            tracee.detach()?;
            if removed? == 0 || !req.sampler.remove(session, tag) {
                bail!("no metric {tag} is active (see 'list')");
            }
            req.forget(tag);
            println!("removed {tag}");
        }
        "list" => {
            for (tag, text, value, active) in req.sampler.list() {
                println!(
                    "{tag:>4}  {text:<40}  {value:>16.6}{}",
                    if active { "" } else { "  (removed)" }
                );
            }
        }
        other => bail!("unknown command '{other}' (add METRIC:FOCUS, remove ID, list)"),
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok(())
}
