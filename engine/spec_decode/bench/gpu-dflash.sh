#!/usr/bin/env bash
# DFlash on the GPU machine, in one run, on the trained pair (models/dflash-pair):
#   check.txt    tests/spec/cuda_spec_check (capture, drafter and verify vs the CPU reference; engine
#                greedy identity with the drafter at batch 1, 4 and 6; acceptance length vs the
#                PyTorch reference)
#   memcheck.txt the same checks' parts under compute-sanitizer memcheck (--parts: no engine runs)
#   bench.md     tandem_spec_bench --device cuda: plain vs DFlash (7 drafts every step, and adaptive)
#                per class at batch 1 and 6 (BATCHES), and the step costs with the speedup bound (--probe)
#   serve.txt    tandem-serve --device cuda with and without --speculative-config: the same greedy
#                completions, and the speculative counters of /metrics
# Usage: gpu-dflash.sh BIN where BIN holds tandem_spec_bench, cuda_spec_check and serve/tandem-serve
# (+ serve/lib: the shared libraries the GPU machine lacks), built on a machine with nvcc for sm_90;
# serve/ may come as BIN/serve.tar.xz instead (the run tool's carry limit), unpacked under /tmp.
# Output in ${OUT:-.}; run from the repository root. Exits 1 when the check, the memcheck, the bench
# or the serve comparison failed (each named on the last line).
set -uo pipefail
bin=$1
out=${OUT:-.}
pair=models/dflash-pair
mkdir -p "$out"
failed=""
if [ -f "$bin/serve.tar.xz" ]; then
  mkdir -p /tmp/gpu-dflash && tar xJf "$bin/serve.tar.xz" -C /tmp/gpu-dflash
  serve_dir=/tmp/gpu-dflash/serve
else
  serve_dir=$bin/serve
fi
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$serve_dir/lib${nccl:+:$(dirname "$nccl")}:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0 PATH=/usr/local/cuda/bin:$PATH
{
  echo "# gpu-dflash $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "## cuda_spec_check ($SECONDS s)"
  timeout 150 "$bin/cuda_spec_check" "$pair" >"$out/check.txt" 2>&1; rc=$?; echo "exit $rc"; [ $rc = 0 ] || failed+=" check"
  grep -E "^##|FAIL|PASS|ok|info" "$out/check.txt"
  if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
    echo "## memcheck of the parts ($SECONDS s)"
    timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_spec_check" "$pair" --parts >"$out/memcheck.txt" 2>&1
    rc=$?; [ $rc = 0 ] || failed+=" memcheck"
    echo "exit $rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck.txt" | tail -1); $(grep -E '^(PASS|FAIL)' "$out/memcheck.txt" | tail -1)"
  fi
  echo "## tandem_spec_bench --device cuda ($SECONDS s)"
  batches=""
  for b in ${BATCHES:-1 6}; do batches+=" --batch $b"; done
  timeout 240 "$bin/tandem_spec_bench" $pair/target $pair/drafter $pair/reference.json --device cuda $batches --both \
    --repeat "${REPEAT:-3}" --probe >"$out/bench.md" 2>&1; rc=$?; echo "exit $rc"; [ $rc = 0 ] || failed+=" bench"
  cat "$out/bench.md"
  if [ -x "$serve_dir/tandem-serve" ]; then
    echo "## tandem-serve --device cuda, plain and DFlash ($SECONDS s)"
    SERVE="$serve_dir/tandem-serve" PAIR=$pair timeout 100 bash "$(dirname "$0")/gpu-dflash-serve.sh" >"$out/serve.txt" 2>&1
    rc=$?; echo "exit $rc"; [ $rc = 0 ] || failed+=" serve"
    cat "$out/serve.txt"
  fi
  echo "total $SECONDS s"
  echo "${failed:+FAILED:$failed}${failed:-all passed}" >"$out/status.txt"
} 2>&1 | tee "$out/gpu-dflash.txt"
cat "$out/status.txt"
grep -q "^all passed" "$out/status.txt"
