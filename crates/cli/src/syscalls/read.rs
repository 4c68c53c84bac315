//! Reading a record back: its events paired into calls (a return that
//! holds the whole call split into its entry and its return), the loader's
//! calls marked, the buffers each call recorded, and the programs that
//! exec'd named.

use anyhow::{bail, Result};
use std::collections::HashMap;
use weft_syscalls::Event;

/// The calls of `dir`, paired up, with the trace's description and the
/// process of each thread that wrote events.
pub(super) fn read_calls(
    dir: &std::path::Path,
) -> Result<(
    weft_events::Meta,
    Vec<weft_syscalls::Call>,
    HashMap<i32, i32>,
)> {
    if !dir.exists() {
        bail!(
            "{} does not exist: `weft syscalls record -o DIR -- CMD` makes a record there",
            dir.display()
        );
    }
    if !dir.join("meta.json").exists() {
        bail!(
            "{} is not a record of system calls (it has no meta.json): `weft syscalls record -o DIR -- CMD` makes one",
            dir.display()
        );
    }
    let trace = weft_events::TraceReader::open(dir)?;
    let meta = trace.meta();
    // A record weft finished has whole streams: one cut or corrupt since
    // is refused, not read in part (an unfinished one, weft killed, is
    // read up to its damage).
    if let (true, Some(damage)) = (meta.streams_only, trace.damage().first()) {
        match damage {
            weft_events::Damage::CutShort { stream, offset, .. } => bail!(
                "{} is cut short at byte {offset}, though weft finished the record whole: the \
                 file was changed since (`weft events --repair {}` keeps its whole packets)",
                stream.display(),
                dir.display()
            ),
            weft_events::Damage::Corrupt(e) => bail!("{e}"),
        }
    }
    let kinds: Vec<Option<bool>> = meta
        .events
        .iter()
        .map(|(_, _, kind, _)| match kind.as_str() {
            "syscall" => Some(false),
            "sysret" => Some(true),
            _ => None,
        })
        .collect();
    if !kinds.iter().any(Option::is_some) {
        bail!(
            "{} holds no system calls: `weft syscalls record -o DIR -- CMD` records them",
            dir.display()
        );
    }
    /// A call's entry or return as the trace holds it.
    struct Captured {
        tid: i32,
        tsc: u64,
        event: u32,
        exit: bool,
        args: Vec<u64>,
        buffers: Vec<weft_syscalls::Buffer>,
    }
    let mut events: Vec<Captured> = Vec::new();
    trace.each_in_time_order(&mut |e| {
        if let Some(Some(exit)) = kinds.get(e.event as usize) {
            events.push(Captured {
                tid: e.tid,
                tsc: e.tsc,
                event: e.event,
                exit: *exit,
                args: e.args.clone(),
                buffers: buffers_of(meta, e),
            });
        }
        Ok(())
    })?;
    // A return that recorded the whole call (`weft_syscalls::ENTRY_TIME`
    // among its values) stands for its entry too: the entry's values
    // come off it, at the entry's instant (at the return's when a signal
    // handler's call made it unknown).
    let whole: Vec<Option<usize>> = (0..meta.events.len())
        .map(|id| {
            let names = meta.names.get(id)?;
            names.iter().position(|n| n == "nr")?;
            names.iter().position(|n| n == weft_syscalls::ENTRY_TIME)
        })
        .collect();
    // In the entry record of a call its thread left, after the entry's
    // instant: the result the call had then (`weft_syscalls::LEFT_RESULT`),
    // by the thread and the entry's instant.
    let left_result: Vec<Option<usize>> = (0..meta.events.len())
        .map(|id| {
            let names = meta.names.get(id)?;
            names.iter().position(|n| n == weft_syscalls::LEFT_RESULT)
        })
        .collect();
    let mut left_results: HashMap<(i32, u64), i64> = HashMap::new();
    if whole.iter().any(Option::is_some) {
        let mut split = Vec::with_capacity(events.len() * 2);
        // The entries of calls found left, and of whole calls, by thread
        // and instant: a thread that a signal handler took out of weft's
        // code after it wrote a call's whole record, before it closed the
        // call, has that call found left too, by its next one.
        let mut left_entries: Vec<usize> = Vec::new();
        let mut whole_entries: std::collections::HashSet<(i32, u64)> = Default::default();
        for mut c in events {
            let at = match (c.exit, whole.get(c.event as usize)) {
                (true, Some(&Some(at))) if at < c.args.len() => at,
                // An entry's record with its instant inside: that of a
                // call the thread left, written by its next call.
                (false, Some(&Some(at))) if at < c.args.len() => {
                    let result = match left_result.get(c.event as usize) {
                        Some(&Some(r)) if r == at + 1 && r < c.args.len() => Some(c.args.remove(r)),
                        _ => None,
                    };
                    if let t @ 1.. = c.args.remove(at) {
                        c.tsc = c.tsc.min(t);
                    }
                    if let Some(r) = result.filter(|&r| r != weft_syscalls::LEFT_RESULT_UNKNOWN) {
                        left_results.insert((c.tid, c.tsc), r as i64);
                    }
                    left_entries.push(split.len());
                    split.push(c);
                    continue;
                }
                _ => {
                    split.push(c);
                    continue;
                }
            };
            let names = &meta.names[c.event as usize];
            let nr_at = names.iter().position(|n| n == "nr").unwrap_or(at);
            let entry_tsc = match c.args[at] {
                0 => c.tsc,
                t => t.min(c.tsc),
            };
            let mut entry: Vec<u64> = c.args[nr_at..at].to_vec();
            // nr, arg1..argK, user_ns: the arguments not recorded are 0.
            let recorded_args = names[nr_at + 1..at]
                .iter()
                .filter(|n| n.starts_with("arg"))
                .count();
            let user = entry.split_off(1 + recorded_args);
            entry.resize(7, 0);
            entry.extend(user);
            c.args.truncate(nr_at.min(c.args.len()));
            whole_entries.insert((c.tid, entry_tsc));
            split.push(Captured {
                tid: c.tid,
                tsc: entry_tsc,
                event: c.event,
                exit: false,
                args: entry,
                buffers: Vec::new(),
            });
            split.push(c);
        }
        let twice: std::collections::HashSet<usize> = (left_entries.into_iter())
            .filter(|&k| whole_entries.contains(&(split[k].tid, split[k].tsc)))
            .collect();
        if !twice.is_empty() {
            split = (split.into_iter().enumerate())
                .filter(|(k, _)| !twice.contains(k))
                .map(|(_, c)| c)
                .collect();
        }
        // Entries before returns of the same instant, as they were made.
        split.sort_by_key(|c| (c.tsc, c.exit));
        events = split;
    }
    let known: HashMap<i32, i32> = events.iter().map(|c| (c.tid, meta.pid_of(c.tid))).collect();
    // An entry and its return are events of one site (the same module
    // and function+offset).
    let mut site_ids: HashMap<(&str, &str), u32> = HashMap::new();
    let sites: Vec<u32> = meta
        .events
        .iter()
        .map(|(module, function, _, _)| {
            let next = site_ids.len() as u32;
            *site_ids.entry((module, function)).or_insert(next)
        })
        .collect();
    let loader_events: Vec<bool> = (meta.events.iter())
        .map(|(module, _, _, _)| module.starts_with("ld-linux"))
        .collect();
    // The calls weft's SIGSYS handler made say where they were made
    // from: the value comes off, and tells the loader's.
    let site_value: Vec<Option<usize>> = (0..meta.events.len())
        .map(|id| {
            let names = meta.names.get(id)?;
            names
                .iter()
                .position(|n| n == weft_abi::dispatch::SITE_VALUE)
        })
        .collect();
    let mut dispatched_by_loader = std::collections::HashSet::new();
    for c in events.iter_mut().filter(|c| !c.exit) {
        if let Some(&Some(k)) = site_value.get(c.event as usize) {
            if k < c.args.len() {
                let site = c.args.remove(k);
                if meta.in_loader(meta.pid_of(c.tid), c.tsc, site) {
                    dispatched_by_loader.insert((c.tid, c.tsc));
                }
            }
        }
    }
    let loader_entries: std::collections::HashSet<(i32, u64)> = (events.iter())
        .filter(|c| !c.exit && loader_events.get(c.event as usize) == Some(&true))
        .map(|c| (c.tid, c.tsc))
        .chain(dispatched_by_loader)
        .collect();
    let mut calls = weft_syscalls::calls_at_sites(events.iter().map(|c| {
        let event = match c.exit {
            true => Event::Exit(c.args.first().copied().unwrap_or(0), c.buffers.clone()),
            false => Event::Entry(&c.args),
        };
        let site = sites.get(c.event as usize).copied().unwrap_or(u32::MAX);
        (c.tid, c.tsc, site, event)
    }));
    for call in &mut calls {
        call.loader = loader_entries.contains(&(call.ring, call.entry_tsc));
        // A left call whose signal frame said its result: it returned,
        // not to its site (no instant), as an `execve` that succeeded.
        if call.exit.is_none() {
            if let Some(&result) = left_results.get(&(call.ring, call.entry_tsc)) {
                call.exit = Some(weft_syscalls::Return { tsc: None, result });
            }
        }
    }
    name_programs_execd(meta, &mut calls);
    let sigpipe: Vec<i32> = (meta.killed.iter())
        .filter(|&(_, &signal)| signal == nix::libc::SIGPIPE)
        .map(|(&pid, _)| pid)
        .collect();
    weft_syscalls::killed::writes_sigpipe_ended(&mut calls, &|tid| meta.pid_of(tid), &sigpipe);
    Ok((meta.clone(), calls, known))
}

