#!/usr/bin/env bash
# Fuzzing campaign over rkv's loaders of untrusted bytes (docs/fuzzing.md).
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Runs each cargo-fuzz target of fuzz/ in turn, one libFuzzer process at a time, for
# SECONDS_PER_TARGET (default 1800) under a 2 GiB RSS limit and a 10 s per-input timeout,
# starting from fuzz/corpus/<target>/ and fuzz/regressions/<target>/. New inputs go to
# fuzz/work/corpus/<target>/ (not committed); crashing inputs to fuzz/artifacts/<target>/.
# Prints per target: executions, coverage (cov/ft from libFuzzer's last lines) and the
# crashes, timeouts and out-of-memory kills found. Needs the nightly toolchain; installs
# cargo-fuzz when it is missing. CARGO_TARGET_DIR, when set, holds the build.
set -euo pipefail

cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-1800}
shift || true
ALL_TARGETS=(gguf_model gguf_vocab safetensors config_json tokenizer_json chat_template)
if [ $# -gt 0 ]; then TARGETS=("$@"); else TARGETS=("${ALL_TARGETS[@]}"); fi

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi
TARGET_DIR=${CARGO_TARGET_DIR:-fuzz/target}
# Release with debug assertions and overflow checks; no sanitizer (the code under test is
# safe Rust apart from SIMD kernels that loading never runs), so inputs run at full speed.
FUZZ_FLAGS=(-O -a -s none --target-dir "$TARGET_DIR")

cargo +nightly fuzz build "${FUZZ_FLAGS[@]}" >&2

mkdir -p fuzz/work/logs
declare -a ROWS
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/work/corpus/$t" "fuzz/artifacts/$t" "fuzz/regressions/$t"
    log="fuzz/work/logs/$t.log"
    since="fuzz/work/logs/$t.start"
    touch "$since"
    echo "== $t: ${SECONDS_PER_TARGET}s" >&2
    set +e
    cargo +nightly fuzz run "${FUZZ_FLAGS[@]}" "$t" \
        "fuzz/work/corpus/$t" "fuzz/corpus/$t" "fuzz/regressions/$t" -- \
        -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1
    rc=$?
    set -e
    execs=$(grep -oE 'stat::number_of_executed_units:[[:space:]]+[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(echo "$last" | grep -o 'cov: [0-9]*' | grep -o '[0-9]*' || true)
    ft=$(echo "$last" | grep -o 'ft: [0-9]*' | grep -o '[0-9]*' || true)
    rss=$(grep -oE 'stat::peak_rss_mb:[[:space:]]+[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
    # Only what this run wrote: artifacts of earlier runs stay until removed.
    crashes=$(find "fuzz/artifacts/$t" -name 'crash-*' -newer "$since" | wc -l)
    timeouts=$(find "fuzz/artifacts/$t" -name 'timeout-*' -newer "$since" | wc -l)
    ooms=$(find "fuzz/artifacts/$t" -name 'oom-*' -newer "$since" | wc -l)
    ROWS+=("$(printf '%-15s %9s %7s %7s %8s %8s %9s %5s %4s' "$t" "$SECONDS_PER_TARGET" \
        "${execs:-?}" "${cov:-?}" "${ft:-?}" "${rss:-?}" "$crashes" "$timeouts" "$ooms")")
    if [ "$rc" -ne 0 ]; then
        echo "   $t stopped with status $rc: see $log and fuzz/artifacts/$t/" >&2
    fi
done

printf '%-15s %9s %7s %7s %8s %8s %9s %5s %4s\n' target seconds execs cov ft peak_MB \
    crashes t/outs ooms
printf '%s\n' "${ROWS[@]}"
