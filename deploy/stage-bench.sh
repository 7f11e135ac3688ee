#!/usr/bin/env bash
# stage-bench.sh BUILD [--mib N] [--files K] [--chunk SIZE] [--out DIR]
#
# Measures `tandemctl stage` (issue 27) between two real tandemd agents: on loopback (head on
# 127.0.0.1, worker on 127.0.0.2) and, where network namespaces can be made (root), across the veth
# pair of tests/cluster/netns.sh (the worker pulls over the fabric). Beside it, `cp -r` and `scp -r`
# (a private sshd, same cipher defaults as the operator's) of the same tree, and the hash
# throughput of one node (tandem-hash-bench: hash_paths at 1, 2, 4 .. N threads, one file alone, memory alone).
# Writes DIR/stage-bench-<commit>.md and .json (default: agent/bench/results). A program, not a
# test: it takes a minute or two and its numbers depend on this machine's load.
set -euo pipefail
usage() { echo "usage: $0 BUILD [--mib N (1024)] [--files K (8)] [--chunk SIZE (8MiB)] [--out DIR]" >&2; exit 2; }
[ $# -ge 1 ] || usage
BUILD=$(readlink -f "$1"); shift
MIB=1024 FILES=8 CHUNK=8MiB
SRC=$(cd "$(dirname "$0")/.." && pwd)
OUT="$SRC/agent/bench/results"
while [ $# -gt 0 ]; do
  case $1 in
    --mib) MIB=$2; shift 2 ;;
    --files) FILES=$2; shift 2 ;;
    --chunk) CHUNK=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) usage ;;
  esac
done
CTL=$BUILD/controller/tandemctl TANDEMD=$BUILD/agent/tandemd HASH=$BUILD/agent/tandem-hash-bench
for b in "$CTL" "$TANDEMD" "$HASH"; do [ -x "$b" ] || { echo "stage-bench: $b is not built" >&2; exit 1; }; done
COMMIT=$(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
W=$(mktemp -d /tmp/tandem-stage-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -f "$W/ns/netns.env" ] && "$SRC/tests/cluster/netns.sh" down "$W/ns" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

now() { date +%s.%N; }
mbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / 1e6 / s }'; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "stage-bench: making a tree of $FILES files, $MIB MiB in all (random bytes)" >&2
mkdir -p "$W/tree"
per=$((MIB / FILES))
for i in $(seq 1 "$FILES"); do
  head -c $((per << 20)) /dev/urandom > "$W/tree/part-$i.bin"
done
BYTES=$(( per * FILES << 20 ))

# --- hash throughput of one node ---
"$HASH" "$W/tree" > /dev/null  # warm the page cache: the numbers are the CPU's, not the disk's
"$HASH" "$W/tree" --json > "$W/hash.json"

