#!/usr/bin/env bash
# Session 17, call a: glm5_next's DSA pool in bf16 and fp8_e4m3 (kv_cache_dtype; the seed runs
# --kv-cache-dtype fp8_e4m3), the fp8 pool's scales calculated by the first step on the device;
# then session 16's pending DFlash call (s16b.sh: the deferred context rows, checks and A/B).
#   - gpu_check glm5_next: dsa_prepare / dsa_select / dsa_attention on fp32, bf16 and fp8 pools
#     against the typed CPU references, also under compute-sanitizer memcheck;
#   - glm5_next_cuda_check: both fixtures as they are, with a bf16 and an fp8 pool against the CPU
#     reference whose rows stand for that pool (KvCache::emulate_rows; the fp8 scales the first step
#     calculated against the reference's amax / 200), their fp8 / NVFP4 rewrites; memcheck of the
#     fixtures and pool types;
#   - the 5.2 B glm5_next fp8 benchmark model: decode at batch 1 / 6 / 16 with the op profile (the
#     hyper-connection collapse and the indexer rewritten since its last run), and with an fp8 pool;
#   - s16b.sh.
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s17a.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-150}
source "$here/lib.sh"
kernel_group glm5_next "dsa_"
check glm5_next_cuda_check 120 "$B/glm5_next_cuda_check" "$FX"
grep -E "^#|^## |scales|FAIL|PASS|greedy|one token per step|all prompts" "$O/glm5_next_cuda_check.txt" | cut -c1-200
# argv[3] names the one fp8 / NVFP4 rewrite to run: "none:none" runs none (the pool types do run).
check glm5_next_memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/glm5_next_cuda_check" "$FX" --fixtures none:none
grep -E "ERROR SUMMARY|PASS|FAIL" "$O/glm5_next_memcheck.txt" | tail -3
# The 5.2 B glm5_next in fp8 (8 layers, 18 experts; 7.37 ms a batch-1 step on an H100 with the
# collapse at 150 us a call and the indexer at 0.5 ms a token, h100-s10-int9-2026-12-07.md): the
# hyper-connection collapse over many blocks a token and the indexer a warp a pool; then its fp8
# pool (the calibrating first step inside the benchmark's prefill).
timeout 60 "$B/tandem-random-checkpoint" /tmp/g5-fp8 fp8 --model glm5_next --layers 8 --experts 18 >"$O/ckpt-g5-fp8.txt" 2>&1
tail -1 "$O/ckpt-g5-fp8.txt"
bench g5-fp8 60 /tmp/g5-fp8 -- --prompt 128 --decode 16 --batches 1,6,16 --profile 3 --profile-batch 1,16
grep -E "hc collapse|dsa indexer|dsa attention|^\*\*sum|\| \*\*sum" "$O/g5-fp8.txt" | cut -c1-120
bench g5-fp8-kv8 40 /tmp/g5-fp8 -- --prompt 128 --decode 16 --batches 1,16 --kv-cache-dtype fp8_e4m3
rm -rf /tmp/g5-fp8
pack
BUDGET_S=150 bash "$here/s16b.sh" || failed+=(s16b)  # (its own clock: spec runs start before 150 s of it)
finish /tmp/none
