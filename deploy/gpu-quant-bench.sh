#!/usr/bin/env bash
# Quantised weights on the GPU machine, in one run: gpu_check (every kernel vs its CPU reference,
# quant_gemv and moe_decode_quant included), cuda_model_check (the fixtures as they are and
# rewritten in fp8 / NVFP4), then the 2 B benchmark model (engine/bench/hf_bench.py writes it; not
# timed here) rewritten by tandem-quantize in fp8 (128x128 blocks) and NVFP4, and tandem-bench-cuda
# on all three side by side (graphs, batches 1, 4, 16, with the per-op --profile); last,
# cuda_model_check --only-quantised under compute-sanitizer memcheck. Files in ${OUT:-.}: go.txt
# (this log), gpu_check.txt, check.txt, bench.txt, bench-{bf16,fp8,nvfp4}.json, memcheck.txt.
# Binaries: $BIN holds gpu_check (tests/kernels/gpu), cuda_model_check, tandem-bench-cuda and
# tandem-quantize (engine/bench/gpu), built for sm_90 (deploy/gpu-prepare.sh puts them in build-deps/bin).
#   BIN=build-deps/bin ./deploy/gpu-quant-bench.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
B=${BIN:-build-deps/bin}
OUT=${OUT:-.}
M=${BENCH_MODEL_DIR:-/tmp/qbench}
mkdir -p "$OUT"
T0=$SECONDS
{
echo "# gpu-quant-bench $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "## gpu_check ($((SECONDS-T0)) s)"
timeout 40 "$B/gpu_check" > "$OUT/gpu_check.txt" 2>&1; echo "exit $?"
grep -E "quant|FAIL|passed|failed" "$OUT/gpu_check.txt" | head -40
echo "## cuda_model_check, all runs ($((SECONDS-T0)) s)"
timeout 50 "$B/cuda_model_check" tests/model/fixtures > "$OUT/check.txt" 2>&1; echo "exit $?"
grep -E "^##|FAIL|PASS|info weights|keeps|worst|greedy|departs" "$OUT/check.txt" | cut -c1-260 | tail -80
echo "## benchmark model ($((SECONDS-T0)) s)"
timeout 60 python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$M')" > /tmp/write.log 2>&1
echo "write exit $?; $(du -sh "$M" | cut -f1)"
timeout 40 "$B/tandem-quantize" "$M" "$M-fp8" fp8; echo "exit $?"
timeout 40 "$B/tandem-quantize" "$M" "$M-nvfp4" nvfp4; echo "exit $?"
: > "$OUT/bench.txt"
for v in bf16 fp8 nvfp4; do
  d=$M; [ $v != bf16 ] && d=$M-$v
  echo "## tandem-bench-cuda $v ($((SECONDS-T0)) s)"
  timeout 30 "$B/tandem-bench-cuda" "$d" --prompt 512 --decode 128 --batches 1,4,16 --modes graphs --profile 16 \
    --json "$OUT/bench-$v.json" > "/tmp/bench-$v.txt" 2>&1
  echo "exit $?"; grep -E "^model|^GPU|^\| [0-9]|floor of this step" "/tmp/bench-$v.txt"
  { echo "## $v"; cat "/tmp/bench-$v.txt"; } >> "$OUT/bench.txt"
done
echo "## memcheck: cuda_model_check --only-quantised ($((SECONDS-T0)) s)"
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/cuda_model_check" tests/model/fixtures --only-quantised \
  > "$OUT/memcheck.txt" 2>&1
echo "exit $?; $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.txt" | tail -1); $(grep -E '^(PASS|FAIL)' "$OUT/memcheck.txt" | tail -1)"
echo "total $((SECONDS-T0)) s"
} 2>&1 | tee "$OUT/go.txt"
