#!/usr/bin/env bash
# Issue 22 batch-6/16 regression: v0 = main (488810b) kernels, v1 = cuda::load16 for the gemv and
# MoE down activations, v3 = v1 + 8 blocks an SM for the 4-load gemv (64 registers). 2 B glm4_moe_lite.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib
m=/tmp/tandem-bench-model; o=$OUT/gv; mkdir -p $o; d=/tmp/gv
python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" > /dev/null 2>&1
for pass in 1 2; do for v in v0 v1 v3; do
  echo "## $v pass $pass"; timeout 90 $d/$v/tandem-bench-cuda $m --modes graphs --batches 1,6,16 --json $o/$v-$pass.json | grep -E "^\| [0-9]"
done; done
for v in v0 v3; do for b in 6 16; do
  timeout 90 $d/$v/tandem-bench-cuda $m --modes graphs --batches 1 --profile 20 --profile-batch $b > $o/profile-$v-b$b.txt 2>&1
done; done
python3 engine/bench/compare.py v0=$o/v0-2.json v1=$o/v1-2.json v3=$o/v3-2.json | tee $o/compare.md
head -40 $o/profile-v3-b16.txt | grep -E "^\|" | head -25
cd $OUT && tar czf gv.tgz gv && rm -rf gv
