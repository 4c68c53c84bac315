//! Metrics on a target with known behaviour: timers against sleeps and
//! spins, predicates and `inside=` against the target's tallies,
//! concurrency against parked threads, lock waiting against a held mutex,
//! and `sum_arg` against the bytes python writes.

use crate::support::*;
use std::time::Duration;

/// Runs the metrics target under `--metric` requests and EXTRA options.
fn measure(metrics: &[&str], extra: &[&str]) -> Measured {
    let name = format!(
        "metrics-{}",
        metrics.join("-").replace(['/', ' ', '=', ',', ':'], "_")
    );
    metric_run(&name, metrics, extra, build("metrics", &O2), &[])
}

/// Wall time agrees with the target's own clock: each nap tallies the time
/// its nanosleep really took (a loaded machine oversleeps; the ten 20 ms
/// naps have been seen to take 300 ms), and weft's timer must match that,
/// not the nominal sleep. It may exceed it only by the few microseconds the
/// target spends outside its own clock reads in each call.
#[test]
fn wall_time_agrees_with_the_targets_own_clock() {
    // The ten nap(20) calls, told apart from the other naps by a predicate.
    let m = measure(&["wall_time:fn=nap,if=arg1 == 20", "wall_time:fn=nap"], &[]);
    let tallies = m.tallies();
    let own = |name: &str| tallies[name] as f64 / 1e6;
    // 10 x 20 ms, 250 ms (doze), 4 x 400 ms (park), 200 ms (holder) and 21 ms.
    for (focus, own, calls, nominal) in [
        ("fn=nap,if=arg1 == 20", own("nap20_us"), 10.0, 0.200),
        ("fn=nap", own("nap_us"), 17.0, 2.271),
    ] {
        let got = m.value("wall_time", focus);
        assert!(
            own >= nominal,
            "{focus}: the naps' own {own} s < {nominal} s asked"
        );
        // weft converts TSC ticks with a rate it calibrates against
        // CLOCK_MONOTONIC over 20 ms at start: within 1% on a loaded VM
        // (0.4% low has been seen). Per call, 1 µs of truncation in the
        // tally, and up to 0.5 ms for the call's own entry and exit around
        // its clock reads.
        let slack = calls * 0.000_5;
        assert!(
            got >= own * 0.99 - calls * 1e-6 && got <= own * 1.01 + slack,
            "{focus}: weft's wall_time {got} s, the naps' own clock {own} s"
        );
    }
}

#[test]
fn cpu_time_of_spinning_and_sleeping() {
    let m = measure(
        &[
            "cpu_time:fn=busy",
            "wall_time:fn=busy",
            "cpu_time:fn=nap",
            "wall_time:fn=nap",
        ],
        &["--interval", "20ms"],
    );
    // Ground truth: the CPU time the spinning thread measured for itself
    // (CLOCK_THREAD_CPUTIME_ID).
    let own = m.tallies()["busy_cpu_us"] as f64 / 1e6;
    let (cpu, wall) = (
        m.value("cpu_time", "fn=busy"),
        m.value("wall_time", "fn=busy"),
    );
    assert!(wall > 0.2 && own > 0.02, "busy: wall {wall}, own cpu {own}");
    // On the per-thread CPU clock: within 1 % or 1 ms.
    assert!(
        (cpu - own).abs() <= (own * 0.01).max(0.001),
        "busy: weft cpu {cpu} vs the thread's own {own} (wall {wall})"
    );
    let (cpu, wall) = (
        m.value("cpu_time", "fn=nap"),
        m.value("wall_time", "fn=nap"),
    );
    assert!(
        wall > 2.0 && cpu < 0.05 * wall,
        "nap: cpu {cpu} vs wall {wall}"
    );
}

