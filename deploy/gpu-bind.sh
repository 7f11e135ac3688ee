#!/usr/bin/env bash
# The main job on a one-GPU machine (issue 20): deploy/local-bind.sh's real two-rank bind (two
# tandemd agents, mutual TLS, sandboxed node roots) of manifests/local-cuda.yaml, whose two ranks
# run tandem-serve --device cuda on the one GPU (TP2 through the host-staged all-reduce), then
# `tandemctl rollback` to the old lane (one CUDA rank), then teardown. Run as root from the
# repository root (the model is its models/dflash-pair):
#   deploy/gpu-bind.sh BUNDLE OUT
# BUNDLE holds bin/ (tandemctl, tandemd, tandem-serve) and lib/ (the shared libraries the machine
# lacks), as `deploy/gpu-prepare.sh --bind` packs them. OUT gets the bind and rollback reports
# (JSON and Markdown), both ranks' logs, the old lane's log, nvidia-smi's view, summary.md and
# summary.json. Exits non-zero when any check fails.
# DEVICE=cpu runs the same flow with both ranks and the old lane on the CPU (a copy of the manifest
# with the device switched), which is how this script is tried on a machine without a GPU.
set -uo pipefail
bundle=$(cd "${1:?usage: gpu-bind.sh BUNDLE OUT}" && pwd)
out=$(mkdir -p "${2:?usage: gpu-bind.sh BUNDLE OUT}" && cd "$2" && pwd)
device=${DEVICE:-cuda}
repo=$(cd "$(dirname "$0")/.." && pwd)
base=/var/lib/tandem/local    # the paths the manifest names
pki=$base/pki
state=$base/state
lib=$base/lib                 # the manifest's engine.env LD_LIBRARY_PATH (the ranks' environment is the agent's)
api=http://127.0.0.1:18888
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ctl=$bundle/bin/tandemctl
: > "$out/checks.tsv"
failures=0
# check NAME OK DETAIL: one row of the summary; OK is 1 (pass), 0 (fail) or "info".
check() {
  printf '%s\t%s\t%s\n' "$1" "$2" "$(echo "$3" | tr '\t\n' '  ' | cut -c1-400)" >> "$out/checks.tsv"
  case $2 in 1) echo "ok    $1: $3" ;; 0) echo "FAIL  $1: $3"; failures=$((failures + 1)) ;; *) echo "info  $1: $3" ;; esac
}
json_get() {  # FILE PYTHON_EXPR(d) -> its value, empty when the file or the key is missing
  python3 -c 'import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: sys.exit(0)
try: v=eval(sys.argv[2])
except Exception: sys.exit(0)
print(v if isinstance(v,str) else json.dumps(v))' "$@"
}
complete() {  # PROMPT MAX_TOKENS -> the greedy completion's text
  python3 - "$1" "$2" "$api" <<'EOF'
import json, sys, urllib.request
body = {"model": "tiny-glm", "prompt": sys.argv[1], "max_tokens": int(sys.argv[2]), "temperature": 0}
req = urllib.request.Request(sys.argv[3] + "/v1/completions", json.dumps(body).encode(), {"Content-Type": "application/json"})
try: print(json.dumps(json.load(urllib.request.urlopen(req, timeout=60))["choices"][0]["text"]))
except Exception as e: print("ERROR " + str(e))
EOF
}
gpu_apps() { nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1; }
gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>/dev/null | head -1 | grep . || echo "unknown"; }
cron_line() { grep -m1 '18888/health' "$base/rank$1/etc/crontab" 2>/dev/null; }
prompt='#include <stdio.h>
int main('

# 1. The binaries start here: every library they need is found (the bundle's lib/, else the machine's).
for b in tandemctl tandemd tandem-serve; do
  missing=$(ldd "$bundle/bin/$b" 2>&1 | grep 'not found' | tr -s ' \t' ' ')
  [ -z "$missing" ] && check "libraries resolve: $b" 1 "ldd finds every library with LD_LIBRARY_PATH=$bundle/lib" ||
    check "libraries resolve: $b" 0 "$missing"
done
# The ranks get only the manifest's LD_LIBRARY_PATH: the bundle's libraries, and CUDA's or NCCL's
# where the machine keeps them off the loader's path (in a Python package, say).
rm -rf "$lib"
mkdir -p "$lib"
cp -a "$bundle/lib/." "$lib/"
for name in $(LD_LIBRARY_PATH=$lib ldd "$bundle/bin/tandem-serve" | awk '/not found/ {print $1}'); do
  found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib "$(python3 -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)" \
    -name "$name" 2>/dev/null | head -1)
  [ -n "$found" ] && ln -sf "$found" "$lib/$name"
