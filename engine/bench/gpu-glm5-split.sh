#!/usr/bin/env bash
# glm5_next's fp32 products on the tensor cores (issue 23), from the repository root of the GPU
# machine, in one call (about 2 minutes):
#   engine/bench/gpu-glm5-split.sh BUNDLE OUT
# BUNDLE holds the branch's glm5_next_cuda_check and tandem-bench-cuda (sm_90) and
# glm5_next_bench_model.py. Past gemv's rows an fp32 product runs as two bf16 products of its input
# split in two bf16 parts (TANDEM_GLM5_FP32_KERNEL=split, the default); cuda_cores is the fp32
# one-warp-per-output kernel every fp32 product used before, so one binary gives before and after.
#   1. glm5_next_cuda_check on both fixtures: products as before (cuda_cores), every product fp32
#      on the tensor cores (TANDEM_GLM5_FP32_PRODUCTS=all, split) and every product fp32 on the CUDA
#      cores (no bf16 rounding anywhere: what is left of chunks of 3 vs one shot is the KDA forms')
#   2. tandem-bench-cuda on the glm5_next_text fixture: prefill 512 and decode at batches 1, 6, 16,
#      cuda_cores then split then every product split
#   3. a random 5 B model of transformers' default glm5_next_text shape (8 layers,
#      glm5_next_bench_model.py), prefill 512 and 2048 and decode at batches 1 and 16, cuda_cores
#      then split, while time is left
# Each step's output goes to OUT/<step>.txt (benchmarks also .json); the summary to stdout. Exit 1
# when a check failed (the benchmarks are timings, not checks).
set -u
B=$(cd "$1" && pwd)
O=$(mkdir -p "$2" && cd "$2" && pwd)
FX=tests/model/fixtures
failed=0
run() {  # name seconds command...: output into OUT/name.txt, rc to stdout
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.txt" 2>&1
  local rc=$?
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
  return $rc
}
TANDEM_GLM5_FP32_KERNEL=cuda_cores run check-cuda-cores 60 "$B/glm5_next_cuda_check" $FX || failed=1
TANDEM_GLM5_FP32_PRODUCTS=all run check-all-split 60 "$B/glm5_next_cuda_check" $FX || failed=1
TANDEM_GLM5_FP32_PRODUCTS=all TANDEM_GLM5_FP32_KERNEL=cuda_cores run check-all-cuda-cores 60 "$B/glm5_next_cuda_check" $FX || failed=1
for c in check-cuda-cores check-all-split check-all-cuda-cores; do
  echo "-- $c: $(grep -E '^(PASS|FAIL)' "$O/$c.txt")"
  grep -E "vs transformers|one shot|greedy|graphs:|FAIL" "$O/$c.txt" | sed 's/^/     /'
done
bench() {  # name seconds model [env...] -- [flags...]: a timing (its rc is reported, not counted)
  local name=$1 limit=$2 model=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local t0=$SECONDS
  env "${envs[@]}" timeout "$limit" "$B/tandem-bench-cuda" "$model" "$@" --json "$O/$name.json" > "$O/$name.txt" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s"
  grep -E '^(prefill|\| [0-9])' "$O/$name.txt"
}
M=$FX/glm5_next_text
for k in cuda_cores split; do
  bench fixture-$k 45 $M TANDEM_GLM5_FP32_KERNEL=$k -- --prompt 128 --decode 64 --batches 1,6,16 --prefill 512,4096
done
bench fixture-all-split 45 $M TANDEM_GLM5_FP32_PRODUCTS=all -- --prompt 128 --decode 64 --batches 1,6,16 --prefill 512,4096
if [ $SECONDS -lt 60 ]; then
  run bench-model 90 python3 "$B/glm5_next_bench_model.py" /tmp/glm5-bench-model
  tail -1 "$O/bench-model.txt"
  cp /tmp/glm5-bench-model/shape.json "$O/bench-model-shape.json" 2>/dev/null
  if [ -f /tmp/glm5-bench-model/config.json ]; then
    for k in split cuda_cores; do
      [ $SECONDS -lt 200 ] && bench big-$k 60 /tmp/glm5-bench-model TANDEM_GLM5_FP32_KERNEL=$k -- --prompt 128 --decode 16 --batches 1,16 --prefill 512,2048
    done
  fi
fi
echo "== split done in $SECONDS s; $([ $failed = 0 ] && echo 'all checks passed' || echo 'A CHECK FAILED')"
exit $failed
