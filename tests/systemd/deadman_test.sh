#!/usr/bin/env bash
# The systemd dead-man for real, on one node booted under systemd (deploy/systemd-root.sh):
#   tests/systemd/deadman_test.sh BUILD_DIR
# 1. enroll: `tandemctl enroll --start systemd` over SSH with strict host keys (an unknown host
#    key is refused first), the packaged unit started and answering over mutual TLS;
# 2. arm/disarm: a bind with `deadman: {backend: systemd}` paused after its serve step shows the
#    transient timer in `systemctl list-timers`, and the hygiene stopped old-lane-revive.timer and
#    commented out the cron line; the bind then passes its gates and disarms: the timer is gone;
#    `tandemctl rollback` puts the crontab back byte for byte and starts the timer again; a bind
#    whose bench gate cannot pass rolls back by itself, and its armed timer is gone with it;
# 3. fire: a bind paused after its serve step, then kill -9 of tandemctl and of tandemd (kept
#    down), the rank stopped with SIGSTOP (stuck): the timer fires at the deadline from PID 1,
#    `tandemd deadman-fire` kills the rank, restores the crontab byte for byte and the timer, and
#    starts the old lane (it answers); the journal has the fire; `tandemctl status` says it fired;
# 4. reboot before the deadline: the restarted node's tandemd re-makes the timer for the rest of the
#    deadline, which fires near the original deadline;
# 5. off across the deadline: powered on after it, the timer is re-made for 1 s and fires at boot.
# Timings go to tests/systemd/results/deadman-timings.md (arm, fire latency against the deadline,
# restore duration). Exit 77 (skipped) where the root cannot be made or booted, with the reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: deadman_test.sh BUILD_DIR}" && pwd)
source "$repo/deploy/systemd-root.sh" --lib
source "$here/node.sh"
node_gate
sr_preflight
sr_image "$build"

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
results=${SYSTEMD_RESULTS:-$here/results/deadman-timings.md}
rows=()
row() { rows+=("$1"); echo "timing: $1"; }

DM=/var/lib/tandem/deadman/sysd          # the agent's dead-man dir for bind 'sysd'
UNIT=tandem-deadman-sysd
dm_json() { cat "$SR_ROOT$DM/deadman.json" 2>/dev/null || echo '{}'; }
crontab_sha() { sha256sum "$SR_ROOT/etc/crontab" | cut -c1-64; }
lane_up() { curl -sf -m 2 "http://$SR_NODE_IP:$NODE_PORT/health" >/dev/null; }
lane_is_old() { curl -sf -m 2 "http://$SR_NODE_IP:$NODE_PORT/v1/models" | grep -q '"old-lane"'; }
wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local deadline=$((SECONDS + $1)) what=$2; shift 2
  while [ "$SECONDS" -lt "$deadline" ]; do "$@" && return 0; sleep 0.2; done
  fail "timed out after ${deadline}s waiting for: $what"
}
timer_listed() { sr_exec systemctl list-timers --all --no-legend --plain "$UNIT.timer" | grep -q "$UNIT.timer"; }
fired_complete() { dm_json | jq -e '.fired == true and .fire_complete == true' >/dev/null; }

# bind_paused LABEL: a bind (fresh controller state) that stops after step 13 (the engine serves;
# dead-man armed, cron and the old lane's timer off, old lane stopped). Sets BIND_PID.
bind_paused() {
  export TANDEM_STATE_DIR=$NODE_STATE/state-$1
  rm -rf "$TANDEM_STATE_DIR"
  TANDEM_FAULT_PAUSE=after:13 "$build/controller/tandemctl" bind "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" -o json \
    >"$NODE_STATE/bind-$1.json" 2>"$NODE_STATE/bind-$1.log" &
  BIND_PID=$!
  local deadline=$((SECONDS + 120))
  while [ ! -f "$TANDEM_STATE_DIR/sysd/paused" ]; do
    kill -0 "$BIND_PID" 2>/dev/null || { cat "$NODE_STATE/bind-$1.log" >&2; fail "bind ($1) ended before its pause"; }
    [ "$SECONDS" -lt "$deadline" ] || fail "bind ($1) did not reach its pause in 120 s"
    sleep 0.2
  done
}

