#!/usr/bin/env bash
# Decode and prefill on GLM-4.7-Flash's real shape (transformers' glm4_moe_lite defaults, ~30 B
# parameters, random weights), on the GPU machine, in one run (issue 22): for fp8 (128x128 block
# scales), then NVFP4, tandem-random-checkpoint writes the checkpoint straight in that format (bf16,
# 60 GB, would not fit the disk beside it), tandem-bench-cuda measures decode (CUDA graphs, prompt
# 512, 128 steps, batches $BATCHES) against the floor of the quantised bytes a step reads, then, in
# a second process (a long prefill raises max-model-len, which decode graphs attend up to), prefill
# of one prompt of each $PREFILL_<FMT> length; the checkpoint is deleted before the next format.
# real_shape_report.py prints the table (and the NVFP4 / fp8 speed ratio against their byte
# ratio) and writes summary.json. Exit 1 when a step failed or a number is missing.
#   BIN=dir-with-binaries engine/bench/gpu-real-shape.sh OUT
# Environment: BIN (tandem-random-checkpoint, tandem-bench-cuda; default build-deps/bin), WORK
# (where checkpoints go; default /tmp/real-shape), LAYERS (47), BATCHES (1,6,16), PREFILL_FP8
# (512,32768), PREFILL_NVFP4 (512: the long prefill's time is the attention's, the same in both
# formats, and one costs a minute), BUDGET_S (330: a long prefill is skipped past it), PROFILE (steps:
# when set, the decode process also prints where a batch-1 step's time goes, op by op).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-real-shape.sh OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=${BIN:-build-deps/bin}
work=${WORK:-/tmp/real-shape}
layers=${LAYERS:-47}
batches=${BATCHES:-1,6,16}
budget=${BUDGET_S:-330}
failed=()
. engine/bench/bench_step.sh  # step NAME COMMAND...: run it, remember a failure
{
echo "# gpu-real-shape $(date -u +%Y-%m-%dT%H:%MZ), $layers layers"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
for fmt in fp8 nvfp4; do
  dir=$work/$fmt
  rm -rf "$work"
  mkdir -p "$work"
  # Bytes per layer in the format (+ the bf16 embedding and LM head, 1.3 GB), and 2 GB to spare.
  per_layer_mb=$([ "$fmt" = fp8 ] && echo 660 || echo 380)
  need_mb=$((layers * per_layer_mb + 1300 + 2000))
  free_mb=$(df -Pm "$work" | awk 'NR == 2 {print $4}')
  echo "## $fmt: $need_mb MB needed, $free_mb MB free on $(df -P "$work" | awk 'NR == 2 {print $6}') ($SECONDS s)"
  if [ "$free_mb" -lt "$need_mb" ]; then
    failed+=("$fmt: disk ($free_mb MB free, $need_mb MB needed)")
    continue
  fi
  step "$fmt write" timeout 240 "$bin/tandem-random-checkpoint" "$dir" "$fmt" --layers "$layers" || continue
  df -h "$work" | tail -1
  echo "## $fmt decode ($SECONDS s)"
  step "$fmt decode" timeout 200 "$bin/tandem-bench-cuda" "$dir" --prompt 512 --decode 128 --batches "$batches" --modes graphs \
    ${PROFILE:+--profile "$PROFILE"} --json "$out/$fmt-decode.json" > "$out/$fmt-decode.txt" 2>&1
  grep -E "^GPU|^model|^prefill|^\| [0-9]|tandem-bench-cuda:" "$out/$fmt-decode.txt"
  prefill_var=PREFILL_${fmt^^}
  prefill=${!prefill_var:-$([ "$fmt" = fp8 ] && echo 512,32768 || echo 512)}
  if [ "$SECONDS" -gt "$budget" ]; then
    echo "## $fmt prefill: past the ${budget} s budget, only 512"
    prefill=512
  fi
  echo "## $fmt prefill $prefill ($SECONDS s)"
  step "$fmt prefill" timeout 200 "$bin/tandem-bench-cuda" "$dir" --batches none --prefill "$prefill" \
    --json "$out/$fmt-prefill.json" > "$out/$fmt-prefill.txt" 2>&1
  grep -E "^prefill|tandem-bench-cuda:" "$out/$fmt-prefill.txt"
  rm -rf "$work"
done
finish engine/bench/real_shape_report.py
} 2>&1 | tee "$out/real-shape.txt"
