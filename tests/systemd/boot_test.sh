#!/usr/bin/env bash
# The harness itself and the packaged units under a real systemd (deploy/systemd-root.sh):
#   tests/systemd/boot_test.sh BUILD_DIR
# - the booted root's PID 1 is systemd, in its own PID namespace, with its own /tmp, /run and
#   boot id (nothing of this machine's /tmp is visible, nothing written there leaks out);
# - `cmake --install BUILD_DIR` into the root puts tandemd, tandemctl, tandem-serve and the units
#   where the units say; `systemd-analyze verify` inside the root passes them without a warning;
# - tandemd.service starts as packaged (its env file and certificate in place) and answers over
#   mutual TLS from this machine, across the veth pair; after `kill -9` systemd restarts it
#   (Restart=on-failure) and the new agent answers again;
# - a reboot from inside comes back with a new boot id and tandemd enabled and answering.
# Exit 77 (skipped) where the root cannot be made or booted here, with the reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: boot_test.sh BUILD_DIR}" && pwd)
# shellcheck source=../../deploy/systemd-root.sh
source "$repo/deploy/systemd-root.sh" --lib
source "$here/node.sh"
node_gate
sr_preflight
sr_image "$build"

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }

node_boot "sdboot$$"

# --- the namespaces are the root's own
[ "$(sr_exec cat /proc/1/comm)" = systemd ] || fail "PID 1 inside is '$(sr_exec cat /proc/1/comm)', not systemd"
[ "$(cat /proc/1/comm)" != systemd ] || true
host_boot=$(cat /proc/sys/kernel/random/boot_id)
boot1=$(sr_exec cat /proc/sys/kernel/random/boot_id)
[ "$boot1" != "$host_boot" ] || fail "the root shares this machine's boot id"
marker=$(mktemp /tmp/tandem-sdroot-marker.XXXXXX)
sr_exec test ! -e "$marker" || fail "this machine's $marker is visible inside the root: /tmp is shared"
sr_exec sh -c 'echo inside > /tmp/tandem-sdroot-inside'
[ ! -e /tmp/tandem-sdroot-inside ] || fail "a file written to /tmp inside appeared on this machine"
sr_exec findmnt -n -o FSTYPE /run | grep -qx tmpfs || fail "/run inside is not the root's own tmpfs"
ok "PID 1 is systemd ($(sr_exec systemctl --version | head -1)); own /tmp, /run, boot id"
rm -f "$marker"

# --- the installed units
for u in tandemd.service tandem-deadman@.service tandem-deadman@.timer; do
  sr_exec test -f "/usr/local/lib/systemd/system/$u" || fail "cmake --install put no $u in /usr/local/lib/systemd/system"
done
sr_exec test -x /usr/local/sbin/tandemd || fail "no /usr/local/sbin/tandemd (the path the units run)"
# --man=no: the root has no man-db for Documentation=man:tandemd(8) (tests/packaging checks the page ships).
out=$(sr_exec systemd-analyze verify --man=no /usr/local/lib/systemd/system/tandemd.service \
  /usr/local/lib/systemd/system/tandem-deadman@verify.service /usr/local/lib/systemd/system/tandem-deadman@verify.timer 2>&1) ||
  fail "systemd-analyze verify inside the root: $out"
if grep -i 'tandem' <<<"$out"; then fail "systemd-analyze verify warned about the units (above)"; fi
ok "systemd-analyze verify: tandemd.service, tandem-deadman@.service, tandem-deadman@.timer"

# --- tandemd as the packaged unit
node_install_agent_config
t0=$(sr_now_ms)
sr_exec systemctl enable --now tandemd.service
node_wait_agent 30 || fail "tandemd.service did not answer over mTLS: $(sr_exec journalctl -u tandemd -n 20 --no-pager)"
ok "tandemd.service (packaged unit) answers over mutual TLS on $SR_NODE_IP:$NODE_AGENT_PORT in $(( $(sr_now_ms) - t0 )) ms"
pid1=$(sr_exec systemctl show -p MainPID --value tandemd.service)
sr_exec kill -9 "$pid1"
t0=$(sr_now_ms)
for _ in $(seq 100); do
  pid2=$(sr_exec systemctl show -p MainPID --value tandemd.service)
  [ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ] && break
  sleep 0.1
done
[ "$pid2" != 0 ] && [ "$pid2" != "$pid1" ] || fail "systemd did not restart tandemd after kill -9"
node_wait_agent 30 || fail "the restarted tandemd does not answer"
ok "kill -9 of tandemd: restarted by systemd as pid $pid2, answering after $(( $(sr_now_ms) - t0 )) ms"

# --- a reboot
sr_reboot
boot2=$(sr_exec cat /proc/sys/kernel/random/boot_id)
[ "$boot2" != "$boot1" ] || fail "the boot id did not change across the reboot"
sr_exec systemctl is-enabled tandemd.service >/dev/null || fail "tandemd.service not enabled after the reboot"
node_wait_agent 60 || fail "tandemd did not answer after the reboot: $(sr_exec journalctl -u tandemd -b -n 20 --no-pager)"
sr_exec test ! -e /tmp/tandem-sdroot-inside || fail "/tmp inside survived the reboot (tmpfiles did not clean it)" 
ok "rebooted in $SR_LAST_BOOT_MS ms: new boot id, tandemd back and answering"
echo "PASS: systemd root boot, units and packaged tandemd"
