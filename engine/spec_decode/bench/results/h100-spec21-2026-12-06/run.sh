#!/usr/bin/env bash
# spec21 (issue 21), one GPU call: gpu_check's rows_mma and decode groups (with and without
# TANDEM_GEMV_MMA=1), then engine/spec_decode/bench/gpu-dflash.sh (cuda_spec_check + tandem_spec_bench
# --probe) for main (base) and this branch (mine) in its variants, interleaved:
#   mine          the drafter on rows_mma (norms, embedding, argmax folded) and qkv_heads (head_prep
#                 folded), fixed attention splits merged in the attention kernel, one context upload
#   mine-heads    TANDEM_DRAFTER_FUSED_HEADS=0: rows_mma then head_prep, as apart
#   mine-combine  TANDEM_ATTN_COMBINE_LAUNCH=1: the splits merged by a second launch, as before
#   mine-nomma    TANDEM_DRAFTER_MMA=0: the drafter's gemv path (with the fixed splits and one upload)
#   mine-gemvmma  TANDEM_GEMV_MMA=1: the target's ungrouped products on rows_mma too (experiment)
# Run from the repository root (models/dflash-pair); results under $OUT/spec21/<variant>/.
# Exit 1 when a check of mine or base fails (the experiment's failures are reported, not fatal).
set -u
here=$(cd "$(dirname "$0")" && pwd)
o=${OUT:-/tmp/out}/spec21
mkdir -p "$o"
cp "$here/run.sh" "$o/"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/card.txt"
echo "mine $(cat "$here/mine/COMMIT") base $(cat "$here/base/COMMIT")"
fail=""
for v in plain gemvmma; do
  e=""; [ $v = gemvmma ] && e="TANDEM_GEMV_MMA=1"
  groups="rows_mma decode attention"; [ $v = gemvmma ] && groups="rows_mma decode"
  env $e timeout 120 "$here/mine/gpu_check" $groups >"$o/gpu_check-$v.txt" 2>&1; rc=$?
  echo "== gpu_check $groups ($v): exit $rc"
  grep -E "^rows_mma|^qkv_heads|bit for bit|dflash|merged|FAIL|passed|failed" "$o/gpu_check-$v.txt" | cut -c1-160 | head -40
  [ $v = plain ] && [ $rc != 0 ] && fail+=" gpu_check"
done
run() {
  local name=$1 bin=$2 mk=$3
  shift 3
  env "$@" OUT="$o/$name" SKIP_MEMCHECK=$mk REPEAT=1 timeout 170 bash "$here/gpu-dflash.sh" "$here/$bin" >/dev/null 2>&1
  echo "== $name ($*): $(cat "$o/$name/status.txt" 2>/dev/null || echo 'no status')"
  grep -E "^exit|^PASS|^FAIL|  FAIL|ERROR SUMMARY|ratios to|t_plain" "$o/$name/gpu-dflash.txt" | cut -c1-220
  case $name in base | mine) grep -q "^all passed" "$o/$name/status.txt" 2>/dev/null || fail+=" $name" ;; esac
}
run base base 1
run mine mine 0
run mine-heads mine 1 TANDEM_DRAFTER_FUSED_HEADS=0
run mine-combine mine 1 TANDEM_ATTN_COMBINE_LAUNCH=1
run mine-nomma mine 1 TANDEM_DRAFTER_MMA=0
run mine-gemvmma mine 0 TANDEM_GEMV_MMA=1
run base2 base 1
run mine2 mine 1
echo "speed table (mine):"
grep -E "^\| (code|json|prose) " "$o/mine/bench.md"
if [ -n "$fail" ]; then echo "FAILED:$fail"; exit 1; fi
echo "all passed"
