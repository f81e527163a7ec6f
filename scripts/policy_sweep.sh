#!/usr/bin/env bash
# Every registered policy against FullKV (docs/compression.md, "Measured"):
# `rkv eval fidelity --policies all` on the tuning and held-out MATH traces, then the
# variants tried and not kept, each printed as one line of KL and top-1 per budget.
# Usage: scripts/policy_sweep.sh [MODEL ...]   (default: smollm2-135m qwen2.5-coder-1.5b)
# Env: SETS ("tune heldout"), LIMIT (traces per set, default 3), TOKENS (per trace, 1500),
#      BUDGETS (256,512), POLICIES (all), VARIANTS (1: also the variants),
#      SHARED_TRACES (../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl).
# The trace sets are lines of the shared file (the first ones with more than 5,000
# characters of output), written to target/policy-traces/; nothing is committed.
set -euo pipefail
cd "$(dirname "$0")/.."
SETS=${SETS:-tune heldout}
LIMIT=${LIMIT:-3}
TOKENS=${TOKENS:-1500}
BUDGETS=${BUDGETS:-256,512}
POLICIES=${POLICIES:-all}
SHARED_TRACES=${SHARED_TRACES:-../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl}
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(smollm2-135m qwen2.5-coder-1.5b)
[ -f "$SHARED_TRACES" ] || { echo "no traces at $SHARED_TRACES (set SHARED_TRACES)" >&2; exit 1; }
cargo build --release -q -p rkv-cli
mkdir -p bench/results target/policy-traces
sed -n '2p;8p;10p' "$SHARED_TRACES" > target/policy-traces/tune.jsonl
sed -n '12p;16p;18p' "$SHARED_TRACES" > target/policy-traces/heldout.jsonl
summary() {
    python3 -c '
import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])["summary"]
print(" ".join("%s@%d kl=%.4f top1=%.4f" % (x["policy"], x["budget"], x["kl_mean"], x["top1_agreement"]) for x in d))'
}
fidelity() {
    target/release/rkv eval fidelity --model "$1" --traces "target/policy-traces/$2.jsonl" \
        --limit "$LIMIT" --max-tokens "$TOKENS" --budgets "$BUDGETS" --json "${@:3}"
}
for m in "${models[@]}"; do
    for ts in $SETS; do
        out="bench/results/policies.$m.$ts.jsonl"
        fidelity "$m" "$ts" --policies "$POLICIES" > "$out"
        echo "$m $ts: $(summary < "$out")"
        [ "${VARIANTS:-1}" = 1 ] && [ "$ts" = tune ] || continue
        for v in "hybrid gamma=0.5" "hybrid beta=0.2" "hybrid recent=0.25" \
                 "h2o recent=0.25" "h2o recent=0.75" "h2o-mean halflife=512"; do
            set -- $v
            pol=$1; shift
            args=()
            for p in "$@"; do args+=(--kv-param "$p"); done
            echo "$m $ts $v: $(fidelity "$m" "$ts" --policies "$pol" "${args[@]}" | summary)"
        done
    done
done