/// Gives each `execve` that succeeded (it has no return, where paths are
/// recorded) the file name its process's new image was given, and its
/// arguments and environment's size where weft read them: the last such
/// call of the process before weft found that image.
fn name_programs_execd(meta: &weft_events::Meta, calls: &mut [weft_syscalls::Call]) {
    for exec in &meta.execs {
        let made = calls.iter_mut().rfind(|c| {
            weft_syscalls::is_exec(c.nr)
                && c.entry_tsc < exec.tsc
                && (meta.pid_of(c.tid) == exec.pid || c.tid == exec.pid)
                && c.exit.is_some_and(|e| e.tsc.is_none() && e.result == 0)
        });
        if let Some(call) = made {
            // execveat's path is its second argument.
            let arg = usize::from(call.nr == 322);
            if !call
                .buffers
                .iter()
                .any(|b| b.what == weft_syscalls::Memory::Path)
            {
                call.buffers.push(weft_syscalls::Buffer {
                    what: weft_syscalls::Memory::Path,
                    arg,
                    bytes: exec.path.as_bytes().to_vec(),
                    truncated: false,
                });
            }
            let has =
                |call: &weft_syscalls::Call, what| call.buffers.iter().any(|b| b.what == what);
            if let (Some(argv), false) = (&exec.argv, has(call, weft_syscalls::Memory::Argv)) {
                let strings = argv.iter().flat_map(|a| a.bytes().chain([0]));
                call.buffers.push(weft_syscalls::Buffer {
                    what: weft_syscalls::Memory::Argv,
                    arg: arg + 1,
                    bytes: strings.collect(),
                    truncated: false,
                });
            }
            let environment = weft_syscalls::Memory::Environment;
            if let (Some(vars), false) = (exec.vars, has(call, environment)) {
                call.buffers.push(weft_syscalls::Buffer {
                    what: environment,
                    arg: arg + 2,
                    bytes: (vars as u64).to_le_bytes().to_vec(),
                    truncated: false,
                });
            }
        }
    }
}

