#!/usr/bin/env bash
# Sets up a fresh Debian machine for weft, builds it, and counts the calls of
# the bundled example program (examples/fib.c) with it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release --quiet
out=$(mktemp -d)
# -fno-optimize-sibling-calls keeps every C-level call of fib a machine-level
# call, so weft's count (machine calls) equals the program's own tally.
gcc -O2 -fno-optimize-sibling-calls -o "$out/fib" examples/fib.c
echo "+ weft run --count fib --count greet --count 'libc.so.6:malloc' -- $out/fib 20"
./target/release/weft run --count fib --count greet --count 'libc.so.6:malloc' -- "$out/fib" 20
rm -rf "$out"
