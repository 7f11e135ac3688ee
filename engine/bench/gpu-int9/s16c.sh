#!/usr/bin/env bash
# Session 16, call c: as call b (s16b.sh), after the drafter's context pass is timed apart from the
# proposal (Drafts::context_seconds: the adaptive length weighs the proposal alone) and every padded
# size of the pass is captured at start-up. Call b: the context rows written only before a proposal (a step that
# drafts nothing copies its captured rows aside instead of running the drafter's context pass).
#   - cuda_spec_check (greedy with the drafter equal to plain at batch 1, 4, 6, fixed and adaptive)
#     and the same under compute-sanitizer memcheck;
#   - tandem_spec_bench at 256 and 64 new tokens, batch 1 and 6, fixed k and adaptive, with the
#     context pass after every step (TANDEM_DRAFTER_DEFER_CONTEXT=0, as before) and deferred
#     (the default now), side by side; the probe's step costs with the deferred rows.
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s16c.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
P=models/dflash-pair
check cuda_spec_check 60 "$B/cuda_spec_check" $P
grep -E "FAIL" "$O/cuda_spec_check.txt" | head -8 | cut -c1-200
check cuda_spec_memcheck 240 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/cuda_spec_check" $P
grep -E "ERROR SUMMARY|FAIL" "$O/cuda_spec_memcheck.txt" | tail -3
spec() {  # spec NAME TOKENS [VAR=value] -- extra flags
  local name=$1 tokens=$2 envs=(); shift 2
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ $SECONDS -ge "$budget" ]; then echo "## $name: skipped (at $SECONDS s)"; slow+=("$name"); return; fi
  check "$name" 150 "${envs[@]}" "$B/tandem_spec_bench" $P/target $P/drafter $P/reference.json --device cuda \
    --batch 1 --batch 6 --both --repeat 2 --max-tokens "$tokens" "$@"
  echo "## $name: ${envs[*]} $tokens tokens"
  sed -n '/^| class | batch | tokens/,/^Op profile/p' "$O/$name.txt" | grep -E '^\||^The adaptive' | cut -c1-200
}
spec spec.256.before 256 TANDEM_DRAFTER_DEFER_CONTEXT=0 --
spec spec.256.deferred 256 --
spec spec.64.before 64 TANDEM_DRAFTER_DEFER_CONTEXT=0 --
spec spec.64.deferred 64 -- --probe
finish /tmp/none
