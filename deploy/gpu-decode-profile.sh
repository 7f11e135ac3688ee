#!/usr/bin/env bash
# Decode speed of the CUDA model on the GPU machine, before/after in one run, with the per-op
# profile: gpu_check (every kernel vs its CPU reference), cuda_model_check (the fixtures), the
# benchmark model (engine/bench/hf_bench.py writes it; transformers is not timed here), then
# tandem-bench-cuda three ways: the decode-sized kernels with programmatic dependent launch (graphs
# and eager, plus --profile), the same without PDL, and as before them (--decode-kernels 0 --pdl 0,
# plus --profile); last, gpu_check under compute-sanitizer memcheck.
# Binaries: $BIN holds gpu_check (tests/kernels/gpu), cuda_model_check and tandem-bench-cuda
# (engine/bench/gpu), built on the build machine for sm_90. Everything lands in ${OUT:-.}.
#   BIN=build-deps/bin ./deploy/gpu-decode-profile.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=${BIN:-build-deps/bin}
out=${OUT:-.}
mkdir -p "$out"
model=${BENCH_MODEL_DIR:-/tmp/tandem-bench-model}
steps=${PROFILE_STEPS:-20}
{
  echo "# gpu-decode-profile $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  (python3 -c "import sys, time; sys.path.insert(0, 'engine/bench'); import hf_bench; t = time.time(); \
hf_bench.write_model('$model'); print('benchmark model ready in %.1f s' % (time.time() - t))" >"$out/write.txt" 2>&1
   echo "exit $?" >>"$out/write.txt") &
  writer=$!
  echo "## gpu_check ($SECONDS s)"
  timeout 90 "$bin/gpu_check" >"$out/gpu_check.txt" 2>&1; echo "exit $?"
  grep -E "^(gemv|moe_decode|moe_router_route|argmax_rows|paged_attention)|FAIL|passed" "$out/gpu_check.txt"
  echo "## cuda_model_check ($SECONDS s)"
  timeout 120 "$bin/cuda_model_check" tests/model/fixtures >"$out/check.txt" 2>&1; echo "exit $?"
  grep -E "##|FAIL|PASS|ok |differs" "$out/check.txt" | cut -c1-230 | head -70
  wait $writer; tail -2 "$out/write.txt"
  echo "## after: decode kernels + PDL, graphs and eager, --profile $steps ($SECONDS s)"
  timeout 150 "$bin/tandem-bench-cuda" "$model" --decode-kernels 1 --pdl 1 --profile "$steps" --json "$out/after.json"
  echo "exit $?"
  echo "## decode kernels without PDL, graphs ($SECONDS s)"
  timeout 100 "$bin/tandem-bench-cuda" "$model" --decode-kernels 1 --pdl 0 --modes graphs --json "$out/after-nopdl.json" | grep -E "^\|"
  echo "## before: --decode-kernels 0 --pdl 0, graphs, --profile $steps ($SECONDS s)"
  timeout 150 "$bin/tandem-bench-cuda" "$model" --decode-kernels 0 --pdl 0 --modes graphs --profile "$steps" --json "$out/before.json"
  echo "exit $?"
  echo "## gpu_check under compute-sanitizer memcheck ($SECONDS s)"
  timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/gpu_check" >"$out/memcheck-gpu_check.txt" 2>&1
  echo "exit $?; $(grep -E 'ERROR SUMMARY' "$out/memcheck-gpu_check.txt" | tail -1); $(grep -E 'passed' "$out/memcheck-gpu_check.txt" | tail -1)"
  echo "## before / after (graphs)"
  python3 engine/bench/compare.py before="$out/before.json" "decode kernels"="$out/after-nopdl.json" \
    "decode kernels + PDL"="$out/after.json" | tee "$out/compare.md"
  echo "total $SECONDS s"
} 2>&1 | tee "$out/gpu-decode-profile.txt"
