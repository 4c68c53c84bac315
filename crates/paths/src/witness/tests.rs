//! Placement against the paper's example, and regeneration against
//! random walks of random CFGs: every walk comes back exactly from the
//! witnesses it wrote.

use super::*;
use proptest::prelude::*;

fn edge(from: usize, to: usize) -> Edge {
    Edge { from, to }
}

/// The paper's `zero` (Figure 6): blocks 0, 1 and 2, `EXIT` 3; 0 returns
/// early or goes on through 1 to the loop 2.
fn zero() -> Cfg {
    Cfg {
        blocks: 3,
        entry: 0,
        edges: vec![edge(0, 1), edge(0, 3), edge(1, 2), edge(2, 2), edge(2, 3)],
        calls: BTreeSet::new(),
    }
}

#[test]
fn zero_gets_its_three_edges() {
    let cfg = zero();
    let plan = place(&cfg);
    let instrumented: Vec<Edge> = plan.instrumented().map(|e| cfg.edges[e]).collect();
    // 0 -> EXIT and 2 -> EXIT block (a predicate reaching EXIT), and the
    // loop edge 2 -> 2 closes a cycle of the spanning tree.
    assert_eq!(instrumented, [edge(0, 3), edge(2, 2), edge(2, 3)]);
    let blocking: Vec<Edge> = plan.blocking.iter().map(|&e| cfg.edges[e]).collect();
    assert_eq!(blocking, [edge(0, 3), edge(2, 3)]);
    assert_eq!(plan.witness_width(), 1);
    // Three trips around the loop, then out: the loop's witness three
    // times, then the exit's.
    let (w_loop, w_exit) = (plan.witness[3].unwrap(), plan.witness[4].unwrap());
    let path = plan
        .regenerate(&cfg, &[w_loop, w_loop, w_loop, w_exit])
        .unwrap();
    assert_eq!(path, [0, 2, 3, 3, 3, 4]);
    // The early return.
    let early = plan.witness[1].unwrap();
    assert_eq!(plan.regenerate(&cfg, &[early]).unwrap(), [1]);
    // Witnesses that fit no path.
    assert_eq!(plan.regenerate(&cfg, &[w_loop]), None);
    assert_eq!(plan.regenerate(&cfg, &[early, early]), None);
}

#[test]
fn a_predicate_that_reaches_a_call_is_blocked() {
    // 0 branches to 1 (a call, then 3) or 2 (then 3); 3 returns.
    let cfg = Cfg {
        blocks: 4,
        entry: 0,
        edges: vec![edge(0, 1), edge(0, 2), edge(1, 3), edge(2, 3), edge(3, 4)],
        calls: BTreeSet::from([1]),
    };
    let plan = place(&cfg);
    let blocking: Vec<Edge> = plan.blocking.iter().map(|&e| cfg.edges[e]).collect();
    // 0 -> 1 reaches the call; 0 -> 2 reaches EXIT through 2 and 3.
    assert_eq!(blocking, [edge(0, 1), edge(0, 2)]);
}

#[test]
fn loops_weigh_ten_times_their_entry() {
    let w = weights(&zero());
    // 0 splits in two; 1 runs on half the calls; the loop 2 runs ten
    // times what enters it, and splits.
    assert_eq!(w, [0.5, 0.5, 0.5, 2.5, 2.5]);
}

#[test]
fn an_interpreters_cases_get_the_smallest_numbers() {
    // 0 enters the dispatch 1, which returns or goes to one of 300 cases;
    // case c (block 2 + 3c) makes a call, then branches to 3 + 3c or
    // 4 + 3c, both back to the dispatch. Every iteration takes one case
    // and one of its two ways: the cases (blocking witnesses, as they
    // reach a call) run twice as often as each way, and their numbers
    // come first, one byte for as many as fit, although their edges come
    // last in the CFG's order.
    let cases = 300;
    let exit = 2 + 3 * cases;
    let mut inside = Vec::new();
    let mut dispatch = vec![edge(0, 1), edge(1, exit)];
    for c in 0..cases {
        let head = 2 + 3 * c;
        inside.extend([edge(head, head + 1), edge(head, head + 2)]);
        inside.extend([edge(head + 1, 1), edge(head + 2, 1)]);
        dispatch.push(edge(1, head));
    }
    let cfg = Cfg {
        blocks: exit,
        entry: 0,
        edges: inside.into_iter().chain(dispatch).collect(),
        calls: (0..cases).map(|c| 2 + 3 * c).collect(),
    };
    let plan = place(&cfg);
    let numbers = |of_dispatch: bool| -> Vec<u32> {
        plan.instrumented()
            .filter(|&e| (cfg.edges[e].from == 1) == of_dispatch)
            .map(|e| plan.witness[e].unwrap())
            .collect()
    };
    let (cases_numbers, ways) = (numbers(true), numbers(false));
    assert!(
        cases_numbers.len() >= cases - 1,
        "{} cases",
        cases_numbers.len()
    );
    assert!(!ways.is_empty());
    let last_case = cases_numbers.iter().max().unwrap();
    assert!(
        ways.iter().all(|w| w > last_case),
        "a way numbered before a case"
    );
    assert_eq!(*cases_numbers.iter().min().unwrap(), 1);
}

/// A random CFG of `targets.len()` blocks: block `b` has one or two
/// edges, to the blocks (or `EXIT`) `targets[b]` chooses; the last block
/// returns, so that `EXIT` is an edge's target.
fn cfg_of(targets: &[(u8, Option<u8>)]) -> Cfg {
    let n = targets.len();
    let mut edges = Vec::new();
    for (b, &(first, second)) in targets.iter().enumerate() {
        if b == n - 1 {
            edges.push(edge(b, n));
            continue;
        }
        edges.push(edge(b, first as usize % (n + 1)));
        if let Some(s) = second {
            edges.push(edge(b, s as usize % (n + 1)));
        }
    }
    Cfg {
        blocks: n,
        entry: 0,
        edges,
        calls: BTreeSet::new(),
    }
}

