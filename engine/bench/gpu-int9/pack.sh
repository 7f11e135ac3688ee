#!/usr/bin/env bash
# Packs the call scripts beside this file with the sm_90 binaries of build-cuda into
# build-deps/int9/bundle.tar.xz, the bundle every script here unpacks:
#   int9/bin/{gpu_check,cuda_model_check,glm5_next_cuda_check,tandem-bench-cuda,cuda_spec_check,tandem_spec_bench,gpu_timing,
#   tandem-random-checkpoint},
#   int9/*.sh, int9/COMMIT (the commit the binaries were built at; +dirty with uncommitted changes).
# Build them first: ninja -C build-cuda gpu_check cuda_model_check glm5_next_cuda_check tandem_spec_bench gpu_timing \
#   tandem-bench-cuda cuda_spec_check tandem-random-checkpoint. Then, on the GPU machine, with build-deps/int9 carried:
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/NAME.sh
# xz -9e matters: the binaries repeat their device code, and the bundle must fit beside the tracked
# tree in the 64 MiB a call carries (about 4.5 MB this way, 17 MB with xz -6).
set -euo pipefail
cd "$(dirname "$0")/../../.."
b=${BUILD:-build-cuda}
stage=$(mktemp -d)
mkdir -p "$stage/int9/bin"
for f in tests/kernels/gpu_check tests/model/cuda_model_check tests/model/glm5_next_cuda_check engine/bench/tandem-bench-cuda \
  tests/spec/cuda_spec_check engine/spec_decode/tandem_spec_bench tests/kernels/gpu_timing engine/bench/tandem-random-checkpoint; do
  strip -o "$stage/int9/bin/$(basename "$f")" "$b/$f"
done
cp engine/bench/gpu-int9/*.sh "$stage/int9/"
echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo +dirty)" >"$stage/int9/COMMIT"
mkdir -p build-deps/int9
tar -C "$stage" -cf - int9 | xz -9e -T2 >build-deps/int9/bundle.tar.xz.tmp
mv build-deps/int9/bundle.tar.xz.tmp build-deps/int9/bundle.tar.xz
rm -rf "$stage"
ls -la build-deps/int9/bundle.tar.xz
