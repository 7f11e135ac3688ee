#!/usr/bin/env bash
# attn22 (issue 22, MLA decode attention split by each token's own context): checks, then the
# switch on (TANDEM_ATTN_SPLIT=1, as built; TANDEM_ATTN_SPLITS=8: fewer, longer splits) vs off
# (0: the split of max-model-len, as before) in the same binaries. Run from the repository root after unpacking the bundle into /tmp/attn22:
#   mkdir -p /tmp/attn22 && tar xJf build-deps/attn22/bundle.tar.xz -C /tmp/attn22 && bash /tmp/attn22/run.sh
# Results under $OUT/attn22 (or /tmp/attn22-out); exit 1 when a check failed. Optional parts skip
# themselves when the run is past its budget (BUDGET_S, default 170 s).
set -u
export PATH=/usr/local/cuda/bin:$PATH
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
here=$(cd "$(dirname "$0")" && pwd)
d=${BIN:-$here/bin}; o=${OUT:-/tmp/attn22-out}/attn22; mkdir -p "$o"; fail=0
budget=${BUDGET_S:-165}
echo "attn22 binaries $(cat "$here/COMMIT" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
run() {  # run NAME SECONDS [VAR=value ...] COMMAND...: output into $o/NAME.txt, one summary line
  local name=$1 lim=$2 t0=$SECONDS envs=(); shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$lim" "$@" >"$o/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $((SECONDS - t0)) s: $(grep -v '^\s*$' "$o/$name.txt" | tail -1 | cut -c1-120)"
  [ "$rc" -eq 0 ] || fail=$((fail + 1))
}
# The 47-layer checkpoint (about 40 s of CPU and 31 GB of disk) is written while the checks run.
r=/tmp/attn22-47l-fp8
( t0=$SECONDS; timeout 90 "$d/tandem-random-checkpoint" $r fp8 --layers "${LAYERS:-47}" >"$o/checkpoint-47l-fp8.txt" 2>&1
  echo "exit $? after $((SECONDS - t0)) s" >>"$o/checkpoint-47l-fp8.txt" ) &
ck=$!
run gpu_check 75 "$d/gpu_check" attention mla_split decode moe
grep -E "mla own|FAIL" "$o/gpu_check.txt" | cut -c1-160
run cuda_model_check 40 "$d/cuda_model_check" tests/model/fixtures
run cuda_model_check.split0 40 TANDEM_ATTN_SPLIT=0 "$d/cuda_model_check" tests/model/fixtures
run cuda_model_check.splits8 40 TANDEM_ATTN_SPLITS=8 "$d/cuda_model_check" tests/model/fixtures
grep -hE "FAIL" "$o"/cuda_model_check*.txt | head -6 | cut -c1-160
run cuda_spec_check 40 "$d/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$o/cuda_spec_check.txt" | head -4
echo "checks done at $SECONDS s"
timeout 40 "$d/gpu_timing" mla >"$o/gpu_timing-mla.txt" 2>&1 || echo "gpu_timing mla failed (a timing, not a check)"
cat "$o/gpu_timing-mla.txt"
bench() {  # bench LABEL MODEL SECONDS [VAR=value ...]: graphs at 1/6/16 and the batch-1 profile
  local label=$1 model=$2 lim=$3 t0=$SECONDS; shift 3
  env "$@" timeout "$lim" "$d/tandem-bench-cuda" "$model" --modes graphs --batches 1,6,16 --prompt 512 --decode 128 --profile 10 \
    --json "$o/$label.json" >"$o/$label.txt" 2>&1 || echo "$label failed (exit $?)"
  echo "## $label ($((SECONDS - t0)) s): $*"
  grep -E "^\| [0-9]|paged attention|\*\*sum|Graph replays" "$o/$label.txt" | cut -c1-150
}
wait $ck
echo "47-layer fp8 checkpoint: $(tail -1 "$o/checkpoint-47l-fp8.txt") (at $SECONDS s)"
if [ -f $r/config.json ] && [ $SECONDS -lt $((budget - 50)) ]; then
  bench 47l-fp8-split1 $r 40 TANDEM_ATTN_SPLIT=1
  bench 47l-fp8-split0 $r 40 TANDEM_ATTN_SPLIT=0
  [ $SECONDS -lt $((budget - 45)) ] && bench 47l-fp8-splits8 $r 40 TANDEM_ATTN_SPLITS=8
else
  echo "skipped the 47-layer benches (at $SECONDS s)"
fi
rm -rf $r
run memcheck.mla_split 80 compute-sanitizer --tool memcheck --error-exitcode 9 "$d/gpu_check" mla_split
m=/tmp/attn22-2b
if [ $SECONDS -lt $((budget - 40)) ]; then
  t0=$SECONDS
  python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" >"$o/bench-model.txt" 2>&1 ||
    { echo "2 B model write failed"; tail -3 "$o/bench-model.txt"; }
  echo "2 B model written in $((SECONDS - t0)) s"
  bench 2b-split1 $m 30 TANDEM_ATTN_SPLIT=1
  [ $SECONDS -lt $budget ] && bench 2b-split0 $m 30 TANDEM_ATTN_SPLIT=0
else
  echo "skipped the 2 B benches (at $SECONDS s)"
fi
echo "checks failed: $fail (at $SECONDS s)"
[ "$fail" -eq 0 ]
