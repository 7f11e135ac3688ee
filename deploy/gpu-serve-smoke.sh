#!/usr/bin/env bash
# tandem-serve --device cuda on the GPU machine, end to end: writes the demo model, starts the
# server on the GPU (KV pool from --gpu-memory-utilization on the device), waits for /health, asks
# a chat completion, then 8 greedy completions at once (one batched step each), and compares the
# greedy text with the CPU reference server's on the same prompts. Usage: gpu-serve-smoke.sh DIR
# where DIR holds tandem-serve and, in DIR/lib, the shared libraries it needs that the GPU machine
# lacks (NCCL is looked for in the Python packages). Log: ${SERVE_OUT:-.}/serve.log.
# SERVE_MODEL=MODEL_DIR serves that model directory instead of the demo model (say a seeded glm4_moe
# from tests/model/reference/make_serve_model.py).
set -uo pipefail
dir=$1
out=${SERVE_OUT:-.}
nccl=$(find /usr /opt "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" -name 'libnccl.so*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH=$dir/lib${nccl:+:$(dirname "$nccl")}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export NCCL_NVLS_ENABLE=0
serve=$dir/tandem-serve
if ! "$serve" --help >/dev/null 2>&1; then
  echo "tandem-serve does not start here:"; "$serve" --help 2>&1 | head -5; ldd "$serve" | grep 'not found'; exit 1
fi
demo=/tmp/tandem-demo
if [ -n "${SERVE_MODEL:-}" ]; then demo=$SERVE_MODEL; else "$serve" --write-demo-model "$demo" >/dev/null || exit 1; fi
ask() {  # port body path -> the response body
  python3 - "$@" <<'PY'
import json, sys, urllib.request
port, path, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body.encode(), headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
}
wait_health() {
  for _ in $(seq 90); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=1)" 2>/dev/null && return 0
    sleep 1
  done
  return 1
}
run() {  # device port -> texts of 8 concurrent greedy completions, one per line
  local device=$1 port=$2
  "$serve" "$demo" --device "$device" --port "$port" --gpu-memory-utilization 0.05 --max-model-len 1024 \
    >>"$out/serve.log" 2>&1 &
  local pid=$!
  if ! wait_health "$port"; then echo "$device server did not come up"; tail -20 "$out/serve.log"; kill $pid; return 1; fi
  if [ "$device" = cuda ]; then
    echo "chat: $(ask "$port" /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":16}' | cut -c1-300)"
  fi
  local t0=$SECONDS
  for i in 1 2 3 4 5 6 7 8; do
    ask "$port" /v1/completions "{\"prompt\":\"prompt number $i says\",\"max_tokens\":48,\"temperature\":0}" \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"].replace("\n"," "))' >"/tmp/$device.$i" &
  done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
  echo "$device: 8 concurrent completions of 48 tokens in $((SECONDS - t0)) s"
  for i in 1 2 3 4 5 6 7 8; do cat "/tmp/$device.$i"; done >"/tmp/$device.all"
  kill $pid; wait $pid 2>/dev/null
}
: >"$out/serve.log"
run cuda 8123 || exit 1
grep -E "KV pool|KV budget" "$out/serve.log" | head -4
run cpu 8124 || exit 1
same=$(paste -d '\n' /tmp/cuda.all /tmp/cpu.all | paste - - | awk -F'\t' '$1 == $2' | wc -l)
echo "greedy completions identical to the CPU reference server's: $same of 8"
head -2 /tmp/cuda.all | cut -c1-160
