#!/usr/bin/env bash
# glm5_next decode on the GPU (issue 23): a branch's binaries against main's, from the repository
# root of the GPU machine, in one call (about 3 minutes):
#   engine/bench/gpu-glm5-decode.sh BUNDLE OUT
# BUNDLE holds before/ (main: glm5_next_cuda_check, tandem-bench-cuda) and after/ (the branch: the
# same two, cuda_tp_check and gpu_check), stripped; glm5_next_bench_model.py beside this script.
#   1. gpu_check (every kernel against its CPU reference; the fp32-activation gemv among them)
#   2. glm5_next_cuda_check: main's; the branch's with its default fp32 products, with every
#      product in fp32 (TANDEM_GLM5_FP32_PRODUCTS=all) and with none (the CPU emulation's 2.5e-2)
#   3. cuda_tp_check on glm5_next_text: TP1 eager, TP1 with graphs bit-identical to it, TP2 over
#      the host-staged transport (eager) within the bar of TP1
#   4. tandem-bench-cuda on the glm5_next_text fixture, batches 1 / 6 / 16: main (eager: it has no
#      graphs), the branch's default and the branch with every product in fp32 (graphs and eager)
#   5. compute-sanitizer memcheck of the branch's glm5_next_cuda_check
#   6. while time is left: a random glm5_next_text of transformers' default shape, scaled
#      (glm5_next_bench_model.py), and the same benchmark on it, branch then main
# Each step's output goes to OUT/<step>.txt (and .json); the summary to stdout.
set -u
B=$(cd "$1" && pwd)
O=$(mkdir -p "$2" && cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
FX=tests/model/fixtures
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/card.txt" 2>&1
cat "$O/card.txt"
run() {  # name seconds command...: output into OUT/name.txt, its last lines and rc to stdout
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.txt" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s"
}
run gpu_check 60 "$B/after/gpu_check"
grep -E "FAIL|PASS|failed" "$O/gpu_check.txt" | tail -3
run check-main 60 "$B/before/glm5_next_cuda_check" $FX
run check 60 "$B/after/glm5_next_cuda_check" $FX
TANDEM_GLM5_FP32_PRODUCTS=all run check-all-fp32 60 "$B/after/glm5_next_cuda_check" $FX
TANDEM_GLM5_FP32_PRODUCTS=none run check-all-bf16 60 "$B/after/glm5_next_cuda_check" $FX
for c in check-main check check-all-fp32 check-all-bf16; do
  echo "-- $c: $(grep -E '^(PASS|FAIL)' "$O/$c.txt")"
  grep -E "vs transformers|graphs|greedy|FAIL" "$O/$c.txt" | sed 's/^/     /'
done
T=$B/after/cuda_tp_check
M=$FX/glm5_next_text
run tp1 30 "$T" --model $M --ranks 1 --timing "$O/tp1.json" --out /tmp/glm5-tp1.bin
run tp1-graphs 30 "$T" --model $M --ranks 1 --eager 0 --identical /tmp/glm5-tp1.bin --timing "$O/tp1-graphs.json"
timeout 40 "$T" --model $M --ranks 2 --rank 1 --port 29811 --transport auto --reference /tmp/glm5-tp1.bin > "$O/tp2.rank1.txt" 2>&1 &
rank1=$!
run tp2.rank0 40 "$T" --model $M --ranks 2 --rank 0 --port 29811 --transport auto --reference /tmp/glm5-tp1.bin --timing "$O/tp2.json"
wait $rank1
echo "== tp2.rank1: rc $?"
grep -hE "ok  |FAIL" "$O/tp1.txt" "$O/tp1-graphs.txt" "$O/tp2.rank0.txt"
bench() {  # name binary model decode-steps [flags...]
  local name=$1 bin=$2 model=$3 steps=$4
  shift 4
  run "$name" 60 "$bin" "$model" "$@" --prompt 128 --decode "$steps" --batches 1,6,16 --json "$O/$name.json"
  grep -E '^(model|\| [0-9])' "$O/$name.txt"
}
bench bench-main "$B/before/tandem-bench-cuda" $M 64 --modes eager
bench bench "$B/after/tandem-bench-cuda" $M 64
TANDEM_GLM5_FP32_PRODUCTS=all bench bench-all-fp32 "$B/after/tandem-bench-cuda" $M 64
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  run memcheck 90 "$san" --tool memcheck --error-exitcode 9 "$B/after/glm5_next_cuda_check" $FX
  tail -2 "$O/memcheck.txt"
else
  echo "memcheck: compute-sanitizer is not on this machine"
fi
if [ $SECONDS -lt 120 ]; then
  run bench-model $((200 - SECONDS)) python3 "$here/glm5_next_bench_model.py" /tmp/glm5-bench-model
  tail -2 "$O/bench-model.txt"
  cp /tmp/glm5-bench-model/shape.json "$O/bench-model-shape.json" 2>/dev/null
  if [ -f /tmp/glm5-bench-model/config.json ]; then
    bench big "$B/after/tandem-bench-cuda" /tmp/glm5-bench-model 24
    bench big-main "$B/before/tandem-bench-cuda" /tmp/glm5-bench-model 24 --modes eager
  fi
fi
echo "== done in $SECONDS s"
