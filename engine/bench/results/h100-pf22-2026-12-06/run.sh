#!/usr/bin/env bash
# pf22: CUDA steps routed by phase (decode-class sequences on the batch-invariant kernels, each
# prompt chunk in a pass of its own on cuBLASLt), main (ab3571a) vs the branch in one call.
#   run: tar xJf build-deps/pf22/bundle.tar.xz -C /tmp && bash /tmp/pf22/run.sh   (in the repository root)
# Checks first (the branch's cuda_spec_check with its mixed-step part, cuda_model_check,
# glm5_next_cuda_check, gpu_check), then tandem-bench-cuda on the 2 B random glm4_moe_lite of
# hf_bench.py: main, main --decode-kernels 0 (all cuBLASLt), the branch, interleaved; then the
# branch's 6-prompt prefill (a pass a prompt vs grouped), --invariant-tokens 2048, and the 1 x 512
# prefill profile; last, cuda_spec_check --parts under memcheck. Exit 1 when a check fails.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
b=/tmp/pf22; o=${OUT:-/tmp/pf22-out}/pf22; m=/tmp/tandem-bench-model
mkdir -p "$o"
cat "$b/COMMIT" > "$o/commit.txt"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >> "$o/commit.txt" 2>&1
failed=""
check() {  # name timeout command...
  local name=$1 t=$2; shift 2
  local t0=$SECONDS; timeout "$t" "$@" > "$o/$name.txt" 2>&1; local rc=$?
  printf '%-22s exit %3d %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -E 'PASS|FAIL|passed|ERROR SUMMARY' "$o/$name.txt" | tail -1)"
  [ "$rc" = 0 ] || failed+=" $name"
}
check cuda_spec_check 150 "$b/cuda_spec_check" models/dflash-pair
grep -E "mixed|beside|captured rows of the mixed|greedy output with the drafter" "$o/cuda_spec_check.txt" | sed 's/^/    /'
check cuda_model_check 120 "$b/cuda_model_check" tests/model/fixtures
check glm5_next_cuda_check 60 "$b/glm5_next_cuda_check" tests/model/fixtures
check gpu_check 90 "$b/gpu_check"
t0=$SECONDS
python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" > "$o/model.txt" 2>&1 || failed+=" model"
echo "model written in $((SECONDS - t0)) s"
bench() {  # name binary args...
  local name=$1 bin=$2; shift 2
  local t0=$SECONDS
  timeout 90 "$b/$bin/tandem-bench-cuda" "$m" --modes graphs --json "$o/$name.json" "$@" > "$o/$name.txt" 2>&1 || failed+=" bench-$name"
  echo "## $name ($((SECONDS - t0)) s): $*"; grep -E "^prefill|^\| [0-9]" "$o/$name.txt"
}
bench main base --batches 1,6 --prefill 512,4096
bench pf22 new --batches 1,6 --prefill 512,4096
bench main-cublas base --batches 1,6 --prefill 512,4096 --decode-kernels 0
bench pf22-2 new --batches 1,6 --prefill 512,4096
bench main-2 base --batches 1,6 --prefill 512,4096
bench pf22-6x512 new --batches none --prefill 512 --prefill-seqs 6
bench pf22-6x512-grouped new --batches none --prefill 512 --prefill-seqs 6 --group-prefill 1
bench pf22-inv2048 new --batches none --prefill 512 --invariant-tokens 2048
bench pf22-profile new --batches none --profile-prefill 512
sed -n '/^Prefill profile/,$p' "$o/pf22-profile.txt" | head -40
python3 engine/bench/compare.py main=$o/main-2.json main-cublas=$o/main-cublas.json pf22=$o/pf22-2.json > "$o/compare.md" 2>&1 && cat "$o/compare.md"
if command -v compute-sanitizer > /dev/null; then  # (cut short by its timeout: no verdict, not a failure)
  t0=$SECONDS
  timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 "$b/cuda_spec_check" models/dflash-pair --parts > "$o/spec_memcheck.txt" 2>&1
  rc=$?; echo "spec_memcheck exit $rc $((SECONDS - t0)) s $(grep -E 'ERROR SUMMARY|PASS|FAIL' "$o/spec_memcheck.txt" | tail -1)"
  [ "$rc" = 0 ] || [ "$rc" = 124 ] || failed+=" spec_memcheck"
fi
echo "total $SECONDS s; failed:${failed:- none}"
[ -z "$failed" ]
