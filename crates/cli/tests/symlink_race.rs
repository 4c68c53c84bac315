//! Link races against a root weft: while root runs `weft run --output
//! FILE` and `weft run --events-out DIR` into a sticky world-writable
//! directory (a `/tmp`), an unprivileged user (`nobody`) plants, in a tight
//! loop, symbolic links to a root-only file and directory at those paths,
//! hard links to a root file, files and directories of its own holding
//! links where weft writes (`meta.json`, `events.jsonl`, `trace.json`,
//! `ctf/`, `ctf/metadata`, `ctf/stream_1`), removing each again. Whatever
//! the interleaving, the victims stay as they were, and each run either
//! wrote a private file (0600, or a 0700 directory of 0600 files) of its
//! own, not through a link, or refused with one clear line and a non-zero
//! exit before the program ran: never exit 0 with the report lost.

use crate::support::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The unprivileged user the planter runs as.
const NOBODY: u32 = 65534;

/// The planter: `planter DIR SECONDS IDLE_US VICTIM VICTIM_DIR HARD NAME...`.
/// Started by root, it enters DIR (so that it needs no access to the
/// directories above), drops to `nobody` for good, says `ready`, then
/// until SIGTERM (or SECONDS) plants and removes, at each NAME: a link to
/// VICTIM, a link to VICTIM_DIR, a hard link to HARD, a file of its own,
/// and a directory of its own (0777) holding links to the victims under
/// weft's names. Every other round holds each plant 100 µs (so weft's
/// first look sees it); every round ends with IDLE_US of nothing planted
/// (so weft sometimes wins). On SIGTERM it prints what it managed to plant.
const PLANTER: &str = r#"
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc < 8) return 2;
    if (chdir(argv[1])) { perror("planter: chdir"); return 2; }
    if (setgroups(0, 0) || setgid(65534) || setuid(65534)) { perror("planter: drop"); return 2; }
    if (getuid() != 65534 || geteuid() != 65534 || getegid() != 65534 || setuid(0) == 0) {
        fprintf(stderr, "planter: still privileged\n");
        return 2;
    }
    signal(SIGTERM, on_term);
    umask(0);
    double end = now() + atof(argv[2]);
    long idle_us = atol(argv[3]);
    const char *victim = argv[4], *victim_dir = argv[5], *hard = argv[6];
    static const char *inner[] = {"meta.json", "events.jsonl", "trace.json", "ctf/metadata", "ctf/stream_1"};
    unsigned long links = 0, hardlinks = 0, files = 0, dirs = 0, rounds = 0;
    char path[4096];
    printf("ready uid=%d euid=%d\n", (int)getuid(), (int)geteuid());
    fflush(stdout);
    while (!stop && now() < end) {
        int hold = rounds % 2 ? 100 : 0;
        for (int i = 7; i < argc; i++) {
            const char *n = argv[i];
            if (!symlink(victim, n)) { links++; if (hold) usleep(hold); unlink(n); }
            if (!symlink(victim_dir, n)) { links++; if (hold) usleep(hold); unlink(n); }
            if (!link(hard, n)) { hardlinks++; if (hold) usleep(hold); unlink(n); }
            int fd = open(n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0666);
            if (fd >= 0) {
                files++;
                if (write(fd, "planted\n", 8) != 8) perror("planter: write");
                close(fd);
                if (hold) usleep(hold);
                unlink(n);
            }
            if (!mkdir(n, 0777)) {
                dirs++;
                snprintf(path, sizeof path, "%s/ctf", n);
                if (rounds % 4 < 2) {
                    mkdir(path, 0777);
                } else {
                    symlink(victim_dir, path);
                }
                for (int k = 0; k < 5; k++) {
                    snprintf(path, sizeof path, "%s/%s", n, inner[k]);
                    symlink(victim, path);
                }
                if (hold) usleep(hold);
                for (int k = 0; k < 5; k++) {
                    snprintf(path, sizeof path, "%s/%s", n, inner[k]);
                    unlink(path);
                }
                snprintf(path, sizeof path, "%s/ctf", n);
                if (rmdir(path)) unlink(path);
                rmdir(n);
            }
        }
        rounds++;
        if (idle_us) usleep(idle_us);
    }
    printf("planted links=%lu hardlinks=%lu files=%lu dirs=%lu rounds=%lu\n", links, hardlinks,
           files, dirs, rounds);
    return 0;
}
"#;

