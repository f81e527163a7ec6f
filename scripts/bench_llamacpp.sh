#!/usr/bin/env bash
# rkv against llama.cpp on the file types users download, side by side in one invocation
# per file (`rkv bench decode --llama-bench`, the two alternating repeat by repeat): the
# default model requantised to Q4_K_M by `rkv quantize` (decode at depths 0, 512 and 4096,
# prompts of 512 and 4096 tokens), and a random-weight file of R1-Distill-Qwen-1.5B's
# shapes in Q4_K_M (`rkv bench model`; decode at depths 0 and 512, a prompt of 512).
# Writes bench/results/llamacpp_side_by_side.jsonl (another name on
# an AVX-512 machine: scripts/results_path.sh) and re-renders BENCHMARKS.md; about 10
# minutes on 2 cores.
#
# LLAMA_BENCH: llama.cpp's llama-bench (BENCHMARKS.md, "Building llama.cpp here").
# WORK: where the two model files are kept between runs (default: a temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench binary}
. scripts/llamacpp_bench_env.sh
MODEL=$("$RKV" fetch | tail -1)
[ -f "$WORK/default-q4_k_m.gguf" ] || "$RKV" quantize "$MODEL" "$WORK/default-q4_k_m.gguf" --type q4_k_m >&2
[ -f "$WORK/r1-qwen-1.5b-q4_k_m.gguf" ] ||
  "$RKV" bench model --shape r1-distill-qwen-1.5b --out "$WORK/r1-qwen-1.5b-q4_k_m.gguf" >&2
out=$(scripts/results_path.sh llamacpp_side_by_side)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE --depths D --tokens T --repeat R --llama-bench LLAMA_BENCH --json"
  echo "== default model, Q4_K_M" >&2
  "$RKV" bench decode --threads 2 --model "$WORK/default-q4_k_m.gguf" --depths 0,512,4096 \
    --tokens 64 --repeat 3 --llama-bench "$LLAMA_BENCH" --json
  echo "== R1-Distill-Qwen-1.5B shapes, Q4_K_M" >&2
  "$RKV" bench decode --threads 2 --model "$WORK/r1-qwen-1.5b-q4_k_m.gguf" --depths 0,512 \
    --tokens 32 --repeat 2 --llama-bench "$LLAMA_BENCH" --json
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
