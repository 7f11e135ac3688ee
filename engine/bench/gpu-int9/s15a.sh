#!/usr/bin/env bash
# Session 15's call: main's kernels checked as built (the gemv rule that keeps SiLU products at one
# row a warp never ran whole), and new DFlash drafters for models/dflash-pair's target trained on
# far more of the target's own greedy text (tools/train: generation through glm_lite's KV cache,
# prompt-length prefixes, anchors only where the labels are the target's own tokens). Three
# drafters train side by side on one data set for $SECS s each; each one's reference.json (the
# PyTorch reference's acceptance lengths on the committed prompts) comes back, and
# tandem_spec_bench runs the committed drafter and the best new one on the GPU engine.
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s15a.sh
# Output: $OUT/int9.tgz (logs, references, benches), $OUT/drafters.tar.* (the new drafters).
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-480}
source "$here/lib.sh"
SECS=${SECS:-230}
W=/tmp/w; mkdir -p "$W"
export PYTHONUNBUFFERED=1
T=tools/train

echo "# 1. data in the background, checks meanwhile ($SECONDS s)"
timeout 150 python3 $T/train_drafter.py --pair models/dflash-pair --out "$W/data" --data "$W/data.pt" --data-only \
  --gen-seconds 45 >"$O/data.log" 2>&1 &
data_pid=$!
check gpu_check.decode 60 "$B/gpu_check" decode
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check cuda_model_check 90 "$B/cuda_model_check" "$FX"
grep -hE "FAIL" "$O"/gpu_check.decode.txt "$O"/cuda_spec_check.txt "$O"/cuda_model_check.txt | head -8 | cut -c1-200
wait $data_pid; echo "## data: exit $? ($SECONDS s)"; tail -3 "$O/data.log"

echo "# 2. three drafters side by side, $SECS s each ($SECONDS s)"
common=(--pair models/dflash-pair --data "$W/data.pt" --intermediate 1536 --anchors 128 --layers 2 --seconds "$SECS")
declare -A variant=([s75]="--gen-share 0.75" [s100]="--gen-share 1.0" [s75g7]="--gen-share 0.75 --gamma 7")
for v in "${!variant[@]}"; do
  # shellcheck disable=SC2086
  timeout $((SECS + 120)) python3 $T/train_drafter.py "${common[@]}" ${variant[$v]} --out "$W/$v" >"$O/train-$v.log" 2>&1 &
done
wait
best=; best_score=0
for v in "${!variant[@]}"; do
  echo "### $v: ${variant[$v]}"; grep -E "drafter:|reference|total|Error" "$O/train-$v.log" | tail -8
  cp "$W/$v/reference.json" "$O/reference-$v.json" 2>/dev/null
  # The issue's classes: code and JSON acceptance, summed.
  score=$(grep -E "^reference (code|json):" "$O/train-$v.log" | awk '{s += $6} END {printf "%.3f", s}')
  if awk -v a="$score" -v b="$best_score" 'BEGIN {exit !(a > b)}'; then best=$v; best_score=$score; fi
done
echo "## best: ${best:-none} (code + JSON acceptance $best_score) ($SECONDS s)"

echo "# 3. the GPU engine with the committed drafter and the best new one ($SECONDS s)"
spec() {  # spec NAME PAIR_DIR DRAFTER REFERENCE
  timeout 90 "$B/tandem_spec_bench" "$2/target" "$3" "$4" --device cuda --batch 1 --batch 6 --both --repeat 1 --probe \
    >"$O/spec-$1.md" 2>&1
  echo "## tandem_spec_bench $1: exit $?"; grep -E "ratios to|t_plain|^\| (code|json|prose) " "$O/spec-$1.md" | cut -c1-200
}
spec committed models/dflash-pair models/dflash-pair/drafter models/dflash-pair/reference.json
if [ -n "$best" ] && [ $SECONDS -lt "$budget" ]; then
  spec "$best" models/dflash-pair "$W/$best/drafter" "$W/$best/reference.json"
fi
(cd "$W" && tar cf - ./*/drafter ./*/train_log.txt 2>/dev/null) | split -b 15M - "$OUT/drafters.tar."
rm -f "$W/data.pt"
finish /tmp/none
