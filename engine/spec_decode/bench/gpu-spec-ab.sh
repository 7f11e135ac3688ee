#!/usr/bin/env bash
# DFlash step costs A/B on the GPU machine, one call (written for issue 21's verify21 branch):
# gpu_check's decode and attention groups (the tiled gemv and the narrow paged-attention variant
# against their references and against one row alone, bit for bit), then gpu-dflash.sh
# (cuda_spec_check + tandem_spec_bench --probe: step costs, per-op profiles, speed per class at
# batch 1 and 6) for a base build and this one (mine) in its variants, interleaved:
#   mine         the tiled gemv from 16 rows (a batch-6 verification), the narrow drafter attention
#   mine-tiles0  TANDEM_GEMV_TILES=0: the old gemv at every size
#   mine-tiles8  TANDEM_GEMV_TILES=8: the tiled gemv from 8 rows (a batch-1 verification too)
#   mine-nomma   TANDEM_DRAFTER_MMA=0: the drafter's products on the gemv (tiled at batch 6)
# Bundle layout: run.sh (this file), gpu-dflash.sh, mine/ and base/ holding cuda_spec_check,
# tandem_spec_bench and COMMIT (mine/ also gpu_check). Run from the repository root
# (models/dflash-pair); results under $OUT/verify21/<variant>/; spec_costs_json.py turns them
# into JSON. Exit 1 when a check of mine or base fails (the variants' failures are reported).
set -u
here=$(cd "$(dirname "$0")" && pwd)
o=${OUT:-/tmp/out}/verify21
mkdir -p "$o"
cp "$here/run.sh" "$o/"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$o/card.txt"
echo "mine $(cat "$here/mine/COMMIT") base $(cat "$here/base/COMMIT")"
fail=""
timeout 100 "$here/mine/gpu_check" decode attention >"$o/gpu_check.txt" 2>&1; rc=$?
echo "== gpu_check decode attention: exit $rc"
grep -E "bit for bit|FAIL|passed|failed| 64 " "$o/gpu_check.txt" | cut -c1-160 | head -40
[ $rc != 0 ] && fail+=" gpu_check"
run() {
  local name=$1 bin=$2 mk=$3
  shift 3
  env "$@" OUT="$o/$name" SKIP_MEMCHECK=$mk REPEAT=1 timeout 150 bash "$here/gpu-dflash.sh" "$here/$bin" >/dev/null 2>&1
  echo "== $name ($*): $(cat "$o/$name/status.txt" 2>/dev/null || echo 'no status') at ${SECONDS}s"
  grep -E "^exit|^PASS|^FAIL|  FAIL|ERROR SUMMARY|ratios to|t_plain" "$o/$name/gpu-dflash.txt" | cut -c1-220
  case $name in base | mine) grep -q "^all passed" "$o/$name/status.txt" 2>/dev/null || fail+=" $name" ;; esac
}
run base base 1
run mine mine 0
run mine-tiles0 mine 1 TANDEM_GEMV_TILES=0
run mine-tiles8 mine 1 TANDEM_GEMV_TILES=8
run mine-nomma mine 1 TANDEM_DRAFTER_MMA=0
run base2 base 1
echo "speed table (mine):"
grep -E "^\| (code|json|prose) " "$o/mine/bench.md"
echo "total ${SECONDS}s"
if [ -n "$fail" ]; then echo "FAILED:$fail"; exit 1; fi
echo "all passed"
