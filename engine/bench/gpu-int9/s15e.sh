#!/usr/bin/env bash
# Whether the adaptive draft length's deficit against 7 drafts every step (s15d: JSON 0.86x against
# 1.40x at batch 1) is its learning within 64-token answers: the committed pair at 256 new tokens a
# prompt, batch 1 and 6, fixed k and adaptive, 2 timed runs; cuda_spec_check first (step_sample's
# start shared by both decoders since s15d).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s15e.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
check spec.256 200 "$B/tandem_spec_bench" models/dflash-pair/target models/dflash-pair/drafter \
  models/dflash-pair/reference.json --device cuda --batch 1 --batch 6 --both --repeat 2 --max-tokens 256
sed -n '/^| class | batch | tokens/,$p' "$O/spec.256.txt" | cut -c1-200
finish /tmp/none
