//! The walk's compact tables against walks whose path is known: random
//! walks of random CFGs and of an interpreter's dispatch (hundreds of
//! witnesses at one block, two-byte witnesses), regenerated through
//! [`Program`] from the records their copies would have written, and
//! through the plain walk alone.

use super::*;
use crate::instrument::BlockInfo;
use crate::witness::{place, Cfg, Edge, Plan};
use std::collections::BTreeSet;

fn edge(from: usize, to: usize) -> Edge {
    Edge { from, to }
}

/// Function 0 of a trace: `cfg`'s blocks 16 bytes apart from 0x1000, of
/// two instructions each, with `plan`'s witnesses.
fn function_of(cfg: &Cfg, plan: &Plan) -> FunctionInfo {
    FunctionInfo {
        id: 0,
        module: "m".into(),
        path: "/m".into(),
        name: "f".into(),
        vaddr: 0x1000,
        blocks: (0..cfg.blocks)
            .map(|b| BlockInfo {
                start: 0x1000 + 16 * b as u64,
                insns: vec![0, 4],
                calls: Vec::new(),
                callees: Vec::new(),
                tail: 0,
            })
            .collect(),
        entry: cfg.entry,
        edges: cfg
            .edges
            .iter()
            .enumerate()
            .map(|(e, x)| (x.from, x.to, plan.witness[e].unwrap_or(0)))
            .collect(),
        resumes: Vec::new(),
        part_exits: Vec::new(),
        data: None,
    }
}

/// The bytes of `record`, as a copy stores it.
fn bytes_of(record: Record) -> Vec<u8> {
    record.value().to_le_bytes()[..record.len() as usize].to_vec()
}

/// A walk from the entry choosing each predicate's edge by `choose`;
/// `None` if it has not reached `EXIT` after `limit` edges.
fn walk(cfg: &Cfg, limit: usize, mut choose: impl FnMut() -> usize) -> Option<Vec<usize>> {
    let mut at = cfg.entry;
    let mut path = Vec::new();
    while at != cfg.exit() {
        let outs: Vec<usize> = cfg.out_edges(at).collect();
        if outs.is_empty() || path.len() == limit {
            return None;
        }
        let e = outs[choose() % outs.len()];
        path.push(e);
        at = cfg.edges[e].to;
    }
    Some(path)
}

/// Regenerates the path `path` of `cfg` from its entry and witness
/// records, and checks that every block along it comes back, in order,
/// at its address.
fn regenerates_exactly(cfg: &Cfg, plan: &Plan, path: &[usize]) {
    let functions = [function_of(cfg, plan)];
    let image = ImageLoads {
        pid: 1,
        modules: Vec::new(),
        linked: Vec::new(),
    };
    let program = Program::new(&functions, &[image], false);
    assert!(!program.fast.is_empty(), "the plain walk's tables");
    let mut stream = bytes_of(Record::Entered(0));
    for &e in path {
        if let Some(w) = plan.witness[e] {
            stream.extend(bytes_of(Record::Witness(w)));
        }
    }
    let mut got = Vec::new();
    let summary = program.regenerate(0, &stream, |s| got.push(s));
    assert_eq!(summary, Ok(Summary::default()));
    let blocks = std::iter::once(cfg.entry).chain(path.iter().map(|&e| cfg.edges[e].to));
    let expected: Vec<Segment> = blocks
        .filter(|&b| b != cfg.exit())
        .map(|b| Segment {
            function: 0,
            block: b as u32,
            first: 0,
            last: 2,
            at: 0x1000 + 16 * b as u64,
        })
        .collect();
    assert_eq!(got, expected);
    // The plain walk alone goes all the way (it hands nothing to the
    // general walk, whose tables would hide a fault of its own).
    let after_entry = Record::Entered(0).len() as usize;
    let plain = plain_walk(
        &program,
        Frame::at_entry(0, cfg.entry),
        &stream,
        after_entry,
    );
    assert_eq!(plain, expected);
}

/// The plain walk alone from `frame`, at byte `at` of `stream`: the
/// segments it gives, once it has checked that it read the stream to its
/// end and closed every frame.
fn plain_walk(program: &Program, frame: Frame, stream: &[u8], at: usize) -> Vec<Segment> {
    let mut stack = vec![frame];
    let mut r = Reader { bytes: stream, at };
    let mut got = Vec::new();
    let (mut unread, mut last_at) = (0, 0);
    program.run_plain(
        &program.fast[0],
        &mut stack,
        &mut r,
        &mut |s, _| got.push(s),
        (&mut unread, &mut last_at),
    );
    assert!(stack.is_empty(), "the plain walk stopped early");
    assert_eq!(r.at, stream.len(), "the plain walk stopped early");
    got
}

