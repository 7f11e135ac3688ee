#!/usr/bin/env bash
# After call.sh: the switched defaults (flash prefill attention, tensor-core quantised decode
# experts, the tiled gemv from 16 rows, glm5_next's grouped experts and register KDA) checked as
# built, with no switch set, then the 2 B bf16 model's prefill and decode beside transformers eager
# and compiled on the same weights in the same call. Output under $OUT/int9 (packed into int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/verify.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. checks, defaults ($SECONDS s)"
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check memcheck.defaults 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_flash_small quant_mma_small moe_f32
check cuda_model_check 60 "$B/cuda_model_check" $FX
grep -E "FAIL" "$O/cuda_model_check.txt" | head -8 | cut -c1-160
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.token-kda 60 TANDEM_KDA_CHUNK=0 "$B/glm5_next_cuda_check" $FX
grep -E "FAIL" "$O"/glm5_next_cuda_check*.txt | head -6 | cut -c1-160
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -6 | cut -c1-160
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"

echo "# 2. 2 B bf16: tandem (defaults) beside transformers eager and compiled ($SECONDS s)"
timeout 120 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches 1,6,16 --decode 32 \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^prefill|^decode|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-decode 60 /tmp/m2b -- --batches 1,6,16 --prompt 512 --decode 64
bench 2b-prefill 60 /tmp/m2b -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
