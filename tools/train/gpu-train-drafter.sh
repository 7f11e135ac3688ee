#!/usr/bin/env bash
# A new DFlash drafter for models/dflash-pair's target, trained and measured in one GPU-machine run
# (the run behind models/dflash-pair/drafter and engine/spec_decode/bench/results/h200-dflash-2026-12-03-drafter2.md):
#   data: corpus + target-generated rows (train_drafter.py --data-only), shared by
#   three drafters trained side by side for $SECS s (2 and 4 layers on corpus + generated rows,
#   2 layers on corpus only), each one's reference.json recomputed by train_drafter.py (dflash_greedy);
#   then tandem_spec_bench on the pair's current drafter, and engine/spec_decode/bench/gpu-dflash.sh on the
#   pair with each new 2- and 4-layer drafter swapped in (the checkout's models/dflash-pair is changed:
#   run it on a copy). Results: $OUT/go.txt, and everything (drafters, logs, bench) as
#   $OUT/results.tar.* (split under 16 MB). Usage, from the repository root:
#     bash tools/train/gpu-train-drafter.sh BIN     # BIN: tandem_spec_bench, cuda_spec_check
set -uo pipefail
BIN=${1:?usage: gpu-train-drafter.sh BIN (tandem_spec_bench and cuda_spec_check built for sm_90)}
TRAIN=${TRAIN:-tools/train}
W=/tmp/w
SECS=${SECS:-200}
mkdir -p $W
export PYTHONUNBUFFERED=1 PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{
echo "# drafter2 $(date -u +%FT%TZ)"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cp -r models/dflash-pair $W/old-pair
echo "## data ($SECONDS s)"
timeout 100 python3 $TRAIN/train_drafter.py --pair models/dflash-pair --out $W/data --data $W/data.pt --data-only --gen-seconds 25 > $W/data.log 2>&1; echo "exit $?"
tail -5 $W/data.log
echo "## train ($SECONDS s)"
common="--pair models/dflash-pair --data $W/data.pt --intermediate 1536 --anchors 128 --seconds $SECS"
timeout $((SECS + 90)) python3 $TRAIN/train_drafter.py $common --out $W/l2 --layers 2 > $W/l2.log 2>&1 &
timeout $((SECS + 90)) python3 $TRAIN/train_drafter.py $common --out $W/l4 --layers 4 > $W/l4.log 2>&1 &
timeout $((SECS + 90)) python3 $TRAIN/train_drafter.py $common --out $W/l2c --layers 2 --no-generated > $W/l2c.log 2>&1 &
wait
for v in l2 l4 l2c; do echo "### $v"; grep -E "drafter:|reference|total|Error|error" $W/$v.log | tail -9; done
echo "## old drafter, tandem_spec_bench ($SECONDS s)"
timeout 60 $BIN/tandem_spec_bench $W/old-pair/target $W/old-pair/drafter $W/old-pair/reference.json --device cuda \
  --batch 1 --batch 4 --both --repeat 3 --probe > $W/bench-old.md 2>&1; echo "exit $?"
cat $W/bench-old.md
for v in l2 l4; do
  [ -f $W/$v/drafter/config.json ] || continue
  echo "## gpu-dflash.sh with $v ($SECONDS s)"
  rm -rf models/dflash-pair/drafter && cp -r $W/$v/drafter models/dflash-pair/drafter && cp $W/$v/reference.json models/dflash-pair/reference.json
  mkdir -p $W/bench-$v
  OUT=$W/bench-$v timeout 150 bash engine/spec_decode/bench/gpu-dflash.sh $BIN > /dev/null 2>&1; echo "exit $?"
  cat $W/bench-$v/gpu-dflash.txt
done
echo "total $SECONDS s"
} 2>&1 | tee $W/go.txt
rm -f $W/data.pt; rm -rf $W/old-pair
cp $W/go.txt $OUT/go.txt
tar cf - -C $W . | split -b 15M - $OUT/results.tar.
ls -la $OUT