/// A little generator of the same numbers every run.
fn numbers() -> impl FnMut() -> usize {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    }
}

#[test]
fn random_walks_of_random_cfgs_regenerate_exactly() {
    let mut next = numbers();
    let mut ended = 0;
    for _ in 0..1000 {
        let n = 2 + next() % 12;
        let mut edges = Vec::new();
        for b in 0..n - 1 {
            edges.push(edge(b, next() % (n + 1)));
            if next().is_multiple_of(2) {
                edges.push(edge(b, next() % (n + 1)));
            }
        }
        edges.push(edge(n - 1, n));
        let cfg = Cfg {
            blocks: n,
            entry: 0,
            edges,
            calls: BTreeSet::new(),
        };
        let plan = place(&cfg);
        if let Some(path) = walk(&cfg, 200, &mut next) {
            regenerates_exactly(&cfg, &plan, &path);
            ended += 1;
        }
    }
    assert!(ended > 300, "only {ended} of 1000 walks ended");
}

#[test]
fn an_interpreters_dispatch_regenerates_exactly() {
    // 0 enters the dispatch 1, which returns or goes to one of 400 cases;
    // case c (block 2 + 3c) branches to 3 + 3c or 4 + 3c, both back to
    // the dispatch: the dispatch decides among hundreds of witnesses, and
    // many are two bytes long.
    let cases = 400;
    let exit = 2 + 3 * cases;
    let mut edges = vec![edge(0, 1), edge(1, exit)];
    for c in 0..cases {
        let head = 2 + 3 * c;
        edges.extend([edge(1, head), edge(head, head + 1), edge(head, head + 2)]);
        edges.extend([edge(head + 1, 1), edge(head + 2, 1)]);
    }
    let cfg = Cfg {
        blocks: exit,
        entry: 0,
        edges,
        calls: BTreeSet::new(),
    };
    let plan = place(&cfg);
    assert!(plan
        .witness
        .iter()
        .flatten()
        .any(|&w| w > crate::record::MAX_BYTE_WITNESS));
    let mut next = numbers();
    for _ in 0..50 {
        let path = walk(&cfg, 20_000, &mut next).expect("the walk returns");
        regenerates_exactly(&cfg, &plan, &path);
    }
}

#[test]
fn calls_that_write_records_stay_in_the_plain_walk() {
    // Function 0's one block calls through a pointer (instruction 1) and
    // returns; the call reaches function 1 (a callback of untraced code)
    // before it returns.
    let block = |start: u64, insns: Vec<u32>, calls: Vec<u32>| BlockInfo {
        start,
        callees: vec![0; calls.len()],
        insns,
        calls,
        tail: 0,
    };
    let function = |id: u32, vaddr: u64, b: BlockInfo| FunctionInfo {
        id,
        module: "m".into(),
        path: "/m".into(),
        name: format!("f{id}"),
        vaddr,
        blocks: vec![b],
        entry: 0,
        edges: vec![(0, 1, 0)],
        resumes: Vec::new(),
        part_exits: Vec::new(),
        data: None,
    };
    let functions = [
        function(0, 0x1000, block(0x1000, vec![0, 3, 5], vec![1])),
        function(1, 0x2000, block(0x2000, vec![0, 4], Vec::new())),
    ];
    let image = ImageLoads {
        pid: 1,
        modules: Vec::new(),
        linked: Vec::new(),
    };
    let program = Program::new(&functions, &[image], false);
    let stream: Vec<u8> = [Record::Entered(1), Record::Returned]
        .into_iter()
        .flat_map(bytes_of)
        .collect();
    let segment = |function, first, last, at| Segment {
        function,
        block: 0,
        first,
        last,
        at,
    };
    assert_eq!(
        plain_walk(&program, Frame::at_entry(0, 0), &stream, 0),
        [
            segment(0, 0, 2, 0x1000),
            segment(1, 0, 2, 0x2000),
            segment(0, 2, 3, 0x1005),
        ]
    );
}
