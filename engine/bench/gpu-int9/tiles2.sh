#!/usr/bin/env bash
# Session 13's second call, after tiles.sh (git show 05a766e:engine/bench/gpu-int9/tiles.sh; results
# in engine/bench/results/h100-s13-tiles-2026-12-07.md): the tiled router + routing rewritten (a
# thread's experts a compile-time count, the next columns' loads in flight while these are summed;
# the first version lost 350 us a 1 x 512 step), the dense MLPs' gemm_silu behind
# TANDEM_MLP_WGMMA=1, the experts' tile back to 64 x 4 unless set, 64 x 3 at three blocks an SM,
# the experts' copies asking L2 for 256 bytes (TANDEM_GROUPED_WGMMA_L2=0: not). Checks: gpu_check gemm (the
# SiLU forms, the tiles), decode (the tiled router's ids exactly and weights against the CPU at 32,
# 64 and 160 experts), the model, DFlash, memcheck of decode. Then the 2 B bf16 model's prefill at
# 1 x 512 and 1 x 4096: the defaults, the session's paths off (old), each switch apart, the tiles
# 64 x 3 and 128 x 3, two rounds; the 1 x 512 profile; 1 x 32768; beside transformers eager (512,
# 4096, 32768) and compiled (512, 4096). Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/tiles2.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-430}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
for group in gemm decode; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL|tiles|gemm_silu wgmma" "$O/gpu_check.$group.txt" | cut -c1-200; tail -1 "$O/gpu_check.$group.txt"
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check memcheck.decode 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" decode

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), then tandem's paths ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 512,4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
OLD=(TANDEM_FUSED_SILU=0 TANDEM_ROUTER_TILES=0)
for round in 1 2; do
  bench "2b-default-r$round" 60 /tmp/m2b -- --batches none --prefill 512,4096
  bench "2b-old-r$round" 60 /tmp/m2b "${OLD[@]}" -- --batches none --prefill 512,4096
  bench "2b-router-apart-r$round" 60 /tmp/m2b TANDEM_ROUTER_TILES=0 -- --batches none --prefill 512,4096
  bench "2b-silu-apart-r$round" 60 /tmp/m2b TANDEM_FUSED_SILU=0 -- --batches none --prefill 512,4096
  bench "2b-mlp-wgmma-r$round" 60 /tmp/m2b TANDEM_MLP_WGMMA=1 -- --batches none --prefill 512,4096
  bench "2b-l2off-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_L2=0 -- --batches none --prefill 512,4096
  bench "2b-64x3-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=64 TANDEM_GROUPED_WGMMA_STAGES=3 -- --batches none --prefill 512,4096
  bench "2b-128x3-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=128 TANDEM_GROUPED_WGMMA_STAGES=3 -- --batches none --prefill 512,4096
done
bench 2b-profile512 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 512
bench 2b-32768 60 /tmp/m2b -- --batches none --prefill 32768
bench 2b-32768-old 60 /tmp/m2b "${OLD[@]}" -- --batches none --prefill 32768
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 512,4096
finish /tmp/m2b