# manifest + roots + agents; $1 = head address, $2 = worker address, $3 = head fabric address,
# $4 = the pair's directory, $5 = stage.from (empty: the worker pulls from the head's agent)
setup_pair() {
  local head=$1 worker=$2 fabric=$3 dir=$4 from=${5:-}
  mkdir -p "$dir/head/models/bench" "$dir/worker/models" "$dir/state"
  cp "$W/tree"/* "$dir/head/models/bench/"
  HP=$(free_port) WP=$(free_port)
  cat > "$dir/m.yaml" <<YAML
apiVersion: tandem/v1
kind: Bind
metadata: {name: stagebench}
nodes:
  - {name: head, address: $head, fabric_address: $fabric, role: head, agent: {port: $HP}, root: $dir/head}
  - {name: worker, address: $worker, role: worker, agent: {port: $WP}, root: $dir/worker}
engine:
  binary: /usr/local/bin/tandem-serve
  model_dir: /models/bench
  run_user: root
  cache_dir: /var/cache/tandem
  serve: {port: 18000, tensor_parallel_size: 2, device: cpu}
gates: {tool_call: false}
deadman: {delay: 70m, backend: agent}
rollback:
  commands: [{on: head, run: [/bin/true]}]
  verify: {url: 'http://127.0.0.1:18000/health'}
stage: {items: [model], chunk: $CHUNK${from:+, from: $from}}
YAML
  "$CTL" pki init "$dir/pki" "$dir/m.yaml" > /dev/null
}

start_agent() {  # NAME LISTEN ROOT LOG [NETNS]
  local ns=${5:-}
  ${ns:+ip netns exec "$ns"} "$TANDEMD" serve --node "$1" --listen "$2" --root "$3" --pki-dir "$PKI" \
    --allow-exec /usr/local/bin/tandem-serve --allow-exec /bin/true > "$4" 2>&1 &
  PIDS+=($!)
}

wait_agents() {  # HEAD_ADDR WORKER_ADDR: both ports accept connections
  for _ in $(seq 100); do
    (echo > "/dev/tcp/$1/$HP") 2>/dev/null && (echo > "/dev/tcp/$2/$WP") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "stage-bench: the agents did not come up" >&2
  exit 1
}

run_stage() {  # DIR [tandemctl flags...]; prints: seconds mb_per_s(agent's) copied
  local dir=$1
  shift
  rm -rf "$dir/worker/models/bench"
  local t0 t1
  t0=$(now)
  "$CTL" stage "$M" --pki-dir "$PKI" --state-dir "$STATE" -o json "$@" > "$dir/stage.json" 2>"$dir/stage.err" || {
    echo "stage-bench: tandemctl stage failed:" >&2; cat "$dir/stage.err" >&2; exit 1; }
  t1=$(now)
  python3 - "$t0" "$t1" "$dir/stage.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[3]))
# The node that copied (a push also stages the head, whose files are already equal: skipped).
ev = max((s["evidence"]["apply"] for s in j["steps"] if s["action"] == "stage.files"), key=lambda e: e["copied"])
print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f} {ev["mb_per_s"]:.0f} {ev["copied"]}')
PY
}

scp_time() {  # SSHD_NS CLIENT_NS ADDR: seconds of scp -r of the tree to ADDR (sshd in SSHD_NS)
  local sns=$1 cns=$2 addr=$3 d=$W/ssh
  mkdir -p "$d" && chmod 700 "$d"
  [ -f "$d/host" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/host"
  [ -f "$d/id" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/id"
  cp "$d/id.pub" "$d/authorized_keys"
  local port
  port=$(free_port)
  cat > "$d/sshd_config" <<CFG
Port $port
ListenAddress $addr
HostKey $d/host
AuthorizedKeysFile $d/authorized_keys
PasswordAuthentication no
StrictModes no
PidFile $d/sshd.pid
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
  ${sns:+ip netns exec "$sns"} /usr/sbin/sshd -D -f "$d/sshd_config" -E "$d/sshd.log" &
  local spid=$!
  sleep 0.5
  rm -rf "$W/scp-dest"
  local t0 t1
  t0=$(now)
  ${cns:+ip netns exec "$cns"} scp -q -r -P "$port" -i "$d/id" -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null \
    "$W/tree" "root@$addr:$W/scp-dest" || { echo "stage-bench: scp failed (sshd log: $(tail -3 "$d/sshd.log"))" >&2; exit 1; }
  t1=$(now)
  [ "$(du -sb "$W/scp-dest" | cut -f1)" -ge "$BYTES" ] || { echo "stage-bench: scp copied less than the tree" >&2; exit 1; }
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}

# --- loopback ---
L=$W/loop
setup_pair 127.0.0.1 127.0.0.2 127.0.0.1 "$L"
M=$L/m.yaml PKI=$L/pki STATE=$L/state
start_agent head "127.0.0.1:$HP" "$L/head" "$L/head.log"
start_agent worker "127.0.0.2:$WP" "$L/worker" "$L/worker.log"
wait_agents 127.0.0.1 127.0.0.2
read -r LOOP_S LOOP_AGENT_MBPS LOOP_COPIED < <(run_stage "$L")
# The same pair with stage.from: controller: tandemctl pushes from this machine (the head's root as
# its --stage-root) to every node; the worker's copy is the one measured.
setup_pair 127.0.0.1 127.0.0.2 127.0.0.1 "$W/push" controller
M=$W/push/m.yaml PKI=$W/push/pki STATE=$W/push/state
start_agent head "127.0.0.1:$HP" "$W/push/head" "$W/push/head.log"
start_agent worker "127.0.0.2:$WP" "$W/push/worker" "$W/push/worker.log"
wait_agents 127.0.0.1 127.0.0.2
read -r PUSH_S PUSH_AGENT_MBPS PUSH_COPIED < <(run_stage "$W/push" --stage-root "$W/push/head")
rm -rf "$W/cp-dest"; sync
t0=$(now); cp -r "$W/tree" "$W/cp-dest"; sync; t1=$(now)
CP_S=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
SCP_LOOP_S=$(scp_time "" "" 127.0.0.1)

# --- across the veth pair (netns) ---
NS_ROW=""
if "$SRC/tests/cluster/netns.sh" up "$W/ns" --owner $$ > /dev/null 2>&1; then
  # shellcheck disable=SC1091
  . "$W/ns/netns.env"
  N=$W/netns
  setup_pair "$A_ADDR" "$B_ADDR" "$A_FABRIC" "$N"
  M=$N/m.yaml PKI=$N/pki STATE=$N/state
  start_agent head "0.0.0.0:$HP" "$N/head" "$N/head.log" "$NS_A"
  start_agent worker "0.0.0.0:$WP" "$N/worker" "$N/worker.log" "$NS_B"
  wait_agents "$A_ADDR" "$B_ADDR"
  read -r NS_S NS_AGENT_MBPS NS_COPIED < <(run_stage "$N")
  SCP_NS_S=$(scp_time "$NS_A" "$NS_B" "$A_FABRIC")
  NS_ROW=1
else
  echo "stage-bench: no network namespaces here (needs root); the veth rows are left out" >&2
fi

mkdir -p "$OUT"
python3 - "$OUT/stage-bench-$COMMIT-chunk$CHUNK" <<PY
import json, sys, platform, os
B = $BYTES
rows = [
  {"what": "tandemctl stage, loopback (127.0.0.1 -> 127.0.0.2)", "seconds": $LOOP_S, "agent_mb_per_s": $LOOP_AGENT_MBPS, "copied": $LOOP_COPIED},
  {"what": "tandemctl stage, stage.from: controller, loopback (pushed to 127.0.0.2)", "seconds": $PUSH_S, "agent_mb_per_s": $PUSH_AGENT_MBPS, "copied": $PUSH_COPIED},
  {"what": "cp -r (same file system)", "seconds": $CP_S},
  {"what": "scp -r, loopback", "seconds": $SCP_LOOP_S},
]
if "$NS_ROW":
  rows += [
    {"what": "tandemctl stage, veth (netns A -> B, the fabric)", "seconds": $NS_S, "agent_mb_per_s": $NS_AGENT_MBPS, "copied": $NS_COPIED},
    {"what": "scp -r, veth (netns B <- A)", "seconds": $SCP_NS_S},
  ]
for r in rows: r["mb_per_s"] = round(B / 1e6 / r["seconds"])
hashing = json.load(open("$W/hash.json"))
doc = {"commit": "$COMMIT", "bytes": B, "files": $FILES, "cores": os.cpu_count(), "kernel": platform.release(),
       "transfer": rows, "hash": hashing}
doc["chunk"] = "$CHUNK"
open(sys.argv[1] + ".json", "w").write(json.dumps(doc, indent=2) + "\n")
md = [f"# stage bench at {doc['commit']}: {B >> 20} MiB in $FILES files, stage.chunk $CHUNK, {doc['cores']} cores", "",
      "\`deploy/stage-bench.sh BUILD\` (warm page cache; tandemctl stage's seconds include listing and",
      "hashing on the head, the worker's compare, backups, fsyncs and the final verify).", "",
      "| what | seconds | MB/s (wall) | MB/s (agent's transfer) |", "|---|---|---|---|"]
for r in rows:
  md.append(f"| {r['what']} | {r['seconds']:.2f} | {r['mb_per_s']} | {r.get('agent_mb_per_s', '')} |")
md += ["", "Hashing one tree (tandem-hash-bench: hash_paths, no cache; memory alone = the CPU's ceiling):", "",
       "| threads | seconds | tree GB/s (wall) | GB per CPU-second | memory GB/s (wall) |", "|---|---|---|---|---|"]
for r in hashing["rows"]:
  md.append(f"| {r['threads']} | {r['seconds']:.2f} | {r['gb_per_s']:.2f} | {r['gb_per_cpu_s']:.2f} | {r['memory_gb_per_s']:.2f} |")
one = hashing["one_file"]
md += ["", f"One file alone (SHA-256 is sequential within a file, so one core's rate): {one['bytes'] >> 20} MiB at "
       f"{one['gb_per_s']:.2f} GB/s. SHA extensions: {'yes' if hashing['sha_extensions'] else 'no'} ({hashing['openssl']})."]
load = open("/proc/loadavg").read().split()[:3]
md += ["", f"Load average when written: {' '.join(load)} on {doc['cores']} cores (other sessions share this machine)."]
doc["loadavg"] = load
open(sys.argv[1] + ".json", "w").write(json.dumps(doc, indent=2) + "\n")
open(sys.argv[1] + ".md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
