#!/usr/bin/env bash
# The R1-Distill-Qwen-1.5B-shaped Q4_K_M file (`rkv bench model`) against llama.cpp at
# depth, side by side in one invocation each (`rkv bench decode --llama-bench`, the two
# alternating repeat by repeat): both engines with the whole cache at depth 4096, and rkv
# under R-KV at budget 1024 against llama.cpp's whole cache at depth 8000 (what a
# compressed cache buys on a long reasoning trace). Writes
# bench/results/llamacpp_depth.jsonl (another name on an AVX-512 machine: scripts/results_path.sh) and re-renders BENCHMARKS.md. Every repeat prefills
# the depth once in rkv and once in llama.cpp (twice for the full-cache row, whose prompt
# speed is compared too): about 80 minutes on 2 cores with REPEAT=2.
#
# LLAMA_BENCH: llama.cpp's llama-bench (BENCHMARKS.md, "Building llama.cpp here").
# WORK: where the model file is kept between runs (default: a temporary folder).
# REPEAT: repeats per row (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench binary}
REPEAT=${REPEAT:-2}
. scripts/llamacpp_bench_env.sh
FILE="$WORK/r1-qwen-1.5b-q4_k_m.gguf"
[ -f "$FILE" ] || "$RKV" bench model --shape r1-distill-qwen-1.5b --out "$FILE" >&2
out=$(scripts/results_path.sh llamacpp_depth)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE [--kv-policy rkv --kv-budget 1024] --depths D --tokens 32 --repeat R --llama-bench LLAMA_BENCH --json"
  echo "== depth 4096, both with the whole cache" >&2
  "$RKV" bench decode --threads 2 --model "$FILE" --depths 4096 --tokens 32 \
    --repeat "$REPEAT" --llama-bench "$LLAMA_BENCH" --json
  echo "== depth 8000, rkv under R-KV at budget 1024" >&2
  "$RKV" bench decode --threads 2 --model "$FILE" --kv-policy rkv --kv-budget 1024 \
    --depths 8000 --tokens 32 --repeat "$REPEAT" --llama-bench "$LLAMA_BENCH" --json
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
