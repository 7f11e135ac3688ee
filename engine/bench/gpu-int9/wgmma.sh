#!/usr/bin/env bash
# The un-absorbed MLA prefill's wgmma kernel (TANDEM_MHA_KERNEL=wgmma, opt-in when built) against
# its mma.sync kernel: both checked (gpu_check mla_mha: every shape, chunking, key segments and
# block sizes for each kernel, and segments alternating between them), the model checked through
# it (also with contexts cut into spans of 64 keys), the 2 B bf16 model's prefill with each kernel
# side by side beside transformers eager and compiled on the same weights, the 1 x 4096 profile;
# then every default's checks (the mma.sync kernel now shares its softmax, state and output code
# with the new one) and a memcheck of the group. Most important first: a call cut short keeps
# what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/wgmma.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. both kernels' checks ($SECONDS s)"
check gpu_check.mla_mha 90 "$B/gpu_check" mla_mha
grep -E "mla_prefill_mha|latent_gather|FAIL" "$O/gpu_check.mla_mha.txt" | cut -c1-200
check cuda_model_check.wgmma 60 TANDEM_MHA_KERNEL=wgmma "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.wgmma.txt" | head -8 | cut -c1-200
check cuda_model_check.wgmma-spans 60 TANDEM_MHA_KERNEL=wgmma TANDEM_MHA_PASS_ROWS=64 "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.wgmma-spans.txt" | head -4 | cut -c1-200

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model; its first row is 1 x 512), then tandem with each kernel ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill-wgmma 90 /tmp/m2b TANDEM_MHA_KERNEL=wgmma -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
bench 2b-prefill-mma 90 /tmp/m2b TANDEM_MHA_KERNEL=mma -- --batches none --prefill 512,4096,32768
bench 2b-prefill-wgmma-tile128 30 /tmp/m2b TANDEM_MHA_KERNEL=wgmma TANDEM_MHA_TILE_ROWS=128 -- --batches none --prefill 512,2048

echo "# 3. every default's checks ($SECONDS s)"
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL" "$O/cuda_model_check.txt" | head -8 | cut -c1-160
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -6 | cut -c1-160
check memcheck.mla_mha 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