/// `calls` and `sum_arg` of a function that 2 and 8 threads call at once:
/// the counts the threads add in their CPUs' lanes sum to the target's own
/// tally, inline and through a mini-trampoline, and the arguments to the
/// sum of what the threads passed (thread `i` passes `i`, then each result
/// `x * 7 + 3` cut to 16 bits, as `threads.c` computes).
#[test]
fn calls_and_sum_arg_stay_exact_with_many_threads() {
    const CALLS: u64 = 100_000;
    for threads in [2u64, 8] {
        let m = metric_run(
            &format!("metrics-threads-{threads}"),
            &[
                "calls:fn=work",
                "calls:fn=work,if=arg1 >= 0",
                "sum_arg:fn=work,arg=1",
            ],
            &[],
            build("threads", &O2),
            &[&threads.to_string(), &CALLS.to_string()],
        );
        let tally = m.tallies()["work"];
        assert_eq!(tally, threads * CALLS);
        assert_eq!(
            m.value("calls", "fn=work") as u64,
            tally,
            "{threads} threads"
        );
        assert_eq!(
            m.value("calls", "fn=work,if=arg1 >= 0") as u64,
            tally,
            "{threads} threads, through a mini-trampoline"
        );
        let passed: u64 = (0..threads)
            .map(|i| {
                let mut x = i;
                (0..CALLS).fold(0, |sum, _| {
                    let arg = x;
                    x = (x * 7 + 3) & 0xffff;
                    sum + arg
                })
            })
            .sum();
        assert_eq!(m.value("sum_arg", "fn=work,arg=1") as u64, passed);
    }
}

#[test]
fn concurrency_of_four_parked_threads() {
    let m = measure(&["concurrency:fn=park"], &["--interval", "50ms"]);
    let buckets = histogram(m.row("concurrency"));
    let peak = buckets.iter().cloned().fold(0.0, f64::max);
    assert!(
        (3.5..=4.3).contains(&peak),
        "peak concurrency {peak} in {buckets:?}"
    );
}

#[test]
fn predicates_and_inside_match_the_tallies() {
    let m = measure(
        &[
            "calls:fn=classify,if=arg1 == 2",
            "calls:fn=write_line,inside=flush_log",
            "calls:fn=write_line",
        ],
        &[],
    );
    assert_eq!(
        m.value("calls", "fn=classify,if=arg1 == 2") as u64,
        m.tallies()["classify_2"]
    );
    assert_eq!(
        m.value("calls", "fn=write_line,inside=flush_log") as u64,
        m.tallies()["write_inside"]
    );
    assert_eq!(
        m.value("calls", "fn=write_line") as u64,
        m.tallies()["write_all"]
    );
}

/// Constants at the ends of the 64-bit range reach the generated code as
/// they are: classify's arguments (1 to 3) are above i64::MIN and are not
/// all-ones, so the first predicate passes every call and the second none.
#[test]
fn predicates_take_constants_of_the_whole_64_bit_range() {
    let every = "fn=classify,if=arg1 > -9223372036854775808 and arg1 != 0xFFFFFFFFFFFFFFFF";
    let none = "fn=classify,if=arg1 == 18446744073709551615 or arg1 < -9223372036854775807";
    let m = metric_run(
        "metrics-64-bit-constants",
        &[&format!("calls:{every}"), &format!("calls:{none}")],
        &[],
        build("metrics", &O2),
        &[],
    );
    assert_eq!(m.value("calls", every), 300.0, "classify runs 300 times");
    assert_eq!(m.value("calls", none), 0.0);
}

#[test]
fn lock_wait_of_a_held_mutex() {
    let m = measure(&["lock_wait"], &[]);
    let got = m.value("lock_wait", "");
    // main waits for the holder's 200 ms nap minus the 20 ms head start.
    assert!((0.14..0.4).contains(&got), "lock_wait {got} s");
}

#[test]
fn histogram_doubles_and_keeps_the_total() {
    let m = measure(
        &["wall_time:fn=nap"],
        &["--interval", "10ms", "--buckets", "8"],
    );
    let row = m.row("wall_time");
    let bucket_ns = row["histogram"]["bucket_ns"].as_u64().unwrap();
    let values = histogram(row);
    // The run lasts about 1.1 s: 8 buckets of 10 ms must double at least 4 times.
    assert!(bucket_ns >= 10_000_000 * 16, "bucket width {bucket_ns} ns");
    assert!(values.len() <= 8);
    let total: f64 = values.iter().sum();
    let value = row["value"].as_f64().unwrap();
    assert!(
        (total - value).abs() < 1e-6 * value.max(1.0),
        "buckets sum {total} vs value {value}"
    );
}

