#!/usr/bin/env bash
# gemvnt21 helper: gpu_check (fused, glue, decode groups) of mine, then main, the gemv-only branch (af27477)
# and mine (gemvnt21 head, see /tmp/g21/mine/COMMIT) through gpu-dflash.sh on one card (memcheck: mine only).
set -u
mkdir -p /tmp/g21
tar xJf build-deps/gemvnt21/bundles.tar.xz -C /tmp/g21 && tar xJf build-deps/gemvnt21/mine.tar.xz -C /tmp/g21
o=${OUT:-/tmp/out}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $o/card.txt
(cd /tmp/g21/mine && LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib ./gpu_check fused glue decode > $o/gpu_check.txt 2>&1; echo "gpu_check exit $?"; grep -E "head_prep|embed_rmsnorm|picked|argmax|gemv|passed|FAIL|device" $o/gpu_check.txt)
for b in ${BUILDS:-mine branch main}; do
  mk=1; [ $b = mine ] && mk=0
  echo "=== $b"
  OUT=$o/$b SKIP_MEMCHECK=$mk REPEAT=${REPEAT:-1} timeout 120 bash engine/spec_decode/bench/gpu-dflash.sh /tmp/g21/$b > /dev/null 2>&1
  cp $o/$b/gpu-dflash.txt $o/$b.txt
  cat $o/$b/status.txt
  grep -E "^exit|^PASS|^FAIL|FAIL |ERROR SUMMARY|ratios to|t_plain" $o/$b.txt | head -20
done
