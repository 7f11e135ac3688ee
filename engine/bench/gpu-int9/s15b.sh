#!/usr/bin/env bash
# Where a DFlash step's time goes on the GPU engine: tandem_spec_bench's new table (ms per engine
# step: proposals, verifying forwards, the rest of the model work, the engine outside it) for the
# committed pair at batch 1 and 6, fixed k and adaptive, 3 timed runs; s15a measured every DFlash
# step costing ~0.2 ms more than its proposal and verification. Then, while time is left, what
# s14b.sh holds for the decode gemv (4 rows a warp sharing x; rows_mma for the ungrouped products).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s15b.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
echo "# 1. DFlash time per step ($SECONDS s)"
check spec.committed 150 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
  models/dflash-pair/reference.json --device cuda --batch 1 --batch 6 --both --repeat 3
sed -n '/^| class | batch | tokens/,$p' "$O/spec.committed.txt" | cut -c1-200

echo "# 2. the decode gemv, while time is left ($SECONDS s)"
if [ $SECONDS -lt "$budget" ]; then
  check gpu_check.decode.rw4 60 TANDEM_GEMV_SHARED_ROWS=4 "$B/gpu_check" decode
  timeout 100 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-write.json" --batches none >"$O/hf-write.txt" 2>&1
  echo "## model written (exit $?)"
  for setting in TANDEM_GEMV_SHARED_ROWS=2 TANDEM_GEMV_SHARED_ROWS=4 TANDEM_GEMV_MMA=1; do
    bench "2b-decode-${setting#TANDEM_}" 40 /tmp/m2b "$setting" -- --batches 1,6,16
  done
fi
finish /tmp/m2b
