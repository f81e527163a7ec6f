#!/usr/bin/env bash
# Every registered policy against FullKV on both named models (docs/compression.md,
# "Measured"): `rkv eval fidelity --policies all` on the shared MATH traces, then the
# variants tried and not kept, each printed as one line of KL and top-1 per budget.
# Usage: scripts/policy_sweep.sh [MODEL ...]   (default: smollm2-135m qwen2.5-coder-1.5b)
# Env: LIMIT (traces, default 3), TOKENS (per trace, 1500), BUDGETS (256,512),
#      TRACES (../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-3}
TOKENS=${TOKENS:-1500}
BUDGETS=${BUDGETS:-256,512}
TRACES=${TRACES:-../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(smollm2-135m qwen2.5-coder-1.5b)
cargo build --release -q -p rkv-cli
mkdir -p bench/results
summary() {
    python3 -c '
import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])["summary"]
print(" ".join("%s@%d kl=%.4f top1=%.4f" % (x["policy"], x["budget"], x["kl_mean"], x["top1_agreement"]) for x in d))'
}
for m in "${models[@]}"; do
    out="bench/results/policies.$m.jsonl"
    target/release/rkv eval fidelity --model "$m" --traces "$TRACES" --limit "$LIMIT" \
        --max-tokens "$TOKENS" --budgets "$BUDGETS" --policies all --json > "$out"
    echo "$m all: $(summary < "$out")"
    [ "${VARIANTS:-1}" = 1 ] || continue
    for v in "h2o recent=0.25" "h2o recent=0.75" "hybrid gamma=0.5" "hybrid beta=0.5"; do
        set -- $v
        pol=$1; shift
        args=()
        for p in "$@"; do args+=(--kv-param "$p"); done
        r=$(target/release/rkv eval fidelity --model "$m" --traces "$TRACES" --limit "$LIMIT" \
            --max-tokens "$TOKENS" --budgets "$BUDGETS" --policies "$pol" "${args[@]}" --json)
        echo "$m $v: $(summary <<< "$r")"
    done
done
