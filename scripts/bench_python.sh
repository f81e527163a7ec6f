#!/usr/bin/env bash
# The Python binding's cost (docs/python.md): examples/passk.py, run from a fresh virtual
# environment holding only `pip install .` (the wheel built from this checkout and tqdm),
# against `rkv eval math` on the same settings: the first PROBLEMS (default 20) MATH-500
# problems x 8 samples, R-KV at budget 256, MAX_TOKENS (default 256) tokens, temperature
# 0.6, top-p 0.95, seed 42, 2 threads. The two run in turn, REPEAT times (default 4), the
# CLI first in odd repeats and Python first in even ones (this machine's speed drifts by
# 15% over minutes); each run's tokens/s, its tokens per CPU-second (user + system time
# of the whole process, from /usr/bin/time: the work each did, less sensitive than wall
# time to what else the machine runs) and the ratios per repeat go to bench/results/python.jsonl (a header
# line: command, machine, commit, date), then BENCHMARKS.md is re-rendered. Needs
# ../shared/data/math500.jsonl (or DATASET=PATH). About 15 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
DATASET="${DATASET:-../shared/data/math500.jsonl}"
PROBLEMS="${PROBLEMS:-20}"
MAX_TOKENS="${MAX_TOKENS:-256}"
REPEAT="${REPEAT:-4}"
cargo build --release -p rkv-cli
RKV="${CARGO_TARGET_DIR:-target}/release/rkv"
"$RKV" fetch > /dev/null
VENV=target/bench-py-venv
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check .
common="--samples 8 --max-tokens $MAX_TOKENS --temperature 0.6 --top-p 0.95 --seed 42 --threads 2 --json"
cli=(eval math --dataset "$DATASET" --limit "$PROBLEMS" --kv-policy rkv --kv-budget 256 $common --output /dev/null)
py=(examples/passk.py --dataset "$DATASET" --problems "$PROBLEMS" --policy rkv --budget 256 $common)
OUT=bench/results
mkdir -p "$OUT"
tmp=$(mktemp)
python3 scripts/bench_header.py "$RKV ${cli[*]} ; $VENV/bin/python ${py[*]}" > "$tmp"
summary() { grep '^{"summary"' | tail -1; }
for r in $(seq 1 "$REPEAT"); do
  run_cli() {
    echo "== repeat $r/$REPEAT: rkv eval math" >&2
    c=$(/usr/bin/time -f "%U %S" -o "$tmp.cpu_cli" "$RKV" "${cli[@]}" 2>/dev/null | summary)
  }
  run_py() {
    echo "== repeat $r/$REPEAT: examples/passk.py" >&2
    p=$(/usr/bin/time -f "%U %S" -o "$tmp.cpu_py" "$VENV/bin/python" "${py[@]}" 2>/dev/null | summary)
  }
  if [ $((r % 2)) = 1 ]; then run_cli; run_py; else run_py; run_cli; fi
  python3 - "$r" "$c" "$p" "$(cat "$tmp.cpu_cli")" "$(cat "$tmp.cpu_py")" >> "$tmp" <<'PY'
import json, sys
r, c, p = int(sys.argv[1]), json.loads(sys.argv[2])["summary"], json.loads(sys.argv[3])["summary"]
c["cpu"], p["cpu"] = (sum(map(float, a.split())) for a in sys.argv[4:6])
tps = lambda s: s["generated_tokens"] / s["seconds"]
tpc = lambda s: s["generated_tokens"] / s["cpu"]
print(json.dumps({"bench": "python_passk", "repeat": r,
                  "cli_tok_s": tps(c), "py_tok_s": tps(p), "py_over_cli": tps(p) / tps(c),
                  "cli_cpu_s": c["cpu"], "py_cpu_s": p["cpu"],
                  "py_over_cli_per_cpu_s": tpc(p) / tpc(c),
                  "cli_seconds": c["seconds"], "py_seconds": p["seconds"],
                  "cli_tokens": c["generated_tokens"], "py_tokens": p["generated_tokens"],
                  "cli_pass_at_1": c["pass_at_1"], "py_pass_at_1": p["pass_at_1"],
                  "py_pass_at_8": p["pass_at_8"], "problems": c["n_problems"],
                  "samples": c["samples"], "max_tokens": c["max_tokens"]}))
PY
  tail -1 "$tmp" >&2
done
rm -f "$tmp.cpu_cli" "$tmp.cpu_py"
mv "$tmp" "$OUT/python.jsonl"
python3 scripts/render_benchmarks.py
