#!/usr/bin/env bash
# qdec22's device call (issue 22): the tensor-core quantised MoE decode against the CUDA-core one in
# the same binaries. Checks: gpu_check quant_mma (+ the quant groups it sits beside), memcheck of
# quant_mma, cuda_model_check (fixtures, fp8 / NVFP4 rewrites) with each path. Timings: the real
# GLM-4.7-Flash shape (47 layers, random weights) written in fp8 then NVFP4 by
# tandem-random-checkpoint, tandem-bench-cuda decode (graphs, prompt 512, 128 steps, batch 1/6/16,
# the batch-1 per-op profile) with TANDEM_QUANT_DECODE_MMA=1 and =0. Run from the repository root
# with the bundle unpacked at /tmp/qdec22 (bash /tmp/qdec22/call.sh); writes $OUT/qdec22; exit 1
# when a check failed.
B=${B:-/tmp/qdec22}; O=$OUT/qdec22; FX=tests/model/fixtures
mkdir -p "$O"
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
end=${CALL_S:-240}
fails=()
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/card.txt"
echo "binaries: $(cat $B/COMMIT)" | tee -a "$O/card.txt"
W=${WORK:-/tmp/qdec22-ck}
rm -rf "$W"; mkdir -p "$W"
( timeout 150 $B/tandem-random-checkpoint $W/fp8 fp8 --layers 47 >"$O/checkpoint-fp8.txt" 2>&1; echo "exit $?" >>"$O/checkpoint-fp8.txt" ) &
ck=$!
# check NAME CAP COMMAND...: a check (its failure fails the call; a memcheck timeout does not).
check() {
  local name=$1 cap=$2 t0=$SECONDS rc; shift 2
  timeout "$cap" "$@" >"$O/$name.txt" 2>&1; rc=$?
  echo "$name exit $rc $((SECONDS - t0)) s: $(grep -E 'passed,|^PASS|^FAIL|ERROR SUMMARY' "$O/$name.txt" | tail -1 | cut -c1-160)"
  [ $rc = 0 ] || { [ $rc = 124 ] && [ "${name#memcheck}" != "$name" ]; } || fails+=("$name")
}
check gpu_check 120 $B/gpu_check quant_mma quant quant_grouped_small
grep -E "FAIL" "$O/gpu_check.txt" | head -20 | cut -c1-200
grep -E "^moe_decode_quant" "$O/gpu_check.txt" | cut -c1-200
check memcheck.quant_mma_small 70 compute-sanitizer --tool memcheck --error-exitcode 9 $B/gpu_check quant_mma_small
check cuda_model_check 60 $B/cuda_model_check $FX
check cuda_model_check.mma0 60 env TANDEM_QUANT_DECODE_MMA=0 $B/cuda_model_check $FX
grep -E "FAIL" "$O/cuda_model_check.txt" | head -8 | cut -c1-200
# bench NAME CAP MODEL VAR=value -- FLAGS: a timing, skipped past the call's end.
bench() {
  local name=$1 cap=$2 m=$3 v=$4; shift 5
  local left=$((end - SECONDS)); [ $left -lt $cap ] && cap=$left
  [ $cap -lt 10 ] && { echo "## $name skipped (at $SECONDS s)"; return; }
  local t0=$SECONDS
  env "$v" timeout $cap $B/tandem-bench-cuda "$m" --modes graphs --json "$O/$name.json" "$@" >"$O/$name.txt" 2>&1
  echo "## $name (exit $?, $((SECONDS - t0)) s): $v $*"
  grep -E "^\| [0-9]|moe experts|\*\*sum|floor of this step" "$O/$name.txt" | cut -c1-170
}
wait $ck; echo "fp8 checkpoint: $(tail -2 "$O/checkpoint-fp8.txt" | tr '\n' ' ' | cut -c1-200) (at $SECONDS s)"
# The NVFP4 checkpoint (18 GB) is written while fp8 is timed when the disk holds both.
free_mb=$(df -Pm "$W" | awk 'NR == 2 {print $4}')
echo "disk: $free_mb MB free"
nv=0
if [ "${free_mb:-0}" -gt 21000 ]; then
  ( timeout 120 $B/tandem-random-checkpoint $W/nvfp4 nvfp4 --layers 47 >"$O/checkpoint-nvfp4.txt" 2>&1; echo "exit $?" >>"$O/checkpoint-nvfp4.txt" ) &
  nv=$!
fi
flags=(--prompt 512 --decode 128 --batches 1,6,16 --profile 8)
if [ -f $W/fp8/config.json ]; then
  bench fp8-mma1 45 $W/fp8 TANDEM_QUANT_DECODE_MMA=1 -- "${flags[@]}"
  bench fp8-mma0 45 $W/fp8 TANDEM_QUANT_DECODE_MMA=0 -- "${flags[@]}"
fi
rm -rf $W/fp8
if [ $nv = 0 ] && [ $((end - SECONDS)) -gt 70 ]; then
  timeout 100 $B/tandem-random-checkpoint $W/nvfp4 nvfp4 --layers 47 >"$O/checkpoint-nvfp4.txt" 2>&1
else
  [ $nv = 0 ] || wait $nv
fi
echo "nvfp4 checkpoint: $(tail -2 "$O/checkpoint-nvfp4.txt" 2>/dev/null | tr '\n' ' ' | cut -c1-200) (at $SECONDS s)"
if [ -f $W/nvfp4/config.json ]; then
  bench nvfp4-mma1 45 $W/nvfp4 TANDEM_QUANT_DECODE_MMA=1 -- "${flags[@]}"
  bench nvfp4-mma0 45 $W/nvfp4 TANDEM_QUANT_DECODE_MMA=0 -- "${flags[@]}"
fi
rm -rf "$W"
echo "done at $SECONDS s; failed checks: ${fails[*]:-none}"
[ ${#fails[@]} = 0 ]
