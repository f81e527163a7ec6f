#!/usr/bin/env bash
# Runs the benchmarks behind BENCHMARKS.md and writes their JSON to bench/results/, then
# renders BENCHMARKS.md. Takes about an hour on 2 cores. Each part can be rerun alone by
# running its line; scripts/render_benchmarks.py uses whatever results exist. Optional: LLAMACPP_PY=path to a
# python with llama-cpp-python installed runs llama.cpp side by side (see
# ../shared/reference/LLAMACPP.md for how it was built).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
mkdir -p "$OUT"
MODEL=$($RKV fetch)
run() { # name, command...
  local name=$1; shift
  echo "== $name: $*" >&2
  { echo "{\"command\": $(printf '%s ' "$@" | python3 -c 'import json,sys; print(json.dumps(sys.stdin.read().strip()))')}"; "$@"; } > "$OUT/$name.jsonl"
}
run decode_full $RKV bench decode --threads 2 --depths 0,512,4096,8000 --tokens 128 --repeat 3 --json
if [ -n "${LLAMACPP_PY:-}" ]; then
  echo "== llama.cpp" >&2
  "$LLAMACPP_PY" ../shared/reference/llamacpp_bench.py --model "$MODEL" --depths 0,512,4096,8000 \
    --gen 128 --reps 3 --threads 2 --no-extra-bufts > "$OUT/llamacpp.txt"
fi
run decode_rkv1024 $RKV bench decode --threads 2 --kv-policy rkv --compare-policy full --kv-budget 1024 --depths 4096,8000 --tokens 128 --repeat 3 --json
# R-KV against SnapKV in one run each (as R-KV against FullKV above): repeats alternate the
# two policies on one engine.
run gen4096_512 $RKV bench decode --threads 2 --kv-policy rkv --compare-policy snapkv --kv-budget 512 --depths 0 --tokens 4096 --repeat 4 --interleave --json
run event_1024 $RKV bench decode --threads 2 --kv-policy rkv --compare-policy snapkv --kv-budget 1024 --depths 0 --tokens 2048 --repeat 5 --json
# One compression event of one KV head in rkv-core (criterion; per-sample times copied here).
cargo bench -p rkv-core --bench compress -- 'compress/(rkv_fast|rkv_paged|rkv_paged_described|snapkv)/B(256|1024|4096)_'
rm -rf "$OUT/compress" && mkdir -p "$OUT/compress"
for f in "${CARGO_TARGET_DIR:-target}"/criterion/compress/{rkv_fast,rkv_paged,rkv_paged_described,snapkv}/B*/new/sample.json; do
  id=$(basename "$(dirname "$(dirname "$f")")"); pol=$(basename "$(dirname "$(dirname "$(dirname "$f")")")")
  cp "$f" "$OUT/compress/${pol}_${id}.json"
done
# The same events as ratios per round (R-KV flat, paged, paged from a described state, and SnapKV alternating).
run compress_paired cargo bench -p rkv-core --bench compress_paired -- --json
run fidelity $RKV eval fidelity --threads 2 --traces ../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl \
  --limit 10 --max-tokens 2000 --budgets 128,256,512 --policies rkv,snapkv,h2o,streamingllm --json --plot BENCHMARKS-fidelity.svg
lscpu | grep -E "Model name|^CPU\(s\)" > "$OUT/machine.txt"
date -u +%Y-%m-%d > "$OUT/date.txt"
python3 scripts/render_benchmarks.py
