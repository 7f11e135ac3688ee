#!/usr/bin/env bash
# The short form of call.sh for a call of about four minutes: every check, then (while time is
# left) the real shape cut to 8 layers in fp8: flash vs mla prefill and tensor-core vs CUDA-core
# quantised decode, side by side in the same binaries. Output under $OUT/int9 (packed into int9.tgz).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/quick.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
( timeout 60 "$B/tandem-random-checkpoint" /tmp/q8 fp8 --layers 8 >"$O/ckpt-q8.txt" 2>&1 ) &
check cuda_model_check 40 "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.txt" | head -6 | cut -c1-160
check cuda_model_check.new 40 TANDEM_PREFILL_ATTN=flash TANDEM_QUANT_DECODE_MMA=1 TANDEM_GEMV_TILES=16 "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.new.txt" | head -6 | cut -c1-160
check glm5_next_cuda_check 40 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.new 40 TANDEM_GLM5_EXPERTS=grouped TANDEM_KDA_REGISTERS=1 "$B/glm5_next_cuda_check" $FX
grep -E "FAIL" "$O/glm5_next_cuda_check.txt" | head -4 | cut -c1-160
check cuda_spec_check 40 "$B/cuda_spec_check" models/dflash-pair
check cuda_spec_check.tiles 40 TANDEM_GEMV_TILES=16 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -4 | cut -c1-160
check gpu_check 130 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
wait
bench q8-flash 25 /tmp/q8 TANDEM_PREFILL_ATTN=flash -- --batches none --prefill 512,4096
bench q8-mla 25 /tmp/q8 TANDEM_PREFILL_ATTN=mla -- --batches none --prefill 512,4096
bench q8-mma1 20 /tmp/q8 TANDEM_QUANT_DECODE_MMA=1 -- --batches 1,6,16 --prompt 512 --decode 64
bench q8-mma0 20 /tmp/q8 TANDEM_QUANT_DECODE_MMA=0 -- --batches 1,6,16 --prompt 512 --decode 64
check memcheck.new-groups 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_flash_small quant_mma_small
echo "done at $SECONDS s; checks failed: ${failed[*]:-none}"
pack
[ ${#failed[@]} -eq 0 ]
