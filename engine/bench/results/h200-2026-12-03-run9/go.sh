#!/usr/bin/env bash
# cuda-attn helper's device run: checks of the branch's binaries (gpu_check, cuda_model_check,
# memcheck) and decode benchmarks of main's binaries (before) and the branch's (after), same run.
set -uo pipefail
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=build-deps/cuda-attn/before A=build-deps/cuda-attn/after
final=${OUT:-/tmp/out}; out=/tmp/cuda-attn-out; mkdir -p "$out" "$final"
model=/tmp/tandem-bench-model
steps=20
{
  echo "# cuda-attn go.sh $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
  (python3 -c "import sys, time; sys.path.insert(0, 'engine/bench'); import hf_bench; t = time.time(); \
hf_bench.write_model('$model'); print('benchmark model ready in %.1f s' % (time.time() - t))" >"$out/write.txt" 2>&1
   echo "exit $?" >>"$out/write.txt") &
  writer=$!
  echo "## gpu_check, after ($SECONDS s)"
  timeout 120 "$A/gpu_check" >"$out/gpu_check.txt" 2>&1; echo "exit $?"
  grep -E "paged_attention|FAIL|passed" "$out/gpu_check.txt"
  echo "## cuda_model_check, after ($SECONDS s)"
  timeout 150 "$A/cuda_model_check" tests/model/fixtures >"$out/check.txt" 2>&1; echo "exit $?"
  grep -E "##|FAIL|PASS|differs" "$out/check.txt" | cut -c1-230 | head -40
  wait $writer; tail -2 "$out/write.txt"
  for kv in auto fp8_e4m3; do
    echo "## before, kv $kv, graphs ($SECONDS s)"
    timeout 100 "$B/tandem-bench-cuda" "$model" --kv-cache-dtype $kv --modes graphs --json "$out/before-$kv.json" | grep -E "^\|"
    echo "## after, kv $kv, graphs ($SECONDS s)"
    timeout 100 "$A/tandem-bench-cuda" "$model" --kv-cache-dtype $kv --modes graphs --json "$out/after-$kv.json" | grep -E "^\|"
  done
  echo "## after without programmatic launch (--pdl 0), kv auto, graphs ($SECONDS s)"
  timeout 100 "$A/tandem-bench-cuda" "$model" --pdl 0 --modes graphs --json "$out/after-nopdl.json" | grep -E "^\|"
  echo "## after, --profile $steps ($SECONDS s)"
  timeout 100 "$A/tandem-bench-cuda" "$model" --modes graphs --batches 1 --profile $steps --json "$out/after-profile.json" >"$out/after-profile.txt" 2>&1
  echo "exit $?"; grep -E "^\|" "$out/after-profile.txt" | head -30
  echo "## before, --profile $steps ($SECONDS s)"
  timeout 100 "$B/tandem-bench-cuda" "$model" --modes graphs --batches 1 --profile $steps --json "$out/before-profile.json" >"$out/before-profile.txt" 2>&1
  echo "exit $?"; grep -E "^\|" "$out/before-profile.txt" | head -30
  echo "## gpu_check under compute-sanitizer memcheck, after ($SECONDS s)"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$A/gpu_check" >"$out/memcheck-gpu_check.txt" 2>&1
  echo "exit $?; $(grep -E 'ERROR SUMMARY' "$out/memcheck-gpu_check.txt" | tail -1); $(grep -E 'passed' "$out/memcheck-gpu_check.txt" | tail -1)"
  echo "## before / after (graphs)"
  python3 engine/bench/compare.py before="$out/before-auto.json" "after, no PDL"="$out/after-nopdl.json" after="$out/after-auto.json" | tee "$out/compare.md"
  python3 engine/bench/compare.py "before fp8 KV"="$out/before-fp8_e4m3.json" "after fp8 KV"="$out/after-fp8_e4m3.json" | tee "$out/compare-fp8.md"
  echo "total $SECONDS s"
} 2>&1 | tee "$out/go.txt"
cp "$out/go.txt" "$final/"
tar -C "$out" -czf "$final/out.tar.gz" .
