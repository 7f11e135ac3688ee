#!/usr/bin/env bash
# The session's defaults as they land: the wgmma attention with TMA loads (default since
# ea83318), the experts' wgmma GEMM in tiles of 64 outputs for short prompts (the step's pairs as
# a hint: the same bits as 128). Checks: gpu_check gemm and mla_mha, the model, DFlash and
# glm5_next checks on the defaults, a memcheck of gemm; then the 2 B bf16 model's prefill beside
# transformers eager and compiled, the 1 x 512 profile. Most important first: a call cut short
# keeps what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/final.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
check gpu_check.gemm 60 "$B/gpu_check" gemm
grep -E "wgmma|FAIL" "$O/gpu_check.gemm.txt" | cut -c1-200; tail -1 "$O/gpu_check.gemm.txt"
check gpu_check.mla_mha 60 "$B/gpu_check" mla_mha
grep -E "FAIL" "$O/gpu_check.mla_mha.txt" | cut -c1-200; tail -1 "$O/gpu_check.mla_mha.txt"
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.txt" | head -6 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" "$FX"
check memcheck.gemm 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), tandem's defaults ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill 90 /tmp/m2b -- --batches none --prefill 512,4096,32768 --profile-prefill 512
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
