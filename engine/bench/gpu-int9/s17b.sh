#!/usr/bin/env bash
# Session 17, call b: call a (s17a.sh, H100) ran every new kernel right (gpu_check glm5_next 64/64,
# memcheck clean) and took the 5.2 B fp8 model's batch-1 step from 7.37 to 4.07 ms, but its bf16 /
# fp8 pool checks compared rows the device computed with bf16 output projections against fp32
# ones. Now those runs take every product in fp32 (as the reference), and the collapse's second
# launch adds the chunks a warp a row and runs the Sinkhorn iterations in one warp (shuffles, no
# block barriers): it still took 42 us a call. Also the MoE combine over many blocks a token, and the
# graph-capture helper (below).
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s17b.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-200}
source "$here/lib.sh"
kernel_group glm5_next "hc_collapse"
# glue.cu's latent cache writes and the MLA kernels that read them: the typed element helpers (2eb0aac).
kernel_group glue "latent"
kernel_group mla_mha "fp8"
check glm5_next_cuda_check 120 "$B/glm5_next_cuda_check" "$FX"
grep -E "^#|^## |FAIL|PASS" "$O/glm5_next_cuda_check.txt" | cut -c1-200
# The capture of every CUDA graph now goes through one helper (cuda_graph.hpp): the decoders' decode
# graphs (cuda_model_check, and glm5_next's above) and the drafter's proposal and context graphs.
check cuda_model_check 90 "$B/cuda_model_check" "$FX"
grep -E "PASS|FAIL" "$O/cuda_model_check.txt" | tail -3 | cut -c1-160
check cuda_spec_check 60 "$B/cuda_spec_check" models/dflash-pair
grep -E "PASS|FAIL" "$O/cuda_spec_check.txt" | tail -3 | cut -c1-160
timeout 60 "$B/tandem-random-checkpoint" /tmp/g5-fp8 fp8 --model glm5_next --layers 8 --experts 18 >"$O/ckpt-g5-fp8.txt" 2>&1
bench g5-fp8 60 /tmp/g5-fp8 -- --prompt 128 --decode 16 --batches 1,6,16 --profile 3 --profile-batch 1
sed -n '/Profile: batch 1,/,/sum/p' "$O/g5-fp8.txt" | head -16 | cut -c1-120
bench g5-fp8-kv8 40 /tmp/g5-fp8 -- --prompt 128 --decode 16 --batches 1,16 --kv-cache-dtype fp8_e4m3
finish /tmp/g5-fp8
