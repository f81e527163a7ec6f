#!/usr/bin/env bash
# The portable build (`-C target-cpu=x86-64`, target/portable/) against the default native
# one (`-C target-cpu=native`, target/release/) on the default model: `rkv bench decode`
# at depths 0 and 2048, the two binaries in turn, ROUNDS times each (default 2). Both
# choose their SIMD paths at run time; this measures what the rest of the code (compiled
# for the baseline instead of this CPU) costs. Writes bench/results/portable.jsonl and
# re-renders BENCHMARKS.md; about 5 minutes on 2 cores once both are built.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
cargo build --release -p rkv-cli
RUSTFLAGS="-C target-cpu=x86-64" CARGO_TARGET_DIR=target/portable cargo build --release -p rkv-cli
out=bench/results/portable.jsonl
tmp=$(mktemp)
{
  python3 scripts/bench_header.py "rkv bench decode --threads 2 --depths 0,2048 --tokens 64 --repeat 3 --json"
  for round in $(seq "$ROUNDS"); do
    for build in native portable; do
      bin=target/release/rkv
      [ "$build" = portable ] && bin=target/portable/release/rkv
      echo "== round $round, $build" >&2
      "$bin" --version | sed -n 's/^kernels: //p' | python3 -c 'import json,sys; print(json.dumps({"build": sys.argv[1], "round": int(sys.argv[2]), "kernels": sys.stdin.read().strip()}))' "$build" "$round"
      "$bin" bench decode --threads 2 --depths 0,2048 --tokens 64 --repeat 3 --json |
        python3 -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l); r["build"] = sys.argv[1]; r["round"] = int(sys.argv[2]); print(json.dumps(r))' "$build" "$round"
    done
  done
} > "$tmp"
mv "$tmp" "$out"
python3 scripts/render_benchmarks.py
