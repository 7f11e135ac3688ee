#!/usr/bin/env bash
# tandem-serve --device cuda on the trained pair, plain and with --speculative-config (the drafter on
# the GPU): the same four greedy completions from each (they must be equal), 4 at once, and the
# speculative counters of /metrics and of one response's usage. Env: SERVE (the binary), PAIR.
set -uo pipefail
serve=$SERVE
pair=$PAIR
ask() {  # port path body -> response body
  python3 - "$@" <<'PY'
import json, sys, urllib.request
port, path, body = sys.argv[1], sys.argv[2], sys.argv[3]
req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body.encode() if body else None,
                             headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=60).read().decode())
PY
}
wait_health() {
  for _ in $(seq 60); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$1/health', timeout=1)" 2>/dev/null && return 0
    sleep 1
  done
  return 1
}
prompts=('def main(' 'The following' '{"name": ' 'import os')
run() {  # tag port [flags...]
  local tag=$1 port=$2
  shift 2
  "$serve" "$pair/target" --device cuda --port "$port" --gpu-memory-utilization 0.1 --max-model-len 1024 --max-num-seqs 4 "$@" \
    >"/tmp/serve-$tag.log" 2>&1 &
  local pid=$!
  if ! wait_health "$port"; then echo "$tag: server did not come up"; tail -20 "/tmp/serve-$tag.log"; kill $pid; return 1; fi
  grep -E "DFlash|speculative|KV pool" "/tmp/serve-$tag.log" | sed "s/^/$tag log: /"
  local t0=$SECONDS
  for i in 0 1 2 3; do
    body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1], "max_tokens": 64, "temperature": 0}))' "${prompts[$i]}")
    ask "$port" /v1/completions "$body" >"/tmp/$tag.$i.json" &
  done
  wait $(jobs -p | grep -v "^$pid$") 2>/dev/null
  echo "$tag: 4 concurrent greedy completions of 64 tokens in $((SECONDS - t0)) s"
  for i in 0 1 2 3; do python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["choices"][0]["text"]))' "/tmp/$tag.$i.json"; done >"/tmp/$tag.all"
  python3 -c 'import json,sys; print(sys.argv[2], "usage:", json.dumps(json.load(open(sys.argv[1]))["usage"]))' "/tmp/$tag.0.json" "$tag"
  ask "$port" /metrics "" | grep -E "^tandem_spec_decode_(mean_acceptance_length|drafts_total|accepted_tokens_total)" | sed "s/^/$tag metrics: /"
  kill $pid; wait $pid 2>/dev/null
}
run plain 8131 || exit 1
run dflash 8132 --speculative-config "{\"method\":\"dflash\",\"model\":\"$pair/drafter\",\"num_speculative_tokens\":7}" || exit 1
same=$(paste -d '\t' /tmp/plain.all /tmp/dflash.all | awk -F'\t' '$1 == $2' | wc -l)
echo "greedy completions identical, DFlash vs plain: $same of 4"
head -2 /tmp/dflash.all | cut -c1-200
[ "$same" = 4 ]