/// A walk from the entry, choosing each predicate's edge from `choices`;
/// `None` if it has not reached `EXIT` after 200 edges.
fn walk(cfg: &Cfg, choices: &[u8]) -> Option<Vec<usize>> {
    let mut at = cfg.entry;
    let mut path = Vec::new();
    for step in 0..200 {
        if at == cfg.exit() {
            return Some(path);
        }
        let outs: Vec<usize> = cfg.out_edges(at).collect();
        if outs.is_empty() {
            return None; // a trap: the run ends here
        }
        let e = outs[choices.get(step).copied().unwrap_or(0) as usize % outs.len()];
        path.push(e);
        at = cfg.edges[e].to;
    }
    (at == cfg.exit()).then_some(path)
}

proptest! {
    #[test]
    fn random_walks_regenerate_exactly(
        targets in prop::collection::vec((any::<u8>(), prop::option::of(any::<u8>())), 2..14),
        choices in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let cfg = cfg_of(&targets);
        let plan = place(&cfg);
        if let Some(path) = walk(&cfg, &choices) {
            let witnesses: Vec<u32> = path.iter().filter_map(|&e| plan.witness[e]).collect();
            prop_assert_eq!(plan.regenerate(&cfg, &witnesses), Some(path));
        }
        // Every predicate's edges have disjoint witness sets.
        for p in (0..cfg.blocks).filter(|&b| cfg.is_predicate(b)) {
            let outs: Vec<usize> = cfg.out_edges(p).collect();
            for (i, &a) in outs.iter().enumerate() {
                for &b in &outs[i + 1..] {
                    let (sa, sb) = (plan.may_come_next(&cfg, a), plan.may_come_next(&cfg, b));
                    prop_assert!(sa.is_disjoint(&sb), "{:?} {:?} at {}", sa, sb, p);
                }
            }
        }
    }
}

/// The property above is not vacuous: many random walks do end, and each
/// comes back exactly (a fixed sequence of CFGs and walks).
#[test]
fn many_random_walks_end_and_regenerate() {
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as u8
    };
    let mut ended = 0;
    for _ in 0..1000 {
        let n = 2 + next() as usize % 12;
        let targets: Vec<(u8, Option<u8>)> = (0..n)
            .map(|_| (next(), (next() % 2 == 0).then(&mut next)))
            .collect();
        let cfg = cfg_of(&targets);
        let plan = place(&cfg);
        let choices: Vec<u8> = (0..200).map(|_| next()).collect();
        if let Some(path) = walk(&cfg, &choices) {
            let witnesses: Vec<u32> = path.iter().filter_map(|&e| plan.witness[e]).collect();
            assert_eq!(plan.regenerate(&cfg, &witnesses), Some(path));
            ended += 1;
        }
    }
    assert!(ended > 300, "only {ended} of 1000 walks ended");
}

/// Every function of a real program, Debian's gzip: each plan leaves the
/// witness sets of every predicate disjoint, and a walk of each function
/// (the first edge at every predicate, then the second) regenerates.
#[test]
fn every_function_of_gzip_gets_a_plan_that_regenerates() {
    let path = std::path::Path::new("/usr/bin/gzip");
    let image = match weft_image::Image::open(path) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("SKIPPED: {e}");
            assert!(
                std::env::var_os("WEFT_CI").is_none_or(|v| v.is_empty()),
                "WEFT_CI is set, so a skip is a failure: gzip missing ({e})"
            );
            return;
        }
    };
    let (mut planned, mut walked, mut edges, mut witnesses) = (0, 0, 0, 0);
    for f in image.functions() {
        let Some(bytes) = image.bytes_at(f.addr, f.size as usize) else {
            continue;
        };
        let data = |addr: u64, len: usize| {
            image
                .bytes_at(weft_image::FileAddr(addr), len)
                .map(<[u8]>::to_vec)
        };
        let code = weft_code::FunctionCode::analyze(f.addr.get(), bytes, &data);
        let cfg = Cfg::from_code(&code);
        if cfg.blocks == 0 {
            continue;
        }
        let plan = place(&cfg);
        planned += 1;
        edges += cfg.edges.len();
        witnesses += plan.instrumented().count();
        for p in (0..cfg.blocks).filter(|&b| cfg.is_predicate(b)) {
            let outs: Vec<usize> = cfg.out_edges(p).collect();
            for (i, &a) in outs.iter().enumerate() {
                for &b in &outs[i + 1..] {
                    let (sa, sb) = (plan.may_come_next(&cfg, a), plan.may_come_next(&cfg, b));
                    assert!(sa.is_disjoint(&sb), "{}: {sa:?} {sb:?}", f.name);
                }
            }
        }
        for choice in [0u8, 1] {
            if let Some(path) = walk(&cfg, &[choice; 200]) {
                let w: Vec<u32> = path.iter().filter_map(|&e| plan.witness[e]).collect();
                assert_eq!(plan.regenerate(&cfg, &w), Some(path), "{}", f.name);
                walked += 1;
            }
        }
    }
    eprintln!("{planned} functions, {walked} walks, {witnesses} witnesses on {edges} edges");
    assert!(
        planned > 100 && walked > planned,
        "{planned} planned, {walked} walked"
    );
    // Fewer edges than not carry a witness.
    assert!(witnesses < edges, "{witnesses} of {edges}");
}
