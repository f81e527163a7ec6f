#!/usr/bin/env bash
# Builds scripts/llamacpp/greedy.cpp against a llama.cpp tree built with cmake into build/.
# Usage: build_greedy.sh LLAMA_CPP OUT (from the repository root).
set -euo pipefail
g++ -O2 -std=c++17 -I"$1/include" -I"$1/ggml/include" scripts/llamacpp/greedy.cpp \
  -L"$1/build/bin" -lllama -Wl,-rpath,"$1/build/bin" -o "$2"
