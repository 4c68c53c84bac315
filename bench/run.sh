#!/usr/bin/env bash
# weft benchmarks (not tests): every figure is measured against a baseline
# and peer tools in the same run, because these machines are shared and noisy.
#
#   bash bench/run.sh            # all
#   bash bench/run.sh percall    # per-call cost of a counting probe
#   bash bench/run.sh splice     # instrumentation speed on real programs
#   bash bench/run.sh primitives # Paradyn's Figure 9: cost of each primitive
#   bash bench/run.sh events     # per-event cost: weft trace vs LTTng-UST vs bpftrace
#   bash bench/run.sh paths      # abstract execution: slowdown and bytes per block vs QEMU, lackey
#   bash bench/run.sh syscalls   # added ns per captured system call: weft vs strace, bpftrace
#   bash bench/run.sh figure2    # ULTra's Figure 2: actual, replay and reexec times under memory limits
#   bash bench/run.sh make       # slowdown of make -j2 on a small C project: weft syscalls record vs strace -f
#   bash bench/run.sh retsys     # what a `ret` right after a system call costs (why weft's code jumps back)
#   bash bench/run.sh stores     # a witness store in a loop: xadd, plain moves, restartable sequence
#
# WEFT=PATH runs another build of weft (default: target/release/weft).
#
# Needs: gcc, bpftrace, uftrace, python3 (apt-get install -y bpftrace uftrace),
# for paths qemu-user and valgrind, for syscalls strace.
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:-all}
out=bench/out
mkdir -p "$out"
cargo build --release --quiet
WEFT=${WEFT:-$PWD/target/release/weft}
REPS=${REPS:-5}
FAST=${FAST:-20000000}   # calls per run for baseline and weft
SLOW=${SLOW:-200000}     # calls per run for trap-based peers
PEER_LIMIT=${PEER_LIMIT:-60} # seconds a slow peer may run in the paths benchmark

