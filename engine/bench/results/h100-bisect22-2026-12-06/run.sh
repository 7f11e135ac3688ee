#!/usr/bin/env bash
# Issue 22's batch-6/16 regression, bisected in one call: tandem-bench-cuda of each commit below on
# the 2 B random glm4_moe_lite (hf_bench.py), batches 1/6/16, graphs, interleaved twice.
#   run: tar xJf build-deps/bisect22/bisect.tar.xz -C /tmp && bash /tmp/out/run.sh   (carry build-deps/bisect22)
# b3cc69f main before the session; dec22: 56df7aa c1 (router cluster), 5136ad5 c3, 9926ce1 (gemv RW),
# 51d7730 (dec22 head); gemvnt21: af27477 (gemv NT), 1669fa3 (head); merges e7fcf42 (g5n23+dec22),
# 8d0263c (+gemvnt21); a61036a (the L2 guard, landed).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib
m=/tmp/tandem-bench-model; o=${OUT:-/tmp/bisect-out}; mkdir -p $o
python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" > /dev/null 2>&1
order="b3cc69f 56df7aa 5136ad5 9926ce1 51d7730 af27477 1669fa3 e7fcf42 8d0263c a61036a"
for pass in 1 2; do for c in $order; do
  echo "## $c pass $pass"; timeout 60 /tmp/out/$c/tandem-bench-cuda $m --modes graphs --batches 1,6,16 --json $o/$c-$pass.json | grep -E "^\| [0-9]"
done; done
args=""; for c in $order; do args="$args $c=$o/$c-2.json"; done
python3 engine/bench/compare.py $args | tee $o/compare.md
