#!/usr/bin/env bash
# Where a script that compares with llama.cpp writes what it measured: DIR/NAME.jsonl on an
# AVX2 machine, DIR/NAME.avx512.jsonl on one with AVX-512 (the two kinds of machine these
# sessions get, whose llama.cpp builds take different paths; BENCHMARKS.md shows both, each
# from its own file). Usage: results_path.sh NAME [DIR] (DIR defaults to bench/results).
set -euo pipefail
dir=${2:-bench/results}
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "$dir/$1.avx512.jsonl"
else
  echo "$dir/$1.jsonl"
fi
