#!/usr/bin/env bash
# Load, soak and a lost rank, on the local two-rank bind (deploy/local-bind.sh) with the seed's
# --max-num-seqs 6: 64 streaming clients for SECONDS (default 600) with streams dropped mid-way,
# malformed and slowloris requests mixed in, RSS of both ranks sampled (tests/soak/soak_client.py);
# then, under load, kill -9 of the worker rank: the head must end within its peer timeout, and
# `tandemctl rollback` must put the old lane back (its /health answers, crontabs byte-identical).
#
#   deploy/soak.sh BUILD_DIR [SECONDS] [OUT_DIR]     (as root; the results land in OUT_DIR)
# Exits 1 when any check failed.
set -uo pipefail

build=$(cd "${1:?usage: soak.sh BUILD_DIR [SECONDS] [OUT_DIR]}" && pwd)
seconds=${2:-600}
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${3:-$repo/tests/soak/results}
base=/var/lib/tandem/local
state=$base/state
pki=$base/pki
url=http://127.0.0.1:18888
peer_timeout_s=30   # tandem-serve's --peer-timeout default; the manifest leaves it
mkdir -p "$out"
manifest=$out/soak-manifest.yaml
failed=0
fail() { echo "FAIL: $*"; failed=1; }
step() { printf '\n== %s\n' "$*"; }

# The embedded default with the seed's batch width.
"$build/controller/tandemctl" default-manifest | sed 's/max_num_seqs: 4$/max_num_seqs: 6/' > "$manifest"
grep -q "max_num_seqs: 6" "$manifest" || { echo "could not set max_num_seqs 6 in the default manifest"; exit 1; }

step "binding the local two-rank lane with max_num_seqs 6"
MANIFEST=$manifest "$repo/deploy/local-bind.sh" "$build" || { echo "the bind failed"; exit 1; }
cp "$base/rank0/etc/crontab" "$out/.crontab0.bound"   # disabled by the bind; rollback must restore the original

rank_pid() { pgrep -f -- "tandem-serve .*--node-rank $1( |$)" | head -1; }
head_pid=$(rank_pid 0)
worker_pid=$(rank_pid 1)
[ -n "$head_pid" ] && [ -n "$worker_pid" ] || { echo "cannot find the ranks' processes"; pgrep -af tandem-serve; exit 1; }
echo "head rank pid $head_pid, worker rank pid $worker_pid"

step "soak: 64 streaming clients for ${seconds}s"
python3 "$repo/tests/soak/soak_client.py" --url "$url" --clients 64 --seconds "$seconds" \
  --pid "head=$head_pid" --pid "worker=$worker_pid" --json "$out/soak.json" | tee "$out/soak.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || fail "the soak had failures (see $out/soak.txt)"

step "kill -9 of the worker rank under load"
python3 "$repo/tests/soak/soak_client.py" --url "$url" --clients 16 --seconds 40 --json "$out/kill-load.json" \
  > "$out/kill-load.txt" 2>&1 &
load=$!
sleep 10
kill -9 "$worker_pid"
t0=$(date +%s.%N)
ended=""
while [ -z "$ended" ]; do
  kill -0 "$head_pid" 2>/dev/null || ended=$(date +%s.%N)
  [ -n "$ended" ] && break
  if (( $(echo "$(date +%s.%N) - $t0 > $peer_timeout_s + 30" | bc) )); then break; fi
  sleep 0.1
done
wait "$load"
if [ -n "$ended" ]; then
  head_end_s=$(echo "$ended - $t0" | bc)
  echo "the head rank ended $head_end_s s after the worker was killed"
  (( $(echo "$head_end_s <= $peer_timeout_s" | bc) )) || fail "the head took ${head_end_s}s (bound ${peer_timeout_s}s)"
else
  head_end_s=null
  fail "the head rank still runs $((peer_timeout_s + 30))s after its worker was killed"
fi

step "tandemctl rollback: the old lane back"
"$build/controller/tandemctl" rollback "$manifest" --pki-dir "$pki" --state-dir "$state" > "$out/rollback.txt" 2>&1
rollback_rc=$?
tail -20 "$out/rollback.txt"
[ "$rollback_rc" -eq 0 ] || fail "tandemctl rollback exited $rollback_rc"
health=$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)
[ "$health" = "200" ] || fail "the old lane's /health answers $health"
old_lane=$(pgrep -f "tandem-serve $base/models/dflash-pair/target --device cpu" | head -1)
[ -n "$old_lane" ] || fail "no old-lane tandem-serve process"
printf 'SHELL=/bin/sh\n*/5 * * * * root curl -sf http://127.0.0.1:18888/health >/dev/null || true\n' > "$out/.crontab.orig"
for i in 0 1; do
  cmp -s "$out/.crontab.orig" "$base/rank$i/etc/crontab" || fail "rank$i's crontab is not the original"
done
rm -f "$out"/.crontab*

python3 - "$out" "$head_end_s" "$rollback_rc" "$health" "$failed" <<'PY'
import json, sys, subprocess
out, head_end, rb, health, failed = sys.argv[1:]
soak = json.load(open(f"{out}/soak.json"))
kill = json.load(open(f"{out}/kill-load.json"))
commit = subprocess.run(["git", "-C", out, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
r = {"commit": commit, "soak": soak, "kill_load": {"counts": kill["counts"]},
     "head_end_after_worker_kill_s": None if head_end == "null" else float(head_end),
     "rollback_exit": int(rb), "old_lane_health": health, "passed": failed == "0"}
json.dump(r, open(f"{out}/soak-result.json", "w"), indent=2)
PY
"$repo/deploy/local-bind.sh" "$build" --down >/dev/null 2>&1 || true
pkill -f "tandem-serve $base/models/dflash-pair/target" 2>/dev/null || true
[ "$failed" -eq 0 ] && echo "soak: all checks passed" || echo "soak: checks FAILED"
exit "$failed"
