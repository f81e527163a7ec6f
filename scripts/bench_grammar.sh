#!/usr/bin/env bash
# Constrained decoding's cost (docs/serving.md#structured-outputs): `rkv bench grammar` on
# the default model and on Qwen2.5-Coder-1.5B (151,936 logits), 2 threads: one chat prompt
# decoded greedily under bench/schemas/people.json (eight people, 110-130 tokens of JSON)
# and without it, side by side (two engines, one forward of each in turn), REPEAT times
# (default 5): decode tokens/s of each,
# their ratio per repeat, and the grammar's time per token (mask, applying it, consuming
# the token). Writes bench/results/grammar.jsonl (a header line: command, machine,
# commit, date) and re-renders BENCHMARKS.md. About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
mkdir -p "$OUT"
cmd=(bench grammar --threads 2 --schema bench/schemas/people.json --repeat "${REPEAT:-5}" --json)
tmp=$(mktemp)
python3 scripts/bench_header.py "$RKV ${cmd[*]} [--model M] for M in: the default model, qwen2.5-coder-1.5b" > "$tmp"
for model in smollm2-135m qwen2.5-coder-1.5b; do
  $RKV fetch "$model" > /dev/null
  echo "== $model" >&2
  "$RKV" "${cmd[@]}" --model "$model" >> "$tmp"
done
mv "$tmp" "$OUT/grammar.jsonl"
python3 scripts/render_benchmarks.py
