#!/usr/bin/env bash
# 8-bit KV against f16 (docs/kv-dtype.md), both measured by comparing the two dtypes in
# one run: fidelity on the shared math traces (FullKV, R-KV at budgets 256 and 512, each
# teacher-forced with q8_0 KV and with f16 KV; KL(f16 || q8_0) per generated token), then
# single-stream FullKV decode at depth 8000, q8_0 and f16 on their own engines one forward
# of each in turn. Writes bench/results/kv_dtype_fidelity[.MODEL].jsonl and
# kv_dtype_decode[.MODEL].jsonl (a header line each: command, machine, commit, date) and
# re-renders BENCHMARKS.md. MODEL (default: the default model), LIMIT (traces, 10),
# REPEAT (decode repeats, 4) and TRACES override. About 25 minutes on 2 cores for the
# default model.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
mkdir -p "$OUT"
TRACES=${TRACES:-../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl}
model=()
suffix=""
if [ -n "${MODEL:-}" ]; then
  model=(--model "$MODEL")
  suffix=".$MODEL"
fi
$RKV fetch "${MODEL:-smollm2-135m}" > /dev/null
fid=(eval fidelity "${model[@]}" --threads 2 --traces "$TRACES" --limit "${LIMIT:-10}"
     --max-tokens 2000 --budgets 256,512 --policies full,rkv --kv-dtype q8_0
     --reference-kv-dtype f16 --json)
dec=(bench decode "${model[@]}" --threads 2 --kv-dtype q8_0 --compare-kv-dtype f16
     --interleave --depths 8000 --tokens 128 --repeat "${REPEAT:-4}" --json)
for part in fidelity decode; do
  if [ "$part" = fidelity ]; then args=("${fid[@]}"); else args=("${dec[@]}"); fi
  tmp=$(mktemp)
  python3 scripts/bench_header.py "$RKV ${args[*]}" > "$tmp"
  echo "== $part" >&2
  "$RKV" "${args[@]}" >> "$tmp"
  mv "$tmp" "$OUT/kv_dtype_$part$suffix.jsonl"
done
python3 scripts/render_benchmarks.py
