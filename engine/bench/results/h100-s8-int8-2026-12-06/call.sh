#!/usr/bin/env bash
# One integrated device call for int8 (main + qprefill22 + attn22 + g5q23): main's checks
# (gpu-merged.sh part 1, every gpu_check group), memcheck of the new groups, then A/B timings in
# the same binaries, each step capped and skipped when the call runs late (CALL_S, default 470 s).
cd "$(dirname "$0")/.." || exit 1
tar xJf build-deps/int.tar.xz -C /tmp || exit 1
B=/tmp/int; O=$OUT; FX=tests/model/fixtures
export PATH=/usr/local/cuda/bin:$PATH
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=/usr/local/cuda/lib64${nccl:+:$(dirname "$nccl")}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
end=${CALL_S:-470}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/card.txt"
echo "binaries: $(cat $B/COMMIT)" | tee -a "$O/card.txt"
fails=0
# The 47-layer fp8 real shape (31 GB) is written while the checks run.
r=/tmp/r47
( timeout 120 $B/tandem-random-checkpoint $r fp8 --layers 47 >"$O/checkpoint-47l-fp8.txt" 2>&1; echo "exit $?" >>"$O/checkpoint-47l-fp8.txt" ) &
ck=$!
t0=$SECONDS
timeout 150 env PARTS=1 bash engine/bench/gpu-merged.sh $B "$O/m" >"$O/m.log" 2>&1; rc=$?
echo "== main checks rc=$rc $((SECONDS - t0)) s"; grep -E "exit|FAIL|CHECKS|every check|one shot|mixed|greedy output" "$O/m.log" | head -40 | cut -c1-180
[ $rc = 0 ] || fails=$((fails + 1))
t0=$SECONDS
timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 $B/gpu_check mla_split quant_grouped_small >"$O/memcheck.new.txt" 2>&1; rc=$?
echo "== memcheck mla_split quant_grouped_small rc=$rc $((SECONDS - t0)) s: $(grep 'ERROR SUMMARY' "$O/memcheck.new.txt" | tail -1)"
[ $rc = 0 ] || [ $rc = 124 ] || fails=$((fails + 1))
# bench NAME CAP MODEL [VAR=value ...] -- FLAGS: a timing (not a check), skipped past the end.
bench() {
  local name=$1 cap=$2 m=$3 envs=(); shift 3
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local left=$((end - SECONDS)); [ $left -lt $cap ] && cap=$left
  [ $cap -lt 8 ] && { echo "## $name skipped (at $SECONDS s)"; return; }
  local t0=$SECONDS
  env "${envs[@]}" timeout $cap $B/tandem-bench-cuda "$m" --modes graphs --json "$O/$name.json" "$@" >"$O/$name.txt" 2>&1
  echo "## $name (exit $?, $((SECONDS - t0)) s): ${envs[*]} $*"
  grep -E "^prefill|^\| [0-9]|paged attention|moe experts|router|\*\*sum|Graph replays" "$O/$name.txt" | cut -c1-150
}
wait $ck; echo "47-layer checkpoint: $(tail -2 "$O/checkpoint-47l-fp8.txt" | tr '\n' ' ') (at $SECONDS s)"
if [ -f $r/config.json ]; then
  bench 47l-fp8-split1 45 $r TANDEM_ATTN_SPLIT=1 -- --batches 1,6,16 --prompt 512 --decode 128 --profile 10
  bench 47l-fp8-split0 40 $r TANDEM_ATTN_SPLIT=0 -- --batches 1,6,16 --prompt 512 --decode 128
  bench 47l-fp8-prefill-fused 45 $r TANDEM_QUANT_PREFILL=fused -- --batches none --prefill 512,4096 --profile-prefill 512
  bench 47l-fp8-prefill-dequant 40 $r TANDEM_QUANT_PREFILL=dequant TANDEM_GROUPED_MMA=0 TANDEM_PREFILL_ATTN=generic -- --batches none --prefill 512
fi
rm -rf $r
if [ $SECONDS -lt $((end - 100)) ]; then
  g=/tmp/g5-fp8; t0=$SECONDS
  timeout 45 $B/tandem-random-checkpoint $g fp8 --model glm5_next --layers 8 --experts 18 >"$O/checkpoint-glm5-fp8.txt" 2>&1
  echo "glm5_next fp8 model: exit $? in $((SECONDS - t0)) s: $(tail -1 "$O/checkpoint-glm5-fp8.txt" | cut -c1-120)"
  [ -f $g/config.json ] && bench glm5-fp8 40 $g -- --prompt 128 --decode 24 --batches 1,6,16 --profile 4 --prefill 512
  rm -rf $g
fi
if [ $SECONDS -lt $((end - 45)) ]; then
  m=/tmp/m2b; t0=$SECONDS
  timeout 40 python3 -c "import sys; sys.path.insert(0, 'engine/bench'); import hf_bench; hf_bench.write_model('$m')" >"$O/bench-model.txt" 2>&1
  echo "2 B model: exit $? in $((SECONDS - t0)) s"
  bench 2b 20 $m -- --batches 1,6,16 --prefill 512,4096
  bench 2b-old 15 $m TANDEM_GROUPED_MMA=0 TANDEM_ATTN_SPLIT=0 TANDEM_PREFILL_ATTN=generic -- --batches 1,6 --prefill 512,4096
fi
echo "done at $SECONDS s; failed checks: $fails"
[ $fails = 0 ]
