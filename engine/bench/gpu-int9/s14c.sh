#!/usr/bin/env bash
# Session 14's peer call (issue 22: every peer in the same run, on the same weights): tandem's
# defaults beside transformers eager and compiled (hf_bench.py) and llama.cpp's CUDA back end
# (llama-bench from build-deps/llamacpp.tar.xz, deploy/llamacpp-pack.sh; the 2 B model as a bf16
# deepseek2 GGUF, engine/bench/gpu-llamacpp.sh). models/dflash-pair stays out of the tree for this
# call (the carry's 64 MiB), so no DFlash check here. Checks: gpu_check decode, moe_grouped,
# cuda_model_check. Output under $OUT/int9 (int9.tgz):
#   mkdir -p /tmp/int9 && tar xJf build-deps/int9/bundle.tar.xz -C /tmp && bash /tmp/int9/s14c.sh
set -u
here=$(cd "$(dirname "$0")" && pwd); budget=${BUDGET_S:-430}
source "$here/lib.sh"
echo "# 1. checks ($SECONDS s)"
for group in decode moe_grouped; do
  check "gpu_check.$group" 120 "$B/gpu_check" "$group"
  grep -E "FAIL" "$O/gpu_check.$group.txt" | cut -c1-200
done
check cuda_model_check 60 "$B/cuda_model_check" "$FX"

echo "# 2. transformers eager: it writes the model; decode 1, 6, 16 (32 tokens), prefill ($SECONDS s)"
timeout 200 python3 engine/bench/hf_bench.py --write /tmp/m2b --json "$O/hf-eager.json" --batches 1,6,16 --decode 32 \
  --prefill 512,4096,32768 >"$O/hf-eager.txt" 2>&1
echo "## transformers eager (exit $?)"; grep -E "^model|^prefill|^\||FAILED" "$O/hf-eager.txt" | cut -c1-160

echo "# 3. tandem ($SECONDS s)"
for round in 1 2; do
  bench "2b-decode-r$round" 60 /tmp/m2b -- --batches 1,6,16
  bench "2b-prefill-r$round" 60 /tmp/m2b -- --batches none --prefill 512,4096
done
bench 2b-32768 60 /tmp/m2b -- --batches none --prefill 32768

echo "# 4. llama.cpp ($SECONDS s)"
if tar xJf build-deps/llamacpp.tar.xz -C /tmp; then
  timeout 240 env REPEAT=3 bash engine/bench/gpu-llamacpp.sh /tmp/llamacpp /tmp/m2b "$O/llamacpp"
  echo "## llama.cpp (exit $?)"
else
  echo "## llama.cpp: no build-deps/llamacpp.tar.xz"; slow+=(llamacpp)
fi
compiled_peer /tmp/m2b 512,4096
finish /tmp/m2b
