#!/usr/bin/env bash
# Session 14's second call: the decode gemv from 4 x rows with 2 (or 4) weight rows a warp sharing
# each x chunk (gemv.cu's SX; TANDEM_GEMV_SHARED_ROWS=2 default, 4, or 1: the kernel before), and
# the grouped experts' down kernel at one row a block (TANDEM_MOE_DOWN_ROWS=1). Checks: gpu_check
# decode under 2 and 4 (new rows: each of 6-16 rows equal to itself alone), moe_grouped, memcheck of
# decode, cuda_model_check, cuda_spec_check (greedy with the drafter = plain at batch 1, 4, 6).
# Then the 2 B model's decode at batch 1, 6 and 16 under 2 and 1, twice, interleaved; the decode
# products and experts per kernel (gpu_timing decode2b); profiles at 6 and 16; DFlash step costs
# with models/dflash-pair; while time is left: 4 rows a warp, the down kernel's one row, attention
# splits 4 and 8 (context_splits' target), gpu_timing mla. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s14b.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-250}
source "$here/lib.sh"
S=TANDEM_GEMV_SHARED_ROWS
echo "# 1. checks ($SECONDS s)"
for rw in 2 4; do
  check "gpu_check.decode.rw$rw" 120 "$S=$rw" "$B/gpu_check" decode
  grep -E "FAIL" "$O/gpu_check.decode.rw$rw.txt" | cut -c1-200
done
check gpu_check.moe_grouped 120 "$B/gpu_check" moe_grouped
check memcheck.decode 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" decode
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O"/cuda_spec_check*.txt | head -8 | cut -c1-200

echo "# 2. 2 B bf16 decode ($SECONDS s)"
timeout 200 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-write.json" --batches none >"$O/hf-write.txt" 2>&1
echo "## model written (exit $?)"
for round in 1 2; do
  for rw in 2 1; do
    bench "2b-decode-rw$rw-r$round" 60 /tmp/m2b "$S=$rw" -- --batches 1,6,16
  done
done
for rw in 2 1; do
  check "gpu_timing.decode2b.rw$rw" 60 "$S=$rw" "$B/gpu_timing" decode2b
  cat "$O/gpu_timing.decode2b.rw$rw.txt"
done
bench 2b-profile 60 /tmp/m2b -- --batches 6 --profile 20 --profile-batch 6,16
echo "# 3. DFlash step costs ($SECONDS s)"
timeout 60 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter models/dflash-pair/reference.json \
  --device cuda --batch 1 --batch 6 --both --repeat 1 --probe >"$O/spec.md" 2>&1
echo "## tandem_spec_bench: exit $?"; grep -E "ratios to|t_plain|^\| (code|json|prose) " "$O/spec.md" | cut -c1-200
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"

echo "# 4. while time is left ($SECONDS s)"
bench 2b-decode-rw4 60 /tmp/m2b "$S=4" -- --batches 1,6,16
bench 2b-decode-down1 60 /tmp/m2b TANDEM_MOE_DOWN_ROWS=1 -- --batches 1,6,16
if [ $SECONDS -lt "$budget" ]; then
  check gpu_timing.decode2b.down1 60 TANDEM_MOE_DOWN_ROWS=1 "$B/gpu_timing" decode2b
  grep moe_decode "$O/gpu_timing.decode2b.down1.txt"
fi
for splits in 4 8; do
  bench "2b-decode-splits$splits" 60 /tmp/m2b "TANDEM_ATTN_SPLITS=$splits" -- --batches 1,6,16
done
if [ $SECONDS -lt "$budget" ]; then
  check gpu_timing.mla 60 "$B/gpu_timing" mla
  cat "$O/gpu_timing.mla.txt"
fi
finish /tmp/m2b
