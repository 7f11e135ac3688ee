#!/usr/bin/env bash
# Packs attn22's GPU run (run.sh beside it) with the binaries of build-cuda (sm_90) into
# /work/main/build-deps/attn22/bundle.tar.xz: bin/{gpu_check,gpu_timing,tandem-bench-cuda,
# cuda_model_check,cuda_spec_check,tandem-random-checkpoint}, run.sh, COMMIT.
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build-cuda}
stage=$(mktemp -d)/attn22
mkdir -p "$stage/bin"
for f in tests/kernels/gpu_check tests/kernels/gpu_timing engine/bench/tandem-bench-cuda tests/model/cuda_model_check \
  tests/spec/cuda_spec_check engine/bench/tandem-random-checkpoint; do
  strip -o "$stage/bin/$(basename "$f")" "$b/$f"
done
cp engine/bench/gpu-attn22/run.sh "$stage/"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo +dirty)" >"$stage/COMMIT"
mkdir -p /work/main/build-deps/attn22
tar -C "$stage" -cf - . | xz -6 -T2 >/work/main/build-deps/attn22/bundle.tar.xz.tmp
mv /work/main/build-deps/attn22/bundle.tar.xz.tmp /work/main/build-deps/attn22/bundle.tar.xz
rm -rf "$(dirname "$stage")"
ls -la /work/main/build-deps/attn22/bundle.tar.xz
