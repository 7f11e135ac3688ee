#!/usr/bin/env bash
# s14b.sh's essentials for a call with little device time left: gpu_check decode, DFlash's greedy
# identity, the 2 B model's decode at batch 1, 6, 16 with 2 weight rows a warp sharing x (the
# default) beside 1 (the kernel before), the model check, memcheck of decode, the per-kernel times.
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s14d.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
S=TANDEM_GEMV_SHARED_ROWS
check gpu_check.decode 60 "$B/gpu_check" decode
grep -E "FAIL" "$O/gpu_check.decode.txt" | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
timeout 100 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-write.json" --batches none >"$O/hf-write.txt" 2>&1
echo "## model written (exit $?)"
for round in 1 2; do
  for rw in 2 1; do
    bench "2b-decode-rw$rw-r$round" 30 /tmp/m2b "$S=$rw" -- --batches 1,6,16
  done
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
check memcheck.decode 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" decode
for rw in 2 1; do
  check "gpu_timing.decode2b.rw$rw" 60 "$S=$rw" "$B/gpu_timing" decode2b
  cat "$O/gpu_timing.decode2b.rw$rw.txt"
done
finish /tmp/m2b
