//! Function time runs until the function returns to its caller, past the
//! functions it tail-calls (`jmp` at -O2), checked against the targets' own
//! clocks: sleeping, spinning and longjmp-ing callees, four threads parked
//! together, C++ exceptions thrown through such a frame, a backtrace
//! taken under it, a thread that ends in it, a fork in it and signal
//! handlers running in the middle of it; and a weft
//! that detaches or is killed while calls are hooked leaves them returning
//! to their callers.

use crate::support::*;
use std::collections::BTreeMap;
use std::time::Duration;

/// weft's timer against the target's own total (µs) over `calls` calls:
/// within 1% (weft's TSC rate is calibrated against CLOCK_MONOTONIC) plus,
/// per call, 1 µs of the tally's truncation and 0.5 ms for the call's
/// entry and exit outside the target's clock reads.
fn assert_timer(name: &str, got: f64, own_us: u64, calls: f64) {
    let own = own_us as f64 / 1e6;
    assert!(
        got >= own * 0.99 - calls * 1e-6 && got <= own * 1.01 + calls * 0.000_5,
        "{name}: weft's {got} s, the target's own clock {own} s"
    );
}

/// weft's timer between two of the target's own clocks (µs): `inner`, read
/// inside the timed calls (the least the timer can read, whatever the
/// machine does around them), and `outer`, read around them (the most,
/// with 0.5 ms per call for the entry and exit). A loaded machine may
/// preempt the thread between the outer reads and the function's entry
/// for longer than 1 % of the run; never inside the inner ones.
fn assert_between(name: &str, got: f64, inner_us: u64, outer_us: u64, calls: f64) {
    let (inner, outer) = (inner_us as f64 / 1e6, outer_us as f64 / 1e6);
    assert!(
        got >= inner * 0.99 - calls * 1e-6 && got <= outer * 1.01 + calls * 0.000_5,
        "{name}: weft's {got} s, the target's own clocks {inner} s inside and {outer} s around"
    );
}

variant_test!(time_runs_until_the_return_to_the_caller, |v: &Variant| {
    let m = metric_run(
        &format!("tailcall-{}", v.name),
        &[
            "wall_time:fn=park",
            "concurrency:fn=park",
            "wall_time:fn=burn",
            "cpu_time:fn=burn",
            "cpu_time:fn=park",
            "wall_time:fn=leap",
            "wall_time:fn=vault",
            "calls:fn=nap,inside=park",
            "calls:fn=nap,inside=leap",
        ],
        &["--interval", "50ms"],
        build("tailcall", v),
        &["4", "300"],
    );
    let t = m.tallies();
    assert_eq!(t["park_calls"], 4);
    // park and burn end in `jmp`; leap jumps to fall, which longjmps back
    // to main past both; vault calls drop, which gcc knows never returns,
    // so vault has no exit at all and only the longjmp ends its time.
    for (focus, name, calls) in [
        ("fn=park", "park", 4.0),
        ("fn=leap", "leap", 5.0),
        ("fn=vault", "vault", 5.0),
    ] {
        let (inner, outer) = (t[&format!("{name}_inner_us")], t[&format!("{name}_us")]);
        assert_between(focus, m.value("wall_time", focus), inner, outer, calls);
    }
    assert_between(
        "fn=burn",
        m.value("wall_time", "fn=burn"),
        t["burn_inner_us"],
        t["burn_wall_us"],
        1.0,
    );
    // CPU time across the tail call too, against the thread's own CPU
    // clock; parked threads use next to none. Alone it agrees within 1 %
    // or 1 ms (cpu_time.rs checks that); in the loaded test suite about
    // one run in four has been seen off by 2 to 9 ms, which is not
    // understood yet (docs/cpu-clock.md, limits): 10 ms here.
    let (cpu, own) = (
        m.value("cpu_time", "fn=burn"),
        t["burn_cpu_us"] as f64 / 1e6,
    );
    assert!(
        (cpu - own).abs() <= (own * 0.01).max(0.010),
        "burn: weft's cpu_time {cpu} s, the thread's own {own} s"
    );
    // Four threads parked 300 ms each: next to no CPU time, within the
    // same 10 ms the loaded suite needs above (5 ms failed once there).
    let parked = m.value("cpu_time", "fn=park");
    assert!(parked < 0.010, "park: weft's cpu_time {parked} s");
    // nap, entered by park's and fall's tail calls, runs inside them.
    assert_eq!(m.value("calls", "fn=nap,inside=park"), 4.0);
    assert_eq!(m.value("calls", "fn=nap,inside=leap"), 5.0);
    // While the four threads are parked together, four are inside park.
    let row = m
        .rows
        .iter()
        .find(|r| r["metric"] == "concurrency")
        .expect("concurrency row");
    let peak = histogram(row).into_iter().fold(0.0, f64::max);
    assert!((3.9..=4.05).contains(&peak), "concurrency peak {peak}");
});

