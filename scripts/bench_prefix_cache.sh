#!/usr/bin/env bash
# Prefix caching (docs/scheduling.md#prefix-caching), each load run with the cache and with
# --no-prefix-cache in turn, on the default model (MODEL overrides), 2 threads, 256 MiB of
# KV: (1) time to first token when every prompt starts with the same 2,000 tokens, one
# request at a time (8 requests, 16 tokens each; with the cache all but the first find the
# prefix; a second turn of a conversation re-sends its history the same way), FullKV and
# R-KV at budget 256; (2) two-turn conversations one at a time whose first turn leaves
# about 2,000 tokens of history (a 1,900-token system prompt, a problem, 100 generated
# tokens): the second turn's TTFT and whether the outputs are the same (output_digest),
# FullKV and R-KV 256; (3) throughput of 64 requests at concurrency 64 that share a
# 1,000-token system prompt, 128 generated tokens each (FullKV). Writes
# bench/results/prefix_cache[.MODEL].jsonl (a header line: command, machine, commit, date)
# and re-renders BENCHMARKS.md. About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
mkdir -p "$OUT"
model=()
suffix=""
if [ -n "${MODEL:-}" ]; then
  model=(--model "$MODEL")
  suffix=".$MODEL"
fi
$RKV fetch "${MODEL:-smollm2-135m}" > /dev/null
ttft=(bench serve "${model[@]}" --threads 2 --kv-memory 256MiB --json --shared-prefix 2000
      --requests 8 --concurrency 1 --max-tokens 16 --ignore-eos)
turns=(bench serve "${model[@]}" --threads 2 --kv-memory 256MiB --json --shared-prefix 1900
       --requests 4 --concurrency 1 --max-tokens 100 --ignore-eos --turns 2)
load=(bench serve "${model[@]}" --threads 2 --kv-memory 256MiB --json --shared-prefix 1000
      --requests 64 --concurrency 64 --max-tokens 128 --ignore-eos)
tmp=$(mktemp)
python3 scripts/bench_header.py "$RKV ${ttft[*]} --kv-policy P [--no-prefix-cache] and $RKV ${turns[*]} --kv-policy P [--no-prefix-cache] for P in: full, rkv --kv-budget 256; then $RKV ${load[*]} [--no-prefix-cache]" > "$tmp"
for policy in "--kv-policy full" "--kv-policy rkv --kv-budget 256"; do
  for cache in "" "--no-prefix-cache"; do
    echo "== TTFT $policy $cache" >&2
    # shellcheck disable=SC2086
    "$RKV" "${ttft[@]}" $policy $cache | sed 's/^{/{"load":"ttft",/' >> "$tmp"
    echo "== two turns $policy $cache" >&2
    # shellcheck disable=SC2086
    "$RKV" "${turns[@]}" $policy $cache | sed 's/^{/{"load":"turns",/' >> "$tmp"
  done
done
for cache in "" "--no-prefix-cache"; do
  echo "== shared prefix load $cache" >&2
  # shellcheck disable=SC2086
  "$RKV" "${load[@]}" $cache | sed 's/^{/{"load":"shared",/' >> "$tmp"
done
mv "$tmp" "$OUT/prefix_cache$suffix.jsonl"
python3 scripts/render_benchmarks.py
