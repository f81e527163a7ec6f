#!/usr/bin/env bash
# Where a side-by-side bench script writes its results: bench/results/NAME.jsonl on an
# AVX2 machine, bench/results/NAME.avx512.jsonl on one with AVX-512 (the two kinds of
# machine these sessions get; BENCHMARKS.md shows both, each from its own file).
set -euo pipefail
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  echo "bench/results/$1.avx512.jsonl"
else
  echo "bench/results/$1.jsonl"
fi
