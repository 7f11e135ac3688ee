#!/usr/bin/env bash
# The wgmma attention with its keys and values loaded by TMA (TANDEM_MHA_KERNEL=wgmma-tma, opt-in
# when built) against its cp.async loads (the default): gpu_check mla_mha (every row for mma.sync,
# wgmma and wgmma_tma; TMA bit for bit equal to cp.async; segments alternating with mma.sync), the
# model checked through it (also in key spans of 64), a memcheck, the 2 B bf16 model's prefill
# with each side by side beside transformers eager and compiled, the 1 x 32768 profile. Most
# important first: a call cut short keeps what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/tma.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
check gpu_check.mla_mha 120 "$B/gpu_check" mla_mha
grep -E "wgmma_tma|FAIL" "$O/gpu_check.mla_mha.txt" | cut -c1-200; tail -1 "$O/gpu_check.mla_mha.txt"
check cuda_model_check.tma 60 TANDEM_MHA_KERNEL=wgmma-tma "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.tma.txt" | head -4 | cut -c1-200
check cuda_model_check.tma-spans 60 TANDEM_MHA_KERNEL=wgmma-tma TANDEM_MHA_PASS_ROWS=64 "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.tma-spans.txt" | head -4 | cut -c1-200
check memcheck.mla_mha 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), tandem with each load ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill-tma 90 /tmp/m2b TANDEM_MHA_KERNEL=wgmma-tma -- --batches none --prefill 512,4096,32768 --profile-prefill 32768
bench 2b-prefill 90 /tmp/m2b -- --batches none --prefill 512,4096,32768
bench 2b-profile4096-tma 60 /tmp/m2b TANDEM_MHA_KERNEL=wgmma-tma -- --batches none --prefill 512 --profile-prefill 4096
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
