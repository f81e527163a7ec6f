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
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
MODEL=$("$RKV" fetch | tail -1)
WORK=${WORK:-$(mktemp -d)}
mkdir -p "$WORK"
[ -f "$WORK/r1-qwen-1.5b-q4_k_m.gguf" ] ||
  "$RKV" bench model --shape r1-distill-qwen-1.5b --out "$WORK/r1-qwen-1.5b-q4_k_m.gguf" >&2
out=$(scripts/results_path.sh llamacpp_types)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE --depths 0,512 --tokens T --repeat R --llama-bench LLAMA_BENCH --json"
  for t in q5_k_m q6_k q8_0; do
    file="$WORK/default-$t.gguf"
    [ -f "$file" ] || "$RKV" quantize "$MODEL" "$file" --type "$t" >&2
    echo "== default model, $t" >&2
    "$RKV" bench decode --threads 2 --model "$file" --depths 0,512 --tokens 64 --repeat 3 \
      --llama-bench "$LLAMA_BENCH" --json
  done
  for t in q5_k_m q6_k q8_0; do
    file="$WORK/r1-qwen-1.5b-$t.gguf"
    [ -f "$file" ] || "$RKV" quantize "$WORK/r1-qwen-1.5b-q4_k_m.gguf" "$file" --type "$t" >&2
    echo "== R1-Distill-Qwen-1.5B shapes, $t" >&2
    "$RKV" bench decode --threads 2 --model "$file" --depths 0,512 --tokens 32 --repeat 3 \
      --llama-bench "$LLAMA_BENCH" --json
  done
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
