#!/usr/bin/env bash
# The main job on the embedded default (manifests/local.yaml): a real two-rank bind on this one
# machine. Two tandemd agents (rank0 on 127.0.0.1, rank1 on 127.0.0.2) with mutual TLS, each
# confined to a sandboxed node root under /var/lib/tandem/local/rankN (its crontab, /dev/shm and
# /proc stand-ins live there, so the bind's hygiene never touches this machine's cron or caches);
# the engine ranks are real tandem-serve processes (CPU, TP2 over TCP), the dead-man is armed and
# disarmed, the gates run against the live endpoint, and the bind report is written.
#
#   deploy/local-bind.sh BUILD_DIR          tear down any previous local run, then bind
#   deploy/local-bind.sh BUILD_DIR --down   stop the local lane and both agents
# BUILD_DIR is a build tree, or a folder holding tandemctl, tandemd and tandem-serve side by side
# (a bundle's bin/, as deploy/gpu-bind.sh passes on a machine that cannot build).
# MANIFEST=FILE binds FILE instead of the embedded default (deploy/soak.sh uses it; deploy/gpu-bind.sh
# passes manifests/local-cuda.yaml); it must name the same nodes, paths and ports.
set -euo pipefail

build=$(cd "${1:?usage: local-bind.sh BUILD_DIR [--down]}" && pwd)
mode=${2:-up}
base=/var/lib/tandem/local          # the paths manifests/local.yaml names
model=$base/models/dflash-pair     # target/ and drafter/, from the repository's models/dflash-pair
repo=$(cd "$(dirname "$0")/.." && pwd)
pki=$base/pki
state=$base/state
bin=/usr/local/bin

step() { printf '\n== %s\n' "$*"; }

down() {
  for i in 0 1; do
    if [ -f "$base/rank$i-agent.pid" ]; then
      kill "$(cat "$base/rank$i-agent.pid")" 2>/dev/null || true
      rm -f "$base/rank$i-agent.pid"
    fi
  done
  # The ranks and the old lane run in their own sessions; they are ours by their model path.
  pkill -f "tandem-serve .*$base/" 2>/dev/null || true
  pkill -f "tandem-serve $model/" 2>/dev/null || true
}

if [ "$mode" = "--down" ]; then
  step "stopping the local lane and its agents"
  down
  exit 0
fi

step "installing tandemctl, tandemd and tandem-serve into $bin"
if [ -x "$build/tandemctl" ]; then
  install -m 0755 "$build/tandemctl" "$build/tandemd" "$build/tandem-serve" "$bin/"
else
  install -m 0755 "$build/controller/tandemctl" "$build/agent/tandemd" "$build/engine/tandem-serve" "$bin/"
fi

step "a fresh sandbox under $base (previous local run stopped)"
down
sleep 0.5
rm -rf "$base/rank0" "$base/rank1" "$state"
mkdir -p "$base" "$state"
rm -rf "$model"
mkdir -p "$base/models"
cp -r "$repo/models/dflash-pair" "$model"
for i in 0 1; do
  root=$base/rank$i
  mkdir -p "$root/etc" "$root/dev/shm" "$root/proc/sys/vm" "$root/proc/net" "$root$bin" "$root$base/models" "$root$base/cache"
  # A crontab with a health-poking job on the serving port: the bind disables it and restores it
  # byte for byte if it rolls back.
  printf 'SHELL=/bin/sh\n*/5 * * * * root curl -sf http://127.0.0.1:18888/health >/dev/null || true\n' > "$root/etc/crontab"
  : > "$root/dev/shm/tandem-local-stale"
  cp /proc/meminfo "$root/proc/meminfo"
  : > "$root/proc/sys/vm/drop_caches"
  # Both nodes share this machine's loopback; the worker gets its own (empty) socket table so it
  # does not take the head's serving port for its own. The head reads the real one.
  if [ "$i" = 1 ]; then
    echo "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode" > "$root/proc/net/tcp"
  else
    cp /proc/net/tcp "$root/proc/net/tcp"
  fi
  cp "$bin/tandem-serve" "$root$bin/tandem-serve"
  cp -r "$model" "$root$model"
done

if [ ! -f "$pki/ca.pem" ]; then
  step "cluster PKI: a CA, the controller's certificate and one per node"
  "$bin/tandemctl" pki init "$pki"
fi

step "starting the two agents (mutual TLS on 127.0.0.1:17443 and 127.0.0.2:17443)"
for i in 0 1; do
  setsid "$bin/tandemd" serve --node "rank$i" --root "$base/rank$i" --listen "127.0.0.$((i + 1)):17443" \
    --pki-dir "$pki" --allow-exec "$bin/tandem-serve" --allow-exec /bin/sh \
    > "$base/rank$i-agent.log" 2>&1 < /dev/null &
  echo $! > "$base/rank$i-agent.pid"
done
for i in 0 1; do
  for _ in $(seq 100); do
    grep -q "serving on" "$base/rank$i-agent.log" 2>/dev/null && break
    if ! kill -0 "$(cat "$base/rank$i-agent.pid")" 2>/dev/null; then
      echo "tandemd rank$i exited:"; cat "$base/rank$i-agent.log"; exit 1
    fi
    sleep 0.1
  done
done

step "tandemctl bind ${MANIFEST:-(the embedded default; tandemctl plan shows the same steps)}"
# --yes: this script is the whole confirmation (bind would ask on a terminal before the outage).
if ! "$bin/tandemctl" bind ${MANIFEST:+"$MANIFEST"} --yes --pki-dir "$pki" --state-dir "$state"; then
  echo
  echo "The bind failed and rolled back (see above). Agent logs: $base/rank0-agent.log, $base/rank1-agent.log"
  exit 1
fi

cat <<EOF

The local two-rank lane is serving on http://127.0.0.1:18888: a 13.9M-parameter GLM trained on source code
and documentation (it continues text; it was not trained to chat), with its DFlash drafter.
  curl -s 127.0.0.1:18888/v1/completions -d '{"prompt":"#include <stdio.h>\nint main(","max_tokens":32,"temperature":0}'
  curl -s 127.0.0.1:18888/metrics | grep spec_decode
  tandemctl status --pki-dir $pki --state-dir $state
  tandemctl logs rank1 --pki-dir $pki --state-dir $state
Bind report: tandemctl history --state-dir $state; tandemctl report BIND_ID --state-dir $state
Stop it all: deploy/local-bind.sh $1 --down
EOF
