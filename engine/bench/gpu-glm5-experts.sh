#!/usr/bin/env bash
# glm5_next's routed experts grouped by expert on the GPU (issue 23, branch g5e23), from the
# repository root of the GPU machine, in one call (about 4 minutes):
#   engine/bench/gpu-glm5-experts.sh BUNDLE OUT
# BUNDLE holds gpu_check, glm5_next_cuda_check, tandem-bench-cuda and tandem-random-checkpoint
# (stripped, sm_90), and COMMIT (the commit they were built from).
#   1. gpu_check moe_f32 glm5_next quant: the grouped fp32-input expert GEMMs against the CPU and,
#      bit for bit, against the per-pair kernel; the combine with pair_pos; the quantised kernels
#      (then moe_f32 again under compute-sanitizer memcheck)
#   2. glm5_next_cuda_check on tests/model/fixtures, as it is and with TANDEM_KDA_CHUNK=0; memcheck
#      of one quantised run (glm5_next_text_sparse in fp8)
#   3. the 5.2 B benchmark model (transformers' default glm5_next_text shape at 8 layers and 18
#      routed experts) written in fp8 by tandem-random-checkpoint; tandem-bench-cuda at batch 1 / 6 /
#      16 with the per-op profile at each, grouped experts (default) and TANDEM_GLM5_EXPERTS=pairs
#      (the per-pair kernels) from the same binary; then the same in NVFP4 while minutes remain
# Each step's output goes to OUT/<step>.txt (and .json); a summary to stdout. Exit status: non-zero
# when gpu_check, a check or memcheck failed.
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
fails=0
run gpu_check 60 "$B/gpu_check" moe_f32 glm5_next quant || fails=$((fails + 1))
grep -E "grouped_gemm|moe_combine|FAIL|passed|failed" "$O/gpu_check.txt" | tail -40
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  run memcheck-moe_f32 90 "$san" --tool memcheck --error-exitcode 9 "$B/gpu_check" moe_f32 || fails=$((fails + 1))
  tail -2 "$O/memcheck-moe_f32.txt"
fi
run check 90 "$B/glm5_next_cuda_check" $FX || fails=$((fails + 1))
grep -E "^(#|##)|FAIL|^PASS|failed" "$O/check.txt" | head -40
TANDEM_KDA_CHUNK=0 run check-kda0 90 "$B/glm5_next_cuda_check" $FX || fails=$((fails + 1))
grep -E "FAIL|^PASS|failed" "$O/check-kda0.txt" | head -20
if [ -n "$san" ]; then
  run memcheck-check 60 "$san" --tool memcheck --error-exitcode 9 "$B/glm5_next_cuda_check" $FX --only-quantised glm5_next_text_sparse:fp8 ||
    fails=$((fails + 1))
  tail -2 "$O/memcheck-check.txt"
else
  echo "memcheck: compute-sanitizer is not on this machine"
fi
bench() {  # name model [env assignments]: grouped, then the per-pair experts
  run "$1" 70 "$B/tandem-bench-cuda" "$2" --prompt 128 --decode 24 --batches 1,6,16 --modes graphs --profile 4 \
    --profile-batch 1,6,16 --json "$O/$1.json"
  grep -E '^(model|weights|\| [0-9])' "$O/$1.txt"
  TANDEM_GLM5_EXPERTS=pairs run "$1-pairs" 70 "$B/tandem-bench-cuda" "$2" --prompt 128 --decode 24 --batches 1,6,16 --modes graphs \
    --profile 4 --profile-batch 1,6,16 --json "$O/$1-pairs.json"
  grep -E '^\| [0-9]' "$O/$1-pairs.txt"
}
for fmt in fp8 nvfp4; do
  [ $SECONDS -lt $([ $fmt = fp8 ] && echo 400 || echo 200) ] || { echo "== $fmt: skipped (time)"; continue; }
  Q=/tmp/glm5-bench-model-$fmt
  run checkpoint-$fmt 60 "$B/tandem-random-checkpoint" $Q $fmt --model glm5_next --layers 8 --experts 18 && tail -1 "$O/checkpoint-$fmt.txt"
  [ -f $Q/config.json ] && bench bench-$fmt $Q
  rm -rf $Q
done
echo "== done in $SECONDS s ($fails failed)"
[ $fails = 0 ]