# The everyone-dead part: tandemctl and tandemd killed (tandemd kept down), the rank stuck.
kill_everyone() {
  kill -9 "$BIND_PID"; wait "$BIND_PID" 2>/dev/null || true
  local agent rank
  agent=$(sr_exec systemctl show -p MainPID --value tandemd.service)
  rank=$(sr_exec pgrep -f -- "--served-model-name tiny-glm" | head -1)
  [ -n "$rank" ] || fail "no engine rank running at the pause"
  sr_exec kill -9 "$agent"
  sr_exec systemctl stop tandemd.service   # no restart: the agent stays dead until the fire is done
  sr_exec kill -STOP "$rank"
  STUCK_RANK=$rank
}

# check_restored LABEL ORIGINAL_CRONTAB_SHA: after a fire, the node is back on its old lane.
check_restored() {
  [ "$(crontab_sha)" = "$2" ] || { diff <(echo) "$SR_ROOT/etc/crontab" >&2 || true; fail "$1: /etc/crontab is not byte-identical after the fire"; }
  sr_exec systemctl is-active --quiet old-lane-revive.timer || fail "$1: old-lane-revive.timer was not started again"
  wait_for 60 "the old lane answering ($1)" lane_up
  lane_is_old || fail "$1: port $NODE_PORT answers, but not as the old lane"
  if sr_exec pgrep -f -- "--served-model-name tiny-glm" >/dev/null; then fail "$1: the new lane's rank is still running"; fi
  sr_exec journalctl -b -u "$UNIT.service" --no-pager -o cat | grep -qx fired ||
    fail "$1: the journal of $UNIT.service has no 'fired': $(sr_exec journalctl -u "$UNIT.service" --no-pager -o cat | tail -5)"
  dm_json | jq -e '.outcomes | length == 2 and all(.exit_code == 0)' >/dev/null ||
    fail "$1: a rollback command failed: $(dm_json | jq -c '.outcomes')"
}

fire_timings() {  # fire_timings LABEL: fire latency against the deadline, restore duration
  local j deadline fired restore_ms
  j=$(dm_json)
  deadline=$(jq .deadline_ms <<<"$j"); fired=$(jq .fired_at_ms <<<"$j")
  restore_ms=$(jq '[.outcomes[].elapsed_ms] | add' <<<"$j")
  row "| $1 | delay $(jq '(.deadline_ms - .armed_at_ms)/1000' <<<"$j") s | fired $((fired - deadline)) ms after the deadline | restore $(jq '.outcomes[0].elapsed_ms' <<<"$j") ms + old lane start $(jq '.outcomes[1].elapsed_ms' <<<"$j") ms = $restore_ms ms | $2 |"
}

NODE_DEADMAN_DELAY=10m
node_boot "sddm$$"
ORIG_CRON=$(crontab_sha)
wait_for 60 "the old lane answering before any bind" lane_up

# --- 1. enroll over SSH, strict host keys
: >"$NODE_STATE/empty_known_hosts"
if ctl enroll "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" --identity "$NODE_STATE/id_ed25519" \
    --known-hosts "$NODE_STATE/empty_known_hosts" --start systemd --agent-binary "$build/agent/tandemd" >"$NODE_STATE/enroll-unknown.log" 2>&1; then
  fail "enroll accepted a node whose host key is not in known_hosts"
fi
grep -q -- "--accept-new" "$NODE_STATE/enroll-unknown.log" || fail "the unknown-host refusal does not say how to proceed: $(cat "$NODE_STATE/enroll-unknown.log")"
ok "enroll refuses an unknown host key"
t0=$(sr_now_ms)
ctl enroll "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" --identity "$NODE_STATE/id_ed25519" \
  --known-hosts "$NODE_STATE/known_hosts" --start systemd --agent-binary "$build/agent/tandemd" >"$NODE_STATE/enroll.log" 2>&1 ||
  { cat "$NODE_STATE/enroll.log" >&2; fail "tandemctl enroll --start systemd failed"; }