#[test]
fn per_thread_values() {
    let m = measure(&["wall_time:fn=park,thread=each"], &[]);
    let row = m.row("wall_time");
    let threads = row["threads"].as_array().unwrap();
    let parked: Vec<f64> = threads
        .iter()
        .map(|t| t["value"].as_f64().unwrap())
        .filter(|&v| v > 0.0)
        .collect();
    assert_eq!(parked.len(), 4, "{threads:?}");
    for v in parked {
        assert!(
            (0.38..0.6).contains(&v),
            "each parked thread spends ~0.4 s in park: {v}"
        );
    }
}

#[test]
fn python_write_bytes_with_sum_arg() {
    let python = "/usr/bin/python3";
    if !std::path::Path::new(python).exists() {
        skip("Debian's python3 missing (bash scripts/install-deps.sh installs it)");
        return;
    }
    let m = metric_run(
        "metrics-python",
        &[
            "sum_arg:fn=libc.so.6:write,arg=3",
            "calls:fn=libc.so.6:write",
        ],
        &[],
        python,
        &[
            "-c",
            "import os\nfor i in range(10): os.write(1, b'x' * (1000 + i))",
        ],
    );
    assert_eq!(m.out.stdout.len(), 10_045);
    assert_eq!(
        m.value("sum_arg", "fn=libc.so.6:write,arg=3") as u64,
        10_045
    );
    assert_eq!(m.value("calls", "fn=libc.so.6:write") as u64, 10);
}

#[test]
fn bad_metric_requests_are_one_clear_line() {
    let bin = build("metrics", &O2);
    // A loop over bad requests (not build variants), each with its message.
    for (req, want) in [
        ("walltime:fn=nap", "unknown metric 'walltime'"),
        ("sum_arg:fn=nap", "sum_arg needs arg=N"),
        ("calls:fn=nap,if=arg9 > 1", "arguments are arg1 to arg6"),
        ("calls:fn=napp", "matches no function"),
    ] {
        let out = run(
            weft().args(["run", "--metric", req, "--"]).arg(&bin),
            Duration::from_secs(30),
        );
        assert_clear_error(&out, 1, want, req);
    }
}

