#!/usr/bin/env bash
# What session 14's short call (s14d.sh) left out, for a later call: 4 weight rows a warp sharing
# x (TANDEM_GEMV_SHARED_ROWS=4: gpu_check decode and timings), the grouped experts' down kernel
# at one row a block (TANDEM_MOE_DOWN_ROWS=1: gpu_check moe_grouped and timings), attention at 4
# and 8 splits a token (TANDEM_ATTN_SPLITS, context_splits' target), gpu_timing mla, and the
# DFlash step costs with models/dflash-pair under the shared-x gemv; and the ungrouped products on
# the tensor cores (TANDEM_GEMV_MMA=1, rows_mma: batch-invariant, another rounding), which the
# 16-row step needs if the CUDA-core gemv stays FMA-bound there. Output under $OUT/int9:
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s14b.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-300}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
check gpu_check.decode.rw4 120 TANDEM_GEMV_SHARED_ROWS=4 "$B/gpu_check" decode
check gpu_check.moe_grouped.down1 120 TANDEM_MOE_DOWN_ROWS=1 "$B/gpu_check" moe_grouped
check cuda_spec_check.rw4 60 TANDEM_GEMV_SHARED_ROWS=4 "$B/cuda_spec_check" models/dflash-pair
grep -hE "FAIL" "$O"/gpu_check.*.txt "$O"/cuda_spec_check*.txt | head -8 | cut -c1-200

echo "# 2. per kernel and per step, 2 B bf16 ($SECONDS s)"
for setting in TANDEM_GEMV_SHARED_ROWS=4 TANDEM_MOE_DOWN_ROWS=1 TANDEM_GEMV_MMA=1; do
  check "gpu_timing.decode2b.${setting#TANDEM_}" 60 "$setting" "$B/gpu_timing" decode2b
  cat "$O/gpu_timing.decode2b.${setting#TANDEM_}.txt"
done
check gpu_timing.mla 60 "$B/gpu_timing" mla
cat "$O/gpu_timing.mla.txt"
timeout 200 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-write.json" --batches none >"$O/hf-write.txt" 2>&1
echo "## model written (exit $?)"
bench 2b-decode 60 /tmp/m2b -- --batches 1,6,16
for setting in TANDEM_GEMV_SHARED_ROWS=4 TANDEM_MOE_DOWN_ROWS=1 TANDEM_GEMV_MMA=1 TANDEM_ATTN_SPLITS=4 TANDEM_ATTN_SPLITS=8; do
  bench "2b-decode-${setting#TANDEM_}" 60 /tmp/m2b "$setting" -- --batches 1,6,16
done

echo "# 3. DFlash step costs ($SECONDS s)"
timeout 60 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter models/dflash-pair/reference.json \
  --device cuda --batch 1 --batch 6 --both --repeat 1 --probe >"$O/spec.md" 2>&1
echo "## tandem_spec_bench: exit $?"; grep -E "ratios to|t_plain|^\| (code|json|prose) " "$O/spec.md" | cut -c1-200
finish /tmp/m2b