enroll_ms=$(( $(sr_now_ms) - t0 ))
sr_exec systemctl is-active --quiet tandemd.service || fail "tandemd.service is not active after enroll"
sr_exec systemctl is-enabled --quiet tandemd.service || fail "tandemd.service is not enabled after enroll"
cmp -s "$build/agent/tandemd" "$SR_ROOT/usr/local/sbin/tandemd" || fail "the tandemd on the node differs from the one enrolled"
node_wait_agent 30 || fail "the enrolled agent does not answer tandemctl status"
ok "tandemctl enroll --start systemd over SSH in $enroll_ms ms: tandemd.service enabled, active, answering"
row "| enroll --start systemd | | | | $enroll_ms ms (SSH, copy, SHA-256, systemctl restart, mTLS health) |"

# --- 2. a real transient timer: armed during the bind, gone after its disarm
bind_paused arm
lane_up && ! lane_is_old || fail "at the pause the new lane should serve on $NODE_PORT"
timer_listed || fail "$UNIT.timer is not in systemctl list-timers while armed: $(sr_exec systemctl list-timers --all --no-pager)"
sr_exec systemctl list-timers --all --no-pager "$UNIT.timer" | sed 's/^/  /'
[ "$(sr_exec systemctl show -p Unit --value "$UNIT.timer")" = "$UNIT.service" ] || fail "$UNIT.timer does not trigger $UNIT.service"
sr_exec systemctl cat "$UNIT.service" | tr -d '"' | grep -qx "ExecStart=/usr/local/sbin/tandemd deadman-fire --state-dir $DM" ||
  fail "$UNIT.service does not run tandemd deadman-fire: $(sr_exec systemctl cat "$UNIT.service")"
