#!/usr/bin/env bash
# Packs flash22's GPU run (run.sh beside it) with the binaries of $BUILD (default build; sm_90 in
# it) into /work/main/build-deps/flash22/${NAME:-bundle.tar.xz}: bin/{gpu_check,cuda_model_check,
# cuda_spec_check,tandem-bench-cuda,tandem-random-checkpoint}, run.sh, COMMIT. NAME: the bundle's
# file name (default bundle.tar.xz); V1: a tandem-bench-cuda of another commit to time beside it,
# packed as bin/tandem-bench-cuda-v1.
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build}
stage=$(mktemp -d)/flash22
mkdir -p "$stage/bin"
for f in tests/kernels/gpu_check tests/model/cuda_model_check tests/spec/cuda_spec_check engine/bench/tandem-bench-cuda \
  engine/bench/tandem-random-checkpoint; do
  strip -o "$stage/bin/$(basename "$f")" "$b/$f"
done
[ -z "${V1:-}" ] || cp "$V1" "$stage/bin/tandem-bench-cuda-v1"
cp engine/bench/gpu-flash22/run.sh "$stage/"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo +dirty)" >"$stage/COMMIT"
mkdir -p /work/main/build-deps/flash22
tar -C "$stage" -cf - . | xz -9 -T1 >/work/main/build-deps/flash22/${NAME:-bundle.tar.xz}.tmp
mv /work/main/build-deps/flash22/${NAME:-bundle.tar.xz}.tmp /work/main/build-deps/flash22/${NAME:-bundle.tar.xz}
rm -rf "$(dirname "$stage")"
ls -la /work/main/build-deps/flash22/${NAME:-bundle.tar.xz}