#[test]
fn calibrate_stores_costs() {
    let dir = scratch("calibrate");
    let path = dir.join("costs.json");
    let out = run(
        weft().arg("calibrate").env("WEFT_CALIBRATION", &path),
        Duration::from_secs(60),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let costs = read_json(&path);
    let timers = costs["timer_pair"].as_f64().unwrap();
    assert!(timers > 0.0 && timers < 5000.0, "{costs}");
    assert!(
        out.stdout.contains("startTimer + stopTimer"),
        "{}",
        out.stdout
    );
}

#[test]
fn max_overhead_refuses_before_inserting_anything() {
    let mut server = Server::start();
    server.send("spin 2");
    assert_eq!(server.line(), "spinning 2");
    let dir = scratch("max-overhead");
    let pid = server.pid().to_string();
    // attach for 0.2 s asking for METRIC within --max-overhead LIMIT.
    let attach = |metric: &str, limit: &str| {
        run(
            weft()
                .args([
                    "attach",
                    "-p",
                    &pid,
                    "--duration",
                    "0.2",
                    "--metric",
                    metric,
                ])
                .args(["--max-overhead", limit])
                .env("WEFT_CALIBRATION", dir.join("costs.json")),
            Duration::from_secs(60),
        )
    };
    let out = attach("wall_time:fn=work", "0.001");
    assert_eq!(out.status, 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("exceeds --max-overhead 0.001%")
            && out.stderr.contains("nothing was inserted"),
        "{}",
        out.stderr
    );
    // A generous limit lets it through, and weft reports predicted against observed.
    let out = attach("calls:fn=leaf", "100000");
    assert_eq!(out.status, 0, "{}", out.stderr);
    assert!(
        out.stderr.contains("perturbation: predicted"),
        "{}",
        out.stderr
    );
    server.send("stop");
    assert_eq!(server.line(), "stopped OK calls>0:1 bad=0");
    let run_refused = run(
        weft().args([
            "run",
            "--metric",
            "calls:fn=work",
            "--max-overhead",
            "5",
            "--",
            "/bin/true",
        ]),
        Duration::from_secs(30),
    );
    // `run` has no such option (its --help does not list it).
    assert!(
        run_refused.status == 2 && run_refused.stderr.contains("'--max-overhead'"),
        "{}",
        run_refused.stderr
    );
}

#[test]
fn html_report_renders_in_headless_chromium() {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| have(c));
    let Some(chromium) = chromium else {
        skip("chromium missing (bash scripts/install-deps.sh installs it)");
        return;
    };
    let m = metric_run(
        "html-report",
        &["wall_time:fn=nap", "concurrency:fn=park"],
        &["--interval", "50ms"],
        build("metrics", &O2),
        &[],
    );
    let (json, dir) = (&m.json, m.json.parent().unwrap());
    let html = dir.join("m.html");
    let out = run(
        weft().arg("report").arg(json).arg("--html").arg(&html),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let buckets: Vec<usize> = m.rows.iter().map(|m| histogram(m).len()).collect();
    let flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=900,1200",
    ];
    let profile = format!("--user-data-dir={}", dir.join("profile").display());
    let url = format!("file://{}", html.display());
    let dom = run(
        std::process::Command::new(chromium)
            .args(flags)
            .arg(&profile)
            .arg("--dump-dom")
            .arg(&url),
        Duration::from_secs(120),
    );
    assert_eq!(dom.status, 0, "{}", dom.stderr);
    // The browser parsed one plot per metric, each with all its buckets.
    assert_eq!(
        dom.stdout.matches("<svg").count(),
        buckets.len(),
        "{}",
        dom.stdout
    );
    for n in &buckets {
        assert!(
            dom.stdout.contains(&format!("data-buckets=\"{n}\"")),
            "a plot with {n} buckets"
        );
    }
    let png = dir.join("m.png");
    let shot = format!("--screenshot={}", png.display());
    let out = run(
        std::process::Command::new(chromium)
            .args(flags)
            .arg(&profile)
            .arg(&shot)
            .arg(&url),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "{}", out.stderr);
    let bytes = std::fs::read(&png).unwrap();
    assert!(
        bytes.starts_with(b"\x89PNG") && bytes.len() > 10_000,
        "a real picture: {} bytes",
        bytes.len()
    );
}

#[test]
fn user_defined_metrics_from_a_file() {
    let dir = scratch("metrics-file");
    let defs = dir.join("defs.weft");
    std::fs::write(
        &defs,
        "# calls of the focus function with a given first argument
metric kind_two
  unit calls
  counter n
  at entry of $fn if arg1 == 2: add n 1
  value n

# time inside nap, by hand
metric nap_time
  timer t
  at entry of nap: start t
  at exit of nap: stop t
  value t
",
    )
    .unwrap();
    let defs_arg = defs.to_str().unwrap();
    let m = measure(
        &["kind_two:fn=classify", "nap_time", "wall_time:fn=nap"],
        &["--metrics-file", defs_arg],
    );
    assert_eq!(
        m.value("kind_two", "fn=classify") as u64,
        m.tallies()["classify_2"]
    );
    let (by_hand, built_in) = (m.value("nap_time", ""), m.value("wall_time", "fn=nap"));
    assert!(
        (by_hand - built_in).abs() / built_in < 0.01,
        "{by_hand} vs {built_in}"
    );
    let row = m.row("nap_time");
    assert_eq!(row["unit"], "s");

    std::fs::write(
        &defs,
        "metric broken\n  counter c\n  at entry of f: add d 1\n  value c\n",
    )
    .unwrap();
    let bin = build("metrics", &O2);
    let out = run(
        weft()
            .args([
                "run",
                "--metrics-file",
                defs_arg,
                "--metric",
                "broken",
                "--",
            ])
            .arg(&bin),
        Duration::from_secs(30),
    );
    assert_eq!(out.status, 1);
    assert!(
        out.stderr.contains("line 3") && out.stderr.contains("'d' is no declared counter"),
        "{}",
        out.stderr
    );
}