# A monotonic timer (OnActiveSec): its next elapse is a time since boot; the uptime is the clock.
next_us=$(sr_exec systemd-analyze timespan "$(sr_exec systemctl show -p NextElapseUSecMonotonic --value "$UNIT.timer")" | awk '/μs:/{print $2}')
left=$(awk -v n="$next_us" -v u="$(sr_exec cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%d", n/1e6 - u}')
[ "$left" -gt 500 ] && [ "$left" -le 600 ] || fail "the timer elapses in $left s, the manifest says 10m"
[ "$(grep -c "^#tandem-disabled op=" "$SR_ROOT/etc/crontab")" = 2 ] || fail "the two cron lines were not commented out: $(cat "$SR_ROOT/etc/crontab")"
if sr_exec systemctl is-active --quiet old-lane-revive.timer; then fail "old-lane-revive.timer still active during the outage"; fi
ok "armed: $UNIT.timer listed (elapses in ${left} s), cron line commented out, old-lane-revive.timer stopped"
rm -f "$TANDEM_STATE_DIR/sysd/paused"
wait "$BIND_PID" || { cat "$NODE_STATE/bind-arm.log" >&2; fail "the bind did not pass after its pause"; }
if timer_listed; then fail "$UNIT.timer still listed after the bind disarmed it"; fi
dm_json | jq -e '.armed == false and .fired == false' >/dev/null || fail "deadman.json not disarmed: $(dm_json)"
ok "bind passed and disarmed: $UNIT.timer gone from list-timers"
step_ms() { sed -n "s/.* $1 *ok (\([0-9]*\) ms).*/\1/p" "$NODE_STATE/bind-arm.log" | head -1; }
row "| arm / disarm (bind steps) | 10m | | | arm $(step_ms deadman.arm) ms (systemd-run through the agent), disarm $(step_ms deadman.disarm) ms |"
ctl rollback "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" >"$NODE_STATE/rollback.log" 2>&1 || { cat "$NODE_STATE/rollback.log" >&2; fail "tandemctl rollback failed"; }
[ "$(crontab_sha)" = "$ORIG_CRON" ] || fail "the crontab is not byte-identical after tandemctl rollback"
sr_exec systemctl is-active --quiet old-lane-revive.timer || fail "old-lane-revive.timer not started again by the rollback"
wait_for 60 "the old lane after tandemctl rollback" lane_is_old
ok "tandemctl rollback: crontab byte-identical, old-lane-revive.timer active, old lane serving"

# --- 2b. a bind whose gates fail: its rollback takes the armed timer with it
node_manifest 10m
sed -i 's/^gates:$/gates:\n  bench: { concurrency: 1, max_tokens: 8, min_tok_s: 1000000, max_failures: 0 }/' "$NODE_MANIFEST"
bind_paused gatefail
timer_listed || fail "$UNIT.timer is not listed while the gate-failing bind is armed"
rm -f "$TANDEM_STATE_DIR/sysd/paused"
if wait "$BIND_PID"; then fail "a bind whose bench gate wants 1,000,000 tok/s passed"; fi
grep -q "bench" "$NODE_STATE/bind-gatefail.log" || fail "the failed bind does not name its failing gate: $(tail -20 "$NODE_STATE/bind-gatefail.log")"
if timer_listed; then fail "$UNIT.timer still listed after the failed bind's rollback"; fi
dm_json | jq -e '.armed == false and .fired == false' >/dev/null || fail "deadman.json after the failed bind: $(dm_json)"
[ "$(crontab_sha)" = "$ORIG_CRON" ] || fail "the crontab is not byte-identical after the failed bind's rollback"
wait_for 60 "the old lane after the failed bind's rollback" lane_is_old
sr_exec systemctl is-active --quiet old-lane-revive.timer || fail "old-lane-revive.timer not started again after the failed bind"
ok "a bind whose gates fail: rolled back, $UNIT.timer gone, crontab byte-identical, old lane serving"

# The remaining phases need a delay short enough to wait for.
node_manifest 30s
sed -i 's/serve_timeout: 60s/serve_timeout: 15s/; s/port_dark_timeout: 10s/port_dark_timeout: 5s/' "$NODE_MANIFEST"

# --- 3. everyone dead: the timer fires from PID 1
bind_paused fire
kill_everyone
deadline=$(dm_json | jq .deadline_ms)
ok "tandemctl and tandemd killed (kill -9), rank $STUCK_RANK stopped (SIGSTOP); deadline in $(( (deadline - $(sr_now_ms)) / 1000 )) s"
wait_for 90 "the dead-man to fire and complete" fired_complete
check_restored fire "$ORIG_CRON"
if sr_exec test -d "/proc/$STUCK_RANK"; then fail "the stuck rank $STUCK_RANK survived the fire"; fi
[ "$(dm_json | jq -r .fired_by)" = systemd ] || fail "fired by '$(dm_json | jq -r .fired_by)', not systemd"
sr_exec systemctl start tandemd.service
node_wait_agent 30 || fail "tandemd does not answer after the fire"
st=$(node_status_json)
jq -e '.nodes[0].deadman | .fired == true and .fired_by == "systemd" and .fire_complete == true and (.outcomes | length) == 2' <<<"$st" >/dev/null ||
  fail "tandemctl status does not report the fire: $(jq -c '.nodes[0].deadman' <<<"$st")"
jq -e '.nodes[0].deadman.fired_at_ms > 0' <<<"$st" >/dev/null || fail "tandemctl status does not say when it fired"
jq -r '.nodes[0].deadman.outcomes[0].output_tail' <<<"$st" | grep -q '"restored"' || fail "the status does not carry what the restore did"
text=$(ctl status "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" 2>&1 || true)
grep -Eq 'dead-man FIRED at [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z by systemd, 2/2 rollback commands ok' <<<"$text" ||
  fail "tandemctl status (text) does not say when and how the fire went: $text"
[ "$(grep -c '^    restored: .*: ok$' <<<"$text")" = 2 ] || fail "tandemctl status (text) does not list what was restored: $text"
ok "the dead-man fired from PID 1 with everyone dead: rank killed, crontab byte-identical, timer restarted, old lane serving, journal and status record it"
fire_timings "kill -9 tandemctl + tandemd, rank stuck" "fired by $UNIT.service from PID 1"
ctl status "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" | sed 's/^/  /' || true

# --- 4. rebooted before the deadline
sr_exec systemctl reset-failed >/dev/null 2>&1 || true
bind_paused reboot-before
kill -9 "$BIND_PID"; wait "$BIND_PID" 2>/dev/null || true
deadline=$(dm_json | jq .deadline_ms)
sr_reboot
[ $(( deadline - $(sr_now_ms) )) -gt 3000 ] || fail "the reboot took too long to test 'before the deadline'"
wait_for 60 "the re-made timer after the reboot" timer_listed
if lane_up; then fail "port $NODE_PORT answers after the reboot before the dead-man fired (the cron line should be off)"; fi
dm_json | jq -e '.timer_rearms == 1 and .armed == true' >/dev/null || fail "no re-arm recorded after the reboot: $(dm_json | jq -c '{armed,timer_rearms,fired}')"
ok "rebooted $(( (deadline - $(sr_now_ms)) / 1000 )) s before the deadline: tandemd re-made $UNIT.timer"
wait_for 90 "the dead-man to fire after the reboot" fired_complete
check_restored reboot-before "$ORIG_CRON"
fire_timings "rebooted before the deadline (reboot $SR_LAST_BOOT_MS ms)" "timer re-made by tandemd at boot for the rest"

# --- 5. off across the deadline, powered on after it
sr_exec systemctl reset-failed >/dev/null 2>&1 || true
# No tandemd restart here: the fires above restored /etc/crontab from PID 1, outside
# tandemd.service's sandbox. The rewrite keeps the inode, so the service's bind mount of the file
# (ReadWritePaths=-/etc/crontab) stays attached and this bind's cron step can write it again.
bind_paused reboot-after
kill -9 "$BIND_PID"; wait "$BIND_PID" 2>/dev/null || true
deadline=$(dm_json | jq .deadline_ms)
sr_poweroff
while [ "$(sr_now_ms)" -lt $((deadline + 3000)) ]; do sleep 0.5; done
boot_at=$(sr_now_ms)
sr_start
wait_for 90 "the dead-man to fire after a boot past the deadline" fired_complete
check_restored reboot-after "$ORIG_CRON"
dm_json | jq -e '.timer_rearms == 1' >/dev/null || fail "the fire after the late boot was not through a re-made timer"
[ "$(dm_json | jq -r .fired_by)" = systemd ] || fail "fired by '$(dm_json | jq -r .fired_by)' after the late boot, not systemd"
after_boot=$(( $(dm_json | jq .fired_at_ms) - boot_at ))
ok "powered on $(( (boot_at - deadline) / 1000 )) s after the deadline: fired $after_boot ms after power-on"
fire_timings "off across the deadline, on $(( (boot_at - deadline) / 1000 )) s after it" "fired $after_boot ms after power-on (1 s timer re-made at boot)"

mkdir -p "$(dirname "$results")"
{
  echo "# systemd dead-man timings ($(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  echo "tests/systemd/deadman_test.sh on a Debian 12 root booted under systemd-nspawn (systemd $(sr_exec systemctl --version | awk 'NR==1{print $2}')),"
  echo "one CPU node, this machine's load as it was. The arm step's time is in each bind report under the node's state dir."
  echo
  echo "| case | delay | fire latency | restore | note |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} >"$results"
echo "timings written to $results"
echo "PASS: systemd dead-man: enroll, arm/disarm, fire with everyone dead, reboot before and after the deadline"
