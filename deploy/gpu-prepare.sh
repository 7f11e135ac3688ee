#!/usr/bin/env bash
# Fills build-deps/ (ignored by git) on a build machine with nvcc, for deploy/gpu-bench.sh on a GPU
# machine that has CUDA but none of the project's libraries; hand it over with the run tool's
# carry (64 MiB limit):
#   build-deps/include   nlohmann-json headers (the stand-alone GPU build needs them)
#   build-deps/bin       cuda_model_check, tandem-bench-cuda and tandem-quantize (engine/bench/gpu,
#                        sm_$CUDA_ARCH; deploy/gpu-quant-bench.sh uses the last), and
#                        gpu_check (tests/kernels/gpu) for deploy/gpu-decode-profile.sh
#   build-deps/serve     tandem-serve (stripped, from $SERVE_BUILD, configured with CUDA) and the
#                        shared libraries it needs beyond glibc, CUDA and NCCL (ldd)
# Then there:  BENCH_BIN=build-deps/bin ./deploy/gpu-bench.sh
# With --bundle it also builds glm5_next_cuda_check (engine/bench/gpu), cuda_spec_check and
# tandem_spec_bench ($SERVE_BUILD) and packs every binary and library, stripped, into
# build-deps/bundle.tar.xz (about 13 MB: it fits the carry beside the tracked tree, which the
# uncompressed ICU data does not), for deploy/gpu-verify.sh.
# With --spec it builds only what engine/spec_decode/bench/gpu-dflash.sh runs (cuda_spec_check,
# tandem_spec_bench and tandem-serve, in $SERVE_BUILD: no stand-alone trees) and packs them the same
# way into build-deps/spec-bundle.tar.xz.
# With --bind it builds tandemctl, tandemd and tandem-serve ($SERVE_BUILD, configured with CUDA) and
# packs them, stripped, into bin/ and the shared libraries the three need beyond glibc, CUDA and NCCL
# (libssh, pcre2, ICU, ...) into lib/ of build-deps/bind-bundle.tar.xz, for deploy/gpu-bind.sh.
# With --speed it packs issue 22's speed runs into build-deps/speed-bundle.tar.xz: tandem-bench-cuda
# (engine/bench/gpu) and tandem-random-checkpoint ($SERVE_BUILD), stripped, in bin/, and the
# scripts they run with in tree/ (so a GPU machine's older tree runs this one's); there:
#   tar xJf build-deps/speed-bundle.tar.xz -C /tmp && BIN=/tmp/speed/bin bash /tmp/speed/tree/engine/bench/gpu-peers.sh OUT
#   (or gpu-real-shape.sh OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
arch=${CUDA_ARCH:-90}
serve_build=${SERVE_BUILD:-build-cuda}
# Strips the binaries and the serve libraries into a folder "bundle" packed as build-deps/$1.
pack() {
  local name=$1 stage
  shift
  stage=$(mktemp -d)/bundle
  mkdir -p "$stage/serve/lib"
  cp -r build-deps/serve/lib/. "$stage/serve/lib/"
  for f in "$@"; do strip -o "$stage/$(basename "$f")" "$f"; done
  cp build-deps/serve/tandem-serve "$stage/serve/"
  # The commit the binaries were built from (with "+dirty" for uncommitted changes): the GPU
  # machine's copy of the tree may carry an older .git, so its git log does not say.
  echo "$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!build-deps' || echo +dirty)" >"$stage/COMMIT"
  # xz -9e: a serve build for two architectures packs to 21 MB at xz's default level and 13.5 MB
  # so, and the tracked tree (47 MB) leaves about 20 MB of the carry.
  tar -C "$(dirname "$stage")" -cf - bundle | xz -9e -T0 >"build-deps/$name"
  ls -la "build-deps/$name"
}
# The shared libraries BINARY needs beyond glibc (whose parts must match the machine's own), the
# C++ runtime, CUDA and NCCL, which the GPU machine has. None left is no error: grep's status 1
# would otherwise fail the pipeline (pipefail) and end the script without a word.
needed_libs() {
  ldd "$1" | awk '/=> \// {print $3}' |
    { grep -vE '/(libc|libm|libgcc_s|libstdc\+\+|libpthread|libdl|librt|libresolv|ld-linux[^/]*)\.so|/cuda/|libnccl|libcublas|libcudart' || [ $? = 1 ]; }
}
copy_serve() {
  mkdir -p build-deps/serve/lib
  strip -o build-deps/serve/tandem-serve "$serve_build/engine/tandem-serve"
  needed_libs "$serve_build/engine/tandem-serve" | xargs -r -I{} cp -L {} build-deps/serve/lib/
}
# With --tp: cuda_tp_check and tandem-serve for engine/bench/gpu-tp.sh, into build-deps/tp-bundle.tar.xz.
if [ "${1:-}" = --tp ]; then
  ninja -C "$serve_build" -j "${JOBS:-2}" cuda_tp_check tandem-serve
  copy_serve
  pack tp-bundle.tar.xz "$serve_build/tests/model/cuda_tp_check"
  exit 0
