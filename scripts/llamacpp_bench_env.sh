# Sourced (from the repository root) by the scripts that run rkv against llama.cpp's
# benchmarks: builds rkv and sets RKV (the binary) and WORK (where model files are kept
# between runs; default: a temporary folder).
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
