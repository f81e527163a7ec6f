#!/usr/bin/env bash
# The serving headline of BENCHMARKS.md: 64 requests of 2048 generated tokens each
# (MATH-500 problems with the R1 prompt, greedy, --ignore-eos) at concurrency 64 through
# the engine as `rkv serve` runs it, with 256 MiB of KV memory: R-KV at budget 256 against
# FullKV in one invocation, then R-KV at budgets 128, 512 and 1024. FullKV takes memory by
# ADMISSION (default `reserve`: its whole length on admission, never preempted; `grow`:
# vLLM's grow-and-preempt, which recomputes long sequences many times). Writes
# bench/results/serve.jsonl and re-renders BENCHMARKS.md. Takes about 1.5 hours on 2 cores.
# REQUESTS and TOKENS override the load for a quicker look, BUDGETS the budgets run
# without FullKV (the table says what ran); APPEND=1 adds this run's block to the results
# instead of replacing them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
mkdir -p "$OUT"
$RKV fetch > /dev/null
args=(--threads 2 --requests "${REQUESTS:-64}" --concurrency 64 --max-tokens "${TOKENS:-2048}"
      --ignore-eos --kv-memory 256MiB --json --kv-admission "${ADMISSION:-reserve}")
budgets=${BUDGETS-128 512 1024}
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "$RKV bench serve ${args[*]} --kv-policy rkv --kv-budget 256 --compare-policy full${budgets:+; then --kv-policy rkv --kv-budget B for B in: $budgets}"
  echo "== R-KV 256 against FullKV" >&2
  "$RKV" bench serve "${args[@]}" --kv-policy rkv --kv-budget 256 --compare-policy full
  for b in $budgets; do
    echo "== R-KV $b" >&2
    "$RKV" bench serve "${args[@]}" --kv-policy rkv --kv-budget "$b"
  done
} > "$tmp"
if [ "${APPEND:-0}" = 1 ] && [ -f "$OUT/serve.jsonl" ]; then
  cat "$tmp" >> "$OUT/serve.jsonl" && rm "$tmp"
else
  mv "$tmp" "$OUT/serve.jsonl"
fi
python3 scripts/render_benchmarks.py
