#!/usr/bin/env bash
# Writes crates/rkv-kernels/tests/data/ggml_dots.txt, the reference of
# crates/rkv-kernels/tests/ggml_dots.rs: ggml's own vec_dot and activation quantisers
# (scripts/llamacpp/dot_reference.c, linked against llama.cpp's libggml) on random blocks
# of every format rkv runs with its own kernels.
#
# ggml's x86 build runs one vec_dot per format whether the CPU has AVX2 or AVX-512 (the
# K-quant dots have no AVX-512 variant; the Q4_0/Q5_0/Q8_0 dots use VNNI for the same
# integer sums), so the file holds on both kinds of machine.
#
# LLAMA_CPP: a llama.cpp source tree built with cmake into build/ (BENCHMARKS.md, "Building
# llama.cpp here"); LLAMA_CPP_VERSION: what to record as its version.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_CPP=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree built with cmake into build/}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O2 -std=c11 -I"$LLAMA_CPP/ggml/include" scripts/llamacpp/dot_reference.c \
  -L"$LLAMA_CPP/build/bin" -lggml-cpu -lggml-base -Wl,-rpath,"$LLAMA_CPP/build/bin" \
  -o "$work/dot_reference"
OUT=crates/rkv-kernels/tests/data/ggml_dots.txt
{
  echo "# made by scripts/llamacpp/dot_reference.sh from ${LLAMA_CPP_VERSION:-llama.cpp at $LLAMA_CPP}"
  echo "# on $(lscpu | sed -n 's/^Model name: *//p')"
  "$work/dot_reference"
} > "$OUT"
echo "wrote $OUT ($(grep -vc '^#' "$OUT") cases)" >&2
