//! Compiles the BPF program (clang, with libbpf's headers) into OUT_DIR.

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let source = "src/bpf/schedule.bpf.c";
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={source}");
    if let Err(e) = SkeletonBuilder::new()
        .source(source)
        .obj(out.join("schedule.bpf.o"))
        // Debian keeps <asm/types.h> under the multiarch directory, which
        // clang's bpf target does not search.
        .clang_args(["-I/usr/include/x86_64-linux-gnu"])
        .build()
    {
        panic!("compiling {source} failed (is clang installed? scripts/install-deps.sh installs it): {e:#}");
    }
}