/// Compiles [`PLANTER`] into `dir`.
fn build_planter(dir: &Path) -> PathBuf {
    let src = dir.join("planter.c");
    let exe = dir.join("planter");
    std::fs::write(&src, PLANTER).unwrap();
    let status = Command::new("gcc")
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("gcc runs (bash scripts/install-deps.sh installs it)");
    assert!(status.success(), "gcc failed for the planter");
    exe
}

/// A running planter, killed (by pid) if the test fails before stopping it.
struct Planter {
    child: KillOnDrop,
    lines: Receiver<String>,
}

/// What the planter is to do.
struct Attack<'a> {
    exe: &'a Path,
    /// The sticky directory it plants in.
    dir: &'a Path,
    victim: &'a Path,
    victim_dir: &'a Path,
    /// The root file it tries to hard-link, relative to `dir`.
    hard: &'a str,
    /// Microseconds of nothing planted after each round.
    idle_us: u32,
}

impl Attack<'_> {
    /// Starts the planter on `names` and waits (at most 10 s) until it
    /// runs as `nobody`.
    fn start(&self, names: &[&str]) -> Planter {
        let mut cmd = Command::new(self.exe);
        cmd.arg(self.dir)
            .arg("120")
            .arg(self.idle_us.to_string())
            .arg(self.victim)
            .arg(self.victim_dir)
            .arg(self.hard)
            .args(names)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        let mut child = KillOnDrop(cmd.spawn().expect("the planter starts"));
        let stdout = child.0.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let ready = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("the planter is ready within 10 s");
        assert_eq!(ready, format!("ready uid={NOBODY} euid={NOBODY}"));
        Planter { child, lines }
    }
}

impl Planter {
    /// Stops the planter (SIGTERM to its pid, then SIGKILL after 10 s) and
    /// returns what it says it planted.
    fn stop(mut self) -> String {
        let pid = self.child.0.id() as i32;
        // SAFETY: kill with the pid of our own child, not yet reaped.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = self.child.0.try_wait().expect("the planter's status") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "the planter ends within 10 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(5));
        };
        assert!(status.success(), "planter: {status}");
        self.lines
            .recv_timeout(Duration::from_secs(5))
            .unwrap_or_default()
    }
}

/// Checks that a run weft refused failed as it should: a non-zero exit,
/// one line `weft: ...` (and perhaps a hint), no panic, and the program
/// never started (the paths are checked before weft touches it).
fn assert_refused(out: &Finished, context: &str) {
    assert_ne!(out.status, 0, "{context}: {}", out.stderr);
    assert!(
        !out.stderr.contains("panicked"),
        "{context}: {}",
        out.stderr
    );
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.starts_with("weft: hint:"))
        .collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("weft: "),
        "{context}: not one clear line: {}",
        out.stderr
    );
    assert!(
        tallies(&out.stdout).is_empty(),
        "{context}: refused after the program ran: {}",
        out.stdout
    );
}

/// Checks that `path` is weft's own: not a link, root's, with one name,
/// a file 0600 or a directory 0700 holding only such entries.
fn assert_weft_own(path: &Path) {
    let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| {
        panic!(
            "{}: weft said it wrote here, but there is nothing ({e}): it wrote through \
             a link that is gone",
            path.display()
        )
    });
    assert!(
        !meta.is_symlink(),
        "{} is a link: weft wrote through it",
        path.display()
    );
    let mode = meta.permissions().mode() & 0o7777;
    assert_eq!(meta.uid(), 0, "{} is not root's", path.display());
    if meta.is_dir() {
        assert_eq!(mode, 0o700, "{}", path.display());
        for entry in std::fs::read_dir(path).unwrap() {
            assert_weft_own(&entry.unwrap().path());
        }
    } else {
        assert!(meta.is_file(), "{} is not a plain file", path.display());
        assert_eq!(mode, 0o600, "{}", path.display());
        assert_eq!(meta.nlink(), 1, "{} has other names", path.display());
    }
}

/// A file's content, mode and owner.
fn snapshot(path: &Path) -> (Vec<u8>, u32, u32, u64) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (
        std::fs::read(path).unwrap(),
        meta.permissions().mode(),
        meta.uid(),
        meta.ino(),
    )
}

