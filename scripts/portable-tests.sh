#!/usr/bin/env bash
# One release build for the portable x86-64 target (`-C target-cpu=x86-64`, what a binary
# shipped to any x86-64 machine is built for) into target/portable/, then: `rkv --version`
# (the SIMD path it chose at run time on this CPU) and the tests of the crates with SIMD
# code and the model tests (rkv-core, rkv-kernels, rkv-model, rkv-engine, and the CLI's
# version test, which fails if a CPU with AVX2, FMA and F16C got the scalar path).
# `./scripts/test.sh` tests the workspace's default build (`-C target-cpu=native`,
# .cargo/config.toml); both take the same paths on the same CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="-C target-cpu=x86-64"
export CARGO_TARGET_DIR=target/portable
cargo build --release -p rkv-cli
target/portable/release/rkv --version
cargo run --release -q -p rkv-cli -- fetch
cargo test --release -p rkv-core -p rkv-kernels -p rkv-model -p rkv-engine
cargo test --release -p rkv-cli --test cli_unix version
