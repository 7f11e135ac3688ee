#!/usr/bin/env bash
# Session 14's first call: branch experts-persistent (the grouped wgmma GEMM's persistent form,
# TANDEM_GROUPED_WGMMA_PERSISTENT=1) and mha-shfl (end_rows' quad sum before its `continue`) on a GPU
# for the first time, and the 2 B model's decode profile at batch 1 and 6 for the decode work.
# Checks: gpu_check gemm (persistent rows bit for bit), mla_mha, decode, glue; memcheck of gemm and
# mla_mha; cuda_model_check as built and persistent; DFlash. Then prefill 1 x 512 / 1 x 4096 three
# rounds, default beside persistent, 1 x 32768 once each; decode at 1, 6, 16 with programmatic
# launch on and off; profiles; transformers eager and compiled. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s14a.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-420}
source "$here/lib.sh"
P=TANDEM_GROUPED_WGMMA_PERSISTENT=1
echo "# 1. checks ($SECONDS s)"
for group in gemm mla_mha decode glue elementwise fused; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL" "$O/gpu_check.$group.txt" | cut -c1-200; tail -1 "$O/gpu_check.$group.txt"
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
check cuda_model_check.persistent 60 "$P" "$B/cuda_model_check" "$FX"
grep -E "FAIL" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check memcheck.gemm 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm
check memcheck.mla_mha 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_mha

echo "# 2. 2 B bf16: transformers eager (it writes the model), then tandem ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches 1 \
  --prefill 512,4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|^\||FAILED" "$O/hf-eager.txt" | cut -c1-160
bench 2b-decode 60 /tmp/m2b -- --batches 1,6,16 --profile 20 --profile-batch 1,6,16
bench 2b-decode-pdl0 60 /tmp/m2b -- --batches 1,6,16 --pdl 0
for round in 1 2 3; do
  bench "2b-default-r$round" 60 /tmp/m2b -- --batches none --prefill 512,4096
  bench "2b-persistent-r$round" 60 /tmp/m2b "$P" -- --batches none --prefill 512,4096
done
bench 2b-32768 60 /tmp/m2b -- --batches none --prefill 32768
bench 2b-32768-persistent 60 /tmp/m2b "$P" -- --batches none --prefill 32768
bench 2b-profile512 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 512
bench 2b-profile512-persistent 60 /tmp/m2b "$P" -- --batches none --prefill 512 --profile-prefill 512
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 512,4096
finish /tmp/m2b
