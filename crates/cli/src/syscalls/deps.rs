//! `weft syscalls deps`: the resources a recorded workload's calls used
//! and the order between different threads' operations on them
//! (`weft_syscalls::fds`, `weft_syscalls::deps`), as text, JSON or a dot
//! graph.

use anyhow::Result;
use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use weft_syscalls::deps::{Edge, Mode};
use weft_syscalls::fds::{Access, Kind, Resources};
use weft_syscalls::Call;

/// What `deps` found: the resources, and the edges the mode keeps and
/// those of the coarse order it drops.
pub struct Found<'a> {
    pub calls: &'a [Call],
    pub resources: Resources,
    pub mode: Mode,
    pub kept: Vec<Edge>,
    pub dropped: Vec<Edge>,
}

impl<'a> Found<'a> {
    /// The dependencies of `calls`; `known` maps threads to processes.
    pub fn new(calls: &'a [Call], known: &HashMap<i32, i32>, mode: Mode) -> Found<'a> {
        let resources = weft_syscalls::fds::resolve(calls, known);
        let kept = weft_syscalls::deps::edges(calls, &resources, mode);
        let dropped = match mode {
            Mode::Coarse => Vec::new(),
            Mode::Fine => {
                let fine: BTreeSet<(usize, usize)> = kept.iter().map(|e| (e.from, e.to)).collect();
                weft_syscalls::deps::edges(calls, &resources, Mode::Coarse)
                    .into_iter()
                    .filter(|e| !fine.contains(&(e.from, e.to)))
                    .collect()
            }
        };
        Found {
            calls,
            resources,
            mode,
            kept,
            dropped,
        }
    }

    fn mode_name(&self) -> &'static str {
        match self.mode {
            Mode::Coarse => "coarse",
            Mode::Fine => "fine",
        }
    }

    /// A call as a line: `PID/TID name(args) = result`.
    fn call_line(&self, k: usize) -> String {
        let c = &self.calls[k];
        format!(
            "{}/{} {}",
            self.resources.process[k],
            c.tid,
            weft_syscalls::strace_line(c)
        )
    }

    /// Per resource: operations, threads, edges kept.
    fn per_resource(&self) -> Vec<(usize, usize, usize)> {
        let mut ops = vec![0; self.resources.resources.len()];
        let mut threads = vec![BTreeSet::new(); self.resources.resources.len()];
        let mut edges = vec![0; self.resources.resources.len()];
        for op in &self.resources.ops {
            ops[op.resource] += 1;
            threads[op.resource].insert(self.calls[op.call].tid);
        }
        for e in &self.kept {
            edges[e.resource] += 1;
        }
        (0..ops.len())
            .map(|r| (ops[r], threads[r].len(), edges[r]))
            .collect()
    }

    /// The text report.
    pub fn text(&self, out: &mut dyn Write) -> Result<()> {
        let r = &self.resources;
        let of_kind = |k: Kind| r.resources.iter().filter(|x| x.kind == k).count();
        let threads: BTreeSet<i32> = self.calls.iter().map(|c| c.tid).collect();
        let processes: BTreeSet<i32> = r.process.iter().copied().collect();
        writeln!(
            out,
            "{} ({}, {}, {}, {} inherited); {} by {} of {}",
            counted(r.resources.len(), "resource"),
            counted(of_kind(Kind::File), "file"),
            counted(of_kind(Kind::Pipe), "pipe"),
            counted(of_kind(Kind::Socket), "socket"),
            of_kind(Kind::Inherited),
            counted(r.ops.len(), "operation"),
            counted(threads.len(), "thread"),
            counted(processes.len(), "process"),
        )?;
        match self.mode {
            Mode::Coarse => writeln!(
                out,
                "coarse: {} edges between threads kept (every operation on a resource keeps its order)",
                self.kept.len()
            )?,
            Mode::Fine => writeln!(
                out,
                "fine: {} edges between threads kept, {} of the coarse order's dropped (no write between them, no offset they share)",
                self.kept.len(),
                self.dropped.len()
            )?,
        }
        if !r.unresolved.is_empty() {
            writeln!(
                out,
                "{} use a path or descriptor the record does not say (first: {})",
                counted(r.unresolved.len(), "call"),
                self.call_line(r.unresolved[0])
            )?;
        }
        writeln!(out)?;
        writeln!(
            out,
            "{:>10} {:>8} {:>6}  resource",
            "operations", "threads", "edges"
        )?;
        let rows = self.per_resource();
        let mut order: Vec<usize> = (0..rows.len()).collect();
        order.sort_by_key(|&k| {
            (
                std::cmp::Reverse(rows[k].2),
                std::cmp::Reverse(rows[k].0),
                k,
            )
        });
        for k in order {
            let (ops, threads, edges) = rows[k];
            writeln!(
                out,
                "{ops:>10} {threads:>8} {edges:>6}  {} {}",
                kind_name(r.resources[k].kind),
                r.resources[k].name
            )?;
        }
        for (title, list) in [("kept", &self.kept), ("dropped", &self.dropped)] {
            if list.is_empty() {
                continue;
            }
            writeln!(out, "\n{title}:")?;
            for e in list {
                // A blocking read that a rerun need not hold.
                let by_itself = match e.waits_by_itself {
                    true => " (a blocking read: waits for the bytes by itself)",
                    false => "",
                };
                writeln!(
                    out,
                    "{}{by_itself}\n    {}\n -> {}",
                    r.resources[e.resource].name,
                    self.call_line(e.from),
                    self.call_line(e.to)
                )?;
            }
        }
        Ok(())
    }