done
missing=$(LD_LIBRARY_PATH=$lib ldd "$bundle/bin/tandem-serve" | grep 'not found' | tr -s ' \t' ' ')
[ -z "$missing" ] && check "libraries resolve: the ranks' tandem-serve" 1 "with only LD_LIBRARY_PATH=$lib, as the agents start it" ||
  check "libraries resolve: the ranks' tandem-serve" 0 "$missing"

# 2. The manifest: local-cuda.yaml as committed, or its CPU twin.
manifest=$repo/manifests/local-cuda.yaml
if [ "$device" = cpu ]; then
  sed -e 's/^    device: cuda$/    device: cpu/' -e 's/--device cuda/--device cpu/' "$manifest" > "$out/local-cpu.yaml"
  manifest=$out/local-cpu.yaml
fi
"$ctl" validate "$manifest" > "$out/validate.txt" 2>&1 && check "manifest valid" 1 "$(cat "$out/validate.txt")" ||
  check "manifest valid" 0 "$(cat "$out/validate.txt")"
check "binaries" info "$("$bundle/bin/tandem-serve" --version 2>&1 | head -1); $("$ctl" --version 2>&1 | head -1)"
[ "$device" = cuda ] && check "device" info "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
gpu_before=$(gpu_used)

# 3. The bind, through deploy/local-bind.sh (agents, sandboxes, PKI, the gates).
t0=$(date +%s.%N)
MANIFEST=$manifest "$repo/deploy/local-bind.sh" "$bundle/bin" 2>&1 | tee "$out/bind.log"
bind_rc=${PIPESTATUS[0]}
bind_s=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
"$ctl" history --state-dir "$state" -o json > "$out/history.json" 2>&1
report=$(json_get "$out/history.json" '[r for r in d["runs"] if r["kind"] == "bind"][-1]["report"]["json"]')
if [ -n "$report" ] && [ -f "$report" ]; then
  cp "$report" "$out/bind-report.json"
  cp "${report%.json}.md" "$out/bind-report.md" 2>/dev/null
fi
result=$(json_get "$out/bind-report.json" 'd["result"]')
[ "$bind_rc" = 0 ] && [ "$result" = bound ] && check "bind" 1 "result bound in ${bind_s} s (local-bind.sh and tandemctl bind, bind id $(json_get "$out/bind-report.json" 'd["bind_id"]'))" ||
  check "bind" 0 "local-bind.sh exit $bind_rc, report result '${result:-none}', failed step $(json_get "$out/bind-report.json" 'd["failed_step"]')"
gates=$(json_get "$out/bind-report.json" '" ".join("%s:%s" % (g["gate"], "pass" if g["status"] == "done" and g["evidence"].get("passed") else "FAIL") for g in d["gates"])')
if [ -n "$gates" ] && ! echo "$gates" | grep -q FAIL; then check "gates" 1 "$gates"; else check "gates" 0 "${gates:-no gates in the report}"; fi
spec=$(json_get "$out/bind-report.json" '[g for g in d["gates"] if g["gate"] == "spec_metrics"][0]["evidence"]["detail"]')
[ -n "$spec" ] && check "DFlash acceptance (spec_metrics gate)" info "$spec"
steps=$(json_get "$out/bind-report.json" '"%d steps, all done" % len(d["steps"]) if all(s["status"] == "done" for s in d["steps"]) else "not done: " + ", ".join(s["action"] for s in d["steps"] if s["status"] != "done")')
check "bind steps" "$( [[ "$steps" == *"all done" ]] && echo 1 || echo 0)" "${steps:-none in the report}"

