#!/usr/bin/env bash
# Two prefill glue changes, checked and timed against the build before them in the same call:
# the MLA query's rope rotated from q_ into place in one launch (rope_copy_cuda; was a strided copy
# and a rotation in place) and fp32 router logits as one cuBLASLt product past 128 tokens (was a
# warp per token and expert). $here/bin holds the new binaries, $here/base the old
# tandem-bench-cuda (built at BASE_COMMIT). Output under $OUT/int9 (packed into int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/smallops.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-330}
source "$here/lib.sh"
echo "base binary built at $(cat "$here/BASE_COMMIT")" | tee -a "$O/card.txt"
echo "# 1. checks ($SECONDS s)"
check gpu_check 120 "$B/gpu_check" elementwise glue moe
grep -E "FAIL|rope_copy" "$O/gpu_check.txt" | head -12 | cut -c1-200; tail -1 "$O/gpu_check.txt"
check memcheck.elementwise 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" elementwise
check cuda_model_check 60 "$B/cuda_model_check" $FX
grep -E "FAIL" "$O/cuda_model_check.txt" | head -8 | cut -c1-160
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
echo "# 2. 2 B bf16 prefill, new vs base binary, alternating ($SECONDS s)"
timeout 120 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches none >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^prefill|FAILED" "$O/hf-eager.txt" | cut -c1-160
for round in 1 2; do
  bench 2b-new-$round 40 /tmp/m2b -- --batches none --prefill 512,4096 --profile-prefill $([ $round = 1 ] && echo 512 || echo 4096)
  B=$here/base bench 2b-base-$round 40 /tmp/m2b -- --batches none --prefill 512,4096 --profile-prefill $([ $round = 1 ] && echo 512 || echo 4096)
done
grep -hE "router logits|rope \(query|query rope copy" "$O"/2b-*-1.txt "$O"/2b-*-2.txt | cut -c1-120
rm -rf /tmp/m2b
echo "done at $SECONDS s; checks failed: ${failed[*]:-none}; timings not finished: ${slow[*]:-none}"
pack
[ ${#failed[@]} -eq 0 ]
