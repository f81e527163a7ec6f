#!/usr/bin/env bash
# rkv against llama.cpp on the other quantised file types users download (Q5_K_M, Q6_K,
# Q8_0), side by side in one invocation per file (`rkv bench decode --llama-bench`, the
# two alternating repeat by repeat): the default model requantised to each by
# `rkv quantize`, and the random-weight R1-Distill-Qwen-1.5B-shaped file of
# `rkv bench model` requantised the same way (llama.cpp's type choice per tensor, as
# `llama-quantize` makes it); decode at depths 0 and 512 and a prompt of 512 tokens.
# Writes bench/results/llamacpp_types.jsonl (another name on an AVX-512 machine:
# scripts/results_path.sh) and re-renders BENCHMARKS.md; about 20 minutes on 2 cores.
#
# LLAMA_BENCH: llama.cpp's llama-bench (BENCHMARKS.md, "Building llama.cpp here").
# WORK: where the model files are kept between runs (default: a temporary folder; the
# 1.5B-shaped files take about 5 GB).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench binary}
. scripts/llamacpp_bench_env.sh
MODEL=$("$RKV" fetch | tail -1)
SHAPE="$WORK/r1-qwen-1.5b-q4_k_m.gguf"
[ -f "$SHAPE" ] || "$RKV" bench model --shape r1-distill-qwen-1.5b --out "$SHAPE" >&2
# FROM: the file to requantise; NAME: what the copies are called; T: tokens per repeat.
side_by_side() {
  local from=$1 name=$2 tokens=$3 t file
  for t in q5_k_m q6_k q8_0; do
    file="$WORK/$name-$t.gguf"
    [ -f "$file" ] || "$RKV" quantize "$from" "$file" --type "$t" >&2
    echo "== $name, $t" >&2
    "$RKV" bench decode --threads 2 --model "$file" --depths 0,512 --tokens "$tokens" \
      --repeat 3 --llama-bench "$LLAMA_BENCH" --json
  done
}
out=$(scripts/results_path.sh llamacpp_types)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE --depths 0,512 --tokens T --repeat R --llama-bench LLAMA_BENCH --json"
  side_by_side "$MODEL" default 64
  side_by_side "$SHAPE" r1-qwen-1.5b 32
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
