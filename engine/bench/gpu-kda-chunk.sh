#!/usr/bin/env bash
# The chunked KDA prefill on the GPU (issue 23), from the repository root of the GPU machine, in one
# call (about 3 minutes):
#   engine/bench/gpu-kda-chunk.sh BUNDLE OUT
# BUNDLE holds the branch's gpu_check, gpu_timing, glm5_next_cuda_check and tandem-bench-cuda (sm_90).
#   1. gpu_check kda_chunk glm5_next: the chunked kernel vs the token recurrence (chunks 1..64, fresh
#      and resumed states, a prompt split across calls) and vs kda_chunk_cpu; the token kernel's rows
#   2. glm5_next_cuda_check on both fixtures: default (chunked from 16 tokens: the one-shot prefill
#      chunked, chunks of 3 token by token), every step chunked (TANDEM_KDA_CHUNK_MIN=1) at chunk 5,
#      and never (TANDEM_KDA_CHUNK=0)
#      and every product on fp32 inputs (TANDEM_GLM5_FP32_PRODUCTS=all), default chunking
#   3. gpu_timing kda: the recurrence alone at 1 x 512 and 1 x 32768, 64 heads of 128
#   4. compute-sanitizer memcheck and racecheck of gpu_check kda_chunk_few (chunks 1, 7, 64), then
#      memcheck of the whole kda_chunk group while time is left
#   5. tandem-bench-cuda prefill on the glm5_next_text fixture at 512 and 4096 tokens, chunked and
#      token by token, while time is left (not 32768: the fixture's DSA indexer ranks its pools
#      quadratically per query, minutes at that length)
#   6. when BUNDLE/earlier holds an earlier version's gpu_check and gpu_timing: the same kernel
#      check and timing of that version, for comparison (its failures are reported, not counted)
# Each step's output goes to OUT/<step>.txt; the summary to stdout. Exit 1 when a check failed.
set -u
B=$(cd "$1" && pwd)
O=$(mkdir -p "$2" && cd "$2" && pwd)
FX=tests/model/fixtures
failed=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$O/card.txt" 2>&1
cat "$O/card.txt"
cat "$B/commit.txt" 2>/dev/null
run() {  # name seconds command...: output into OUT/name.txt, rc to stdout; a non-zero rc counts as a failure
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" > "$O/$name.txt" 2>&1
  local rc=$?
  echo "== $name: rc $rc in $((SECONDS - t0)) s"
  [ $rc = 0 ] || failed=1
}
run gpu_check 90 "$B/gpu_check" kda_chunk glm5_next
grep -E "kda|FAIL|passed" "$O/gpu_check.txt"
run check 60 "$B/glm5_next_cuda_check" $FX
TANDEM_KDA_CHUNK_MIN=1 TANDEM_KDA_CHUNK=5 run check-all-chunked 60 "$B/glm5_next_cuda_check" $FX
TANDEM_KDA_CHUNK=0 run check-token 60 "$B/glm5_next_cuda_check" $FX
# Where the chunked form's ~1e-6 grows to ~1e-3 in the logits: the same with every product on fp32
# inputs (no bf16 rounding of the output projections' inputs to amplify it)
TANDEM_GLM5_FP32_PRODUCTS=all run check-fp32 60 "$B/glm5_next_cuda_check" $FX
for c in check check-all-chunked check-token check-fp32; do
  echo "-- $c: $(grep -E '^(PASS|FAIL)' "$O/$c.txt")"
  grep -E "one shot|all prompts|greedy|FAIL" "$O/$c.txt" | sed 's/^/     /'
done
run timing 90 "$B/gpu_timing" kda
cat "$O/timing.txt"
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  run memcheck-few 60 "$san" --tool memcheck --error-exitcode 9 "$B/gpu_check" kda_chunk_few
  tail -2 "$O/memcheck-few.txt"
  run racecheck-few 60 "$san" --tool racecheck --error-exitcode 9 "$B/gpu_check" kda_chunk_few
  tail -2 "$O/racecheck-few.txt"
  if [ $SECONDS -lt 150 ]; then
    run memcheck 60 "$san" --tool memcheck --error-exitcode 9 "$B/gpu_check" kda_chunk
    tail -2 "$O/memcheck.txt"
  fi
else
  echo "memcheck: compute-sanitizer is not on this machine"
  failed=1
fi
bench() {  # name prompt [env...]: prefill of one prompt on the fixture (no check: a timing)
  local name=$1 prompt=$2
  shift 2
  local t0=$SECONDS
  env "$@" timeout 45 "$B/tandem-bench-cuda" $FX/glm5_next_text --prompt "$prompt" --decode 8 --batches 1 \
    --json "$O/$name.json" > "$O/$name.txt" 2>&1
  echo "== $name: rc $? in $((SECONDS - t0)) s: $(grep -E '^prefill' "$O/$name.txt")"
}
if [ $SECONDS -lt 190 ]; then
  bench prefill-512-chunked 512 TANDEM_KDA_CHUNK=64
  bench prefill-512-token 512 TANDEM_KDA_CHUNK=0
fi
if [ $SECONDS -lt 190 ]; then
  bench prefill-4096-chunked 4096 TANDEM_KDA_CHUNK=64
  bench prefill-4096-token 4096 TANDEM_KDA_CHUNK=0
fi
if [ -x "$B/earlier/gpu_check" ]; then
  cat "$B/earlier/commit.txt" 2>/dev/null
  timeout 60 "$B/earlier/gpu_timing" kda > "$O/earlier-timing.txt" 2>&1
  echo "== earlier-timing: rc $?"
  cat "$O/earlier-timing.txt"
  if [ $SECONDS -lt 200 ]; then
    timeout 40 "$B/earlier/gpu_check" kda_chunk > "$O/earlier-gpu_check.txt" 2>&1
    echo "== earlier-gpu_check: rc $? (not counted)"
    grep -E "kda|FAIL|passed" "$O/earlier-gpu_check.txt"
  fi
fi
echo "== done in $SECONDS s; $([ $failed = 0 ] && echo 'all checks passed' || echo 'A CHECK FAILED')"
exit $failed
