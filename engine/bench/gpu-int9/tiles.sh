#!/usr/bin/env bash
# Session 13's first call: the routed experts' wgmma GEMM in tiles of 128 pairs and 3 stages
# (WgmmaTile), SiLU-and-mul fused into the experts' gate_up launch and, through the same kernel
# over every row (gemm_silu), into prefill's dense MLPs (the shared expert, the first layer), the
# prefill's MLA glue (LoRA norms, key rope, cache write) in latent_prep's one launch, the MoE
# combine eight outputs a thread, and the prefill's router logits and routing in one launch of
# 16-token tiles over a cluster of 8 blocks (moe_router_route_tiles), the rotary angles once a
# prefill step (rope_angles) for every layer's query and key rotations.
# Checks: gpu_check gemm (the tiles bit for bit against 64 x 4, the SiLU forms bit for bit against
# gemm + silu_and_mul and against each other, the combine's two paths), decode (the tiled router's
# ids exactly and weights against the CPU), elementwise (rope_copy with the angle table), glue
# (latent_prep against its unfused launches, both ways), the model (greedy and logits
# against the CPU reference), DFlash, glm5_next, memcheck of gemm and decode. Then the 2 B bf16
# model's prefill at 1 x 512 and 1 x 4096: the defaults, all of the above as before (old), the SiLU
# launches apart (TANDEM_FUSED_SILU=0), the router apart (TANDEM_ROUTER_TILES=0), each tile; two
# rounds; the 1 x 512 profiles; beside transformers eager and compiled (and compiled at 1 x 32768
# while time is left: the peer the 1 x 32768 goal names, not yet measured).
# Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/tiles.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-430}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
for group in gemm decode elementwise glue; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL|wgmma" "$O/gpu_check.$group.txt" | cut -c1-200; tail -1 "$O/gpu_check.$group.txt"
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"
grep -E "FAIL|tokens in one step" "$O"/cuda_model_check*.txt | head -8 | cut -c1-200
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" "$FX"
check memcheck.gemm 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" gemm

echo "# 2. 2 B bf16 prefill: transformers eager (it writes the model), then tandem's tiles ($SECONDS s)"
timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none \
  --prefill 512,4096 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
for round in 1 2; do
  bench "2b-default-r$round" 60 /tmp/m2b -- --batches none --prefill 512,4096
  bench "2b-old-r$round" 60 /tmp/m2b TANDEM_FUSED_SILU=0 TANDEM_ROUTER_TILES=0 TANDEM_GROUPED_WGMMA_TILE=64 TANDEM_GROUPED_WGMMA_STAGES=4 -- --batches none --prefill 512,4096
  bench "2b-silu-apart-r$round" 60 /tmp/m2b TANDEM_FUSED_SILU=0 -- --batches none --prefill 512,4096
  bench "2b-router-apart-r$round" 60 /tmp/m2b TANDEM_ROUTER_TILES=0 -- --batches none --prefill 512,4096
  bench "2b-64x4-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=64 TANDEM_GROUPED_WGMMA_STAGES=4 -- --batches none --prefill 512,4096
  bench "2b-128x4-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=128 TANDEM_GROUPED_WGMMA_STAGES=4 -- --batches none --prefill 512,4096
  bench "2b-128x3-r$round" 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=128 TANDEM_GROUPED_WGMMA_STAGES=3 -- --batches none --prefill 512,4096
done
bench 2b-32768 60 /tmp/m2b -- --batches none --prefill 32768
bench 2b-profile512 60 /tmp/m2b -- --batches none --prefill 512 --profile-prefill 512
bench 2b-profile512-old 60 /tmp/m2b TANDEM_FUSED_SILU=0 TANDEM_ROUTER_TILES=0 TANDEM_GROUPED_WGMMA_TILE=64 TANDEM_GROUPED_WGMMA_STAGES=4 -- --batches none --prefill 512 --profile-prefill 512
bench 2b-profile512-128x3 60 /tmp/m2b TANDEM_GROUPED_WGMMA_TILE=128 TANDEM_GROUPED_WGMMA_STAGES=3 -- --batches none --prefill 512 --profile-prefill 512
check memcheck.decode 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" decode
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
compiled_peer /tmp/m2b 512,4096
budget=500 compiled_peer /tmp/m2b 32768 hf-compiled-32768
finish /tmp/m2b
