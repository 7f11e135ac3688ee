#!/usr/bin/env bash
# The GPU checks, run on the GPU machine (the CPU machines and CI skip them): build each CUDA
# kernel with its CPU reference and check them against each other, under compute-sanitizer too.
# Writes a report to ${OUT:-.}/gpu-check.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-.}/gpu-check.txt
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
arch=${CUDA_ARCH:-90}
bin=$(mktemp -d)
{
  echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  "$nvcc" --version | tail -1
  "$nvcc" -std=c++17 -O2 -arch=sm_$arch -Ikernels/include \
    kernels/cuda/rmsnorm.cu kernels/cpu/rmsnorm.cpp tests/kernels/rmsnorm_cuda_test.cpp -o "$bin/rmsnorm_cuda_test"
  echo "## rmsnorm: CUDA vs CPU reference"
  "$bin/rmsnorm_cuda_test"; echo "exit $?"
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    echo "## rmsnorm under compute-sanitizer memcheck"
    "$sanitizer" --tool memcheck --error-exitcode 9 "$bin/rmsnorm_cuda_test" 2>&1 | tail -3; echo "exit ${PIPESTATUS[0]}"
  fi
} 2>&1 | tee "$out"
