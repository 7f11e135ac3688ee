#!/usr/bin/env bash
# Prefix caching of the recurrent state on the device (session 16): glm5_next_cuda_check on both
# fixtures as they are (its new prefix-resume check: a slot resumed from a state kept by
# make_state_snapshots / PagedWork::state_save equals the slot that ran the whole prompt, bit for
# bit), then cuda_spec_check (the decoders' step code that the copies sit in).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s16a.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-150}
source "$here/lib.sh"
# argv[3] names the one fp8 / NVFP4 rewrite to run: "none:none" runs none (their paths are untouched).
check glm5_next_cuda_check 120 "$B/glm5_next_cuda_check" "$FX" --fixtures none:none
grep -E "prefix resume|rollback|graphs|PASS|FAIL" "$O/glm5_next_cuda_check.txt" | cut -c1-180
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
finish /tmp/none