# 4. Both ranks run on the configured device (their logs through the agents; nvidia-smi).
"$ctl" status "$manifest" --pki-dir "$pki" --state-dir "$state" -o json > "$out/status-bound.json" 2>&1
pids=()
for r in 0 1; do
  "$ctl" logs "rank$r" "$manifest" -n 10000 --pki-dir "$pki" --state-dir "$state" > "$out/rank$r.log" 2>&1
  pid=$(json_get "$out/status-bound.json" "[n for n in d['nodes'] if n['node'] == 'rank$r'][0]['engine']['pid']")
  if [ "$device" = cuda ]; then
    # Only a --device cuda rank of a group joins the GPU group; on one GPU it picks the host-staged all-reduce.
    line=$(grep -m1 -o 'device all-reduce: host-staged[^(]*' "$out/rank$r.log")
    [ -n "$line" ] || line=$(grep -m1 -o 'tensor parallel on the GPU (`tp_transport` [a-z]*' "$out/rank$r.log")
    [ -n "$line" ] && check "rank$r on the GPU" 1 "pid ${pid:-?}; its log: '$line'" ||
      check "rank$r on the GPU" 0 "its log has no GPU group: $(grep -m2 -iE 'error|device' "$out/rank$r.log")"
  elif [ ! -s "$out/rank$r.log" ]; then
    # An empty log proves nothing about the device (tandemctl logs failed, or the rank never ran).
    check "rank$r on the CPU" 0 "no log from tandemctl logs rank$r"
  else
    grep -q 'device all-reduce' "$out/rank$r.log" && check "rank$r on the CPU" 0 "its log names a device all-reduce" ||
      check "rank$r on the CPU" 1 "pid ${pid:-?}; no GPU group in its log"
  fi
  pids[r]=${pid:-none}
done
if [ "$device" = cuda ]; then
  grep -q 'KV pool storage: on the device' "$out/rank0.log" && check "head KV pool on the GPU" 1 "$(grep -m1 -o 'KV pool storage: on the device.*' "$out/rank0.log")" ||
    check "head KV pool on the GPU" 0 "no 'KV pool storage: on the device' in rank0's log"
  gpu_apps > "$out/nvidia-smi-bound.txt"
  # In a container the driver may list no processes (another PID namespace): then the logs above are the evidence.
  if grep -qE '^[0-9]+,' "$out/nvidia-smi-bound.txt"; then
    both=1
    for p in "${pids[@]}"; do grep -qE "^$p," "$out/nvidia-smi-bound.txt" || both=0; done
    # PIDs of another namespace: then the two ranks' binaries by name.
    [ $both = 1 ] || [ "$(grep -c "tandem/local/rank[01]/usr/local/bin/tandem-serve" "$out/nvidia-smi-bound.txt")" -ge 2 ] && both=1
    check "nvidia-smi lists both ranks" $both "$(tr '\n' ';' < "$out/nvidia-smi-bound.txt") (rank pids ${pids[0]}, ${pids[1]})"
  else
    check "nvidia-smi lists both ranks" info "it lists no compute processes here ($(head -1 "$out/nvidia-smi-bound.txt")); GPU memory used $gpu_before before the bind, $(gpu_used) bound"
  fi
