#!/usr/bin/env bash
# Where a script that compares with llama.cpp writes what it measured, one file per kind of
# machine these sessions get (their llama.cpp builds take different paths; BENCHMARKS.md
# shows each kind from its own file): DIR/NAME.jsonl on an AVX2 machine (AMD Zen without
# AVX-512), DIR/NAME.avx512.jsonl on an Intel Xeon with AVX-512, DIR/NAME.amd-avx512.jsonl
# on an AMD EPYC with AVX-512 (Zen 4). Usage: results_path.sh NAME [DIR] (DIR defaults to
# bench/results).
set -euo pipefail
dir=${2:-bench/results}
if grep -qw avx512f /proc/cpuinfo 2>/dev/null; then
  if grep -qw AuthenticAMD /proc/cpuinfo; then
    echo "$dir/$1.amd-avx512.jsonl"
  else
    echo "$dir/$1.avx512.jsonl"
  fi
else
  echo "$dir/$1.jsonl"
fi
