#!/usr/bin/env bash
# tandem-serve --device cuda under hostile load, on the GPU machine: the repository's trained pair
# (models/dflash-pair, DFlash with 7 drafts) served on the GPU with --max-num-seqs 6, then
# tests/soak/soak_client.py: CLIENTS streaming clients for SECONDS, streams dropped mid-way,
# malformed requests (invalid UTF-8, 1e999, deep nesting, unknown fields, bad schemas) and
# slowloris connections mixed in. Exits 1 when a well-formed request failed, a malformed one was
# not a 4xx, a slow connection was held, RSS grew, or the server died.
#   gpu-hostile-smoke.sh DIR [SECONDS] [CLIENTS]   (DIR: tandem-serve and DIR/lib, as gpu-serve-smoke.sh)
# Results: ${OUT:-.}/hostile-smoke.{txt,json}, the server's log in serve.log.
set -uo pipefail
dir=$1
seconds=${2:-120}
clients=${3:-32}
out=${OUT:-.}
repo=$(cd "$(dirname "$0")/.." && pwd)
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$dir/lib${nccl:+:$(dirname "$nccl")}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
port=18777
"$dir/tandem-serve" "$repo/models/dflash-pair/target" --device cuda --host 127.0.0.1 --port $port \
  --served-model-name tiny-glm --max-num-seqs 6 --max-model-len 4096 --gpu-memory-utilization 0.3 \
  --speculative-config "{\"method\":\"dflash\",\"model\":\"$repo/models/dflash-pair/drafter\",\"num_speculative_tokens\":7}" \
  > "$out/serve.log" 2>&1 &
pid=$!
for _ in $(seq 240); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  kill -0 $pid 2>/dev/null || { echo "tandem-serve exited at start:"; tail -20 "$out/serve.log"; exit 1; }
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/health" >/dev/null || { echo "no /health after 120 s"; tail -20 "$out/serve.log"; exit 1; }
python3 "$repo/tests/soak/soak_client.py" --url "http://127.0.0.1:$port" --clients "$clients" --seconds "$seconds" \
  --pid "serve=$pid" --json "$out/hostile-smoke.json" | tee "$out/hostile-smoke.txt"
rc=${PIPESTATUS[0]}
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^tandem_(spec_decode|requests)' > "$out/metrics.txt" || true
if ! kill -0 $pid 2>/dev/null; then echo "FAIL: tandem-serve died under the load"; rc=1; fi
kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader >> "$out/hostile-smoke.txt" 2>/dev/null || true
echo "gpu-hostile-smoke: exit $rc"
exit $rc
