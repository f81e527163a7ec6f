#!/usr/bin/env bash
# The two smaller serving figures of BENCHMARKS.md, into bench/results/:
# - serve_single.jsonl: one request at a time through a running `rkv serve` (HTTP, SSE)
#   against `rkv generate` on the same prompt, alternating, ROUNDS times;
# - samples.jsonl: `rkv eval math --samples 8` on 20 MATH-500 problems with the samples
#   batched (forked from one prefill) and one at a time, in both orders.
# Then re-renders BENCHMARKS.md. About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
OUT=bench/results
ROUNDS=${ROUNDS:-3}
TOKENS=${TOKENS:-256}
header() {
  python3 scripts/bench_header.py "$1"
}
prompt=$(mktemp)
head -1 ../shared/data/math500.jsonl > "$prompt.jsonl"
python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['problem'])" "$prompt.jsonl" > "$prompt"
log=$(mktemp)
"$RKV" serve --threads 2 --port 0 2> "$log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on" "$log" && break; sleep 0.2; done
url=$(grep -o 'http://[^ ]*' "$log" | head -1)
tmp=$(mktemp)
{
  header "$RKV bench serve --url URL --prompts P --requests 1 --concurrency 1 --max-tokens $TOKENS --ignore-eos --json; $RKV generate --threads 2 --chat --prompt-file F --max-tokens $TOKENS --ignore-eos --json"
  for r in $(seq "$ROUNDS"); do
    "$RKV" bench serve --url "$url" --prompts "$prompt.jsonl" --requests 1 --concurrency 1 \
      --max-tokens "$TOKENS" --ignore-eos --json | python3 -c "import json,sys; d=json.load(sys.stdin); d['kind']='server'; print(json.dumps(d))"
    "$RKV" generate --threads 2 --chat --prompt-file "$prompt" --max-tokens "$TOKENS" --ignore-eos --json \
      | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'kind': 'generate', 'decode_tokens_per_s': d['stats']['decode_tokens_per_s']}))"
  done
} > "$tmp"
mv "$tmp" "$OUT/serve_single.jsonl"
kill -TERM $server; wait $server || true
trap - EXIT
math=(eval math --threads 2 --dataset ../shared/data/math500.jsonl --limit 20 --samples 8
      --max-tokens "${MATH_TOKENS:-64}" --kv-memory 256MiB --json --output /dev/null)
tmp=$(mktemp)
{
  header "$RKV ${math[*]} [--one-at-a-time]"
  for mode in batched one one batched; do
    flag=(); [ "$mode" = one ] && flag=(--one-at-a-time)
    "$RKV" "${math[@]}" "${flag[@]}" 2>/dev/null | tail -1
  done
} > "$tmp"
mv "$tmp" "$OUT/samples.jsonl"
rm -f "$prompt" "$prompt.jsonl" "$log"
python3 scripts/render_benchmarks.py