#[test]
fn links_planted_by_another_user_never_redirect_a_root_weft() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        skip("the link-race test needs root (weft as root, the planter dropping to nobody)");
        return;
    }
    let base = scratch("symlink-race");
    std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Victims: a root-only file and directory, and a root file nobody can
    // reach (for hard links) but not write.
    let secret = base.join("secret");
    std::fs::create_dir(&secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o700)).unwrap();
    let victim = secret.join("victim");
    std::fs::write(&victim, "root's secret\n").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o640)).unwrap();
    let victim_dir = secret.join("dir");
    std::fs::create_dir(&victim_dir).unwrap();
    std::fs::set_permissions(&victim_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let public = base.join("public");
    std::fs::write(&public, "root's file\n").unwrap();
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o644)).unwrap();
    let before = [snapshot(&victim), snapshot(&public)];
    // The shared directory, as /tmp is.
    let sticky = base.join("tmp");
    std::fs::create_dir(&sticky).unwrap();
    std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();

    let attack = Attack {
        exe: &build_planter(&base),
        dir: &sticky,
        victim: &victim,
        victim_dir: &victim_dir,
        hard: "../public",
        idle_us: 0,
    };
    let program = build("events", &O2);
    let mut written = 0;
    let mut refusals = std::collections::BTreeSet::new();
    let mut planted = Vec::new();
    for round in 0..12 {
        // Tight rounds, and rounds with pauses in which weft may win.
        let attack = Attack {
            idle_us: [0, 0, 300, 300, 3000, 3000][round % 6],
            ..attack
        };
        let report_name = format!("report-{round}.txt");
        let events_name = format!("ev-{round}");
        let (report, events) = (sticky.join(&report_name), sticky.join(&events_name));
        let planter = attack.start(&[&report_name, &events_name]);
        let counted = run(
            weft()
                .args(["run", "--count", "traced", "--output"])
                .arg(&report)
                .arg("--")
                .arg(&program)
                .args(["1", "10"]),
            Duration::from_secs(60),
        );
        let force: &[&str] = if round % 2 == 1 { &["--force"] } else { &[] };
        let traced = run(
            weft()
                .args(["run", "--trace", "fn:traced"])
                .args(force)
                .arg("--events-out")
                .arg(&events)
                .arg("--")
                .arg(&program)
                .args(["1", "10"]),
            Duration::from_secs(60),
        );
        planted.push(planter.stop());

        let context = format!("round {round}: --output {}", report.display());
        if counted.status == 0 {
            assert_eq!(
                tallies(&counted.stdout).get("traced"),
                Some(&10),
                "{context}"
            );
            assert_weft_own(&report);
            let text = std::fs::read_to_string(&report).unwrap();
            assert!(text.contains("traced"), "{context}: the report: {text}");
            written += 1;
        } else {
            assert_refused(&counted, &context);
            refusals.insert(counted.stderr.replace(&report_name, "FILE"));
        }
        let context = format!("round {round}: --events-out {}", events.display());
        if traced.status == 0 {
            assert_eq!(
                tallies(&traced.stdout).get("traced"),
                Some(&10),
                "{context}"
            );
            assert_weft_own(&events);
            assert!(events.join("meta.json").is_file(), "{context}");
            assert_eq!(
                lines_with(&events_text(&events), ":traced "),
                20,
                "{context}"
            );
            written += 1;
        } else {
            assert_refused(&traced, &context);
            refusals.insert(traced.stderr.replace(&events_name, "DIR"));
        }
    }
    eprintln!(
        "symlink race: {written} of 24 runs wrote their output; refusals: {refusals:#?}; \
         the planter: {planted:#?}"
    );

    // The victims are as they were, nothing went into the victim
    // directory, and everything root owns in the shared directory is
    // weft's own, private, not a link.
    assert_eq!(
        snapshot(&victim),
        before[0],
        "the root-only victim changed (a symbolic link was followed)"
    );
    assert_eq!(
        snapshot(&public),
        before[1],
        "a root file hard-linked by nobody was rewritten (the kernel allowed the \
         link: fs.protected_hardlinks is {:?})",
        std::fs::read_to_string("/proc/sys/fs/protected_hardlinks").map(|s| s.trim().to_string())
    );
    assert_eq!(std::fs::read_dir(&victim_dir).unwrap().count(), 0);
    let mut secret_names: Vec<String> = std::fs::read_dir(&secret)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    secret_names.sort();
    assert_eq!(secret_names, ["dir", "victim"]);
    for entry in std::fs::read_dir(&sticky).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().uid() == 0 {
            assert_weft_own(&path);
        }
    }
}
