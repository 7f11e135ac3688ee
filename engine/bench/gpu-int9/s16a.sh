#!/usr/bin/env bash
# Session 16, one call: prefix caching of the recurrent state on the device, then where the
# adaptive draft length spends its steps.
#   - glm5_next_cuda_check: both fixtures and their fp8 / NVFP4 rewrites; new: a slot resumed from
#     a state kept by make_state_snapshots / PagedWork::state_save equals the slot that ran the
#     whole prompt, bit for bit; then the fixtures as they are under compute-sanitizer memcheck;
#   - cuda_spec_check (the decoders' step code the copies sit in);
#   - tandem_spec_bench at 256 new tokens a prompt, batch 1, fixed k and adaptive: whether the
#     adaptive length's deficit (s15d: JSON 0.86x against 1.40x at 64 tokens) is its learning, with
#     the new columns of the time table (share of steps that drafted, mean draft length).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s16a.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-150}
source "$here/lib.sh"
check glm5_next_cuda_check 60 "$B/glm5_next_cuda_check" "$FX"
grep -E "prefix resume|rollback:|PASS|FAIL" "$O/glm5_next_cuda_check.txt" | cut -c1-180
# argv[3] names the one fp8 / NVFP4 rewrite to run: "none:none" runs none.
check glm5_next_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/glm5_next_cuda_check" "$FX" --fixtures none:none
grep -E "ERROR SUMMARY|PASS|FAIL" "$O/glm5_next_memcheck.txt" | tail -3
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
if [ $SECONDS -lt "$budget" ]; then
  check spec.256 100 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
    models/dflash-pair/reference.json --device cuda --batch 1 --both --repeat 1 --max-tokens 256
  sed -n '/^| class | batch | tokens/,$p' "$O/spec.256.txt" | cut -c1-200
else
  echo "## spec.256: skipped (at $SECONDS s)"
fi
if [ $SECONDS -lt "$budget" ]; then
  check spec.64 100 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
    models/dflash-pair/reference.json --device cuda --batch 1 --both --repeat 1 --max-tokens 64
  sed -n '/^| class | batch | tokens/,$p' "$O/spec.64.txt" | cut -c1-200
fi
finish /tmp/none
