#!/usr/bin/env bash
# The integrated device call of session 9's branches (flash22, qdec22, verify21, g5e23); first run
# 2026-12-07 (engine/bench/results/h100-s10-int9-2026-12-07.md), after which their paths became the
# defaults. The A/B timings set every switch both ways; the checks run as built (now the new paths)
# and with the new paths named, so since the flip they no longer check the old paths.
# every check first, then each branch's change measured against the path it replaces, side by
# side in the same binaries (an env switch selects the old path). From the repository root:
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp/int9 && bash /tmp/int9/call.sh
# Output under $OUT/int9 (packed into $OUT/int9.tgz); exit 1 when a check failed (a benchmark that
# fails is listed, it is a timing). Benchmarks start only before BUDGET_S (default 500 s).
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-500}
source "$here/lib.sh"
# Checkpoints written on the CPU while the checks hold the GPU: the real shape (47 layers, fp8),
# its 8-layer cut in fp8 and NVFP4 (the NVFP4 / fp8 decode ratio), the 5.2 B glm5_next in fp8.
ck() { local t0=$SECONDS; timeout 150 "$B/tandem-random-checkpoint" "$@" >"$O/ckpt-$(basename "$1").txt" 2>&1; echo "exit $? after $((SECONDS - t0)) s" >>"$O/ckpt-$(basename "$1").txt"; }
( ck /tmp/r47 fp8; ck /tmp/q8-fp8 fp8 --layers 8; ck /tmp/q8-nvfp4 nvfp4 --layers 8; ck /tmp/g5-fp8 fp8 --model glm5_next --layers 8 --experts 18 ) &
ckpid=$!

echo "# 1. checks ($SECONDS s)"
check gpu_check 200 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200
check memcheck.new-groups 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_flash_small quant_mma_small moe_f32
check cuda_model_check 60 "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.txt" | head -8 | cut -c1-160
# The same checks with each of the new paths switched on by name.
NEW=(TANDEM_PREFILL_ATTN=flash TANDEM_QUANT_DECODE_MMA=1 TANDEM_GEMV_TILES=16)
check cuda_model_check.new 60 "${NEW[@]}" "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.new.txt" | head -8 | cut -c1-160
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" $FX
grep -E "FAIL" "$O/glm5_next_cuda_check.txt" | head -6 | cut -c1-160
check glm5_next_cuda_check.token-kda 60 TANDEM_KDA_CHUNK=0 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.new 60 TANDEM_GLM5_EXPERTS=grouped TANDEM_KDA_REGISTERS=1 "$B/glm5_next_cuda_check" $FX
grep -E "FAIL" "$O/glm5_next_cuda_check.new.txt" | head -6 | cut -c1-160
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -6 | cut -c1-160
check cuda_spec_check.tiles 60 TANDEM_GEMV_TILES=16 "$B/cuda_spec_check" models/dflash-pair
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"

wait $ckpid
for f in "$O"/ckpt-*.txt; do echo "$(basename "$f"): $(tail -1 "$f")"; done
echo "# 3. real shape, 47 layers fp8: flash prefill vs mla, decode ($SECONDS s)"
bench 47l-fp8-flash 60 /tmp/r47 TANDEM_PREFILL_ATTN=flash -- --batches none --prefill 4096,32768 --profile-prefill 512
bench 47l-fp8-mla 45 /tmp/r47 TANDEM_PREFILL_ATTN=mla -- --batches none --prefill 4096 --profile-prefill 512
for m in 1 0; do
  bench 47l-fp8-mma$m 35 /tmp/r47 TANDEM_QUANT_DECODE_MMA=$m -- --batches 1,6,16 --prompt 512 --decode 64 --profile 4
done
rm -rf /tmp/r47
echo "# 4. quantised decode, the real shape cut to 8 layers: fp8 vs NVFP4, tensor cores vs CUDA cores ($SECONDS s)"
for f in fp8 nvfp4; do for m in 1 0; do
  bench q8-$f-mma$m 20 /tmp/q8-$f TANDEM_QUANT_DECODE_MMA=$m -- --batches 1,6,16 --prompt 512 --decode 64 --profile 4
done; done
echo "# 2. DFlash step costs (verify21: tiled gemv A/B) ($SECONDS s)"
for t in 16 0; do
  [ $SECONDS -ge "$budget" ] && break
  TANDEM_GEMV_TILES=$t timeout 45 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter models/dflash-pair/reference.json \
    --device cuda --batch 1 --batch 6 --both --repeat 1 --probe >"$O/spec-tiles$t.md" 2>&1
  echo "## tandem_spec_bench TANDEM_GEMV_TILES=$t: exit $?"; grep -E "ratios to|t_plain|^\| (code|json|prose) " "$O/spec-tiles$t.md" | cut -c1-200
done

echo "# 5. glm5_next 5.2 B fp8: experts grouped vs per pair ($SECONDS s)"
for M in grouped pairs; do
  bench g5-fp8-$M 35 /tmp/g5-fp8 TANDEM_GLM5_EXPERTS=$M TANDEM_KDA_REGISTERS=$([ $M = grouped ] && echo 1 || echo 0) -- --prompt 128 --decode 16 --batches 1,6,16 --profile 3 --profile-batch 1,16
done
rm -rf /tmp/q8-fp8 /tmp/q8-nvfp4 /tmp/g5-fp8
source "$here/prefill2b.sh"
echo "done at $SECONDS s; checks failed: ${failed[*]:-none}; timings not finished: ${slow[*]:-none}"
pack
[ ${#failed[@]} -eq 0 ]
