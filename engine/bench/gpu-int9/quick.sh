#!/usr/bin/env bash
# The short form of call.sh for a call of about four minutes: every check, then (while time is
# left) the real shape cut to 8 layers in fp8: flash vs mla prefill and tensor-core vs CUDA-core
# quantised decode, side by side in the same binaries. Output under $OUT/int9 (packed into int9.tgz).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/quick.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); B=$here/bin; O=$OUT/int9; mkdir -p "$O"
FX=tests/model/fixtures; budget=${BUDGET_S:-200}
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
failed=()
pack() { (cd "$OUT" && tar czf int9.tgz int9); }
trap 'pack; exit 124' TERM INT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/card.txt"
echo "binaries built at $(cat "$here/COMMIT")" | tee -a "$O/card.txt"
check() {  # check NAME SECONDS [VAR=value ...] COMMAND...
  local name=$1 limit=$2 t0=$SECONDS envs=(); shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$limit" "$@" >"$O/$name.txt" 2>&1; local rc=$?
  printf '%-32s exit %3d %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -v '^\s*$' "$O/$name.txt" | tail -1 | cut -c1-110)"
  [ "$rc" -eq 0 ] || failed+=("$name")
}
bench() {  # bench NAME SECONDS [VAR=value ...] -- FLAGS...
  local name=$1 limit=$2 t0=$SECONDS envs=(); shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ $SECONDS -ge "$budget" ]; then echo "## $name: skipped (at $SECONDS s)"; return; fi
  env "${envs[@]}" timeout "$limit" "$B/tandem-bench-cuda" /tmp/q8 --modes graphs --json "$O/$name.json" "$@" >"$O/$name.txt" 2>&1
  echo "## $name (exit $?, $((SECONDS - t0)) s): ${envs[*]} $*"
  grep -E "^prefill|^\| [0-9]+ \| graphs|moe experts|flash prefill|paged attention|\*\*sum" "$O/$name.txt" | cut -c1-160
}
( timeout 60 "$B/tandem-random-checkpoint" /tmp/q8 fp8 --layers 8 >"$O/ckpt-q8.txt" 2>&1 ) &
check cuda_model_check 40 "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.txt" | head -6 | cut -c1-160
check cuda_model_check.new 40 TANDEM_PREFILL_ATTN=flash TANDEM_QUANT_DECODE_MMA=1 TANDEM_GEMV_TILES=16 "$B/cuda_model_check" $FX
grep -E "FAIL|one prompt of 160" "$O/cuda_model_check.new.txt" | head -6 | cut -c1-160
check glm5_next_cuda_check 40 "$B/glm5_next_cuda_check" $FX
check glm5_next_cuda_check.new 40 TANDEM_GLM5_EXPERTS=grouped TANDEM_KDA_REGISTERS=1 "$B/glm5_next_cuda_check" $FX
grep -E "FAIL" "$O/glm5_next_cuda_check.txt" | head -4 | cut -c1-160
check cuda_spec_check 40 "$B/cuda_spec_check" models/dflash-pair
check cuda_spec_check.tiles 40 TANDEM_GEMV_TILES=16 "$B/cuda_spec_check" models/dflash-pair
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -4 | cut -c1-160
check gpu_check 130 "$B/gpu_check"
grep -E "FAIL" "$O/gpu_check.txt" | head -12 | cut -c1-200
echo "checks done at $SECONDS s; failed: ${failed[*]:-none}"
wait
bench q8-flash 25 TANDEM_PREFILL_ATTN=flash -- --batches none --prefill 512,4096
bench q8-mla 25 TANDEM_PREFILL_ATTN=mla -- --batches none --prefill 512,4096
bench q8-mma1 20 TANDEM_QUANT_DECODE_MMA=1 -- --batches 1,6,16 --prompt 512 --decode 64
bench q8-mma0 20 TANDEM_QUANT_DECODE_MMA=0 -- --batches 1,6,16 --prompt 512 --decode 64
check memcheck.new-groups 40 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" mla_flash_small quant_mma_small
echo "done at $SECONDS s; checks failed: ${failed[*]:-none}"
pack
[ ${#failed[@]} -eq 0 ]