fi
if [ "${1:-}" = --bind ]; then
  ninja -C "$serve_build" -j "${JOBS:-2}" tandemctl tandemd tandem-serve
  "$serve_build/engine/tandem-serve" --version | grep "CUDA sm_$arch" >/dev/null ||
    { echo "gpu-prepare.sh --bind: $serve_build/engine/tandem-serve is not built for CUDA sm_$arch" >&2; exit 1; }
  stage=$(mktemp -d)/bundle
  mkdir -p "$stage/bin" "$stage/lib"
  for t in controller/tandemctl agent/tandemd engine/tandem-serve; do
    strip -o "$stage/bin/$(basename "$t")" "$serve_build/$t"
    needed_libs "$serve_build/$t" | xargs -r -I{} cp -L {} "$stage/lib/"
  done
  strip --strip-unneeded "$stage"/lib/*.so*
  tar -C "$(dirname "$stage")" -cf - bundle | xz -9e -T0 >build-deps/bind-bundle.tar.xz
  rm -rf "$(dirname "$stage")"
  ls -la build-deps/bind-bundle.tar.xz
  exit 0
fi
if [ "${1:-}" = --speed ]; then
  mkdir -p build-deps/include
  cp -r /usr/include/nlohmann build-deps/include/
  cmake -S engine/bench/gpu -B build-gpu-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DNLOHMANN_INCLUDE="$PWD/build-deps/include" >/dev/null
  ninja -C build-gpu-bench -j "${JOBS:-2}" tandem-bench-cuda
  ninja -C "$serve_build" -j "${JOBS:-2}" tandem-random-checkpoint
  stage=$(mktemp -d)/speed
  mkdir -p "$stage/bin" "$stage/tree/engine/bench"
  strip -o "$stage/bin/tandem-bench-cuda" build-gpu-bench/tandem-bench-cuda
  strip -o "$stage/bin/tandem-random-checkpoint" "$serve_build/engine/bench/tandem-random-checkpoint"
  cp engine/bench/{hf_bench.py,bench_step.sh,gpu-peers.sh,gpu-real-shape.sh,peers_report.py,real_shape_report.py} "$stage/tree/engine/bench/"
  git rev-parse --short HEAD >"$stage/COMMIT"
  tar -C "$(dirname "$stage")" -cf - speed | xz -9e -T0 >build-deps/speed-bundle.tar.xz
  rm -rf "$(dirname "$stage")"
  ls -la build-deps/speed-bundle.tar.xz
  exit 0
fi
if [ "${1:-}" = --spec ]; then
  ninja -C "$serve_build" -j "${JOBS:-2}" cuda_spec_check tandem_spec_bench tandem-serve
  copy_serve
  pack spec-bundle.tar.xz "$serve_build/tests/spec/cuda_spec_check" "$serve_build/engine/spec_decode/tandem_spec_bench"
  exit 0
fi
mkdir -p build-deps/include build-deps/bin build-deps/serve/lib
cp -r /usr/include/nlohmann build-deps/include/
cmake -S engine/bench/gpu -B build-gpu-bench -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DNLOHMANN_INCLUDE="$PWD/build-deps/include" >/dev/null
ninja -C build-gpu-bench -j "${JOBS:-2}"
cp build-gpu-bench/cuda_model_check build-gpu-bench/tandem-bench-cuda build-gpu-bench/tandem-quantize build-deps/bin/
cmake -S tests/kernels/gpu -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" >/dev/null
ninja -C build-gpu -j "${JOBS:-2}" gpu_check
cp build-gpu/gpu_check build-deps/bin/
if [ -x "$serve_build/engine/tandem-serve" ]; then
  copy_serve
fi
du -sh build-deps
if [ "${1:-}" = --bundle ]; then
  # gpu_timing and tandem-random-checkpoint for engine/bench/gpu-merged.sh; LEAN=1 leaves
  # tandem_spec_bench (gpu-dflash.sh's) out, 18 MB unpacked, when the carry is tight.
  ninja -C build-gpu-bench -j "${JOBS:-2}" glm5_next_cuda_check
  ninja -C build-gpu -j "${JOBS:-2}" gpu_timing
  ninja -C "$serve_build" -j "${JOBS:-2}" cuda_spec_check tandem_spec_bench tandem-random-checkpoint tandem-serve
  copy_serve
  spec_bench=$([ "${LEAN:-0}" = 1 ] || echo "$serve_build/engine/spec_decode/tandem_spec_bench")
  pack bundle.tar.xz build-deps/bin/* build-gpu-bench/glm5_next_cuda_check build-gpu/gpu_timing \
       "$serve_build/tests/spec/cuda_spec_check" "$serve_build/engine/bench/tandem-random-checkpoint" $spec_bench
fi
