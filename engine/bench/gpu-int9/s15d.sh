#!/usr/bin/env bash
# The engine's unconstrained steps sampled on the device (Model::step_sample: each row's token and
# logprob read back instead of its logits): the checks that run the engine on the GPU
# (cuda_spec_check: greedy with the drafter equal to plain at batch 1, 4, 6, seeded sampling equal
# at batch 1 and 4; gpu_check sampling: the device's sampler against the CPU's),
# the model check, then tandem_spec_bench on the committed pair (speed, time per step, costs).
# Also the decode gemv's new default of 4 weight rows a warp from 16 x rows (gpu_check decode, the
# 2 B model's decode against TANDEM_GEMV_SHARED_ROWS=2, two rounds).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s15d.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check gpu_check.sampling 60 "$B/gpu_check" sampling
check cuda_model_check 90 "$B/cuda_model_check" "$FX"
grep -hE "FAIL" "$O"/cuda_spec_check.txt "$O"/gpu_check.sampling.txt "$O"/cuda_model_check.txt | head -8 | cut -c1-200
check spec.committed 150 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
  models/dflash-pair/reference.json --device cuda --batch 1 --batch 6 --both --repeat 3 --probe
sed -n '/^| class | batch | tokens/,/^Op profile/p' "$O/spec.committed.txt" | cut -c1-220
check gpu_check.decode 60 "$B/gpu_check" decode
timeout 100 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-write.json" --batches none >"$O/hf-write.txt" 2>&1
echo "## model written (exit $?)"
for round in 1 2; do
  bench "2b-decode-default-r$round" 40 /tmp/m2b -- --batches 1,6,16
  bench "2b-decode-rw2-r$round" 40 /tmp/m2b TANDEM_GEMV_SHARED_ROWS=2 -- --batches 1,6,16
done
finish /tmp/m2b
