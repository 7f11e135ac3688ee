#!/usr/bin/env bash
# dec22 helper's device run (issue 22): checks of the branch's binaries (gpu_check, cuda_model_check,
# then both under memcheck) and batch 1/6/16 decode of main's binaries (before) and the branch's
# (after) in the same run, each intermediate commit's benchmark alone (mid/COMMIT), then the per-op
# profile of both. Unpacked from build-deps/dec22/bins.tar.xz:
#   run: tar -C /tmp -xJf build-deps/dec22/bins.tar.xz && bash /tmp/dec22/go.sh   (carry that file)
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
D=${D:-/tmp/dec22}
B=$D/before A=$D/after
final=${OUT:-/tmp/out}; out=/tmp/dec22-out; mkdir -p "$out" "$final"
model=/tmp/tandem-bench-model
steps=20
{
  echo "# dec22 go.sh $(date -u +%FT%TZ); after = $(cat $D/after.commit), before = $(cat $D/before.commit)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  (python3 -c "import sys, time; sys.path.insert(0, 'engine/bench'); import hf_bench; t = time.time(); \
hf_bench.write_model('$model'); print('benchmark model ready in %.1f s' % (time.time() - t))" >"$out/write.txt" 2>&1
   echo "exit $?" >>"$out/write.txt") &
  writer=$!
  echo "## gpu_check, after ($SECONDS s)"
  timeout 120 "$A/gpu_check" >"$out/gpu_check.txt" 2>&1; echo "exit $?"
  grep -E "router|moe_decode|FAIL|passed" "$out/gpu_check.txt" | cut -c1-200
  echo "## cuda_model_check, after ($SECONDS s)"
  timeout 150 "$A/cuda_model_check" tests/model/fixtures >"$out/check.txt" 2>&1; echo "exit $?"
  grep -E "##|FAIL|PASS|differs" "$out/check.txt" | cut -c1-230 | head -40
  wait $writer; tail -2 "$out/write.txt"
  for kv in auto fp8_e4m3; do
    for side in before after; do
      bin=$B; [ $side = after ] && bin=$A
      echo "## $side, kv $kv, graphs, batches 1,6,16 ($SECONDS s)"
      timeout 100 "$bin/tandem-bench-cuda" "$model" --kv-cache-dtype $kv --modes graphs --batches 1,6,16 \
        --json "$out/$side-$kv.json" | grep -E "^\|"
    done
  done
  # Each commit of the branch on its own (kv auto, graphs): which change gave what.
  for m in "$D"/mid/*/; do
    [ -x "$m/tandem-bench-cuda" ] || continue
    echo "## commit $(basename "$m") alone, kv auto, graphs, batches 1,6,16 ($SECONDS s)"
    timeout 100 "$m/tandem-bench-cuda" "$model" --modes graphs --batches 1,6,16 --json "$out/mid-$(basename "$m").json" | grep -E "^\|"
  done
  echo "## after without programmatic launch (--pdl 0), kv auto, graphs ($SECONDS s)"
  timeout 100 "$A/tandem-bench-cuda" "$model" --pdl 0 --modes graphs --batches 1,6,16 --json "$out/after-nopdl.json" | grep -E "^\|"
  for side in after before; do
    bin=$B; [ $side = after ] && bin=$A
    echo "## $side, --profile $steps ($SECONDS s)"
    timeout 100 "$bin/tandem-bench-cuda" "$model" --modes graphs --batches 1 --profile $steps \
      --json "$out/$side-profile.json" >"$out/$side-profile.txt" 2>&1
    echo "exit $?"; grep -E "^\||Graph" "$out/$side-profile.txt" | head -30
  done
  echo "## before / after (graphs)"
  mids=(); for j in "$out"/mid-*.json; do [ -f "$j" ] && mids+=("$(basename "$j" .json)=$j"); done
  python3 engine/bench/compare.py before="$out/before-auto.json" "${mids[@]}" "after, no PDL"="$out/after-nopdl.json" \
    after="$out/after-auto.json" | tee "$out/compare.md"
  python3 engine/bench/compare.py "before fp8 KV"="$out/before-fp8_e4m3.json" "after fp8 KV"="$out/after-fp8_e4m3.json" \
    | tee "$out/compare-fp8.md"
  echo "## gpu_check under compute-sanitizer memcheck, after ($SECONDS s)"
  timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$A/gpu_check" >"$out/memcheck-gpu_check.txt" 2>&1
  echo "exit $?; $(grep -E 'ERROR SUMMARY' "$out/memcheck-gpu_check.txt" | tail -1); $(grep -E 'passed' "$out/memcheck-gpu_check.txt" | tail -1)"
  echo "## cuda_model_check under compute-sanitizer memcheck, after ($SECONDS s)"
  timeout ${MEMCHECK_S:-120} compute-sanitizer --tool memcheck --error-exitcode 9 "$A/cuda_model_check" tests/model/fixtures \
    >"$out/memcheck-check.txt" 2>&1
  echo "exit $?; $(grep -E 'ERROR SUMMARY' "$out/memcheck-check.txt" | tail -1); $(grep -E '^(PASS|FAIL)' "$out/memcheck-check.txt" | tail -1)"
  echo "total $SECONDS s"
} 2>&1 | tee "$out/go.txt"
cp "$out/go.txt" "$final/"
tar -C "$out" -czf "$final/out.tar.gz" .
