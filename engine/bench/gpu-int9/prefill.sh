#!/usr/bin/env bash
# Prefill's GPU kernels as they are the defaults on sm_90 since session 12 (the un-absorbed MLA
# attention on wgmma with TMA loads, the routed experts on the wgmma grouped GEMM) and the paths
# they replaced, side by side: their checks (gpu_check mla_mha: mma.sync, wgmma and its TMA loads;
# gemm: the grouped GEMM's forms; elementwise: the in-place query rope), the model, DFlash and
# memchecks; then the 2 B bf16 model's prefill with the defaults, the wgmma attention's cp.async
# loads (TANDEM_MHA_KERNEL=wgmma) and session 11's paths (TANDEM_MHA_KERNEL=mma
# TANDEM_GROUPED_WGMMA=0) beside transformers eager and compiled, the profiles at 1 x 512, 4096 and
# 32768. It joins the session's call scripts (git show 84e18e6, 3639786, 10ebb99, 7178092:
# engine/bench/gpu-int9/{wgmma,experts,pingpong,tma}.sh), whose parts each ran. Most important
# first: a call cut short keeps what ran. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/prefill.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
for group in mla_mha gemm elementwise; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL" "$O/gpu_check.$group.txt" | cut -c1-200; tail -1 "$O/gpu_check.$group.txt"
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
check cuda_model_check.spans 60 TANDEM_MHA_PASS_ROWS=64 "$B/cuda_model_check" --only glm4_moe_lite "$FX"
grep -E "FAIL|tokens in one step" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check memcheck.mla_mha 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha
check memcheck.gemm 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), then tandem's paths ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill 90 /tmp/m2b -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
bench 2b-prefill-cpasync 90 /tmp/m2b TANDEM_MHA_KERNEL=wgmma -- --batches none --prefill 512,4096,32768
bench 2b-prefill-s11 90 /tmp/m2b TANDEM_MHA_KERNEL=mma TANDEM_GROUPED_WGMMA=0 -- --batches none --prefill 512,4096,32768
bench 2b-profile512 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 512
bench 2b-profile32768 90 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 32768
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
