#!/usr/bin/env bash
# The un-absorbed (multi-head) MLA prefill (TANDEM_PREFILL_ATTN=mha, opt-in when built): its kernel
# and gather checked (gpu_check mla_mha), the model checked through it (also with its contexts cut
# into spans of 64 keys, the softmax state carried between), the 2 B bf16 model's prefill with the
# flash (absorbed) and the un-absorbed attention side by side beside transformers eager on the same
# weights; then the checks of every default (they also cover the refactors since the last GPU run:
# the shared tensor-core helpers, KDA's token inputs, the router's prefill-only cuBLASLt), a
# memcheck, and transformers compiled while time is left. Most important first: a call cut short
# keeps what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/mha.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. the new path's checks ($SECONDS s)"
check gpu_check.mla_mha 60 "$B/gpu_check" mla_mha
grep -E "mla_prefill_mha|latent_gather|FAIL" "$O/gpu_check.mla_mha.txt" | cut -c1-200
check cuda_model_check.mha 60 TANDEM_PREFILL_ATTN=mha "$B/cuda_model_check" $FX
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.mha.txt" | head -8 | cut -c1-200
check cuda_model_check.mha-spans 60 TANDEM_PREFILL_ATTN=mha TANDEM_MHA_PASS_ROWS=64 "$B/cuda_model_check" --only glm4_moe_lite $FX
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.mha-spans.txt" | head -4 | cut -c1-200

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model; its first row is 1 x 512), then tandem's flash (absorbed) and un-absorbed attention ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill-mha 90 /tmp/m2b TANDEM_PREFILL_ATTN=mha -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
bench 2b-prefill-flash 90 /tmp/m2b TANDEM_PREFILL_ATTN=flash -- --batches none --prefill 512,4096,32768
bench 2b-prefill-mha-tile128 30 /tmp/m2b TANDEM_PREFILL_ATTN=mha TANDEM_MHA_TILE_ROWS=128 -- --batches none --prefill 512,2048

echo "# 3. every default's checks ($SECONDS s)"
check cuda_model_check 60 "$B/cuda_model_check" $FX
grep -E "FAIL" "$O/cuda_model_check.txt" | head -8 | cut -c1-160
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" $FX
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O"/glm5_next_cuda_check.txt "$O/cuda_spec_check.txt" | head -6 | cut -c1-160
check memcheck.mla_mha 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
