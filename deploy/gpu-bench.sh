#!/usr/bin/env bash
# The CUDA model on the GPU machine, in one run: build (engine/bench/gpu: CUDA + header-only
# nlohmann-json, from build-deps/include) unless prebuilt binaries in $BENCH_BIN start there; the
# fixture check (CUDA vs transformers' golden logits and the CPU reference) and the same under
# compute-sanitizer memcheck; the benchmark model (engine/bench/hf_bench.py writes it) and
# transformers' numbers on it; tandem-bench-cuda on it (bf16 KV, then fp8 KV); one Markdown table.
# Everything lands in ${OUT:-.}: gpu-bench.txt (this log), check.txt, memcheck.txt, hf.json,
# tandem.json, tandem-fp8.json, profile.txt + profile.json (tandem-bench-cuda --profile: the batch-1
# step's time per op), table.md, serve.log (or build.log). deploy/gpu-prepare.sh fills
# build-deps/ (headers, prebuilt binaries, tandem-serve) on the build machine; carry it along.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
outdir=${OUT:-.}
mkdir -p "$outdir"
arch=${CUDA_ARCH:-90}
build=${BUILD_DIR:-build-gpu-bench}
bin=${BENCH_BIN:-}
model=${BENCH_MODEL_DIR:-/tmp/tandem-bench-model}
prompt=${PROMPT:-512}
decode=${DECODE:-128}
# Every check and benchmark that fails is named at the end and makes the script exit 1.
failed=()
check() {  # check NAME COMMAND...: run it, print its exit status, remember a failure
  local name=$1 rc
  shift
  "$@"
  rc=$?
  echo "exit $rc"
  [ "$rc" -eq 0 ] || failed+=("$name (exit $rc)")
}
verdict() {
  if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
  fi
  echo "all checks passed"
}
{
  echo "# gpu-bench $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  if [ -n "$bin" ] && { "$bin/tandem-bench-cuda" >/dev/null 2>&1; [ $? -eq 1 ]; }; then
    echo "## prebuilt binaries from $bin start here"
  else
    echo "## build (sm_$arch)"
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    if ! cmake -S engine/bench/gpu -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
          -DNLOHMANN_INCLUDE="$PWD/build-deps/include" >"$outdir/build.log" 2>&1 ||
       ! cmake --build "$build" -j 16 >>"$outdir/build.log" 2>&1; then
      tail -40 "$outdir/build.log"; echo "BUILD FAILED"; exit 1
    fi
    echo "built in $SECONDS s"
    bin=$build
  fi
  echo "## check: CUDA model vs golden fixtures and the CPU reference"
  check cuda_model_check timeout 60 "$bin/cuda_model_check" tests/model/fixtures >"$outdir/check.txt" 2>&1
  grep -E "##|FAIL|PASS|info|ok|departs|trace|routing" "$outdir/check.txt" | head -120
  if [ "${SKIP_MEMCHECK:-0}" != 1 ]; then
    echo "## check under compute-sanitizer memcheck"
    check memcheck timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/cuda_model_check" tests/model/fixtures \
      >"$outdir/memcheck.txt" 2>&1
    echo "$(grep -E 'ERROR SUMMARY' "$outdir/memcheck.txt" | tail -1); $(grep -E '^(PASS|FAIL)' "$outdir/memcheck.txt" | tail -1)"
  fi
  if [ "${ONLY_CHECK:-0}" = 1 ]; then echo "total $SECONDS s (ONLY_CHECK: no benchmark)"; verdict; exit 0; fi
  echo "## benchmark model + transformers ($SECONDS s)"
  check hf_bench timeout 240 python3 engine/bench/hf_bench.py --write "$model" --json "$outdir/hf.json" --prompt "$prompt" --decode "$decode"
  echo "## tandem-bench-cuda, bf16 KV ($SECONDS s)"
  check tandem-bench-cuda timeout 100 "$bin/tandem-bench-cuda" "$model" --prompt "$prompt" --decode "$decode" --json "$outdir/tandem.json"
  echo "## tandem-bench-cuda, fp8_e4m3 KV ($SECONDS s)"
  check tandem-bench-cuda-fp8-kv timeout 100 "$bin/tandem-bench-cuda" "$model" --prompt "$prompt" --decode "$decode" \
    --kv-cache-dtype fp8_e4m3 --json "$outdir/tandem-fp8.json"
  echo "## profile: where a batch-1 decode step's time goes, per op (CUDA events), then graph replays ($SECONDS s)"
  check tandem-bench-cuda-profile timeout 100 "$bin/tandem-bench-cuda" "$model" --prompt "$prompt" --decode "$decode" \
    --batches 1 --modes graphs --profile "${PROFILE_STEPS:-20}" --json "$outdir/profile.json" >"$outdir/profile.txt" 2>&1
  sed -n '/^Profile/,$p' "$outdir/profile.txt"
  echo "## the same, dense GEMMs all through cuBLASLt (--skinny-rows 0), CUDA graphs ($SECONDS s)"
  timeout 60 "$bin/tandem-bench-cuda" "$model" --prompt "$prompt" --decode "$decode" --skinny-rows 0 --modes graphs \
    --batches 1,16 | grep -E '^\|'
  nsys=$(command -v nsys || ls /opt/nvidia/nsight-systems/*/bin/nsys /usr/local/cuda/nsight-systems*/bin/nsys 2>/dev/null | head -1)
  if [ -n "$nsys" ]; then
    echo "## nsys: GPU kernel time of batch-1 decode (graphs), top kernels ($SECONDS s)"
    timeout 90 "$nsys" profile -o /tmp/tandem-decode --force-overwrite true --cuda-graph-trace node \
      "$bin/tandem-bench-cuda" "$model" --prompt "$prompt" --decode 64 --batches 1 --modes graphs >/dev/null 2>&1
    timeout 60 "$nsys" stats --report cuda_gpu_kern_sum --format table /tmp/tandem-decode.nsys-rep 2>/dev/null | head -40 | cut -c1-200
  else
    echo "## nsys not found: no kernel profile"
  fi
  if [ -x build-deps/serve/tandem-serve ]; then
    echo "## tandem-serve --device cuda on the demo model ($SECONDS s)"
    check gpu-serve-smoke env SERVE_OUT="$outdir" timeout 150 ./deploy/gpu-serve-smoke.sh build-deps/serve
  fi
  echo "## table"
  [ -f "$outdir/tandem.json" ] && python3 engine/bench/report.py "$outdir/tandem.json" \
    $( [ -f "$outdir/hf.json" ] && echo "$outdir/hf.json" ) $( [ -f "$outdir/tandem-fp8.json" ] && echo "$outdir/tandem-fp8.json" ) \
    | tee "$outdir/table.md"
  echo "total $SECONDS s"
  verdict
} 2>&1 | tee "$outdir/gpu-bench.txt"
# pipefail: the script's status is the block's (verdict's exit 1), not tee's.
