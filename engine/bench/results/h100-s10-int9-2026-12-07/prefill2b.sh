#!/usr/bin/env bash
# The 2 B bf16 benchmark model of hf_bench.py (the one issue 22's prefill ratio is quoted on): its
# 1x512 and 1x4096 prefill with flash vs mla attention, the 1x512 per-op profile, and transformers
# eager on the same weights in the same call (hf_bench.py writes the model). Sourced by call.sh
# while its budget lasts, or run alone on a warm machine after it:
#   bash /tmp/int9/prefill2b.sh   (from the repository root; output under $OUT/int9, packed)
set -u
if [ -z "${here:-}" ]; then here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-400}; source "$here/lib.sh"; alone=1; fi
echo "# 6. 2 B bf16 prefill: flash vs mla, profile, transformers eager ($SECONDS s)"
if [ $SECONDS -lt "$budget" ]; then
  timeout 150 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager-2b.json" --batches 1 --decode 16 \
    --prefill 4096 >"$O/hf-eager-2b.txt" 2>&1
  echo "## transformers eager 2 B (exit $?)"; grep -iE "prefill|decode" "$O/hf-eager-2b.txt" | tail -6 | cut -c1-160
  bench 2b-flash 40 /tmp/m2b TANDEM_PREFILL_ATTN=flash -- --batches none --prefill 512,4096 --profile-prefill 512
  bench 2b-mla 40 /tmp/m2b TANDEM_PREFILL_ATTN=mla -- --batches none --prefill 512,4096 --profile-prefill 512
  rm -rf /tmp/m2b
else
  echo "## skipped (at $SECONDS s)"; slow+=(prefill2b)
fi
if [ -n "${alone:-}" ]; then pack; [ ${#failed[@]} -eq 0 ]; fi
