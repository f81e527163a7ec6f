#!/usr/bin/env bash
# `rkv inspect`'s report in a real browser: renders reports of real runs on the default
# model in headless Chromium (Debian's `chromium`, installed with apt-get when missing)
# and checks through the dumped DOM that there is one element per token, that the page
# counts the compression events the JSON record holds, and that stepping to event k
# (URL fragment `#policy=i&event=k`) shows, token by token, the retention the JSON gives
# for event k. Then prints how long an 8,000-token trace's report takes to open
# (printed, not asserted; skip with INSPECT_LONG=0).
#
#   ./scripts/inspect_chromium_test.sh
#
# Env: TRACES (default ../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl),
# RKV (a built rkv binary; default: cargo build --release), OUT_DIR (kept reports),
# INSPECT_LONG=0 (skip the 8,000-token timing), THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
TRACES=${TRACES:-../shared/data/traces/r1-distill-qwen-1.5b_math100_fullkv.jsonl}
THREADS=${THREADS:-2}
OUT_DIR=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$OUT_DIR"

if [ -z "${RKV:-}" ]; then
    cargo build --release -q -p rkv-cli
    RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
fi
if [ ! -f "$TRACES" ]; then
    echo "FAIL: no trace file at $TRACES (set TRACES)"
    exit 1
fi

CHROMIUM=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$CHROMIUM" ]; then
    echo "chromium is missing: installing Debian's chromium package with apt-get"
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO="sudo"
    if ! { $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium; } >"$OUT_DIR/apt.log" 2>&1; then
        echo "FAIL: chromium could not be installed here (see $OUT_DIR/apt.log); the report was NOT checked in a browser"
        exit 1
    fi
    CHROMIUM=$(command -v chromium)
fi
echo "browser: $("$CHROMIUM" --version 2>/dev/null | head -1)"

dump() { # file fragment -> DOM on stdout
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --virtual-time-budget=30000 \
        --dump-dom "file://$(realpath "$1")#$2" 2>/dev/null
}

# 1. A real run: R-KV against SnapKV, budget 128, a real trace teacher-forced.
report="$OUT_DIR/check.html"
"$RKV" inspect --threads "$THREADS" --trace "$TRACES" --index 0 --max-tokens 600 \
    --kv-policy rkv --compare-policy snapkv --kv-budget 128 \
    --out "$report" --json-out "$OUT_DIR/check.json"

checked=0
for pi in 0 1; do
    events=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['policies'][$pi]['events']))" "$OUT_DIR/check.json")
    for k in $(seq 0 $((events - 1))); do
        dump "$report" "policy=$pi&event=$k" >"$OUT_DIR/dom_${pi}_$k.html"
        python3 - "$OUT_DIR/check.json" "$OUT_DIR/dom_${pi}_$k.html" "$pi" "$k" <<'EOF'
import json, re, sys
rec = json.load(open(sys.argv[1]))
dom = open(sys.argv[2]).read()
pi, k = int(sys.argv[3]), int(sys.argv[4])
pol = rec["policies"][pi]
n = len(rec["tokens"])
tags = re.findall(r'<span class="tok[^"]*"[^>]*>', dom)
assert len(tags) == n, f"{len(tags)} token elements for {n} tokens"
spans = [(re.search(r'data-pos="(\d+)"', t).group(1), re.search(r'data-kept="(-?\d+)"', t).group(1)) for t in tags]
assert [int(p) for p, _ in spans] == list(range(n)), "token elements out of order"
state = re.search(r'<span id="state"[^>]*>', dom).group(0)
attr = dict(re.findall(r'data-([a-z]+)="([^"]*)"', state))
assert int(attr["events"]) == len(pol["events"]), f"page shows {attr['events']} events, JSON has {len(pol['events'])}"
assert int(attr["event"]) == k and attr["policy"] == pol["policy"], attr
ev = pol["events"][k]
want = [0] * n
for layer in ev["kept"].values():
    for ranges in layer.values():
        for a, b in ranges:
            for p in range(a, b):
                want[p] += 1
got = [int(c) for _, c in spans]
for p in range(n):
    w = want[p] if p <= ev["position"] else -1
    assert got[p] == w, f"{pol['policy']} event {k}: token {p} shows {got[p]} holders, JSON gives {w}"
held = sum(1 for c in got if c > 0)
print(f"ok: {pol['policy']} event {k + 1}/{len(pol['events'])}: {n} token elements, retention of all {n} as in the JSON ({held} held by some head)")
EOF
        checked=$((checked + 1))
    done
done
echo "PASS: $checked events checked in Chromium"

# 2. How long an 8,000-token trace's report takes to open.
if [ "${INSPECT_LONG:-1}" != 0 ]; then
    long="$OUT_DIR/long.html"
    if [ ! -f "$long" ]; then
        echo "writing an 8,000-token report (teacher-forcing three runs: minutes on 2 cores)"
        "$RKV" inspect --threads "$THREADS" --trace "$TRACES" --index 9 --max-tokens 8000 \
            --kv-policy rkv --compare-policy snapkv --kv-budget 256 --out "$long"
    fi
    tokens=$(dump "$long" "policy=0&event=0" | grep -o 'class="tok' | wc -l)
    echo '<!DOCTYPE html><html><body>empty</body></html>' >"$OUT_DIR/empty.html"
    shot() { # file -> wall seconds of a headless screenshot
        local start end
        start=$(date +%s.%N)
        "$CHROMIUM" --headless --no-sandbox --disable-gpu --window-size=1400,1000 \
            --screenshot="$OUT_DIR/shot.png" "file://$(realpath "$1")#policy=0&event=0" >/dev/null 2>&1
        end=$(date +%s.%N)
        python3 -c "print(round($end - $start, 2))"
    }
    echo "8,000-token report: $tokens tokens, $(du -h "$long" | cut -f1); times from the page's own clock (navigation start):"
    for i in 1 2 3; do
        dom=$(dump "$long" "policy=0&event=0")
        attr() { grep -o "data-$1-ms=\"[0-9+]*\"" <<<"$dom" | head -1 | cut -d'"' -f2; }
        echo "  run $i: data parsed at $(attr parse) ms (start+duration), first render done at $(attr render) ms, near-duplicate groups at $(attr dups) ms; headless screenshot $(shot "$long") s against $(shot "$OUT_DIR/empty.html") s for an empty page (chromium start-up)"
    done
fi
