#!/usr/bin/env bash
# A merged tree on the GPU in one device call: every check, then each change measured against the
# behaviour it replaced, side by side in the same binaries (an env switch or a flag selects the old
# path), then GLM-4.7-Flash's real shape while time is left. From the repository root:
#   tar xJf build-deps/bundle.tar.xz -C /tmp && bash engine/bench/gpu-merged.sh /tmp/bundle OUT
# (the bundle of deploy/gpu-prepare.sh --bundle). Parts, in order:
#   1. checks: gpu_check (every kernel; when it fails, each group again in a process of its own),
#      memcheck of the groups added lately (moe_grouped_small, kda_chunk_few, quant) and racecheck
#      of kda_chunk_few, cuda_model_check (fixtures and
#      their fp8 / NVFP4 rewrites), glm5_next_cuda_check (default; token-by-token KDA; every product
#      fp32), cuda_spec_check (greedy with the drafter = plain at batch 1, 4, 6; mixed steps),
#      gpu_hybrid_serve.py (glm5_next over HTTP with a drafter)
#   2. the 2 B random glm4_moe_lite (hf_bench.py): decode 1/6/16 and prefill 512/4096 as built;
#      prefill with --invariant-tokens 2048 (every step <= 2048 tokens on the decode kernels, the
#      previous default); decode 6/16 with TANDEM_MOE_GROUPED=0 (an expert read once per token)
#   3. quantised decode at batches 1, 6 and 16 on the real shape cut to 4 layers, fp8 and NVFP4,
#      the experts grouped (as built) and per pair (TANDEM_MOE_GROUPED=0), profiles included
#   4. glm5_next: the KDA recurrence alone (gpu_timing kda), and the fixture's prefill and decode with
#      the fp32 products split on the tensor cores vs on the CUDA cores (TANDEM_GLM5_FP32_KERNEL)
#   5. while time is left (a format starts only before BUDGET_S, default 430 s): the real shape, 47
#      layers, fp8 then NVFP4: decode 1/6/16 and prefill 512 (fp8 also 32768 when early enough),
#      and decode 1/6 under --max-model-len 131072 with the MLA split by own context vs max-model-len
# PARTS (default 12345) picks the parts; a bundle without serve/ skips gpu_hybrid_serve.
# Each step's output goes to OUT/<step>.txt (benchmarks also .json); a summary to stdout. Exit 1
# when a check failed; a failed benchmark is listed but is a timing, not a check.
set -u
B=$(cd "${1:?usage: gpu-merged.sh BUNDLE OUT}" && pwd)
O=$(mkdir -p "${2:?usage: gpu-merged.sh BUNDLE OUT}" && cd "$2" && pwd)
FX=tests/model/fixtures
budget=${BUDGET_S:-430}
parts=${PARTS:-12345}  # which parts run, e.g. PARTS=1 for the checks alone
want() { [[ $parts == *$1* ]]; }
export PATH=/usr/local/cuda/bin:$PATH
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$B/serve/lib:/usr/local/cuda/lib64${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
failed=()
slow=()
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/card.txt"
echo "binaries built at $(cat "$B/COMMIT")" | tee -a "$O/card.txt"

# check NAME SECONDS [VAR=value ...] COMMAND...: a check; its output into OUT/NAME.txt, a summary line.
check() {
  local name=$1 limit=$2 t0=$SECONDS envs=()
  shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$limit" "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  printf '%-34s exit %3d %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -v '^\s*$' "$O/$name.txt" | tail -1 | cut -c1-90)"
  [ "$rc" -eq 0 ] || failed+=("$name")
}
# bench NAME SECONDS MODEL [VAR=value ...] -- FLAGS...: a tandem-bench-cuda timing.
bench() {
  local name=$1 limit=$2 model=$3 t0=$SECONDS envs=()
  shift 3
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout "$limit" "$B/tandem-bench-cuda" "$model" --modes graphs --json "$O/$name.json" "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  echo "## $name (exit $rc, $((SECONDS - t0)) s): ${envs[*]} $*"
  grep -E "^prefill|^\| [0-9]|moe experts|\*\*sum|Graph replays|tandem-bench-cuda:" "$O/$name.txt" | cut -c1-160
  [ "$rc" -eq 0 ] || slow+=("$name")
}

echo "# 1. checks ($SECONDS s)"
check gpu_check 120 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -20
if [[ " ${failed[*]} " == *" gpu_check "* ]]; then
  # A kernel fault leaves the device unusable for the groups after it ("cudaMalloc: an illegal
  # memory access"): each group again in a process of its own, for a verdict on every group.
  for g in $("$B/gpu_check" --list); do
    [[ $g == *_small ]] || check "gpu_check.$g" 60 "$B/gpu_check" "$g"
  done
fi
check memcheck.new-groups 90 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" moe_grouped_small kda_chunk_few quant
check racecheck.kda_chunk_few 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$B/gpu_check" kda_chunk_few
check cuda_model_check 120 "$B/cuda_model_check" $FX
grep -E "FAIL" "$O/cuda_model_check.txt" | head -10
check glm5_next_cuda_check 90 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.token-kda 90 TANDEM_KDA_CHUNK=0 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.fp32-all 90 TANDEM_GLM5_FP32_PRODUCTS=all "$B/glm5_next_cuda_check" $FX
for c in glm5_next_cuda_check glm5_next_cuda_check.token-kda glm5_next_cuda_check.fp32-all; do
  grep -E "one shot|FAIL" "$O/$c.txt" | head -4 | sed "s/^/    $c: /" | cut -c1-170
done
check cuda_spec_check 150 "$B/cuda_spec_check" models/dflash-pair
grep -E "mixed|greedy output with the drafter|FAIL" "$O/cuda_spec_check.txt" | head -8 | cut -c1-170
if [ -x "$B/serve/tandem-serve" ]; then
  check gpu_hybrid_serve 120 python3 deploy/gpu_hybrid_serve.py "$B/serve" $FX "$O/hybrid-serve"
else
  echo "gpu_hybrid_serve skipped: the bundle has no serve/"
fi

if want 2; then
echo "# 2. the 2 B random glm4_moe_lite ($SECONDS s)"
m=/tmp/tandem-bench-model
python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" >"$O/bench-model.txt" 2>&1 ||
  failed+=("bench-model")
bench 2b 60 $m -- --batches 1,6,16 --prefill 512,4096
bench 2b-invariant2048 40 $m -- --batches none --prefill 512,4096 --invariant-tokens 2048
bench 2b-pairs 40 $m TANDEM_MOE_GROUPED=0 -- --batches 6,16
bench 2b-profile-b16 40 $m -- --batches none --profile 20 --profile-batch 16
bench 2b-profile-prefill 40 $m -- --batches none --profile-prefill 512
sed -n '/^Prefill profile/,$p' "$O/2b-profile-prefill.txt" | head -30 | cut -c1-160

fi
if want 3; then
echo "# 3. quantised decode, real shape cut to 4 layers ($SECONDS s)"
for f in fp8 nvfp4; do
  q=/tmp/merged-4l-$f
  timeout 40 "$B/tandem-random-checkpoint" $q $f --layers 4 >"$O/checkpoint-4l-$f.txt" 2>&1 || { slow+=("checkpoint-4l-$f"); continue; }
  for grouped in 1 0; do
    bench 4l-$f-grouped$grouped 40 $q TANDEM_MOE_GROUPED=$grouped -- --batches 1,6,16 --prompt 128 --decode 64 --profile 8
  done
  rm -rf $q
done

fi
if want 4; then
echo "# 4. glm5_next ($SECONDS s)"
bench_fx() {  # name kernel
  bench "$1" 45 $FX/glm5_next_text TANDEM_GLM5_FP32_KERNEL=$2 -- --prompt 128 --decode 64 --batches 1,6,16 --prefill 512,4096
}
if [ -x "$B/gpu_timing" ]; then
  t0=$SECONDS
  timeout 60 "$B/gpu_timing" kda >"$O/kda-timing.txt" 2>&1
  echo "## kda timing (exit $?, $((SECONDS - t0)) s)"
  cut -c1-160 "$O/kda-timing.txt" | tail -12
fi
bench_fx glm5-split split
bench_fx glm5-cuda-cores cuda_cores

fi
if want 5; then
echo "# 5. the real shape, 47 layers ($SECONDS s; budget $budget s)"
for f in fp8 nvfp4; do
  if [ $SECONDS -gt "$budget" ]; then echo "skipped the 47-layer $f run (at $SECONDS s)"; continue; fi
  r=/tmp/merged-47l-$f
  t0=$SECONDS
  timeout 150 "$B/tandem-random-checkpoint" $r $f --layers 47 >"$O/checkpoint-47l-$f.txt" 2>&1 || { slow+=("checkpoint-47l-$f"); rm -rf $r; continue; }
  echo "## written $f in $((SECONDS - t0)) s: $(tail -1 "$O/checkpoint-47l-$f.txt" | cut -c1-120)"
  bench 47l-$f 120 $r -- --prompt 512 --decode 128 --batches 1,6,16 --profile 10
  # The MLA split under a serving max-model-len: by each token's own context (as built) or by
  # max-model-len (TANDEM_ATTN_SPLIT=0); at the bench's own small max-model-len the two agree.
  for split in 1 0; do
    bench 47l-$f-mml131072-split$split 60 $r TANDEM_ATTN_SPLIT=$split -- --prompt 512 --decode 128 --batches 1,6 --max-model-len 131072
  done
  long=$([ "$f" = fp8 ] && [ $SECONDS -lt $((budget - 70)) ] && echo ,32768)
  bench 47l-$f-prefill 120 $r -- --batches none --prefill 512$long
  rm -rf $r
done

fi
echo "# done at $SECONDS s"
[ ${#slow[@]} -eq 0 ] || echo "timings that failed (not checks): ${slow[*]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "CHECKS FAILED: ${failed[*]}"
  exit 1
fi
echo "every check passed"
