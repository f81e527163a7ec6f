#!/usr/bin/env bash
# Writes crates/rkv-engine/tests/data/llamacpp_requant.jsonl, the reference of
# crates/rkv-engine/tests/requant_parity.rs: the default model requantised by
# `rkv quantize` to q4_k_m, q5_k_m, q6_k and q8_0, and llama.cpp's greedy tokens and
# top-2 margins on each (scripts/llamacpp/greedy.cpp, linked against llama.cpp's
# library) for the six public reference prompts.
#
# The test's reference comes from a machine with AVX2 and no AVX-512; on an AVX-512 machine
# the script writes llamacpp_requant.avx512.jsonl beside it instead (llama.cpp takes other
# SIMD paths there and parts from its AVX2 build: scripts/llamacpp/compare_references.py,
# docs/testing.md).
#
# LLAMA_CPP: a llama.cpp source tree built with cmake into build/ (BENCHMARKS.md, "Building
# llama.cpp here"); LLAMA_CPP_VERSION: what to record as its version.
set -euo pipefail
cd "$(dirname "$0")/../.."
LLAMA_CPP=${LLAMA_CPP:?set LLAMA_CPP to a llama.cpp source tree built with cmake into build/}
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
MODEL=$("$RKV" fetch | tail -1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
g++ -O2 -std=c++17 -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" scripts/llamacpp/greedy.cpp \
  -L"$LLAMA_CPP/build/bin" -lllama -Wl,-rpath,"$LLAMA_CPP/build/bin" -o "$work/greedy"
PROMPTS=crates/rkv-engine/tests/data/llamacpp_greedy.jsonl
OUT=$(scripts/results_path.sh llamacpp_requant crates/rkv-engine/tests/data)
MACHINE=$(lscpu | sed -n 's/^Model name: *//p')
python3 -c '
import json, sys
for line in open(sys.argv[1]):
    if line.strip():
        print(" ".join(map(str, json.loads(line)["prompt_token_ids"])))
' "$PROMPTS" > "$work/prompts.txt"
for t in q4_k_m q5_k_m q6_k q8_0; do
  "$RKV" quantize "$MODEL" "$work/$t.gguf" --type "$t" >&2
  "$work/greedy" "$work/$t.gguf" 48 2 < "$work/prompts.txt" > "$work/$t.out" 2> "$work/$t.log"
done
python3 - "$PROMPTS" "$work" "${LLAMA_CPP_VERSION:-llama.cpp at $LLAMA_CPP}" "$MACHINE" \
  > "$OUT" <<'PY'
import hashlib, json, sys
prompts_path, work, version, machine = sys.argv[1:]
prompts = [json.loads(l) for l in open(prompts_path) if l.strip()]
for t in ["q4_k_m", "q5_k_m", "q6_k", "q8_0"]:
    sha = hashlib.sha256(open(f"{work}/{t}.gguf", "rb").read()).hexdigest()
    outs = [l.split() for l in open(f"{work}/{t}.out")]
    assert len(outs) == len(prompts), (t, len(outs))
    for p, out in zip(prompts, outs):
        pairs = [x.split(":") for x in out]
        print(json.dumps({
            "file_type": t, "file_sha256": sha,
            "prompt": p["prompt"], "chat": p["chat"], "prompt_token_ids": p["prompt_token_ids"],
            "token_ids": [int(a) for a, _ in pairs],
            "top2_rel_margin": [float(m) for _, m in pairs],
            "engine": "llama.cpp (libllama, 2 threads, f16 KV, flash attention off)",
            "engine_version": version,
            "machine": machine,
            "made_by": "scripts/llamacpp/requant_reference.sh",
        }))
PY
echo "wrote $OUT" >&2
