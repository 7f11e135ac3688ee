#!/usr/bin/env bash
# flash22 (issue 22, flash MLA prefill attention): checks, then prefill on the real shape (47
# layers, fp8 weights) with TANDEM_PREFILL_ATTN=flash (as built) vs mla (the decode kernel in
# launches of 64 tokens, before) in the same binaries. From the repository root:
#   mkdir -p /tmp/flash22 && tar xJf build-deps/flash22/bundle.tar.xz -C /tmp/flash22 && bash /tmp/flash22/run.sh
# Results under $OUT/flash22 (or /tmp/flash22-out); exit 1 when a check failed (a benchmark that
# fails or times out is reported, not counted). Optional parts skip past BUDGET_S (default 200 s).
set -u
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
here=$(cd "$(dirname "$0")" && pwd)
d=${BIN:-$here/bin}; o=${OUT:-/tmp/flash22-out}/flash22; mkdir -p "$o"; fail=0
budget=${BUDGET_S:-200}
echo "flash22 binaries $(cat "$here/COMMIT" 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1
run() {  # run NAME SECONDS [VAR=value ...] COMMAND...: output into $o/NAME.txt, exit status into NAME.rc
  local name=$1 lim=$2 t0=$SECONDS envs=(); shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$lim" "$@" >"$o/$name.txt" 2>&1; local rc=$?
  echo "$rc" >"$o/$name.rc"
  echo "$name: exit $rc, $((SECONDS - t0)) s: $(grep -v '^\s*$' "$o/$name.txt" | tail -1 | cut -c1-120)" >"$o/$name.line"
}
# The 47-layer fp8 checkpoint (about 40 s of CPU, 31 GB of disk) is written while the checks run.
r=/tmp/flash22-47l-fp8
( t0=$SECONDS; timeout 100 "$d/tandem-random-checkpoint" $r fp8 --layers "${LAYERS:-47}" >"$o/checkpoint-47l-fp8.txt" 2>&1
  echo "exit $? after $((SECONDS - t0)) s" >>"$o/checkpoint-47l-fp8.txt" ) &
ck=$!
# Two chains of checks side by side (correctness only: no timing shares the device with them).
(
  run gpu_check 60 "$d/gpu_check" mla_flash
  run memcheck.mla_flash 110 compute-sanitizer --tool memcheck --error-exitcode 9 "$d/gpu_check" mla_flash
  run racecheck.mla_flash_small 60 compute-sanitizer --tool racecheck --error-exitcode 9 "$d/gpu_check" mla_flash_small
) &
kc=$!
run cuda_model_check 90 "$d/cuda_model_check" tests/model/fixtures
run cuda_spec_check 90 "$d/cuda_spec_check" models/dflash-pair
wait $kc
for c in gpu_check memcheck.mla_flash racecheck.mla_flash_small cuda_model_check cuda_spec_check; do
  cat "$o/$c.line" 2>/dev/null || echo "$c: did not run"
  [ "$(cat "$o/$c.rc" 2>/dev/null)" = 0 ] || fail=$((fail + 1))
done
grep -E "mla_prefill_flash|FAIL" "$o/gpu_check.txt" | cut -c1-170
grep -hE "ERROR|Error|hazard" "$o"/memcheck.mla_flash.txt "$o"/racecheck.mla_flash_small.txt | head -6 | cut -c1-170
grep -hE "FAIL" "$o"/cuda_model_check.txt "$o/cuda_spec_check.txt" | head -6 | cut -c1-160
echo "checks done at $SECONDS s (failed: $fail)"
bench() {  # bench LABEL SECONDS [VAR=value ...] -- FLAGS...: a tandem-bench-cuda run ($BENCH, default bin/tandem-bench-cuda) on $MODEL
  local label=$1 lim=$2 t0=$SECONDS envs=(); shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout "$lim" "${BENCH:-$d/tandem-bench-cuda}" "${MODEL:-$r}" --batches none --json "$o/$label.json" "$@" >"$o/$label.txt" 2>&1 ||
    echo "$label failed or timed out (exit $?; a timing, not a check)"
  echo "## $label ($((SECONDS - t0)) s): ${envs[*]} $*"
  grep -E "^prefill|tandem-bench-cuda:" "$o/$label.txt" | cut -c1-150
  sed -n '/^Prefill profile/,/\*\*sum/p' "$o/$label.txt" | grep -E "^\|" | head -12 | cut -c1-150
  grep -E "paged attention|flash prefill|\*\*sum" "$o/$label.txt" | cut -c1-150
}
wait $ck
echo "47-layer fp8 checkpoint: $(tail -1 "$o/checkpoint-47l-fp8.txt") (at $SECONDS s)"
if [ -f $r/config.json ]; then
  bench 47l-fp8-flash 120 TANDEM_PREFILL_ATTN=flash -- --prefill 512,4096,32768 --profile-prefill 4096
  if [ $SECONDS -lt $budget ]; then
    bench 47l-fp8-mla 90 TANDEM_PREFILL_ATTN=mla -- --prefill 512,4096 --profile-prefill 4096
  else
    echo "skipped the mla bench (at $SECONDS s)"
  fi
  # The first version of the kernel (both warps of a pair scoring all keys), when the bundle has it.
  if [ -x "$d/tandem-bench-cuda-v1" ] && [ $SECONDS -lt $budget ]; then
    BENCH=$d/tandem-bench-cuda-v1 bench 47l-fp8-flash-v1 90 TANDEM_PREFILL_ATTN=flash -- --prefill 512,4096,32768
  fi
else
  echo "no 47-layer checkpoint: no benches"
fi
rm -rf $r
# Optional (PEERS=1): transformers (eager, its default attention; it writes the model) then tandem on
# the 2 B model of hf_bench.py.
if [ -n "${PEERS:-}" ] && [ $SECONDS -lt $((budget + 40)) ]; then
  m=/tmp/flash22-2b
  t0=$SECONDS
  timeout 150 python3 engine/bench/hf_bench.py --write $m --json "$o/2b-hf-eager.json" --batches 1 --decode 8 --prefill 4096,32768 \
    >"$o/2b-hf-eager.txt" 2>&1 || echo "transformers eager failed or timed out (exit $?)"
  echo "## 2b-hf-eager ($((SECONDS - t0)) s)"; grep -E "^model|^prefill|FAILED" "$o/2b-hf-eager.txt" | cut -c1-150
  MODEL=$m bench 2b-flash 60 -- --prefill 512,4096,32768
  rm -rf $m
fi
echo "checks failed: $fail (at $SECONDS s)"
[ "$fail" -eq 0 ]
