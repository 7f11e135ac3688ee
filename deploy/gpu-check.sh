#!/usr/bin/env bash
# The GPU checks, run on the GPU machine (the CPU machines and CI skip them): builds the kernels and
# their checks on their own (tests/kernels/gpu/CMakeLists.txt: CUDA and CMake only), runs every CUDA
# kernel against its CPU reference (gpu_check prints one table), then again under compute-sanitizer
# memcheck and racecheck. Writes the report to ${OUT:-.}/gpu-check.txt and the sanitizers' full
# output beside it. CUDA_ARCH picks the targets ("90" by default here; "90;121" adds GB10).
set -uo pipefail
cd "$(dirname "$0")/.."
outdir=${OUT:-.}
out=$outdir/gpu-check.txt
arch=${CUDA_ARCH:-90}
build=${BUILD_DIR:-build-gpu}
export PATH=/usr/local/cuda/bin:$PATH
{
  echo "# GPU check $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
  echo "## build (sm_$arch)"
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  if ! cmake -S tests/kernels/gpu -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES="$arch" >"$outdir/build.log" 2>&1 ||
     ! cmake --build "$build" -j 16 >>"$outdir/build.log" 2>&1; then
    tail -40 "$outdir/build.log"; echo "BUILD FAILED"; exit 1
  fi
  echo "built in $SECONDS s"
  echo "## rmsnorm (host-buffer entry point): CUDA vs CPU reference"
  "$build/test_kernels_cuda"; echo "exit $?"
  echo "## gpu_check: every kernel vs its CPU reference"
  "$build/gpu_check"; echo "exit $?"
  echo "## gpu_timing: kernel times at serving sizes (CUDA events, mean of 20)"
  "$build/gpu_timing"; echo "exit $?"
  sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  if [ -x "$sanitizer" ]; then
    for tool in memcheck racecheck; do
      echo "## gpu_check and test_kernels_cuda under compute-sanitizer $tool"
      for prog in gpu_check test_kernels_cuda; do
        "$sanitizer" --tool $tool --error-exitcode 9 "$build/$prog" >"$outdir/$tool-$prog.txt" 2>&1
        rc=$?
        echo "$prog: $(grep -E '^[0-9]+ passed' "$outdir/$tool-$prog.txt" | tail -1); $(grep -E '(ERROR|RACECHECK) SUMMARY' "$outdir/$tool-$prog.txt" | tail -1 | sed 's/=* *//'); exit $rc"
      done
    done
  else
    echo "## compute-sanitizer not found: memcheck not run"
  fi
  echo "total $SECONDS s"
} 2>&1 | tee "$out"
