#!/usr/bin/env bash
# Passkey retrieval through compressed prompts (BENCHMARKS.md, "Prompt compression"):
# `rkv eval passkey` per model, FullKV against each policy x budget x prompt mode, a key
# at 10%, 50% and 90% depth. Records go to bench/results/passkey.MODEL.LENGTHS.jsonl, the
# summary to .summary.json and the plot to docs/img/passkey.MODEL.svg.
# Usage: scripts/passkey_sweep.sh [MODEL]   (default: smollm2-135m)
# Env: LENGTHS (4000), DEPTHS (0.1,0.5,0.9), POLICIES (rkv,snapkv,h2o,streamingllm,h2o-mean),
#      BUDGETS (256,1024,2048), MODES (keep,compress), TRIALS (1).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-smollm2-135m}
LENGTHS=${LENGTHS:-4000}
DEPTHS=${DEPTHS:-0.1,0.5,0.9}
POLICIES=${POLICIES:-rkv,snapkv,h2o,streamingllm,h2o-mean}
BUDGETS=${BUDGETS:-256,1024,2048}
MODES=${MODES:-keep,compress}
TRIALS=${TRIALS:-1}
cargo build --release -q -p rkv-cli
mkdir -p bench/results docs/img
tag="$MODEL.${LENGTHS//,/-}"
target/release/rkv eval passkey --model "$MODEL" --lengths "$LENGTHS" --depths "$DEPTHS" \
    --policies "$POLICIES" --budgets "$BUDGETS" --prompt-modes "$MODES" --trials "$TRIALS" \
    --output "bench/results/passkey.$tag.jsonl" --plot "docs/img/passkey.$tag.svg" --json \
    > "bench/results/passkey.$tag.summary.json"
python3 - "bench/results/passkey.$tag.summary.json" <<'PY'
import json, sys
for s in json.load(open(sys.argv[1]))["summary"]:
    b = s["budget"] if s["budget"] is not None else "-"
    print(f'{s["policy"]:<13} {b:>5} {s["prompt_mode"]:>9} {s["length"]:>6} '
          f'acc={s["accuracy"]:.2f} ({s["runs"]} runs) peak={s["kv_slots_peak"]}')
PY
# What scripts/render_benchmarks.py prints above the table.
python3 - "bench/results/passkey.$tag.meta.json" "$MODEL" "$LENGTHS" "$DEPTHS" "$POLICIES" "$BUDGETS" "$MODES" "$TRIALS" <<'PY'
import json, subprocess, sys, datetime
path, model, lengths, depths, policies, budgets, modes, trials = sys.argv[1:]
cpu = [l.split(":", 1)[1].strip() for l in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
       if l.startswith("Model name")]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"model": model, "command": f"rkv eval passkey --model {model} --lengths {lengths} --depths {depths} "
           f"--policies {policies} --budgets {budgets} --prompt-modes {modes} --trials {trials}",
           "machine": (cpu[0] if cpu else "unknown") + ", 2 threads", "commit": commit,
           "date": datetime.date.today().isoformat()}, open(path, "w"))
PY
