#!/usr/bin/env bash
# rkv against llama.cpp on dense 16-bit weights, side by side in one invocation per file
# (`rkv bench decode --llama-bench`, the two alternating repeat by repeat): the default
# model written as F16 and as BF16 by `rkv quantize` (every matrix in that type, as
# `llama-quantize … F16` writes it); decode at depths 0 and 512 and a prompt of 512
# tokens. Writes bench/results/llamacpp_dense.jsonl (another name on an AVX-512
# machine: scripts/results_path.sh) and re-renders BENCHMARKS.md; about
# 5 minutes on 2 cores.
#
# LLAMA_BENCH: llama.cpp's llama-bench (BENCHMARKS.md, "Building llama.cpp here").
# WORK: where the two model files are kept between runs (default: a temporary folder).
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_BENCH=${LLAMA_BENCH:?set LLAMA_BENCH to llama.cpp\'s llama-bench binary}
. scripts/llamacpp_bench_env.sh
MODEL=$("$RKV" fetch | tail -1)
out=$(scripts/results_path.sh llamacpp_dense)
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --model FILE --depths 0,512 --tokens 64 --repeat 3 --llama-bench LLAMA_BENCH --json"
  for t in f16 bf16; do
    file="$WORK/default-$t.gguf"
    [ -f "$file" ] || "$RKV" quantize "$MODEL" "$file" --type "$t" >&2
    echo "== default model, $t" >&2
    "$RKV" bench decode --threads 2 --model "$file" --depths 0,512 --tokens 64 --repeat 3 \
      --llama-bench "$LLAMA_BENCH" --json
  done
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
