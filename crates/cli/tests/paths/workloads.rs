//! Threads, processes and attaching: per-thread tallies, a pipeline
//! followed through fork and exec, a running process, python3's split
//! functions.

use super::*;
use crate::support::*;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

#[test]
fn a_pipeline_is_traced_process_by_process() {
    if !have_qemu() {
        return;
    }
    let dir = scratch("paths-pipeline");
    let input = dir.join("input.txt");
    let text: String = (0..2000)
        .map(|i| format!("line {i} of a pipeline {}\n", i * 7919 % 1000))
        .collect();
    std::fs::write(&input, text).unwrap();
    let trace = dir.join("trace");
    let pipeline = format!("gzip -n -c {} | wc -c", input.display());
    let plain = run(
        std::process::Command::new("/bin/sh").args(["-c", &pipeline]),
        Duration::from_secs(30),
    );
    // The whole workload (weft follows by default), with tiny buffers and
    // a record per block.
    let out = run(
        weft()
            .args(["run", "--paths", "all", "--validate"])
            .args(["--paths-buffer-size", "4K", "--paths-buffers", "4"])
            .arg("--paths-out")
            .arg(&trace)
            .args(["--", "/bin/sh", "-c", &pipeline]),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the pipeline's output");
    assert!(!out.stderr.contains("lost"), "{}", out.stderr);
    assert!(
        out.stderr.contains("validated: regeneration gives the"),
        "{}",
        out.stderr
    );
    let streams = regenerated_by_command(&trace);
    let commands: BTreeSet<&str> = streams.iter().map(|(c, _)| c.as_str()).collect();
    for c in ["sh", "gzip", "wc"] {
        assert!(commands.contains(c), "{c} in the trace: {commands:?}");
    }
    let own = |command: &str, module: &str| -> Vec<u64> {
        let (_, insns) = streams
            .iter()
            .find(|(c, _)| c == command)
            .expect("the command's stream");
        insns
            .iter()
            .filter(|(m, _)| m == module)
            .map(|&(_, a)| a)
            .collect()
    };
    // The same pipeline, each program under QEMU with the argv[0] the
    // shell gives it.
    let input_arg = input.to_str().unwrap();
    let (gzip_log, wc_log) = (dir.join("gzip.log"), dir.join("wc.log"));
    let qemu = |log: &Path, name: &str| {
        format!(
            "qemu-x86_64 -singlestep -d exec,nochain,page -D {} -0 {name} /usr/bin/{name}",
            log.display()
        )
    };
    let under_qemu = format!(
        "{} -n -c {input_arg} | {} -c",
        qemu(&gzip_log, "gzip"),
        qemu(&wc_log, "wc")
    );
    let q = run(
        std::process::Command::new("/bin/sh").args(["-c", &under_qemu]),
        Duration::from_secs(300),
    );
    assert_eq!(
        q.stdout, plain.stdout,
        "the pipeline under qemu: {}",
        q.stderr
    );
    for (name, log, least) in [("gzip", &gzip_log, 50_000), ("wc", &wc_log, 100)] {
        let program = Path::new("/usr/bin").join(name);
        let keep = traced_instructions_of(&trace, name);
        let qemu = qemu_log_instructions(log, &program, &keep, None);
        assert!(qemu.len() > least, "qemu ran {} of {name}", qemu.len());
        assert_same_trace(&qemu, &own(name, name), &format!("{name} in the pipeline"));
    }
}

variant_test!(
    each_thread_regenerates_its_own_calls,
    [o0_pie, o2_pie, o2_static],
    |v| {
        let target = build("paths_threads", v);
        let dir = scratch(&format!("paths-threads-{}", v.name));
        let trace = dir.join("trace");
        let out = paths_run(&trace, &["--validate"], &target, &[]);
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        // Every thread's blocks, as the threads recorded them one by one,
        // equal their regeneration from the witnesses.
        assert!(
            out.stderr.contains("validated: regeneration gives the")
                && out
                    .stderr
                    .contains(" block(s) the 7 thread stream(s) recorded"),
            "{}",
            out.stderr
        );
        // The target's own tally: "TID CALLS" per thread, six threads in two
        // waves (the second reusing the first's stacks and TCBs).
        let tally: std::collections::BTreeMap<String, u64> = out
            .stdout
            .lines()
            .map(|l| {
                let (tid, n) = l.split_once(' ').unwrap();
                (tid.to_string(), n.parse().unwrap())
            })
            .collect();
        assert_eq!(tally.len(), 6, "{}", out.stdout);
        let calls = regenerated_calls(&trace, "step");
        assert_eq!(
            calls, tally,
            "step's calls per thread, regenerated vs the target's tally"
        );
    }
);

/// A program run twice in one workload: the second process takes its
/// copies from the first's (the same function, file and place: a program
/// built without PIE loads at the same address each time, as gcc's `cc1`
/// does), and both regenerate alike, as each recorded itself
/// (`--validate`).
#[test]
fn a_second_run_of_a_program_takes_the_first_ones_copies() {
    let target = build("paths", &VARIANTS[3]);
    assert_eq!(VARIANTS[3].name, "O2-nopie");
    let module = target.file_name().unwrap().to_str().unwrap().to_string();
    let dir = scratch("paths-twice");
    let trace = dir.join("trace");
    let twice = format!("{0} 20000; {0} 20000", target.display());
    let plain = run(
        std::process::Command::new("/bin/sh").args(["-c", &twice]),
        Duration::from_secs(60),
    );
    let out = run(
        weft()
            .args(["run", "--paths", &module, "--validate", "--paths-out"])
            .arg(&trace)
            .args(["--", "/bin/sh", "-c", &twice]),
        Duration::from_secs(300),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "the tallies");
    assert!(
        out.stderr.contains("validated: regeneration gives the"),
        "{}",
        out.stderr
    );
    let traced: u64 = out
        .stderr
        .split("paths of ")
        .nth(1)
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of functions: {}", out.stderr));
    let reused: u64 = out
        .stderr
        .split(" copies taken from an earlier process of the same program")
        .next()
        .and_then(|before| before.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no copy taken: {}", out.stderr));
    assert!(
        traced > 5 && reused >= traced,
        "{reused} copies taken, {traced} functions"
    );
    let streams = regenerated_by_command(&trace);
    let runs: Vec<&Vec<(String, u64)>> = streams
        .iter()
        .filter(|(c, _)| *c == module)
        .map(|(_, s)| s)
        .collect();
    assert_eq!(runs.len(), 2, "two streams of {module}: {streams:?}");
    assert!(runs[0].len() > 10_000, "{} instructions", runs[0].len());
    assert!(runs[0] == runs[1], "the two runs regenerate alike");
}

/// A program rebuilt at the same path between two runs of one workload
/// (as `make check` does): its function at the same address holds other
/// code, and the second run lays it out anew rather than taking the first
/// one's copy.
#[test]
fn a_program_rebuilt_in_place_is_laid_out_anew() {
    let dir = scratch("paths-rebuilt");
    let source = dir.join("k.c");
    std::fs::write(
        &source,
        "#include <stdio.h>\n\
         __attribute__((noinline)) long scaled(long x) { return x * K + 1; }\n\
         int main(void) { long t = 0; for (long i = 0; i < 1000; i++) t += scaled(i);\n\
         printf(\"%ld\\n\", t); return 0; }\n",
    )
    .unwrap();
    for k in ["3", "5"] {
        let out = run(
            std::process::Command::new("cc")
                .args(["-O2", "-fno-pie", "-no-pie", &format!("-DK={k}"), "-o"])
                .arg(dir.join(format!("k{k}")))
                .arg(&source),
            Duration::from_secs(60),
        );
        assert_eq!(out.status, 0, "cc: {}", out.stderr);
    }
    let d = dir.display();
    let script = format!("cp {d}/k3 {d}/k; {d}/k; cp {d}/k5 {d}/k.new; mv {d}/k.new {d}/k; {d}/k");
    let plain = run(
        std::process::Command::new("/bin/sh").args(["-c", &script]),
        Duration::from_secs(60),
    );
    assert_eq!(plain.stdout, "1499500\n2498500\n");
    let out = run(
        weft()
            .args(["run", "--paths", "fn:k:scaled", "--validate", "--paths-out"])
            .arg(dir.join("trace"))
            .args(["--", "/bin/sh", "-c", &script]),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(
        out.stdout, plain.stdout,
        "the rebuilt program's own code ran"
    );
    assert!(!out.stderr.contains("copies taken"), "{}", out.stderr);
}

#[test]
fn attach_traces_a_running_process_and_puts_its_code_back() {
    let target = build("paths_loop", &O2);
    let dir = scratch("paths-attach");
    let trace = dir.join("trace");
    let mut child = std::process::Command::new(&target).spawn().unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(Duration::from_millis(200));
    let before = maps_and_text(&pid);
    let out = run(
        weft()
            .args([
                "attach",
                "-p",
                &pid,
                "--duration",
                "1s",
                "--paths",
                "all",
                "--paths-out",
            ])
            .arg(&trace),
        Duration::from_secs(60),
    );
    let alive = child.try_wait().unwrap().is_none();
    let after = maps_and_text(&pid);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert!(alive, "the process runs on after weft detaches");
    assert_same_code(&before, &after, "after attach --paths");
    let meta = read_json(&trace.join("paths.json"));
    let step = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "step")
        .expect("step traced");
    let entry = format!("paths_loop-O2-pie+{:#x}", step["vaddr"].as_u64().unwrap());
    let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
    let calls = regen.stdout.lines().filter(|l| *l == entry).count();
    // About 100 calls per millisecond's sleep: a second gives thousands.
    assert!(
        calls > 1000,
        "step's calls regenerated over a 1 s attach: {calls}"
    );
}

#[test]
fn python3_regenerates_through_its_split_functions() {
    // Debian's python3.11 is built with its cold code split off: jumps
    // and switch cases into `.cold` parts and back, thousands of them.
    let python = Path::new("/usr/bin/python3");
    if !python.exists() {
        skip("Debian's python3 is not installed (apt-get install python3)");
        return;
    }
    let dir = scratch("paths-python3");
    let script = dir.join("work.py");
    std::fs::write(
        &script,
        "d = {}\nfor i in range(3000):\n    d[i % 37] = d.get(i % 37, 0) + i * i\n\
         print(sum(d.values()), len(d), sorted(d)[:3])\n",
    )
    .unwrap();
    let args = ["-S", "-E"];
    let plain = run(
        std::process::Command::new(python)
            .args(args)
            .arg(&script)
            .env("PYTHONHASHSEED", "0"),
        Duration::from_secs(30),
    );
    // python3 running the script under `weft run --paths all FLAGS`.
    let traced = |flags: &[&str], trace: &Path| {
        let out = run(
            weft()
                .args(["run", "--no-follow", "--paths", "all"])
                .args(flags)
                .arg("--paths-out")
                .arg(trace)
                .arg("--")
                .arg(python)
                .args(args)
                .arg(&script)
                .env("PYTHONHASHSEED", "0"),
            Duration::from_secs(300),
        );
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, plain.stdout, "python's output under --paths");
        out
    };
    let trace = dir.join("trace");
    let out = traced(&["--validate", "--verbose"], &trace);
    // Every function of python3.11 fits weft's code area near it (with
    // 8 MiB, about 4,300 of its 10,000 were left out).
    assert!(
        !out.stderr.contains("code area near"),
        "functions left out for want of room: {}",
        out.stderr
    );
    // Every block python ran in its traced functions, as it recorded them
    // one by one, equals their regeneration from the witnesses.
    let validated = out
        .stderr
        .lines()
        .find_map(|l| l.strip_prefix("weft: validated: regeneration gives the "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no validation line: {}", out.stderr));
    assert!(validated > 1_000_000, "{validated} blocks validated");
    let meta = read_json(&trace.join("paths.json"));
    let functions = meta["functions"].as_array().unwrap();
    let resumes: usize = functions
        .iter()
        .map(|f| f["resumes"].as_array().map_or(0, |r| r.len()))
        .sum();
    assert!(
        functions.len() > 3000 && resumes > 1000,
        "{} functions, {resumes} ways back from other parts",
        functions.len()
    );
    // Without block records, regeneration decides every dispatch of the
    // interpreter loop from witnesses alone: its table of `goto` labels
    // (indexed by the opcode byte) must be whole.
    let plain_trace = dir.join("plain-trace");
    traced(&[], &plain_trace);
    let regen = run(
        weft()
            .args(["regen", "--binary", "-o"])
            .arg(dir.join("plain.bin"))
            .arg(&plain_trace),
        Duration::from_secs(120),
    );
    assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
}

/// Debian's perl compiles its script through `Perl_ck_fun`, whose
/// `switch` loads its table's address 17 instructions before the jump,
/// outside the loop around it. Every block perl runs regenerates equal to
/// its record (the table read wrongly sent its cases to original code).
#[test]
fn perl_validates_through_a_switch_whose_table_is_loaded_far_before() {
    let perl = Path::new("/usr/bin/perl");
    if !perl.exists() {
        skip("Debian's perl is not installed (apt-get install perl-base)");
        return;
    }
    let dir = scratch("paths-perl");
    let script = "my %h; for my $i (1..20000) { $h{$i % 101} += $i } \
                  print scalar(keys %h), ' ', $h{7}, \"\\n\";";
    let plain = run(
        std::process::Command::new(perl).args(["-e", script]),
        Duration::from_secs(30),
    );
    let trace = dir.join("trace");
    let out = paths_run(&trace, &["--validate"], perl, &["-e", script]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "perl's output under --paths");
    assert!(
        out.stderr
            .contains("weft: validated: regeneration gives the "),
        "{}",
        out.stderr
    );
    let meta = read_json(&trace.join("paths.json"));
    let traced = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "Perl_ck_fun");
    assert!(traced, "Perl_ck_fun is not traced: {}", out.stderr);
}

/// A process and its child, then two threads, take turns through pipes:
/// each side's call can only run once the other's has written. Per
/// thread, `weft regen` gives all of one side, then all of the other;
/// `--interleave` must give the calls in the turns the program took.
#[test]
fn interleave_follows_the_turns_the_program_took() {
    let target = build("paths_pingpong", &O2);
    let dir = scratch("paths-interleave");
    let trace = dir.join("trace");
    let out = run(
        weft()
            .args(["run", "--paths", "all", "--paths-out"])
            .arg(&trace)
            .arg("--")
            .arg(&target)
            .arg("40"),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, "40 rounds with a process, 40 with a thread\n");
    assert!(!out.stderr.contains("no schedule"), "{}", out.stderr);
    let meta = read_json(&trace.join("paths.json"));
    let entry = |name: &str| -> String {
        let f = meta["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["name"] == name)
            .unwrap_or_else(|| panic!("{name} traced"));
        format!(
            "{}+{:#x}",
            f["module"].as_str().unwrap(),
            f["vaddr"].as_u64().unwrap()
        )
    };
    let (ping, pong) = (entry("ping"), entry("pong"));
    let turns = |args: &[&str]| -> (String, Vec<String>) {
        let regen = run(
            weft().arg("regen").args(args).arg(&trace),
            Duration::from_secs(120),
        );
        assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
        let calls = regen
            .stdout
            .lines()
            .filter_map(|l| {
                (l == ping)
                    .then_some('i')
                    .or_else(|| (l == pong).then_some('o'))
            })
            .collect();
        let mut lines: Vec<String> = regen
            .stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(String::from)
            .collect();
        lines.sort_unstable();
        (calls, lines)
    };
    let (apart, apart_lines) = turns(&[]);
    let (together, together_lines) = turns(&["--interleave"]);
    assert_eq!(apart.len(), 160, "{apart}");
    assert_eq!(together, "io".repeat(80), "the turns, interleaved");
    assert_eq!(
        together_lines, apart_lines,
        "the same code, in another order"
    );
}

/// bash's option parsing in `enable` and `shopt` is a `switch` whose
/// table address is loaded in the function's prologue, and the register
/// is written again after the option loop: the table is found by walking
/// back from its load (before, the jump was taken for a computed `goto`
/// and regeneration lost its place there, silently without
/// `--validate`).
#[test]
fn bash_builtins_with_option_switches_validate() {
    let bash = Path::new("/bin/bash");
    let dir = scratch("paths-bash-builtins");
    let script = "shopt -s nullglob; enable -n echo; enable echo; \
                  for i in 1 2 3; do shopt -u extglob; done; echo done";
    let plain = run(
        std::process::Command::new(bash).args(["-c", script]),
        Duration::from_secs(30),
    );
    let trace = dir.join("trace");
    let out = paths_run(&trace, &["--validate"], bash, &["-c", script]);
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, plain.stdout, "bash's output under --paths");
    assert!(
        out.stderr
            .contains("weft: validated: regeneration gives the "),
        "{}",
        out.stderr
    );
    let regen = run(weft().arg("regen").arg(&trace), Duration::from_secs(60));
    assert_eq!(regen.status, 0, "weft regen: {}", regen.stderr);
}

/// A library's call of its own exported function goes through its PLT
/// (`call leaf@plt`). Where the dynamic linker binds it to the library's
/// own `leaf`, the copy calls `leaf`'s copy directly and writes no record
/// (`leaf` is linked); where a preloaded library's `leaf` takes the call
/// over, the call reaches that one, as without weft. Two processes of one
/// workload, one of each kind in either order, share the function table,
/// and each regenerates equal to its block record.
#[test]
fn calls_through_the_plt_link_only_where_they_reach_the_library_itself() {
    let own = build_shared("pltown", &O2);
    let pre = build_shared("pltpre", &O2);
    let dir = scratch("paths-plt");
    let lib_dir = own.parent().unwrap();
    let main = dir.join("pltmain");
    let built = run(
        std::process::Command::new("gcc")
            .args(["-O2", "-o"])
            .arg(&main)
            .arg(targets_dir().join("pltmain.c"))
            .arg("-L")
            .arg(lib_dir)
            .args(["-lpltown", "-Wl,-rpath"])
            .arg(lib_dir),
        Duration::from_secs(60),
    );
    assert_eq!(built.status, 0, "gcc: {}", built.stderr);
    let main = main.to_str().unwrap().to_string();
    let pre = pre.to_str().unwrap().to_string();
    let plain = |preload: bool| {
        let mut c = std::process::Command::new(&main);
        c.arg("20000");
        if preload {
            c.env("LD_PRELOAD", &pre);
        }
        run(&mut c, Duration::from_secs(30)).stdout
    };
    let (alone, preloaded) = (plain(false), plain(true));
    assert_ne!(alone, preloaded, "the preloaded leaf gives another sum");

    let trace = dir.join("alone");
    let out = run(
        weft()
            .args([
                "run",
                "--no-follow",
                "--paths",
                "libpltown.so",
                "--validate",
            ])
            .arg("--paths-out")
            .arg(&trace)
            .args(["--", &main, "20000"]),
        Duration::from_secs(120),
    );
    assert_eq!(out.status, 0, "weft: {}", out.stderr);
    assert_eq!(out.stdout, alone);
    assert!(out.stderr.contains("weft: validated: "), "{}", out.stderr);
    let meta = read_json(&trace.join("paths.json"));
    let leaf = meta["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "leaf")
        .and_then(|f| f["id"].as_u64())
        .unwrap_or_else(|| panic!("leaf is not traced: {}", out.stderr));
    let linked = meta["loads"][0]["linked"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        linked.iter().any(|id| id.as_u64() == Some(leaf)),
        "leaf, called through the PLT, is not linked: {:?}",
        meta["loads"]
    );

    let run_a = format!("{main} 20000");
    let run_b = format!("LD_PRELOAD={pre} {main} 20000");
    for (k, (first, second, want)) in [
        (&run_a, &run_b, [alone.clone(), preloaded.clone()].concat()),
        (&run_b, &run_a, [preloaded.clone(), alone.clone()].concat()),
    ]
    .into_iter()
    .enumerate()
    {
        let trace = dir.join(format!("workload-{k}"));
        let out = run(
            weft()
                .args([
                    "run",
                    "--paths",
                    "libpltown.so",
                    "--validate",
                    "--paths-out",
                ])
                .arg(&trace)
                .args(["--", "/bin/sh", "-c", &format!("{first}; {second}")]),
            Duration::from_secs(120),
        );
        assert_eq!(out.status, 0, "weft: {}", out.stderr);
        assert_eq!(out.stdout, want, "the sums under weft");
        assert!(
            out.stderr
                .contains("weft: validated: regeneration gives the "),
            "{first}; {second}: {}",
            out.stderr
        );
    }
}

/// GCC's compiler proper, every function traced, compiles a file to the
/// same assembly as alone (a new-user trial, session 33: cc1's
/// `variably_modified_type_p` ends in a tail call through a pointer that
/// weft takes for a computed `goto`, since the function keeps its
/// `switch`'s code addresses in data, and its copy's dispatch used an
/// argument register as a free one: cc1 stopped with an internal
/// compiler error, and `--validate` passed).
#[test]
fn cc1_compiles_to_the_same_assembly_traced() {
    let Some(cc1) = std::process::Command::new("gcc")
        .arg("-print-prog-name=cc1")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| Path::new(p).exists())
    else {
        skip("gcc's cc1 is not installed (apt-get install gcc)");
        return;
    };
    let dir = scratch("paths-cc1");
    let source = dir.join("unit.c");
    std::fs::write(
        &source,
        "struct s { int n; int v[]; };\n\
         int f(int n) { int a[n]; for (int i = 0; i < n; i++) a[i] = i * i; return a[n - 1]; }\n\
         int g(struct s *p) { return p->v[p->n - 1]; }\n",
    )
    .unwrap();
    let compile = |out: &Path| -> Vec<String> {
        vec![
            "-quiet".into(),
            source.display().to_string(),
            "-o".into(),
            out.display().to_string(),
        ]
    };
    let plain_s = dir.join("plain.s");
    let plain = run(
        std::process::Command::new(&cc1).args(compile(&plain_s)),
        Duration::from_secs(60),
    );
    assert_eq!(plain.status, 0, "cc1 alone: {}", plain.stderr);
    let traced_s = dir.join("traced.s");
    let args = compile(&traced_s);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = paths_run(&dir.join("trace"), &[], Path::new(&cc1), &args);
    assert_eq!(out.status, 0, "cc1 under --paths all: {}", out.stderr);
    // Its 45,000 functions fit one code area (with 64 MiB, 20,180 did not).
    let left_out: u64 = out
        .stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("weft: ")?
                .strip_suffix(" point(s) not instrumented:")
        })
        .map_or(0, |n| n.parse().unwrap_or(u64::MAX));
    assert!(
        left_out < 100,
        "{left_out} of cc1's functions left out: {}",
        out.stderr
    );
    assert_eq!(
        std::fs::read(&traced_s).unwrap(),
        std::fs::read(&plain_s).unwrap(),
        "cc1's assembly under --paths all"
    );
}