// Exceptions, backtraces, thread exits and forks under a hooked call: the
// program's output is the same as without weft (no `std::terminate`, a
// backtrace as deep, the fork child returning through the hooked frame),
// and the timers stop where the frames were left. At -O0 nothing is a
// tail call: the calls are followed without replacing their returns.
variant_test!(
    frames_left_by_exceptions_thread_exits_and_forks_stop_their_timers,
    [o0_pie, o2_pie],
    |v: &Variant| {
        let bin = build("tailthrow", v);
        let alone = run(
            &mut std::process::Command::new(&bin),
            Duration::from_secs(30),
        );
        assert_eq!(alone.status, 0, "{}", alone.stderr);
        let m = metric_run(
            &format!("tailthrow-{}", v.name),
            &[
                "wall_time:fn=pick",
                "wall_time:fn=look",
                "wall_time:fn=leave",
                "wall_time:fn=branch",
            ],
            &[],
            &bin,
            &[],
        );
        let (t, plain) = (m.tallies(), tallies(&alone.stdout));
        // backtrace() sees as many frames as without weft.
        for key in [
            "caught",
            "sum",
            "frames_direct",
            "frames_through",
            "child_status",
        ] {
            assert_eq!(t[key], plain[key], "{key}");
        }
        assert_eq!(
            t["child_status"], 42,
            "the fork child returned through branch"
        );
        // Half of the 20 calls of pick leave by an exception caught in main.
        assert_between(
            "pick",
            m.value("wall_time", "fn=pick"),
            t["pick_inner_us"],
            t["pick_us"],
            20.0,
        );
        // The backtrace re-arms the frames when it returns: look's time is
        // that of one backtrace, not the rest of the run.
        assert!(m.value("wall_time", "fn=look") < 0.002, "{:?}", m.rows);
        // pthread_exit unwinds the thread through leave: its time ends
        // there, after quit calls pthread_exit (quit_us) and before the
        // unwinding reaches leave's caller (leave_us).
        assert_between(
            "leave",
            m.value("wall_time", "fn=leave"),
            t["quit_us"],
            t["leave_us"],
            1.0,
        );
    }
);

