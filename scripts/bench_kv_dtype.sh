#!/usr/bin/env bash
# 8-bit KV against f16 (docs/kv-dtype.md), both measured by comparing the two dtypes in
# one run: fidelity on the shared math traces (FullKV, R-KV at budgets 256 and 512, each
# teacher-forced with q8_0 KV and with f16 KV; KL(f16 || q8_0) per generated token), then
# single-stream FullKV decode at depth 8000, q8_0 and f16 on their own engines one forward
# of each in turn. Writes bench/results/kv_dtype_fidelity[.MODEL].jsonl and
# kv_dtype_decode[.MODEL].jsonl (a header line each: command, machine, commit, date) and
# re-renders BENCHMARKS.md. MODEL (default: the default model), LIMIT (traces, 10),
# REPEAT (decode repeats, 4) and TRACES override. About 25 minutes on 2 cores for the
# default model. PARTS picks the parts (default "fidelity decode"); the part `serve` runs
# scripts/bench_serve.sh's load (64 requests at concurrency 64, 256 MiB of KV, R-KV budget
# 256; TOKENS generated each, default 2048) with f16 KV, then FullKV with f16 KV (reserving
# each request's whole length), then R-KV with q8_0 KV, into
# kv_dtype_serve[.MODEL].jsonl: how many more sequences the same memory holds (about an
# hour on 2 cores at 2048 tokens, most of it FullKV's).
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
srv=(bench serve "${model[@]}" --threads 2 --requests 64 --concurrency 64
     --max-tokens "${TOKENS:-2048}" --ignore-eos --kv-memory 256MiB --json
     --kv-admission reserve --kv-policy rkv --kv-budget 256)
for part in ${PARTS:-fidelity decode}; do
  tmp=$(mktemp)
  case "$part" in
    fidelity) python3 scripts/bench_header.py "$RKV ${fid[*]}" > "$tmp"
              echo "== $part" >&2
              "$RKV" "${fid[@]}" >> "$tmp" ;;
    decode) python3 scripts/bench_header.py "$RKV ${dec[*]}" > "$tmp"
            echo "== $part" >&2
            "$RKV" "${dec[@]}" >> "$tmp" ;;
    serve) python3 scripts/bench_header.py "$RKV ${srv[*]} --kv-dtype f16 --compare-policy full; then --kv-dtype q8_0" > "$tmp"
           echo "== $part f16 (R-KV, then FullKV)" >&2
           "$RKV" "${srv[@]}" --kv-dtype f16 --compare-policy full >> "$tmp"
           echo "== $part q8_0" >&2
           "$RKV" "${srv[@]}" --kv-dtype q8_0 >> "$tmp" ;;
    *) echo "unknown part $part (fidelity, decode, serve)" >&2; exit 2 ;;
  esac
  mv "$tmp" "$OUT/kv_dtype_$part$suffix.jsonl"
done
python3 scripts/render_benchmarks.py
