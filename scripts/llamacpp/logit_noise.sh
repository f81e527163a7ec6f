#!/usr/bin/env bash
# How far quantised activations move the top-2 margin that the parity test compares
# (crates/rkv-engine/tests/requant_parity.rs, docs/testing.md): the default model
# requantised by `rkv quantize` to q4_k_m, q5_k_m, q6_k and q8_0, teacher-forced along the
# committed AVX2 reference's tokens through llama.cpp (scripts/llamacpp/greedy.cpp, which
# writes every step's logits), rkv's quantised path and rkv's f32 path (dequantised weights,
# f32 activations and KV cache: within 5e-5 of transformers' logits on the default model),
# and optionally a second llama.cpp build (LLAMA_CPP_OTHER, e.g. a native AVX-512 build
# beside an AVX2 one). Per file, crates/rkv-engine/examples/logit_noise.rs prints how far
# the margin of llama.cpp's top two tokens moves between each pair of runs.
#
# LLAMA_CPP (and LLAMA_CPP_OTHER): llama.cpp source trees built with cmake into build/
# (BENCHMARKS.md, "Building llama.cpp here"). Needs about 1 GB free in the temp folder.
# On an AVX-512 machine, a build that takes the reference's AVX2 paths (it reproduces all
# of the reference's choices; docs/testing.md) is configured with
#   cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DGGML_AMX=OFF \
#     -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
#     -DGGML_AVX512=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF
# and built with `cmake --build build --target llama -j2`.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_CPP=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree built with cmake into build/}
OTHER=${LLAMA_CPP_OTHER:-}
cargo build --release -p rkv-cli -p rkv-engine --example logit_noise
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
NOISE="${CARGO_TARGET_DIR:-target}/release/examples/logit_noise"
MODEL=$("$RKV" fetch | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
scripts/llamacpp/build_greedy.sh "$LLAMA_CPP" "$work/greedy"
[ -z "$OTHER" ] || scripts/llamacpp/build_greedy.sh "$OTHER" "$work/greedy-other"
REF=crates/rkv-engine/tests/data/llamacpp_requant.jsonl
echo "machine: $(lscpu | sed -n 's/^Model name: *//p'); rkv $(git rev-parse --short HEAD)"
echo "llama.cpp: $LLAMA_CPP${OTHER:+; other build: $OTHER}"
for t in q4_k_m q5_k_m q6_k q8_0; do
  "$RKV" quantize "$MODEL" "$work/$t.gguf" --type "$t" >&2
  python3 scripts/llamacpp/forced_lines.py "$REF" "$t" > "$work/$t.forced.txt"
  "$work/greedy" "$work/$t.gguf" 48 2 "$work/$t.llama.bin" < "$work/$t.forced.txt" > /dev/null 2> "$work/$t.log"
  extra=()
  if [ -n "$OTHER" ]; then
    "$work/greedy-other" "$work/$t.gguf" 48 2 "$work/$t.other.bin" < "$work/$t.forced.txt" > /dev/null 2>> "$work/$t.log"
    extra=("$work/$t.other.bin")
  fi
  echo
  echo "### $t"
  "$NOISE" "$work/$t.gguf" "$work/$t.forced.txt" "$work/$t.llama.bin" "${extra[@]}"
  rm -f "$work/$t.llama.bin" "$work/$t.other.bin" "$work/$t.gguf"
done