ns_per_call() { grep -o 'ns_per_call [0-9.]*' | awk '{print $2}'; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
repeat() { for _ in $(seq "$REPS"); do "$@"; done | median; }

percall() {
    gcc -O2 -pthread -o "$out/loop" bench/loop.c
    gcc -O2 -pthread -fpatchable-function-entry=5 -o "$out/loop-nop" bench/loop.c
    echo "## per-call cost of counting calls to bench_fn (median of $REPS runs)"
    printf '%-10s %-26s %12s %14s %8s\n' target tool ns/call "added ns/call" ratio
    for t in loop loop-nop; do
        bin=$out/$t
        base=$(for _ in $(seq "$REPS"); do "$bin" "$FAST" | ns_per_call; done | median)
        weft=$(for _ in $(seq "$REPS"); do "$WEFT" run --count bench_fn -- "$bin" "$FAST" 2>/dev/null | ns_per_call; done | median)
        row() { printf '%-10s %-26s %12.2f %14.2f %8.1f\n' "$t" "$1" "$2" "$(echo "$2 - $base" | bc -l)" "$(echo "$2 / $base" | bc -l)"; }
        row baseline "$base"
        row "weft (1 thread)" "$weft"
        if command -v bpftrace >/dev/null; then
            bpf=$(for _ in $(seq 3); do bpftrace -q -e "uprobe:$PWD/$bin:bench_fn { @c = count(); }" -c "$bin $SLOW" 2>/dev/null | ns_per_call; done | median)
            row "bpftrace uprobe" "$bpf"
        fi
        if command -v uftrace >/dev/null && [ "$t" = loop-nop ]; then
            uft=$(for _ in $(seq 3); do uftrace record -d "$out/uftrace.data" -P bench_fn "$bin" "$SLOW" 2>/dev/null | ns_per_call; done | median)
            row "uftrace record -P" "$uft"
        fi
        base2=$(for _ in $(seq "$REPS"); do "$bin" "$FAST" 2 | ns_per_call; done | median)
        weft2=$(for _ in $(seq "$REPS"); do "$WEFT" run --count bench_fn -- "$bin" "$FAST" 2 2>/dev/null | ns_per_call; done | median)
        base=$base2
        row "baseline (2 threads)" "$base2"
        row "weft (2 threads, 1 ctr)" "$weft2"
    done
    echo "(uftrace -P patches only functions compiled with a patchable entry, so it runs on loop-nop only)"
}

splice() {
    echo "## instrumentation speed: splice every function of a module in a running process"
    printf '%-34s %8s %8s %8s %8s %12s %12s\n' "target" points jmp jmp8+sb int3 "stopped ms" "us/point"
    gcc -O2 -pthread -o "$out/server" tests/targets/server.c
    measure() {
        local label=$1 pid=$2 pattern=$3
        "$WEFT" attach -p "$pid" --duration 0.2s --count "$pattern" --verbose 2>&1 >/dev/null |
            grep 'target stopped' |
            sed -E 's/.*: ([0-9]+) probe\(s\), ([0-9]+) jmp, ([0-9]+) springboard and ([0-9]+) int3.*stopped ([0-9.]+) ms \(([0-9.]+) us per point\).*/\1 \2 \3 \4 \5 \6/' |
            awk -v l="$label" '{printf "%-34s %8d %8d %8d %8d %12.1f %12.1f\n", l, $1, $2, $3, $4, $5, $6}'
    }
    # A multi-threaded C server with two busy threads.
    mkfifo "$out/server.in" 2>/dev/null || true
    "$out/server" < "$out/server.in" > /dev/null &
    local server=$!
    exec 7> "$out/server.in"
    echo "spin 2" >&7
    sleep 0.3
    measure "server (2 busy threads): libc.so.6:*" "$server" 'libc.so.6:*'
    echo quit >&7
    exec 7>&-
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    # Debian's python3, running a loop.
    python3=/usr/bin/python3
    [ -x "$python3" ] || python3=$(command -v python3)
    "$python3" -c 'import time
for i in range(200): sum(range(10000)); time.sleep(0.02)' &
    local py=$!
    sleep 0.5
    local exe
    exe=$(basename "$(readlink -f "$python3")")
    measure "python3 running: $exe:*" "$py" "$exe:*"
    measure "python3 running: libc.so.6:*" "$py" 'libc.so.6:*'
    kill "$py" 2>/dev/null || true
    wait "$py" 2>/dev/null || true
}

primitives() {
    gcc -O2 -pthread -o "$out/loop" bench/loop.c
    local bin=$out/loop
    echo "## cost of each primitive at bench_fn's entry/exit (median of $REPS runs, ns per call)"
    printf '%-44s %10s %12s\n' "what" ns/call "added ns"
    med() { for _ in $(seq "$REPS"); do "$@" 2>/dev/null | ns_per_call; done | median; }
    local base
    base=$(med "$bin" "$FAST")
    row() { printf '%-44s %10.2f %12.2f\n' "$1" "$2" "$(echo "$2 - $3" | bc -l)"; }
    row "baseline" "$base" "$base"
    local count add sum pred wall cpu
    count=$(med "$WEFT" run --count bench_fn -- "$bin" "$FAST")
    add=$(med "$WEFT" run --metric calls:fn=bench_fn -- "$bin" "$FAST")
    sum=$(med "$WEFT" run --metric sum_arg:fn=bench_fn,arg=1 -- "$bin" "$FAST")
    pred=$(med "$WEFT" run --metric 'sum_arg:fn=bench_fn,arg=1,if=arg1 > 0' -- "$bin" "$FAST")
    wall=$(med "$WEFT" run --metric wall_time:fn=bench_fn -- "$bin" "$FAST")
    cpu=$(med "$WEFT" run --metric cpu_time:fn=bench_fn -- "$bin" "$FAST")
    row "count (--count: lock inc)" "$count" "$base"
    row "addCounter constant (calls)" "$add" "$base"
    row "addCounter arg1 (sum_arg, mini-trampoline)" "$sum" "$base"
    row "  + predicate arg1 > 0" "$pred" "$sum"
    row "startTimer+stopTimer wall (wall_time)" "$wall" "$base"
    row "startTimer+stopTimer for cpu_time" "$cpu" "$base"
    # bench_tail ends in "jmp bench_fn": its return is hooked (docs/returns.md).
    local base_tail tail
    base_tail=$(med "$bin" "$FAST" 1 tail)
    tail=$(med "$WEFT" run --metric wall_time:fn=bench_tail -- "$bin" "$FAST" 1 tail)
    row "baseline, tail-calling function" "$base_tail" "$base_tail"
    row "wall_time of it (return hooked)" "$tail" "$base_tail"
    if command -v bpftrace >/dev/null; then
        local bpf
        bpf=$(for _ in $(seq 3); do bpftrace -q -e "uprobe:$PWD/$bin:bench_fn { @s[tid] = nsecs; } uretprobe:$PWD/$bin:bench_fn /@s[tid]/ { @t = sum(nsecs - @s[tid]); }" -c "$bin $SLOW" 2>/dev/null | ns_per_call; done | median)
        row "bpftrace uprobe+uretprobe wall time" "$bpf" "$base"
        bpf=$(for _ in $(seq 3); do bpftrace -q -e "uprobe:$PWD/$bin:bench_tail { @s[tid] = nsecs; } uretprobe:$PWD/$bin:bench_tail /@s[tid]/ { @t = sum(nsecs - @s[tid]); }" -c "$bin $SLOW 1 tail" 2>/dev/null | ns_per_call; done | median)
        row "bpftrace the same, tail-calling function" "$bpf" "$base_tail"
    fi
}

events() {
    # Unpaced: every iteration records one event. A warm-up run of WARM
    # events first (untimed) touches every page of the buffers and lets the
    # consumer catch up; the N timed events then fit in the buffers
    # (64 MiB for weft and for LTTng) while the consumer writes them to disk
    # alongside. So the figure is the recording cost, with no drops.
    local n=${EVENTS:-2000000} warm=${WARM:-3000000}
    gcc -O2 -o "$out/tl" bench/trace_loop.c
    gcc -O2 -DPROBE -Iinclude -o "$out/tl-probe" bench/trace_loop.c
    gcc -O2 -DRICH -Iinclude -o "$out/tl-rich" bench/trace_loop.c
    echo "## per-event cost: one event with one integer per loop iteration ($n timed events after $warm, median of $REPS runs)"
    printf '%-42s %10s %12s %10s\n' "what" ns/iter "added ns" "lost"
    med() { for _ in $(seq "$REPS"); do "$@" 2>/dev/null | ns_per_call; done | median; }
    local base
    base=$(med "$out/tl" "$n" 0 "$warm")
    printf '%-42s %10.2f %12.2f %10s\n' "baseline (no probe)" "$base" 0 -
    weft_row() {
        local label=$1 bin=$2 trace=$3 v drops
        weft_once() {
            rm -rf "$out/weft-events"
            "$WEFT" run --trace "$trace" --args 1 --ring-size 64M --events-out "$out/weft-events" -- "$bin" "$n" 0 "$warm"
        }
        v=$(med weft_once)
        drops=$(python3 -c "import json;print(json.load(open('$out/weft-events/meta.json'))['dropped'])")
        printf '%-42s %10.2f %12.2f %10s\n' "$label" "$v" "$(echo "$v - $base" | bc -l)" "$drops"
    }
    local off
    off=$(med "$out/tl-probe" "$n" 0 "$warm")
    printf '%-42s %10.2f %12.2f %10s\n' "WEFT_PROBE site, off (5-byte nop)" "$off" "$(echo "$off - $base" | bc -l)" -
    weft_row "weft usdt:weft_bench:event (to disk)" "$out/tl-probe" usdt:weft_bench:event
    weft_row "weft entry:traced_fn (to disk)" "$out/tl" entry:traced_fn
    off=$(med "$out/tl-rich" "$n" 0 "$warm")
    printf '%-42s %10.2f %12.2f %10s\n' "WEFT_EVENT site, off" "$off" "$(echo "$off - $base" | bc -l)" -
    weft_row "weft event:weft_bench:event (to disk)" "$out/tl-rich" event:weft_bench:event
    echo "  weft trace bytes per event: $(cat "$out"/weft-events/ctf/stream_* | wc -c | awk -v n="$((n + warm))" '{printf "%.1f (CTF streams)", $1 / n}')"
    if command -v lttng >/dev/null && echo "#include <lttng/tracepoint.h>" | gcc -E -x c - >/dev/null 2>&1; then
        gcc -O2 -DLTTNG -Ibench -o "$out/tl-lttng" bench/trace_loop.c -llttng-ust -ldl
        local lbase
        lbase=$(med "$out/tl-lttng" "$n" 0 "$warm")
        lttng-sessiond >/dev/null 2>&1 &
        local sessiond=$!
        sleep 1
        local ltt=() lost=()
        for _ in $(seq "$REPS"); do
            rm -rf "$out/lttng-trace"
            lttng create weftbench --output="$out/lttng-trace" >/dev/null
            lttng enable-channel -u ch --subbuf-size 16M --num-subbuf 4 >/dev/null
            lttng enable-event -u -c ch weft_bench:event >/dev/null
            lttng start >/dev/null
            ltt+=("$("$out/tl-lttng" "$n" 0 "$warm" | ns_per_call)")
            lttng stop >/dev/null
            lost+=("$(babeltrace2 "$out/lttng-trace" 2>/dev/null | wc -l | awk -v t="$((n + warm))" '{print t - $1}')")
            lttng destroy >/dev/null
        done
        local lmed
        lmed=$(printf '%s\n' "${ltt[@]}" | median)
        local lbytes
        lbytes=$(find "$out/lttng-trace" -name 'ch_*' -type f -exec cat {} + | wc -c | awk -v n="$((n + warm))" '{printf "%.1f", $1 / n}')
        kill "$sessiond" 2>/dev/null || true
        wait "$sessiond" 2>/dev/null || true
        printf '%-42s %10.2f %12.2f %10s\n' "LTTng-UST tracepoint, off" "$lbase" "$(echo "$lbase - $base" | bc -l)" -
        printf '%-42s %10.2f %12.2f %10s\n' "LTTng-UST tracepoint, recorded (to disk)" "$lmed" "$(echo "$lmed - $base" | bc -l)" "$(printf '%s\n' "${lost[@]}" | median)"
        echo "  LTTng trace bytes per event: $lbytes (stream files)"
    fi
    if command -v bpftrace >/dev/null; then
        local bpf
        bpf=$(for _ in $(seq 3); do bpftrace -q -e "usdt:$PWD/$out/tl-probe:weft_bench:event { @c = count(); }" -c "$out/tl-probe $((n / 10)) 0" 2>/dev/null | ns_per_call; done | median)
        printf '%-42s %10.2f %12.2f %10s\n' "bpftrace usdt (counted, not recorded)" "$bpf" "$(echo "$bpf - $base" | bc -l)" -
    fi
    echo
    echo "## sustained to disk: 2 threads, entry and exit events with 2 values, --ring-mode block"
    gcc -O2 -pthread -Itests/targets -o "$out/events" tests/targets/events.c
    for _ in $(seq "$REPS"); do
        rm -rf "$out/weft-sustained"
        "$WEFT" run --trace fn:traced --ring-mode block --events-out "$out/weft-sustained" -- "$out/events" 2 3000000 2>&1 >/dev/null | grep -o '[0-9]* event(s) written.*'
    done
}


# Wall seconds of a command (its output discarded).
seconds() {
    local t0 t1
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>&1 || true
    t1=$(date +%s.%N)
    echo "$t1 - $t0" | bc -l
}

paths() {
    echo "## abstract execution (--paths): slowdown and witness bytes per block"
    echo "# each row against the baseline of the same program and input in this run;"
    echo "# blocks = stretches of code weft regenerates (a block, split at calls)"
    local input=$out/paths-input.txt
    seq 1 1500000 > "$input"
    cat > "$out/paths.sql" <<'SQL'
create table t(a integer primary key, b text, c real);
with recursive n(i) as (select 1 union all select i+1 from n where i < 50000)
  insert into t select i, 'row' || i, i * 1.5 from n;
create index tb on t(b);
select count(*), sum(c), max(b) from t where a % 7 = 3;
SQL
    printf '%-34s %-24s %9s %8s %12s %12s
' program tool seconds ratio "bytes/block" "blocks"
    bench_paths() {
        local name=$1; shift
        local paths_args=$1; shift
        local base weft line bytes blocks regen_s
        base=$(for _ in $(seq "$REPS"); do seconds "$@"; done | median)
        printf '%-34s %-24s %9.3f %8.2f %12s %12s\n' "$name" baseline "$base" 1 - -
        weft=$(for _ in $(seq "$REPS"); do
            rm -rf "$out/paths-trace"
            # shellcheck disable=SC2086
            seconds "$WEFT" run --no-follow $paths_args --paths-out "$out/paths-trace" -- "$@"
        done | median)
        rm -rf "$out/paths-trace"
        # shellcheck disable=SC2086
        line=$("$WEFT" run --no-follow $paths_args --paths-out "$out/paths-trace" -- "$@" 2>&1 >/dev/null | grep 'bytes of witnesses')
        bytes=$(echo "$line" | grep -o '[0-9]* bytes of witnesses' | awk '{print $1}')
        local t0 t1
        t0=$(date +%s.%N)
        blocks=$("$WEFT" regen "$out/paths-trace" | grep -vc '^#')
        t1=$(date +%s.%N)
        regen_s=$(echo "$t1 - $t0" | bc -l)
        printf '%-34s %-24s %9.3f %8.2f %12.3f %12s\n' "$name" "weft --paths" "$weft" "$(echo "$weft / $base" | bc -l)" "$(echo "$bytes / $blocks" | bc -l)" "$blocks"
        printf '%-34s %-24s %9.3f %8s %12s %12s\n' "$name" "weft regen (to a pipe)" "$regen_s" - - "$(echo "$blocks / $regen_s / 1000000" | bc -l | xargs printf '%.1f M/s')"
        t0=$(date +%s.%N)
        "$WEFT" regen --binary -o /dev/null "$out/paths-trace" 2>/dev/null
        t1=$(date +%s.%N)
        regen_s=$(echo "$t1 - $t0" | bc -l)
        printf '%-34s %-24s %9.3f %8s %12s %12s\n' "$name" "weft regen --binary" "$regen_s" - - "$(echo "$blocks / $regen_s / 1000000" | bc -l | xargs printf '%.1f M/s')"
        # Once each: weft's own record per block (--validate), and data
        # addresses too (--data: the registers addresses need).
        once() {
            local flag=$1; shift
            local s line bytes
            rm -rf "$out/paths-trace"
            # shellcheck disable=SC2086
            s=$(seconds "$WEFT" run --no-follow $paths_args "$flag" --paths-out "$out/paths-trace" -- "$@")
            rm -rf "$out/paths-trace"
            # shellcheck disable=SC2086
            line=$("$WEFT" run --no-follow $paths_args "$flag" --paths-out "$out/paths-trace" -- "$@" 2>&1 >/dev/null | grep 'bytes of witnesses')
            bytes=$(echo "$line" | grep -o '[0-9]* bytes of witnesses' | awk '{print $1}')
            printf '%-34s %-24s %9.3f %8.2f %12.3f %12s\n' "$name" "weft $flag" "$s" "$(echo "$s / $base" | bc -l)" "$(echo "$bytes / $blocks" | bc -l)" -
        }
        once --validate "$@"
        once --data "$@"
        # Peers run once, cut off after PEER_LIMIT seconds (">" marks a cut run).
        peer() {
            local label=$1; shift
            local s mark=""
            s=$(seconds timeout "$PEER_LIMIT" "$@")
            if (( $(echo "$s >= $PEER_LIMIT - 0.5" | bc -l) )); then mark=">"; fi
            printf '%-34s %-24s %8s%.3f %7s%.1f %12s %12s\n' "$name" "$label" "$mark" "$s" "$mark" "$(echo "$s / $base" | bc -l)" - -
        }
        if command -v qemu-x86_64 >/dev/null; then
            peer "qemu -d exec,nochain" qemu-x86_64 -d exec,nochain -D /dev/null "$@"
        fi
        if command -v valgrind >/dev/null; then
            peer "valgrind lackey" valgrind --tool=lackey --trace-mem=yes --log-file=/dev/null "$@"
        fi
    }
    bench_paths "gzip -c (10 MB of numbers)" "--paths all" /usr/bin/gzip -c "$input"
    # What a run costs before the program's first instruction and after
    # its last (laying out every function, writing the trace): gzip on an
    # empty input; and a run six times longer, where that part counts less.
    # Baseline and weft only.
    steady() {
        local label=$1 paths_args=$2; shift 2
        local cbase cweft
        cbase=$(for _ in $(seq "$REPS"); do seconds "$@"; done | median)
        cweft=$(for _ in $(seq "$REPS"); do
            rm -rf "$out/paths-trace"
            # shellcheck disable=SC2086
            seconds "$WEFT" run --no-follow $paths_args --paths-out "$out/paths-trace" -- "$@"
        done | median)
        printf '%-34s %-24s %9.3f %8.2f %12s %12s\n' "$label" baseline "$cbase" 1 - -
        printf '%-34s %-24s %9.3f %8.2f %12s %12s\n' "$label" "weft --paths" "$cweft" "$(echo "$cweft / $cbase" | bc -l)" - -
    }
    local big=$out/paths-input-6x.txt
    for _ in 1 2 3 4 5 6; do cat "$input"; done > "$big"
    steady "gzip -c (empty input)" "--paths all" /usr/bin/gzip -c /dev/null
    steady "gzip -c (60 MB of numbers)" "--paths all" /usr/bin/gzip -c "$big"
    rm -f "$big"
    # A workload of three processes (fork and exec followed), against
    # valgrind following children.
    local pipeline="gzip -c $input | wc -c"
    local pbase pweft
    pbase=$(for _ in $(seq "$REPS"); do seconds /bin/sh -c "$pipeline"; done | median)
    printf '%-34s %-24s %9.3f %8.2f %12s %12s\n' "sh -c 'gzip -c | wc -c'" baseline "$pbase" 1 - -
    pweft=$(for _ in $(seq "$REPS"); do
        rm -rf "$out/paths-trace"
        seconds "$WEFT" run --paths all --paths-out "$out/paths-trace" -- /bin/sh -c "$pipeline"
    done | median)
    printf '%-34s %-24s %9.3f %8.2f %12s %12s\n' "sh -c 'gzip -c | wc -c'" "weft --paths all" "$pweft" "$(echo "$pweft / $pbase" | bc -l)" - -
    if command -v valgrind >/dev/null; then
        local ps mark=""
        ps=$(seconds timeout "$PEER_LIMIT" valgrind --tool=lackey --trace-mem=yes --trace-children=yes --log-file=/dev/null /bin/sh -c "$pipeline")
        if (( $(echo "$ps >= $PEER_LIMIT - 0.5" | bc -l) )); then mark=">"; fi
        printf '%-34s %-24s %8s%.3f %7s%.1f %12s %12s\n' "sh -c 'gzip -c | wc -c'" "lackey --trace-children" "$mark" "$ps" "$mark" "$(echo "$ps / $pbase" | bc -l)" - -
    fi
    bench_paths "sqlite3 (libsqlite3 traced)" "--paths all --paths libsqlite3" /usr/bin/sqlite3 :memory: ".read $out/paths.sql"
    # The same statements on ten times the rows: laying out libsqlite3's
    # 2,900 functions counts less.
    sed 's/i < 50000/i < 500000/' "$out/paths.sql" > "$out/paths-big.sql"
    steady "sqlite3 (500,000 rows)" "--paths all --paths libsqlite3" /usr/bin/sqlite3 :memory: ".read $out/paths-big.sql"
    bench_paths "tar -c /usr/share/doc (I/O)" "--paths all" /usr/bin/tar -cf /dev/null /usr/share/doc
    bench_paths "python3 (dict loop, split functions)" "--paths all" /usr/bin/python3 -S -E -c 'd={}
for i in range(200000): d[i%97]=d.get(i%97,0)+i
print(len(d))'
    steady "python3 (3,000,000 dict updates)" "--paths all" /usr/bin/python3 -S -E -c 'd={}
for i in range(3000000): d[i%97]=d.get(i%97,0)+i
print(len(d))'
}

syscalls() {
    gcc -O2 -o "$out/syscall_loop" bench/syscall_loop.c
    local bin=$out/syscall_loop n=${CALLS:-1000000}
    echo "## added ns per captured system call (median of $REPS runs; $n calls, $SLOW for strace)"
    printf '%-8s %-34s %10s %10s %6s %12s %12s\n' call tool ns/call added ratio "round median" "added" 
    # A run's ns a call over its whole loop, and the median of its rounds
    # of 100,000 calls (bench/syscall_loop.c).
    both() { grep -o 'ns_per_call [0-9.]* round_median [0-9.]*' | awk '{print $2, $4}'; }
    column() { awk -v k="$1" '{print $k}' | median; }
    for kind in getppid read clock; do
        # The baseline and the weft rows run in turn, REPS rounds: this
        # machine's speed drifts over minutes, and rows run one after the
        # other would take the drift for weft's cost. Under Syscall User
        # Dispatch (the first half second of a program), then settled
        # before the loop (its sites rewritten, dispatch off). The record
        # goes to /dev/shm, and once to the disk: on this VM, writing
        # hundreds of MB/s through ext4's page cache on one CPU makes
        # system calls on the other slower (a `getppid` loop: 166 ns a
        # call alone, 325 beside `dd of=FILE bs=64k`, 166 to 181 beside
        # `dd of=/dev/shm/FILE`), and the peers write nothing.
        local bases=() dispatched=() settled=() on_disk=() shm=/dev/shm/weft-bench-sc
        for _ in $(seq "$REPS"); do
            bases+=("$("$bin" "$n" "$kind" | both)")
            rm -rf "$shm"
            dispatched+=("$("$WEFT" syscalls record --settle-after never -o "$shm" -- "$bin" "$n" "$kind" 2>/dev/null | both)")
            rm -rf "$shm"
            settled+=("$("$WEFT" syscalls record --settle-after 0 -o "$shm" -- "$bin" "$n" "$kind" 600 2>/dev/null | both)")
            rm -rf "$shm" "$out/sc"
            on_disk+=("$("$WEFT" syscalls record --settle-after 0 -o "$out/sc" -- "$bin" "$n" "$kind" 600 2>/dev/null | both)")
            rm -rf "$out/sc"
        done
        base=$(printf '%s\n' "${bases[@]}" | column 1)
        base_round=$(printf '%s\n' "${bases[@]}" | column 2)
        row() { # NAME "WHOLE ROUND" (rows of several runs: their medians)
            local whole round
            whole=$(printf '%s\n' "${@:2}" | column 1)
            round=$(printf '%s\n' "${@:2}" | column 2)
            printf '%-8s %-34s %10.2f %10.2f %6.1f %12.2f %12.2f\n' "$kind" "$1" "$whole" \
                "$(echo "$whole - $base" | bc -l)" "$(echo "$whole / $base" | bc -l)" \
                "$round" "$(echo "$round - $base_round" | bc -l)"
        }
        row baseline "${bases[@]}"
        row "weft syscalls record (dispatch)" "${dispatched[@]}"
        row "weft syscalls record (settled)" "${settled[@]}"
        row "weft ... (settled, record on disk)" "${on_disk[@]}"
        peer() { # NAME COMMAND...: a row if the peer ran
            local name=$1 got
            shift
            got=$("$@" 2>/dev/null | both || true)
            if [ -n "$got" ]; then row "$name" "$got"; else echo "($name did not run here)"; fi
        }
        if command -v strace >/dev/null; then
            peer strace strace -qq -o /dev/null "$bin" "$SLOW" "$kind"
            # The filter stops only the calls asked for: here, every call of the loop.
            peer "strace -f --seccomp-bpf -e $kind" strace -qq -f --seccomp-bpf -e trace="$kind" -o /dev/null "$bin" "$SLOW" "$kind"
        fi
        if command -v bpftrace >/dev/null; then
            mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing || true
            peer "bpftrace count (sys_enter)" bpftrace -q -e 'tracepoint:raw_syscalls:sys_enter /pid == cpid/ { @c = count(); }' -c "$bin $n $kind"
        fi
        if command -v perf >/dev/null && perf trace -h >/dev/null 2>&1; then
            peer "perf trace" perf trace -o /dev/null "$bin" "$SLOW" "$kind"
        else
            echo "(perf trace: not installed here)"
        fi
    done
    echo "(round median: the median ns a call of the run's rounds of 100,000 calls, against the baseline's;"
    echo " weft and bpftrace: $n calls a run; strace: $SLOW; clock: the vDSO's clock_gettime,"
    echo " which strace and a sys_enter count never see: their rows time the loop only)"
}

# Slowdown of `make -j2` on a small C project (8 files of a few functions
# each, linked into one program) under `weft syscalls record`, against the
# build alone and under `strace -f`; the median of REPS builds each, every
# build from clean.
make_j2() {
    local proj=$out/make-proj files=${FILES:-8}
    rm -rf "$proj"
    mkdir -p "$proj"
    local objs=""
    for i in $(seq "$files"); do
        {
            echo "#include <stdio.h>"
            echo "#include <string.h>"
            for f in 1 2 3 4; do
                echo "int f${i}_$f(const char *s) { int n = 0; for (size_t k = 0; k < strlen(s); k++) n += s[k] * $f; return n; }"
            done
        } > "$proj/m$i.c"
        objs="$objs m$i.o"
    done
    {
        echo "#include <stdio.h>"
        for i in $(seq "$files"); do echo "int f${i}_1(const char *);"; done
        echo "int main(void) { int n = 0;"
        for i in $(seq "$files"); do echo "n += f${i}_1(\"weft\");"; done
        echo "printf(\"%d\\n\", n); return 0; }"
    } > "$proj/main.c"
    printf 'prog: main.o%s\n\tgcc -o $@ $^\n%%.o: %%.c\n\tgcc -O2 -c -o $@ $<\nclean:\n\trm -f prog *.o\n' "$objs" > "$proj/Makefile"
    build() { # the build's seconds; a build that made no program says so
        make -s -C "$proj" clean >/dev/null
        seconds "$@"
        [ -x "$proj/prog" ] || echo "make -j2 did not build: $*" >&2
    }
    echo "## make -j2 on $((files + 1)) C files (median of $REPS builds, each from clean)"
    printf '%-34s %10s %8s\n' tool seconds ratio
    local base w e s
    base=$(for _ in $(seq "$REPS"); do build make -s -j2 -C "$proj"; done | median)
    printf '%-34s %10.3f %8.2f\n' "make -j2" "$base" 1
    w=$(for _ in $(seq "$REPS"); do rm -rf "$out/make-rec"; build "$WEFT" syscalls record -o "$out/make-rec" -- make -s -j2 -C "$proj"; done | median)
    printf '%-34s %10.3f %8.2f\n' "weft syscalls record" "$w" "$(echo "$w / $base" | bc -l)"
    "$WEFT" syscalls stats "$out/make-rec" 2>/dev/null | tail -1 || true
    # Every site rewritten at each exec, as before Syscall User Dispatch.
    e=$(for _ in $(seq "$REPS"); do rm -rf "$out/make-rec"; build "$WEFT" syscalls record --no-dispatch -o "$out/make-rec" -- make -s -j2 -C "$proj"; done | median)
    printf '%-34s %10.3f %8.2f\n' "weft syscalls record --no-dispatch" "$e" "$(echo "$e / $base" | bc -l)"
    if command -v strace >/dev/null; then
        s=$(for _ in $(seq "$REPS"); do build strace -f -qq -o /dev/null make -s -j2 -C "$proj"; done | median)
        printf '%-34s %10.3f %8.2f\n' "strace -f" "$s" "$(echo "$s / $base" | bc -l)"
    fi
    # Abstract execution of the whole build (issue 12): every process's
    # every function laid out again at each exec; and the cheapest
    # instrumenter of every instruction that follows execs, valgrind's
    # tool "none", as the peer.
    w=$(for _ in $(seq "$REPS"); do rm -rf "$out/make-paths"; build "$WEFT" run --paths all --paths-out "$out/make-paths" -- make -s -j2 -C "$proj"; done | median)
    printf '%-34s %10.3f %8.2f\n' "weft run --paths all" "$w" "$(echo "$w / $base" | bc -l)"
    if command -v valgrind >/dev/null; then
        s=$(for _ in $(seq "$REPS"); do build valgrind -q --tool=none --trace-children=yes make -s -j2 -C "$proj"; done | median)
        printf '%-34s %10.3f %8.2f\n' "valgrind --tool=none (children)" "$s" "$(echo "$s / $base" | bc -l)"
    fi
}

# ULTra's Figure 2: a file-serving workload (bench/fileserve.py: Python's
# http.server and a client it forks, every file fetched PASSES times) recorded
# once, then its actual, replayed and re-executed elapsed times under several
# memory.max limits, caches dropped before each run.
figure2() {
    local root=$out/fig2-www rec=$out/fig2-rec files=${FILES:-64} passes=${PASSES:-3}
    local port=${PORT:-18431} limits=${LIMITS:-"256M 48M 24M"}
    rm -rf "$root" "$rec"
    mkdir -p "$root"
    for i in $(seq -w 1 "$files"); do head -c 1048576 /dev/urandom > "$root/f$i"; done
    local cmd=(/usr/bin/python3 bench/fileserve.py "$root" "$port" "$passes")
    echo "## ULTra Figure 2: ${files} files of 1 MiB served $passes times over HTTP on the loopback"
    "$WEFT" syscalls record -o "$rec" -- "${cmd[@]}" 2>&1 | grep -E 'event\(s\) written' || true
    printf '%-10s %10s %10s %10s %12s %12s\n' memory.max actual replay reexec "replay/act" "reexec/act"
    # One run of each, in turn, REPS times; the medians (this machine's
    # noise moves a single run by 15 %).
    actual_s() { "$WEFT" syscalls actual --memory-max "$1" --drop-caches -- "${cmd[@]}" 2>&1 >/dev/null | grep -o ' ran [0-9.]*' | awk '{print $2}'; }
    # replay exits 1 when results differ: its JSON says how long it took all the same.
    replay_s() { { "$WEFT" syscalls replay --json --memory-max "$1" --drop-caches "$rec" 2>/dev/null || true; } | python3 -c 'import json,sys; print(json.load(sys.stdin)["replayed_s"])'; }
    reexec_s() {
        "$WEFT" syscalls reexec --json "$out/fig2-reexec.json" --memory-max "$1" --drop-caches "$rec" -- "${cmd[@]}" >/dev/null 2>&1 || true
        python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["predicted_s"] if not r["diverged"] else "nan")' "$out/fig2-reexec.json"
    }
    for m in $limits; do
        local a r x as=() rs=() xs=()
        for _ in $(seq "$REPS"); do
            as+=("$(actual_s "$m")"); rs+=("$(replay_s "$m")"); xs+=("$(reexec_s "$m")")
        done
        a=$(printf '%s\n' "${as[@]}" | median); r=$(printf '%s\n' "${rs[@]}" | median); x=$(printf '%s\n' "${xs[@]}" | median)
        printf '%-10s %10.3f %10.3f %10.3f %12.2f %12.2f\n' "$m" "$a" "$r" "$x" "$(echo "$r / $a" | bc -l)" "$( [ "$x" = nan ] && echo 0 || echo "$x / $a" | bc -l)"
    done
    echo "(seconds, medians of $REPS runs each; actual: the workload alone in the group, exec to exit; replay: the replayed calls;"
    echo " reexec: the re-executed program's fed calls, exec to last return, without weft's"
    echo " holds of the workload's only process (predicted_s); 0 ratio: diverged)"
}

retsys() {
    gcc -O2 -o "$out/ret_after_syscall" bench/ret_after_syscall.c
    echo "## a ret right after a system call (best of 20 rounds of 200,000 calls, ns a call)"
    "$out/ret_after_syscall" getppid
    "$out/ret_after_syscall" read
}

stores() {
    gcc -O2 -o "$out/store_chain" bench/store_chain.c
    echo "## a witness store after another on one cursor (ns a store, three passes)"
    "$out/store_chain"
}

case "$what" in
    figure2) figure2 ;;
    stores) stores ;;
    retsys) retsys ;;
    make) make_j2 ;;
    syscalls) syscalls ;;
    percall) percall ;;
    splice) splice ;;
    primitives) primitives ;;
    events) events ;;
    paths) paths ;;
    all) percall; echo; splice; echo; primitives; echo; events; echo; paths; echo; syscalls ;;
    *) echo "usage: bash bench/run.sh [all|percall|splice|primitives|events|paths|syscalls|figure2|make|retsys|stores]" >&2; exit 2 ;;
esac
