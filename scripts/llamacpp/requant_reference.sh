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
# With `--forced REF.jsonl` it writes nothing: this machine's llama.cpp is teacher-forced
# along REF's tokens (each step fed REF's token, not its own choice) and the script prints
# where its own choice differs from REF's and at which of REF's margins. Run on an AVX-512
# machine against the AVX2 reference, that is llama.cpp against itself on the same
# contexts (docs/testing.md).
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
scripts/llamacpp/build_greedy.sh "$LLAMA_CPP" "$work/greedy"
PROMPTS=crates/rkv-engine/tests/data/llamacpp_greedy.jsonl
FORCED=""
if [ "${1:-}" = --forced ]; then
  FORCED=${2:?--forced needs a reference .jsonl}
fi
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
  if [ -n "$FORCED" ]; then
    python3 scripts/llamacpp/forced_lines.py "$FORCED" "$t" > "$work/$t.forced.txt"
    "$work/greedy" "$work/$t.gguf" 48 2 < "$work/$t.forced.txt" > "$work/$t.out" 2> "$work/$t.log"
  else
    "$work/greedy" "$work/$t.gguf" 48 2 < "$work/prompts.txt" > "$work/$t.out" 2> "$work/$t.log"
  fi
done
if [ -n "$FORCED" ]; then
  python3 - "$FORCED" "$work" <<'PY'
import json, sys
ref_path, work = sys.argv[1:]
rows = [json.loads(l) for l in open(ref_path) if l.strip()]
steps, differ = 0, []
for t in ["q4_k_m", "q5_k_m", "q6_k", "q8_0"]:
    mine = [l.split() for l in open(f"{work}/{t}.out")]
    refs = [r for r in rows if r["file_type"] == t]
    assert len(mine) == len(refs), (t, len(mine), len(refs))
    for i, (r, out) in enumerate(zip(refs, mine)):
        got = [int(x.split(":")[0]) for x in out]
        assert len(got) == len(r["token_ids"]), (t, i)
        for s, (g, w, m) in enumerate(zip(got, r["token_ids"], r["top2_rel_margin"])):
            steps += 1
            if g != w:
                differ.append((m, t, i, s))
print(f"teacher-forced along {ref_path}: {len(differ)} of {steps} choices differ, "
      f"{sum(m >= 0.005 for m, *_ in differ)} where the reference's margin is at least 0.5%")
for m, t, i, s in sorted(differ, reverse=True):
    print(f"  {t} prompt {i} step {s}: reference margin {m:.4f}")
PY
  exit 0
fi
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
