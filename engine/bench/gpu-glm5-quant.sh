#!/usr/bin/env bash
# glm5_next with fp8 / NVFP4 weights on the GPU (issue 23, branch g5q23), from the repository root
# of the GPU machine, in one call (about 2.5 minutes):
#   engine/bench/gpu-glm5-quant.sh BUNDLE OUT
# BUNDLE holds glm5_next_cuda_check, tandem-bench-cuda, and tandem-random-checkpoint or
# tandem-quantize, and optionally gpu_check (stripped, sm_90).
#   0. gpu_check quant (with the bundle's gpu_check): the quantised kernels against the CPU,
#      quant_gemv on fp32 inputs and quant_pairs_f32 among them
#   1. glm5_next_cuda_check: both fixtures as they are (vs transformers) and rewritten in fp8 and in
#      NVFP4 (vs the CPU reference on the same weights)
#   2. compute-sanitizer memcheck of one quantised run (glm5_next_text_sparse in fp8)
#   3. the benchmark model of transformers' default glm5_next_text shape at 8 layers and 18 routed
#      experts (5.2 B parameters): in fp8, written straight by tandem-random-checkpoint (or, without
#      it, glm5_next_bench_model.py's bf16 model rewritten by tandem-quantize), and in bf16
#      (glm5_next_bench_model.py); tandem-bench-cuda on each at batch 1 / 6 / 16 with --profile
# Each step's output goes to OUT/<step>.txt (and .json); a summary to stdout. Exit status: non-zero
# when gpu_check, the check or memcheck failed.
set -u
B=$(cd "$1" && pwd)
O=$(mkdir -p "$2" && cd "$2" && pwd)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
FX=tests/model/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/card.txt" 2>&1
cat "$O/card.txt"
cat "$B/COMMIT" 2>/dev/null
run() {  # name seconds command...: output into OUT/name.txt, rc to stdout
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.txt" 2>&1
  local rc=$?
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
  return $rc
}
kernels_rc=0
if [ -x "$B/gpu_check" ]; then
  run gpu_check 30 "$B/gpu_check" quant
  kernels_rc=$?
  grep -E "quant_pairs|f32 x|FAIL|PASS|failed" "$O/gpu_check.txt" | tail -12
fi
run check 45 "$B/glm5_next_cuda_check" $FX
check_rc=$?
grep -E "^(#|##)|FAIL|info weights|near-tie|^PASS" "$O/check.txt" | head -60
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
mem_rc=0
if [ -n "$san" ]; then
  run memcheck 40 "$san" --tool memcheck --error-exitcode 9 "$B/glm5_next_cuda_check" $FX --only-quantised glm5_next_text_sparse:fp8
  mem_rc=$?
  tail -2 "$O/memcheck.txt"
else
  echo "memcheck: compute-sanitizer is not on this machine"
fi
M=/tmp/glm5-bench-model Q=/tmp/glm5-bench-model-fp8
bench() {  # name model
  run "$1" 40 "$B/tandem-bench-cuda" "$2" --prompt 128 --decode 24 --batches 1,6,16 --profile 4 --json "$O/$1.json"
  grep -E '^(model|weights|\| [0-9])' "$O/$1.txt"
}
if [ -x "$B/tandem-random-checkpoint" ] && [ $SECONDS -lt 110 ]; then
  run checkpoint-fp8 40 "$B/tandem-random-checkpoint" $Q fp8 --model glm5_next --layers 8 --experts 18 && tail -1 "$O/checkpoint-fp8.txt"
  [ -f $Q/config.json ] && bench bench-fp8 $Q
  rm -rf $Q
fi
if [ $SECONDS -lt 120 ]; then
  run bench-model 60 python3 engine/bench/glm5_next_bench_model.py $M && cp $M/shape.json "$O/bench-model-shape.json"
  tail -1 "$O/bench-model.txt"
  if [ -f $M/config.json ] && [ ! -x "$B/tandem-random-checkpoint" ] && [ $SECONDS -lt 110 ]; then
    run quantize 45 "$B/tandem-quantize" $M $Q fp8 && tail -1 "$O/quantize.txt"
    [ -f $Q/config.json ] && bench bench-fp8 $Q
    rm -rf $Q
  fi
  [ -f $M/config.json ] && [ $SECONDS -lt 150 ] && bench bench-bf16 $M
  rm -rf $M $Q
fi
echo "== done in $SECONDS s (gpu_check rc $kernels_rc, check rc $check_rc, memcheck rc $mem_rc)"
[ $kernels_rc = 0 ] && [ $check_rc = 0 ] && [ $mem_rc = 0 ]
