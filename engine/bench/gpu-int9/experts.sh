#!/usr/bin/env bash
# The grouped expert GEMM's wgmma form (TANDEM_GROUPED_WGMMA=1, opt-in when built) against its
# mma.sync form: gpu_check gemm (every grouped shape for each form, and the forms against each
# other), the model checked through it, the 2 B bf16 model's prefill with each form side by side
# beside transformers compiled, and the profiles at 1 x 512 and 1 x 4096; then every default's
# checks and a memcheck of the group. Most important first: a call cut short keeps what ran.
# Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/experts.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "# 1. both forms' checks ($SECONDS s)"
check gpu_check.gemm 90 "$B/gpu_check" gemm
grep -E "grouped|FAIL" "$O/gpu_check.gemm.txt" | cut -c1-200
check cuda_model_check.wgmma 60 TANDEM_GROUPED_WGMMA=1 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O/cuda_model_check.wgmma.txt" | head -8 | cut -c1-200
check cuda_spec_check.wgmma 60 TANDEM_GROUPED_WGMMA=1 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.wgmma.txt" | head -4 | cut -c1-160

echo "# 2. 2 B bf16 prefill with each form (the model written by transformers) ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 4096 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-prefill-experts-wgmma 90 /tmp/m2b TANDEM_GROUPED_WGMMA=1 -- --batches none --prefill 512,4096,32768 --profile-prefill 4096
bench 2b-prefill-experts-mma 90 /tmp/m2b TANDEM_GROUPED_WGMMA=0 -- --batches none --prefill 512,4096,32768
bench 2b-profile512-experts-wgmma 60 /tmp/m2b TANDEM_GROUPED_WGMMA=1 -- --batches none --prefill 512 --profile-prefill 512

echo "# 3. every default's checks ($SECONDS s)"
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check memcheck.gemm 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 4096
finish /tmp/m2b