fi
c=$(cron_line 0)
[[ "$c" == \#* ]] && check "hygiene: the crontab job is off while bound" 1 "$c" || check "hygiene: the crontab job is off while bound" 0 "'$c'"
new_text=$(complete "$prompt" 16)
[[ "$new_text" != ERROR* ]] && [ "$new_text" != '""' ] && check "new lane answers" 1 "TP2 greedy: $new_text" ||
  check "new lane answers" 0 "$new_text"

# 5. tandemctl rollback: ranks stopped, hygiene undone, the old lane started and verified.
t0=$(date +%s.%N)
"$ctl" rollback "$manifest" --pki-dir "$pki" --state-dir "$state" -o json > "$out/rollback.json" 2> "$out/rollback.log"
rb_rc=$?
rb_s=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
cat "$out/rollback.log" "$out/rollback.json"
rreport=$(json_get "$out/rollback.json" 'd["report"]["json"]')
if [ -n "$rreport" ] && [ -f "$rreport" ]; then
  cp "$rreport" "$out/rollback-report.json"
  cp "${rreport%.json}.md" "$out/rollback-report.md" 2>/dev/null
fi
rresult=$(json_get "$out/rollback.json" 'd["result"]')
[ "$rb_rc" = 0 ] && [ "$rresult" = rolled_back ] && check "rollback" 1 "rolled_back in ${rb_s} s" ||
  check "rollback" 0 "exit $rb_rc, result '${rresult:-none}': $(json_get "$out/rollback.json" 'd["problems"]')"
"$ctl" status "$manifest" --pki-dir "$pki" --state-dir "$state" -o json > "$out/status-rolled-back.json" 2>&1
phases=$(json_get "$out/status-rolled-back.json" '" ".join("%s:%s" % (n["node"], n["engine"]["phase"]) for n in d["nodes"])')
if [ -n "$phases" ] && ! echo "$phases" | grep -qE ':(starting|ready|adopted)'; then check "new lane's ranks stopped" 1 "$phases"
else check "new lane's ranks stopped" 0 "${phases:-no status}"; fi
old_ok=0
curl -sf "$api/health" > /dev/null && curl -sf "$api/v1/models" | grep -q tiny-glm && old_ok=1
check "old lane serves" $old_ok "GET /health and /v1/models (tiny-glm) at $api"
if [ "$device" = cuda ]; then
  grep -q 'KV pool storage: on the device' "$base/old-lane.log" && ! grep -q 'device all-reduce' "$base/old-lane.log" &&
    check "old lane on the GPU" 1 "one rank: $(grep -m1 -o 'KV pool storage: on the device.*' "$base/old-lane.log")" ||
    check "old lane on the GPU" 0 "$(tail -2 "$base/old-lane.log")"
  gpu_apps > "$out/nvidia-smi-rolled-back.txt"
fi
old_text=$(complete "$prompt" 16)
[[ "$old_text" != ERROR* ]] && [ "$old_text" != '""' ] && check "old lane answers" 1 "TP1 greedy: $old_text" ||
  check "old lane answers" 0 "$old_text"
if [[ "$old_text" != ERROR* ]] && [[ "$new_text" != ERROR* ]]; then
  [ "$old_text" = "$new_text" ] && check "same greedy text, TP2 lane and TP1 old lane" info "identical (16 tokens)" ||
    check "same greedy text, TP2 lane and TP1 old lane" info "they differ (TP2 is within the numeric bar of TP1, not bit-equal; a near-tie departs)"
fi
c=$(cron_line 0)
[ -n "$c" ] && [[ "$c" != \#* ]] && check "hygiene undone: the crontab job is back" 1 "$c" || check "hygiene undone: the crontab job is back" 0 "'$c'"
cp "$base/old-lane.log" "$out/old-lane.log" 2>/dev/null

cp "$base/rank0-agent.log" "$base/rank1-agent.log" "$out/" 2>/dev/null

# 6. Teardown: the old lane and both agents stopped, nothing left on the GPU.
"$repo/deploy/local-bind.sh" "$bundle/bin" --down > "$out/down.log" 2>&1
sleep 2
# From /proc, not pgrep: a bare machine may lack procps (then local-bind.sh's pkill left them too).
left=$(for c in /proc/[0-9]*/cmdline; do { tr '\0' ' ' < "$c"; } 2>/dev/null; echo; done | grep -E "tandem(-serve|d) .*$base/" || true)
[ -z "$left" ] && check "teardown" 1 "no tandem-serve or tandemd of $base left" || check "teardown" 0 "still running: $left"
[ "$device" = cuda ] && check "GPU memory after teardown" info "$(gpu_used) used ($gpu_before before the bind)"

python3 - "$out" "$device" "$failures" <<'EOF'
import json, os, sys
out, device, failures = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [l.rstrip("\n").split("\t", 2) for l in open(os.path.join(out, "checks.tsv")) if l.strip()]
mark = {"1": "pass", "0": "FAIL"}
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write("# Two-rank bind on one machine, ranks on %s (deploy/gpu-bind.sh)\n\n| check | result | detail |\n|---|---|---|\n" % device)
    for name, ok, detail in rows:
        f.write("| %s | %s | %s |\n" % (name, mark.get(ok, "info"), detail.replace("|", "\\|")))
    f.write("\nfailures: %d\n" % failures)
json.dump({"device": device, "failures": failures,
           "checks": [{"check": n, "result": mark.get(o, "info"), "detail": d} for n, o, d in rows]},
          open(os.path.join(out, "summary.json"), "w"), indent=2)
EOF
cat "$out/summary.md"
[ "$failures" -eq 0 ]
