#!/usr/bin/env bash
# openai_client.sh TANDEM_SERVE PREFIX SCRIPT
# Installs the official `openai` npm client (pinned) under PREFIX, writes the demo model, starts
# tandem-serve with the seed recipe's parser flags on a free loopback port and runs SCRIPT (node)
# against it. Exit 77 (skipped) when node/npm or the npm registry is not available.
set -u
serve=$1 prefix=$2 script=$3
version=4.77.0
command -v node >/dev/null && command -v npm >/dev/null || { echo "SKIP: node or npm is not installed"; exit 77; }
if [ ! -f "$prefix/node_modules/openai/package.json" ] ||
   ! grep -q "\"version\": \"$version\"" "$prefix/node_modules/openai/package.json"; then
  mkdir -p "$prefix"
  if ! timeout 120 npm install --prefix "$prefix" --no-audit --no-fund --loglevel=error "openai@$version" >"$prefix/npm.log" 2>&1; then
    echo "SKIP: npm install openai@$version failed (registry not reachable?):"; tail -5 "$prefix/npm.log"; exit 77
  fi
fi
work=$(mktemp -d /tmp/tandem-openai-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$serve" --write-demo-model "$work/model" >/dev/null || { echo "FAIL: --write-demo-model"; exit 1; }
port=$(node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
"$serve" "$work/model" --device cpu --host 127.0.0.1 --port "$port" --served-model-name tiny-glm \
  --max-model-len 1024 --max-num-seqs 4 --kv-cache-memory 8MiB \
  --enable-auto-tool-choice --tool-call-parser glm47 --reasoning-parser glm45 >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 200); do
  node -e 'fetch(process.argv[1]).then(r=>process.exit(r.ok?0:1),()=>process.exit(1))' "http://127.0.0.1:$port/health" && break
  kill -0 "$pid" 2>/dev/null || { echo "FAIL: tandem-serve exited:"; cat "$work/serve.log"; exit 1; }
  sleep 0.1
done
NODE_PATH="$prefix/node_modules" OPENAI_BASE_URL="http://127.0.0.1:$port/v1" node "$script"
rc=$?
[ $rc = 0 ] || { echo "--- tandem-serve log:"; cat "$work/serve.log"; }
exit $rc
