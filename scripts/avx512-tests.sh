#!/usr/bin/env bash
# The AVX-512 paths' tests from a machine without AVX-512 (or on one): builds the test
# binaries of rkv-core and rkv-kernels for x86-64-v4 with VNNI (the SIMD paths are chosen
# at run time, so any build tests them on such a CPU; this one also has the rest of the
# code compiled for it) into target/avx512-tests/, with the golden vectors and run.sh beside
# them. Copy that folder to an AVX-512 machine (glibc as new as this one's) and run
# `bash run.sh` there; on an AVX-512 machine this script runs them at once.
# `./scripts/test.sh` tests only the paths of the CPU it runs on.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/avx512-tests
host=$(rustc -vV | sed -n 's/^host: //p')
golden=${RKV_GOLDEN_DIR:-../shared/golden}
[ -d "$golden" ] || golden=crates/rkv-core/tests/golden
rm -rf "$out"
mkdir -p "$out/bin"
# With --target, RUSTFLAGS reach the test binaries only, not the build scripts run here;
# without debug info the binaries are a tenth of the size, easier to copy.
RUSTFLAGS="-C target-cpu=x86-64-v4 -C target-feature=+avx512vnni" \
  CARGO_TARGET_DIR=target/avx512-build CARGO_PROFILE_RELEASE_DEBUG=false \
  cargo test --release --target "$host" -p rkv-core -p rkv-kernels --no-run \
  --message-format=json-render-diagnostics |
  grep -o '"executable":"[^"]*"' | sed 's/"executable":"//; s/"$//' |
  while read -r exe; do
    name=$(basename "$exe")
    cp "$exe" "$out/bin/${name%-*}"
  done
cp -r "$golden" "$out/golden"
cat > "$out/run.sh" <<'EOF'
#!/usr/bin/env bash
# Runs the AVX-512 build's tests of rkv-core and rkv-kernels (see scripts/avx512-tests.sh).
set -uo pipefail
cd "$(dirname "$0")"
for f in avx512f avx512bw avx512vl avx512_vnni; do
  grep -qw "$f" /proc/cpuinfo || { echo "this CPU lacks $f: the AVX-512 build cannot run here" >&2; exit 2; }
done
export RKV_GOLDEN_DIR=$PWD/golden
status=0
for t in bin/*; do
  echo "== $(basename "$t")"
  "$t" -q || status=1
done
exit $status
EOF
echo "built $(ls "$out/bin" | wc -l) test binaries in $out (golden vectors from $golden)"
if grep -qw avx512f /proc/cpuinfo && grep -qw avx512bw /proc/cpuinfo \
  && grep -qw avx512vl /proc/cpuinfo && grep -qw avx512_vnni /proc/cpuinfo; then
  bash "$out/run.sh"
else
  echo "this CPU has no AVX-512 (with VNNI): copy $out to one and run 'bash run.sh' there"
fi