#[test]
fn metrics_change_while_attached() {
    use std::io::{BufRead, BufReader, Write};
    let mut server = Server::start();
    server.send("spin 2");
    assert_eq!(server.line(), "spinning 2");
    let dir = scratch("metrics-control");
    let json = dir.join("m.json");
    let mut w = weft()
        .args([
            "attach",
            "-p",
            &server.pid().to_string(),
            "--metric",
            "calls:fn=work",
            "--format",
            "json",
            "--output",
        ])
        .arg(&json)
        .env("WEFT_CALIBRATION", dir.join("costs.json"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut to_weft = w.stdin.take().unwrap();
    let (tx, from_weft) = std::sync::mpsc::channel();
    let out = w.stdout.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(out).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let mut w = KillOnDrop(w);
    let reply = |cmd: &str, to: &mut std::process::ChildStdin| {
        writeln!(to, "{cmd}").unwrap();
        to.flush().unwrap();
        from_weft
            .recv_timeout(Duration::from_secs(30))
            .expect("weft answers")
    };
    assert!(reply("add calls:fn=leaf", &mut to_weft).starts_with("added 2: calls:fn=leaf"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(reply("remove 1", &mut to_weft), "removed 1");
    let first = reply("list", &mut to_weft);
    assert!(
        first.contains("calls:fn=work") && first.ends_with("(removed)"),
        "{first}"
    );
    let second = from_weft.recv_timeout(Duration::from_secs(30)).unwrap();
    assert!(
        second.contains("calls:fn=leaf") && !second.contains("removed"),
        "{second}"
    );
    assert!(interrupt(&mut w.0).success());
    let rows = read_metrics(&json);
    assert!(
        metric_value(&rows, "calls", "fn=work") > 0.0
            && metric_value(&rows, "calls", "fn=leaf") > 0.0,
        "{rows:?}"
    );
    server.send("stop");
    assert_eq!(server.line(), "stopped OK calls>0:1 bad=0");
}

/// More threads alive at once than thread slots (a trace with 64M rings
/// leaves few; a run that traces nothing has no rings and 512 slots):
/// the threads without one skip their per-thread instrumentation, and the
/// report says how many executions were skipped, in the table and in JSON.
#[test]
fn threads_beyond_the_slots_are_reported() {
    let bin = build("threads", &O2);
    let m = metric_run(
        "slots",
        &["wall_time:fn=work", "calls:fn=work"],
        &["--ring-size", "64M", "--trace", "fn:main"],
        &bin,
        &["40", "100", "together"],
    );
    // Each call of a thread without a slot skips its timer's start and stop.
    let skipped = read_json(&m.json)["executions_without_thread_slot"]
        .as_u64()
        .unwrap();
    assert!(
        skipped > 0 && skipped.is_multiple_of(200) && skipped < 40 * 200,
        "{skipped} executions without a slot"
    );
    // The process-wide count needs no slot and stays exact.
    assert_eq!(m.value("calls", "fn=work"), 4000.0);
    let table = run(
        weft()
            .args([
                "run",
                "--ring-size",
                "64M",
                "--trace",
                "fn:main",
                "--metric",
                "wall_time:fn=work",
                "--",
            ])
            .arg(&bin)
            .args(["40", "100", "together"]),
        Duration::from_secs(60),
    );
    assert_eq!(table.status, 0, "{}", table.stderr);
    assert!(
        table.stderr.contains(&format!(
            "{skipped} execution(s) of per-thread instrumentation"
        )),
        "{}",
        table.stderr
    );
}