/// The buffers a return recorded: each value named `path:K`, `sent:K` or
/// `data:K` (see `weft_syscalls`) holds its byte count and flags
/// (`region::ring`), and the record's texts, in the same order, its bytes
/// (hex for sized ones).
fn buffers_of(meta: &weft_events::Meta, e: &weft_live::EventRecord) -> Vec<weft_syscalls::Buffer> {
    const TRUNCATED: u64 = 1 << 62;
    const NULL: u64 = 1 << 63;
    let (mask, binary) = meta.string_masks(e.event);
    let mut texts = e.strings.iter();
    let mut out = Vec::new();
    for (i, &word) in e.args.iter().enumerate() {
        if mask & (1 << i) == 0 {
            // A plain value the call's memory held (`flags:K`).
            let name = meta.value_name(e.event, i);
            if let Some(arg) = name.strip_prefix("flags:").and_then(|a| a.parse().ok()) {
                out.push(weft_syscalls::Buffer {
                    what: weft_syscalls::Memory::Flags,
                    arg,
                    bytes: word.to_le_bytes().to_vec(),
                    truncated: false,
                });
            }
            continue;
        }
        let Some(text) = texts.next() else { break };
        let name = meta.value_name(e.event, i);
        let Some((what, arg)) = name.split_once(':') else {
            continue;
        };
        let what = match what {
            "path" => weft_syscalls::Memory::Path,
            "sent" => weft_syscalls::Memory::Sent,
            "data" => weft_syscalls::Memory::Filled,
            "iov" => weft_syscalls::Memory::Iovecs,
            "addr" => weft_syscalls::Memory::Address,
            "control" => weft_syscalls::Memory::Control,
            _ => continue,
        };
        let (Ok(arg), false) = (arg.parse(), word & NULL != 0) else {
            continue;
        };
        let bytes = if binary & (1 << i) != 0 {
            weft_live::from_hex(text)
        } else {
            text.as_bytes().to_vec()
        };
        out.push(weft_syscalls::Buffer {
            what,
            arg,
            bytes,
            truncated: word & TRUNCATED != 0,
        });
    }
    out
}
