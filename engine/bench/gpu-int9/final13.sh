#!/usr/bin/env bash
# Session 13's last call: main's prefill defaults after tiles.sh and tiles2.sh (results in
# engine/bench/results/h100-s13-tiles*-2026-12-07.md): the experts' SiLU in the gate_up launch,
# their tile by the pairs an expert averages (64x4, 128x3 from 256), latent_prep for the prefill's
# MLA glue, the rotary angles once a step, the 8-wide combine. Checks: gpu_check gemm (tiles and the
# SiLU form bit for bit), decode, glue, elementwise, the model, DFlash, glm5_next, memcheck of gemm
# and glue. Then the 2 B bf16 model's prefill at 1 x 512 and 1 x 4096, three rounds, the defaults
# beside TANDEM_FUSED_SILU=0; 1 x 32768 twice each; the 1 x 512 and 1 x 4096 profiles; beside
# transformers eager (512, 4096, 32768) and compiled (512, 4096). Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/final13.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-400}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
for group in gemm decode glue elementwise; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL" "$O/gpu_check.$group.txt" | cut -c1-200; tail -1 "$O/gpu_check.$group.txt"
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" "$FX"
check memcheck.gemm 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm
check memcheck.glue 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" glue elementwise

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), then tandem ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 512,4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
for round in 1 2 3; do
  bench "2b-default-r$round" 60 /tmp/m2b -- --batches none --prefill 512,4096
  bench "2b-silu-apart-r$round" 60 /tmp/m2b TANDEM_FUSED_SILU=0 -- --batches none --prefill 512,4096
done
for round in 1 2; do
  bench "2b-32768-r$round" 60 /tmp/m2b -- --batches none --prefill 32768
  bench "2b-32768-silu-apart-r$round" 60 /tmp/m2b TANDEM_FUSED_SILU=0 -- --batches none --prefill 32768
done
bench 2b-profile512 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 512
bench 2b-profile4096 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 4096
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 512,4096
finish /tmp/m2b
