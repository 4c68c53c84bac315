#!/usr/bin/env bash
# Installs what weft's build and tests need on Debian: a C compiler for the
# test targets, gdb and real programs used as ground truth (postgres for its
# USDT probes), libc's detached debug symbols (weft names stripped code with
# them), clang and libelf for the BPF programs (CPU clock, workload
# follower, schedule), QEMU and valgrind (ground truth for --paths and its
# data addresses), strace (ground truth for system calls), gzip (a pipeline
# replayed) and zstd, and Rust if absent.
set -euo pipefail
need=()
for pkg in gcc g++ libc6-dev libc6-dbg bpftrace clang libelf-dev zlib1g-dev pkg-config make gdb python3 sqlite3 binutils bc chromium babeltrace2 systemtap-sdt-dev postgresql qemu-user valgrind zstd strace gzip; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if ! command -v cargo >/dev/null 2>&1 && [ ! -x "$HOME/.cargo/bin/cargo" ]; then
    need+=(cargo rustc)
fi
if [ ${#need[@]} -gt 0 ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
