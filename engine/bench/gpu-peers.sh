#!/usr/bin/env bash
# tandem against transformers, eager and compiled, on the 2 B benchmark model (hf_bench.py writes
# it: glm4_moe_lite, random, bf16), on the GPU machine, in one run (issue 22): transformers eager
# (it writes the model), tandem-bench-cuda decode (CUDA graphs, prompt 512, 128 steps, batches
# $BATCHES; prefill 1 x 512), tandem-bench-cuda prefill 1 x 512 and 1 x $PREFILL in a second process
# (a long prefill raises max-model-len, which decode graphs attend up to), then transformers with a
# static cache and torch.compile(mode="reduce-overhead"). peers_report.py prints the table; every
# JSON is written as it is measured, so a timeout keeps what came before. Exit 1 on any failure.
#   BIN=dir-with-tandem-bench-cuda engine/bench/gpu-peers.sh OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: gpu-peers.sh OUT}
mkdir -p "$out"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
bin=${BIN:-build-deps/bin}
model=${BENCH_MODEL_DIR:-/tmp/tandem-bench-model}
batches=${BATCHES:-1,6,16}
prefill=${PREFILL:-32768}
failed=()
. engine/bench/bench_step.sh  # step NAME COMMAND...: run it, remember a failure
{
echo "# gpu-peers $(date -u +%Y-%m-%dT%H:%MZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "## transformers eager (writes the model) ($SECONDS s)"
step hf-eager timeout "${HF_EAGER_S:-150}" python3 engine/bench/hf_bench.py --write "$model" --json "$out/hf-eager.json" \
  --batches "$batches" --prefill "$prefill"
echo "## tandem-bench-cuda decode ($SECONDS s)"
step tandem-decode timeout 90 "$bin/tandem-bench-cuda" "$model" --batches "$batches" --modes graphs --json "$out/tandem.json" \
  > "$out/tandem.txt" 2>&1
grep -E "^GPU|^model|^prefill|^\| [0-9]|tandem-bench-cuda:" "$out/tandem.txt"
echo "## tandem-bench-cuda prefill 512,$prefill ($SECONDS s)"
step tandem-prefill timeout 120 "$bin/tandem-bench-cuda" "$model" --batches none --prefill "512,$prefill" \
  --json "$out/tandem-prefill.json" > "$out/tandem-prefill.txt" 2>&1
grep -E "^prefill|tandem-bench-cuda:" "$out/tandem-prefill.txt"
echo "## transformers compiled ($SECONDS s)"
step hf-compiled timeout "${HF_COMPILED_S:-270}" python3 engine/bench/hf_bench.py --write "$model" --json "$out/hf-compiled.json" \
  --batches "$batches" --prefill "$prefill" --compile
finish engine/bench/peers_report.py
} 2>&1 | tee "$out/peers.txt"
