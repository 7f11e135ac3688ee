#!/usr/bin/env bash
# Builds llama.cpp's llama-bench with its CUDA back end (sm_$CUDA_ARCH, default 90) on this machine
# (nvcc, no GPU needed) from a source tree without models/, and packs bin/llama-bench, lib/ (its
# shared libraries) and gguf-py/ into build-deps/llamacpp.tar.xz for engine/bench/gpu-llamacpp.sh on
# the GPU machine (carry it; unpack with tar xJf ... -C /tmp: /tmp/llamacpp). It is about 32 MB
# (libggml-cuda.so holds every quantisation's kernels), more than the carry leaves beside the
# tracked tree: move models/dflash-pair (38 MB, not used by that run) out of the tree for the call.
# Usage: deploy/llamacpp-pack.sh LLAMA_SRC   (e.g. a copy of the ggerganov/llama.cpp snapshot)
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LLAMA_SRC" >&2; exit 2; }
src=$(cd "$1" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
arch=${CUDA_ARCH:-90}
build=$src/build-cuda-sm$arch
# This machine has no GPU driver: the executable links against the link-time libcuda.so that the
# CUDA toolkit ships (in its stubs/ folder); the GPU machine's driver supplies libcuda at run time.
# The libraries ask for the name libcuda.so.1, so a link of that name points at it. (A llama-bench
# linked so ran on an H100: engine/bench/results/h100-peers-2026-12-06.md.)
linklib=$(find "${CUDA_HOME:-/usr/local/cuda}/" -path '*stubs/libcuda.so' 2>/dev/null | head -1)
[ -n "$linklib" ] || { echo "llamacpp-pack: no link-time libcuda.so (stubs/) under ${CUDA_HOME:-/usr/local/cuda}" >&2; exit 1; }
linkdir=$(mktemp -d)
ln -s "$linklib" "$linkdir/libcuda.so.1"
cmake -S "$src" -B "$build" -G Ninja -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_CURL=OFF -DGGML_NATIVE=OFF -DCMAKE_CUDA_COMPILER="${NVCC:-/usr/local/cuda/bin/nvcc}" \
  -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$linkdir" >/dev/null
ninja -C "$build" -j "${JOBS:-2}" llama-bench
stage=$(mktemp -d)/llamacpp
mkdir -p "$stage/bin" "$stage/lib"
strip -o "$stage/bin/llama-bench" "$build/bin/llama-bench"
find "$build" -name '*.so*' -type f -exec sh -c 'strip -o "$1/lib/$(basename "$2")" "$2"' _ "$stage" {} \;
find "$build" -name '*.so*' -type l -exec cp -P {} "$stage/lib/" \;
# OpenMP's runtime (ggml-cpu) beside them, in case the GPU machine's compiler runtime lacks it.
ldd "$stage/lib/libggml-cpu.so" | awk '/libgomp/ {print $3}' | xargs -r -I{} cp -L {} "$stage/lib/"
cp -r "$src/gguf-py" "$stage/gguf-py"
# The snapshot's commit: from git, or from a COMMIT file a copy of the tree carries.
git -C "$src" log --oneline -1 > "$stage/COMMIT" 2>/dev/null || cp "$src/COMMIT" "$stage/COMMIT" 2>/dev/null ||
  echo "unknown" > "$stage/COMMIT"
mkdir -p "$root/build-deps"
tar -C "$(dirname "$stage")" -cf - llamacpp | xz -9e -T0 > "$root/build-deps/llamacpp.tar.xz"
ls -la "$root/build-deps/llamacpp.tar.xz"
