#!/usr/bin/env bash
# The wgmma attention's two warpgroups taking turns on the tensor cores (ping-pong, now its only
# schedule) and the un-absorbed prefill's query rope in one launch a token (rope_copy in place):
# their checks (gpu_check mla_mha and elementwise), the model checked through the defaults (also
# with contexts cut into spans of 64 keys), the 2 B bf16 model's prefill beside transformers eager
# and compiled (and the mma.sync attention kernel in the same call for reference), the profiles at
# 1 x 4096 and 1 x 32768; then every default's checks and memchecks. Most important first: a call
# cut short keeps what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/pingpong.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. the changed kernels' checks ($SECONDS s)"
check gpu_check.mla_mha 90 "$B/gpu_check" mla_mha
grep -E "FAIL" "$O/gpu_check.mla_mha.txt" | cut -c1-200; tail -1 "$O/gpu_check.mla_mha.txt"
check gpu_check.elementwise 60 "$B/gpu_check" elementwise
grep -E "rope_copy|FAIL" "$O/gpu_check.elementwise.txt" | cut -c1-200
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.txt" | head -8 | cut -c1-200
check cuda_model_check.spans 60 TANDEM_MHA_PASS_ROWS=64 "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.spans.txt" | head -4 | cut -c1-200

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), tandem's defaults, its mma.sync attention ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill 90 /tmp/m2b -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
bench 2b-prefill-mma 90 /tmp/m2b TANDEM_MHA_KERNEL=mma -- --batches none --prefill 512,4096,32768
bench 2b-profile32768 90 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 32768

echo "# 3. every default's checks ($SECONDS s)"
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" "$FX"
grep -E "FAIL" "$O/cuda_spec_check.txt" "$O/glm5_next_cuda_check.txt" | head -6 | cut -c1-160
check memcheck.mla_mha 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha
check memcheck.elementwise 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" elementwise
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