/// A weft that detaches while calls are hooked, and one killed then, leave
/// every call returning to its caller: the target finishes its rounds and
/// no weft memory stays mapped.
#[test]
fn hooked_calls_survive_a_detach_and_a_killed_weft() {
    let bin = build("tailcall", &O2);
    let dir = scratch("tailcall-detach");
    for killed in [false, true] {
        let stdout = dir.join(format!("stdout-{killed}"));
        let target = std::process::Command::new(&bin)
            .args(["4", "50", "1000", "40"])
            .stdout(std::fs::File::create(&stdout).unwrap())
            .spawn()
            .unwrap();
        let mut target = KillOnDrop(target);
        let pid = target.0.id();
        std::thread::sleep(Duration::from_millis(100));
        let mut weft = attach(pid, |c| c.args(["--metric", "wall_time:fn=park"]));
        std::thread::sleep(Duration::from_millis(400));
        if killed {
            // SAFETY: kill with the pid of the weft this test started.
            unsafe { libc::kill(weft.weft.0.id() as i32, libc::SIGKILL) };
            let _ = weft.weft.0.wait();
            // The next weft undoes what the killed one left.
            let mut next = attach(pid, |c| c.args(["--count", "libc.so.6:nanosleep"]));
            assert!(next.detach().success());
        } else {
            assert!(weft.detach().success());
        }
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
        assert!(!maps.contains("weft"), "weft memory left:\n{maps}");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let status = loop {
            if let Some(status) = target.0.try_wait().unwrap() {
                break status;
            }
            assert!(std::time::Instant::now() < deadline, "the target finishes");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert!(status.success(), "killed {killed}: {status:?}");
        let t = tallies(&std::fs::read_to_string(&stdout).unwrap());
        assert_eq!(t["park_calls"], 160, "killed {killed}");
    }
}

/// A traced function's exit comes when it returns to its caller: park's
/// exit events (after `jmp nap`) carry durations that add up to between
/// what nap's own clock measured inside and what the four threads' clocks
/// measured around park, and leap's (left by a longjmp) likewise.
#[test]
fn traced_exits_come_at_the_return_to_the_caller() {
    let traced = trace_run(
        "trace-tailcall",
        &["--trace", "fn:park", "--trace", "fn:leap"],
        build("tailcall", &O2),
        &["4", "100"],
    );
    let t = traced.tallies();
    // Event id -> function name, from the trace's metadata.
    let meta = events_meta(&traced.events);
    let names: Vec<String> = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[1].as_str().unwrap().to_string())
        .collect();
    let mut total: BTreeMap<String, (f64, u64)> = BTreeMap::new();
    for e in traced.records() {
        if e.kind == "exit" {
            let name = names[e.json["event"].as_u64().unwrap() as usize].clone();
            let took = e.json["duration_ns"].as_u64().expect("an exit's duration");
            let sum = total.entry(name).or_default();
            sum.0 += took as f64 / 1e9;
            sum.1 += 1;
        }
    }
    let (park, parks) = total.get("park").copied().unwrap_or_default();
    let (leap, leaps) = total.get("leap").copied().unwrap_or_default();
    assert_eq!((parks, leaps), (4, 5), "{total:?}");
    assert_between("park", park, t["park_inner_us"], t["park_us"], 4.0);
    assert_between("leap", leap, t["leap_inner_us"], t["leap_us"], 5.0);
}

/// Signals in the middle: a 1 ms timer's handler calls tick (a tail call
/// to count_tick) while main is inside burn (a tail call to spin): every
/// tick is counted, burn's time is the program's own, tick's is short.
#[test]
fn signal_handlers_inside_hooked_calls() {
    let m = metric_run(
        "tailsig",
        &[
            "wall_time:fn=burn",
            "wall_time:fn=tick",
            "calls:fn=count_tick",
        ],
        &[],
        build("tailsig", &O2),
        &["20"],
    );
    let t = m.tallies();
    assert!(
        t["ticks"] > 0,
        "no SIGALRM handled: the test would prove nothing"
    );
    assert_eq!(m.value("calls", "fn=count_tick"), t["ticks"] as f64);
    assert_timer("burn", m.value("wall_time", "fn=burn"), t["burn_us"], 20.0);
    // A handler's call lasts microseconds: a timer left running would
    // hold most of the run.
    let tick = m.value("wall_time", "fn=tick");
    assert!(
        tick < 0.001 * t["ticks"] as f64 / 10.0,
        "tick {tick} s for {} ticks",
        t["ticks"]
    );
}

/// A fork child that calls a hooked function while its parent is inside
/// one: Debian's bash, timing libc's waitpid (a tail call to wait4), runs
/// a command substitution whose subshell waits for its own child. Each
/// process keeps its own thread slot and return stack: the output is the
/// same as without weft.
#[test]
fn fork_children_and_their_parent_inside_hooked_calls() {
    let script = r#"x=$( (sleep 0.1; echo inner) ; echo "outer rc=$?" ); echo "x=$x""#;
    let plain = run(
        std::process::Command::new("/usr/bin/bash").args(["-c", script]),
        Duration::from_secs(30),
    );
    assert_eq!(plain.stdout, "x=inner\nouter rc=0\n");
    for _ in 0..3 {
        let m = metric_run(
            "tail-fork-bash",
            &["wall_time:fn=libc.so.6:waitpid"],
            &[],
            "/usr/bin/bash",
            &["-c", script],
        );
        assert_eq!(m.out.stdout, plain.stdout, "{}", m.out.stderr);
    }
}