    /// The JSON report: one object.
    pub fn json(&self, out: &mut dyn Write) -> Result<()> {
        let r = &self.resources;
        let rows = self.per_resource();
        let edge = |e: &Edge| {
            serde_json::json!({
                "from": e.from,
                "to": e.to,
                "resource": e.resource,
                "waits_by_itself": e.waits_by_itself,
            })
        };
        let doc = serde_json::json!({
            "mode": self.mode_name(),
            "resources": r.resources.iter().zip(&rows).map(|(x, row)| serde_json::json!({
                "name": x.name,
                "kind": kind_name(x.kind),
                "operations": row.0,
                "threads": row.1,
                "edges": row.2,
            })).collect::<Vec<_>>(),
            "ops": r.ops.iter().map(|o| serde_json::json!({
                "call": o.call,
                "tid": self.calls[o.call].tid,
                "pid": r.process[o.call],
                "name": weft_syscalls::name(self.calls[o.call].nr),
                "resource": o.resource,
                "access": match o.access { Access::Read => "read", Access::Write => "write" },
                "description": o.description,
                "offset": o.offset,
            })).collect::<Vec<_>>(),
            "edges": self.kept.iter().map(edge).collect::<Vec<_>>(),
            "dropped": self.dropped.iter().map(edge).collect::<Vec<_>>(),
            "unresolved": r.unresolved,
        });
        writeln!(out, "{doc}")?;
        Ok(())
    }

    /// A dot graph: the calls with edges, each thread's in a cluster in
    /// program order (grey), the edges kept (black) and dropped (dashed).
    pub fn dot(&self, out: &mut dyn Write) -> Result<()> {
        let r = &self.resources;
        let mut nodes: BTreeSet<usize> = BTreeSet::new();
        for e in self.kept.iter().chain(&self.dropped) {
            nodes.insert(e.from);
            nodes.insert(e.to);
        }
        writeln!(out, "digraph deps {{")?;
        writeln!(out, "  node [shape=box, fontname=monospace];")?;
        let mut by_thread: std::collections::BTreeMap<i32, Vec<usize>> = Default::default();
        for &k in &nodes {
            by_thread.entry(self.calls[k].tid).or_default().push(k);
        }
        for (tid, calls) in &by_thread {
            writeln!(out, "  subgraph cluster_{tid} {{")?;
            writeln!(
                out,
                "    label={};",
                quote(&format!("{}/{tid}", r.process[calls[0]]))
            )?;
            for &k in calls {
                let line = weft_syscalls::strace_line(&self.calls[k]);
                let short: String = line.chars().take(60).collect();
                writeln!(out, "    c{k} [label={}];", quote(&short))?;
            }
            for pair in calls.windows(2) {
                writeln!(out, "    c{} -> c{} [color=grey];", pair[0], pair[1])?;
            }
            writeln!(out, "  }}")?;
        }
        for (list, style) in [(&self.kept, ""), (&self.dropped, ", style=dashed")] {
            for e in list {
                writeln!(
                    out,
                    "  c{} -> c{} [label={}{style}];",
                    e.from,
                    e.to,
                    quote(&r.resources[e.resource].name)
                )?;
            }
        }
        writeln!(out, "}}")?;
        Ok(())
    }
}

/// `n thing(s)`.
fn counted(n: usize, thing: &str) -> String {
    match (n, thing) {
        (1, _) => format!("1 {thing}"),
        (_, "process") => format!("{n} processes"),
        _ => format!("{n} {thing}s"),
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::File => "file",
        Kind::Pipe => "pipe",
        Kind::Socket => "socket",
        Kind::Inherited => "inherited",
        Kind::Descriptors => "descriptors",
    }
}

/// `text` as a dot string.
fn quote(text: &str) -> String {
    let mut s = String::from("\"");
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                s.push('\\');
                s.push(c);
            }
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}
