#!/usr/bin/env bash
# The portable (non-x86) paths on aarch64: builds the whole workspace for
# aarch64-unknown-linux-gnu, then runs the tests of the crates that hold SIMD code and its
# scalar fallbacks (rkv-core, rkv-kernels) and the tiny-model tests of rkv-model and
# rkv-engine under qemu's user-mode emulator.
#
#   scripts/aarch64-tests.sh            # build, then test under qemu
#   scripts/aarch64-tests.sh --build    # build only
#
# Needs the target's standard library (`rustup target add aarch64-unknown-linux-gnu`), a
# cross linker and qemu (Debian: `apt-get install gcc-aarch64-linux-gnu
# libc6-dev-arm64-cross qemu-user`). Builds into target/aarch64/. Emulated, the tests run
# about twenty times slower than natively; proptests run 16 cases instead of 256.
set -euo pipefail
cd "$(dirname "$0")/.."
target=aarch64-unknown-linux-gnu
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CARGO_TARGET_DIR=target/aarch64
# The workspace's `-C target-cpu=native` (.cargo/config.toml) names this machine's CPU;
# the aarch64 build takes the target's baseline instead (the x86 SIMD paths are not built).
export RUSTFLAGS=""
export PROPTEST_CASES=${PROPTEST_CASES:-16}
cargo build --release --target "$target" --workspace --all-targets
[ "${1:-}" = --build ] && exit 0
cargo test --release --target "$target" -p rkv-core -p rkv-kernels
# Not chat_template_bounds: its time limits are for a native run, not an emulated one.
cargo test --release --target "$target" -p rkv-model --test parity_candle --test tokenizer_units \
    --test template_reference
cargo test --release --target "$target" -p rkv-engine --test policies_tiny
