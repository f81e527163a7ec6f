#!/usr/bin/env bash
# Many sequences at depth 8000 on the R1-Distill-Qwen-1.5B-shaped Q4_K_M file
# (`rkv bench model`): rkv under R-KV at budget 1024 against llama.cpp's whole cache, side
# by side in one invocation each (`rkv bench decode --batch N --llama-batched-bench`, the
# two alternating repeat by repeat). rkv decodes N samples of one 8000-token prompt,
# compressed to the budget before they fork, in a KV pool of just what the request
# reserves; llama.cpp (`llama-batched-bench -pps`) decodes the same prompt copied into
# each sequence's own cache. Two rows: the same batch (8 and 8), and about the same KV
# memory (rkv's 7 sequences of budget + buffer slots against llama.cpp's one sequence of
# 8128). Writes bench/results/llamacpp_batched.jsonl (another name on an AVX-512
# machine: scripts/results_path.sh) and re-renders BENCHMARKS.md. Every
# repeat prefills 8000 tokens once in each engine: about 30 minutes on 2 cores with
# REPEAT=2.
#
# LLAMA_BATCHED_BENCH: llama.cpp's llama-batched-bench (BENCHMARKS.md, "Building
# llama.cpp here").
# WORK: where the model file is kept between runs (default: a temporary folder).
# REPEAT: repeats per row (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BATCHED_BENCH=${LLAMA_BATCHED_BENCH:?set LLAMA_BATCHED_BENCH to llama.cpp\'s llama-batched-bench binary}
REPEAT=${REPEAT:-2}
. scripts/llamacpp_bench_env.sh
FILE="$WORK/r1-qwen-1.5b-q4_k_m.gguf"
[ -f "$FILE" ] || "$RKV" bench model --shape r1-distill-qwen-1.5b --out "$FILE" >&2
out=$(scripts/results_path.sh llamacpp_batched)
args=(--threads 2 --model "$FILE" --kv-policy rkv --kv-budget 1024 --depths 8000
      --tokens 128 --repeat "$REPEAT" --llama-batched-bench "$LLAMA_BATCHED_BENCH" --json)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE --kv-policy rkv --kv-budget 1024 --depths 8000 --tokens 128 --repeat R --llama-batched-bench LLAMA_BATCHED_BENCH --json, with --batch 8, then --batch 7 --llama-sequences 1"
  echo "== 8 sequences each" >&2
  "$RKV" bench decode "${args[@]}" --batch 8
  echo "== rkv's 7 sequences against llama.cpp's one" >&2
  "$RKV" bench decode "${args[@]}" --batch 7 --llama-sequences 1
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
