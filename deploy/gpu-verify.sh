#!/usr/bin/env bash
# Every GPU check of the tree in one device call, on the binaries `deploy/gpu-prepare.sh --bundle`
# packed (build-deps/bundle.tar.xz, carried). Each check writes its whole output under $OUT and a
# line to $OUT/summary.txt; the summary is printed at the end.
#   gpu_check            every CUDA kernel (glm5_next's included) against its CPU reference, then under memcheck
#   cuda_model_check     the GLM decoders against the fixtures (and their fp8 / NVFP4 rewrites)
#   glm5_next_cuda_check glm5_next's model, both fixtures, device rollback
#   cuda_spec_check      DFlash on the GPU against the CPU reference, on models/dflash-pair
#   gpu_hybrid_serve.py  glm5_next served over HTTP: state slots, a random drafter
#   tandem-bench-cuda    batch 1 / 4 / 16 decode of the 2 B random model against its floor
# Usage (repository root on the GPU machine): OUT=dir bash deploy/gpu-verify.sh [CHECK ...]
# (no CHECK: all of them; names as in the list above).
# Exits non-zero when any check fails.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1  # no set -e here: every check runs, failures are counted
all="gpu_check cuda_model_check glm5_next_cuda_check cuda_spec_check gpu_hybrid_serve.py tandem-bench-cuda"
wanted=" ${*:-$all} "
# A misspelt name would run nothing and pass: refuse it before spending the device call.
for name in "$@"; do
  [[ " $all " == *" $name "* ]] || { echo "gpu-verify.sh: no check named '$name' (checks: $all)" >&2; exit 2; }
done
out=${OUT:-.}
mkdir -p "$out"
export PATH=/usr/local/cuda/bin:$PATH
tmp=$(mktemp -d)
tar -C "$tmp" -xJf build-deps/bundle.tar.xz || { echo "no build-deps/bundle.tar.xz: run deploy/gpu-prepare.sh --bundle"; exit 1; }
b=$tmp/bundle
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$b/serve/lib:/usr/local/cuda/lib64${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
summary=$out/summary.txt
failed=0  # checks that exited non-zero: the script's exit status says whether any did
: >"$summary"

# run_check NAME SECONDS COMMAND...: runs it into $out/NAME.txt, records its exit status and last line.
run_check() {
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  printf '%-24s exit %3d  %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -v '^\s*$' "$out/$name.txt" | tail -1 | cut -c1-100)" |
    tee -a "$summary"
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
}
check() {  # the same, for a check that was asked for (its name in the list above)
  [[ $wanted == *" $1 "* ]] && run_check "$@"
}
memcheck() {  # memcheck NAME SECONDS COMMAND...: that check again under compute-sanitizer, when asked for
  local name=$1 limit=$2
  shift 2
  [[ $wanted == *" $name "* ]] && run_check "$name.memcheck" "$limit" compute-sanitizer --tool memcheck --error-exitcode 9 "$@"
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
echo "binaries built at $(cat "$b/COMMIT" 2>/dev/null || echo '(unknown: a bundle from before COMMIT was packed)')" | tee -a "$summary"
check gpu_check 120 "$b/gpu_check"
# A kernel fault leaves the device unusable for the groups after it ("cudaMalloc: an illegal memory
# access"): on a failure, each group again in a process of its own, for a verdict on every group.
if [[ $wanted == *" gpu_check "* ]] && ! grep -q "^[0-9]* passed, 0 failed" "$out/gpu_check.txt"; then
  for g in $("$b/gpu_check" --list); do
    [[ $g == *_small ]] || run_check "gpu_check.$g" 60 "$b/gpu_check" "$g"
  done
fi
memcheck gpu_check 200 "$b/gpu_check"
check cuda_model_check 240 "$b/cuda_model_check" tests/model/fixtures
check glm5_next_cuda_check 120 "$b/glm5_next_cuda_check" tests/model/fixtures
memcheck glm5_next_cuda_check 200 "$b/glm5_next_cuda_check" tests/model/fixtures
check cuda_spec_check 150 "$b/cuda_spec_check" models/dflash-pair
check gpu_hybrid_serve.py 200 python3 deploy/gpu_hybrid_serve.py "$b/serve" tests/model/fixtures "$out/hybrid-serve"
if [[ $wanted == *" tandem-bench-cuda "* ]]; then
  model=${BENCH_MODEL_DIR:-/tmp/tandem-bench-model}  # the 2 B random glm4_moe_lite of engine/bench/hf_bench.py
  python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$model')" >"$out/bench-model.txt" 2>&1
  check tandem-bench-cuda 200 "$b/tandem-bench-cuda" "$model" --modes graphs --json "$out/bench.json"
fi
echo "## summary"
cat "$summary"
echo "checks failed: $failed"
[ "$failed" -eq 0 ]
