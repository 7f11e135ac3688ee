#!/usr/bin/env bash
# Scratch (branch trace-spec): one line per DFlash engine step from TANDEM_SPEC_TRACE, summed by kind.
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
TANDEM_SPEC_TRACE=1 timeout 100 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
  models/dflash-pair/reference.json --device cuda --batch 1 --fixed-k --repeat 1 >"$O/spec.txt" 2>"$O/trace.txt"
echo "exit $?"; cat "$O/spec.txt" | head -8
awk '/spec-trace/ { k = ($5 > 0) ? "verify" : ($7 > 1 ? "prefill" : "plain"); n[k]++; p[k] += $11; f[k] += $13; c[k] += $15; a[k] += $17; t[k] += $19 }
  END { for (k in n) printf "%s: %d steps, mean ms: propose %.3f forward %.3f context %.3f accept %.3f total %.3f\n", k, n[k], p[k]/n[k], f[k]/n[k], c[k]/n[k], a[k]/n[k], t[k]/n[k] }' "$O/trace.txt"
grep spec-trace "$O/trace.txt" | awk '$19 > 1.0' | head -30
finish /tmp/none
