#!/usr/bin/env bash
# A Debian 12 root booted with systemd as PID 1 of its own PID, mount, IPC, UTS, cgroup and
# network namespaces (systemd-nspawn), so the systemd parts of tandem (the packaged units, the
# systemd dead-man, `tandemctl enroll --start systemd`) run under a real systemd. Never this
# machine's own root: the booted root is a fresh copy of a debootstrap'ed tree with its own /tmp,
# /run and units, and its network is one veth pair to this machine (10.251.N.0/30).
#
#   deploy/systemd-root.sh BUILD_DIR [COMMAND...]
#       make (or reuse) the cached root under BUILD_DIR/systemd-root, boot a copy, run COMMAND
#       inside (default: `systemctl is-system-running --wait` and the list of timers), power it
#       off and remove the copy. Exit status: COMMAND's; 77 when it cannot run here (says why).
#   source deploy/systemd-root.sh --lib
#       only define the sr_* functions (tests/systemd/*.sh use them); sr_cleanup runs on EXIT.
#
# Needs root, systemd-nspawn (Debian: systemd-container), nsenter, ip, zstd, and for the first
# run debootstrap and the Debian archive (the mirror apt is configured with; SYSTEMD_ROOT_MIRROR
# overrides it). The root tarball is cached as BUILD_DIR/systemd-root/bookworm-<key>.tar.zst:
# reruns only unpack it (seconds).
#
# Host facts this relies on (checked by sr_preflight): this machine's PID 1 need not be systemd;
# nspawn runs with --register=no --keep-unit (no machined, no scope), and the container's systemd
# gets a cgroup v2 hierarchy or the v1 name=systemd one (a hybrid host works: systemd 252 runs in
# hybrid mode).

SR_SUITE=bookworm
# What the tests need in the node: systemd + dbus (transient timers), sshd (enroll), cron (the
# hygiene's cron step), iproute2/procps (checks), and the run-time libraries of tandemd and
# tandem-serve (Debian 12 names).
SR_PACKAGES=systemd,systemd-sysv,dbus,openssh-server,cron,iproute2,procps,libspdlog1.10,libfmt9,libyaml-cpp0.7,libssl3,libicu72,libpcre2-8-0
SR_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
SR_MACHINES=()

sr_log() { printf '[systemd-root %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
sr_skip() { echo "SKIP: $*" >&2; exit 77; }
sr_die() { echo "FAIL: $*" >&2; exit 1; }
sr_now_ms() { date +%s%3N; }

# Everything that would make a boot impossible here, as a skip with the reason.
sr_preflight() {
  [ "$(id -u)" -eq 0 ] || sr_skip "booting a systemd root needs root (uid is $(id -u))"
  command -v systemd-nspawn >/dev/null || sr_skip "systemd-nspawn not installed (Debian: apt-get install systemd-container)"
  local t
  for t in nsenter ip zstd tar; do command -v "$t" >/dev/null || sr_skip "'$t' not installed"; done
  if ! grep -qw cgroup2 /proc/filesystems; then sr_skip "the kernel has no cgroup2 file system"; fi
  # systemd in the container needs either the unified hierarchy or the v1 name=systemd one.
  if ! { [ -f /sys/fs/cgroup/cgroup.controllers ] || [ -d /sys/fs/cgroup/systemd ] || [ -d /sys/fs/cgroup/unified ]; }; then
    sr_skip "no cgroup v2 at /sys/fs/cgroup and no name=systemd hierarchy: systemd cannot run in a container here"
  fi
  unshare --pid --mount --net --uts --ipc --fork true 2>/dev/null || sr_skip "cannot create PID/mount/net namespaces (unshare failed)"
}

# The Debian mirror apt is configured with (deb822 .sources or one-line sources.list).
sr_mirror() {
  if [ -n "${SYSTEMD_ROOT_MIRROR:-}" ]; then echo "$SYSTEMD_ROOT_MIRROR"; return; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk '/^URIs:/{u=$2} /^Suites:/{ if ($0 ~ /[ ]'"$SR_SUITE"'([ ]|$)/ && u !~ /security/) {print u; exit} }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  uri=$(awk '$1=="deb" && $0 ~ / '"$SR_SUITE"' / && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' \
    /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | head -1)
  [ -n "$uri" ] && echo "$uri"
}

# BUILD_DIR -> path of the cached root tarball (made now if missing).
sr_image() {
  local build=${1:?sr_image BUILD_DIR}
  SR_BASE=$build/systemd-root
  mkdir -p "$SR_BASE"
  local key
  key=$(printf '%s %s\n' "$SR_SUITE" "$SR_PACKAGES" | sha256sum | cut -c1-12)
  SR_IMAGE=$SR_BASE/$SR_SUITE-$key.tar.zst
  if [ -s "$SR_IMAGE" ]; then return 0; fi
  command -v debootstrap >/dev/null || sr_skip "no cached root ($SR_IMAGE) and debootstrap is not installed (Debian: apt-get install debootstrap)"
  local mirror
  mirror=$(sr_mirror) || true
  [ -n "$mirror" ] || sr_skip "no Debian mirror in apt's sources for $SR_SUITE (set SYSTEMD_ROOT_MIRROR)"
  local tmp=$SR_BASE/debootstrap.$$
  rm -rf "$tmp"
  sr_log "making the $SR_SUITE root with debootstrap (once; cached as $SR_IMAGE)"
  local t0=$SECONDS
  if ! debootstrap --variant=minbase --include="$SR_PACKAGES" "$SR_SUITE" "$tmp" "$mirror" >"$SR_BASE/debootstrap.log" 2>&1; then
    rm -rf "$tmp"
    if grep -qiE 'Failed getting release file|Could not resolve|Temporary failure|Connection (refused|timed out)|Network is unreachable' "$SR_BASE/debootstrap.log"; then
      sr_skip "debootstrap could not reach the Debian archive (see $SR_BASE/debootstrap.log)"
    fi
    tail -20 "$SR_BASE/debootstrap.log" >&2
    sr_die "debootstrap failed (log: $SR_BASE/debootstrap.log)"
  fi
  # Host keys of the image are not used: each boot gets its own (sr_prepare).
  rm -f "$tmp"/etc/ssh/ssh_host_*
  tar -C "$tmp" -cf - . | zstd -T0 -3 -q -o "$SR_IMAGE.part"
  mv "$SR_IMAGE.part" "$SR_IMAGE"
  rm -rf "$tmp"
  sr_log "root cached in $((SECONDS - t0)) s ($(du -h "$SR_IMAGE" | cut -f1))"
}

# sr_machine NAME: the per-machine paths and addresses (N from the name, distinct per machine).
sr_machine() {
  SR_NAME=$1
  SR_DIR=$SR_BASE/m/$SR_NAME
  SR_ROOT=$SR_DIR/root
  local n
  n=$(( $(printf '%s' "$SR_NAME" | cksum | cut -d' ' -f1) % 250 + 1 ))
  SR_HOST_IP=10.251.$n.1
  SR_NODE_IP=10.251.$n.2
  SR_IFACE=ve-${SR_NAME:0:12}
}

# sr_prepare NAME: a fresh copy of the image with this machine's identity and network.
sr_prepare() {
  sr_machine "$1"
  rm -rf "$SR_DIR"
  mkdir -p "$SR_ROOT"
  zstd -dc "$SR_IMAGE" | tar -C "$SR_ROOT" -xf -
  echo "$SR_NAME" >"$SR_ROOT/etc/hostname"
  printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$SR_NAME" >"$SR_ROOT/etc/hosts"
  : >"$SR_ROOT/etc/machine-id"   # systemd makes one at first boot
  # The container end of the veth pair, static (systemd-networkd; network-online waits for it).
  mkdir -p "$SR_ROOT/etc/systemd/network"
  cat >"$SR_ROOT/etc/systemd/network/10-host0.network" <<NET
[Match]
Name=host0
[Network]
Address=$SR_NODE_IP/30
Gateway=$SR_HOST_IP
LinkLocalAddressing=no
IPv6AcceptRA=no
NET
  ln -sf /lib/systemd/system/systemd-networkd.service "$SR_ROOT/etc/systemd/system/multi-user.target.wants/systemd-networkd.service"
  mkdir -p "$SR_ROOT/etc/systemd/system/network-online.target.wants"
  ln -sf /lib/systemd/system/systemd-networkd-wait-online.service \
    "$SR_ROOT/etc/systemd/system/network-online.target.wants/systemd-networkd-wait-online.service"
  # Units that only slow a test boot down or reach out of the machine.
  local u
  for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer e2scrub_reap.service; do
    ln -sf /dev/null "$SR_ROOT/etc/systemd/system/$u"
  done
  ssh-keygen -q -A -f "$SR_ROOT" >/dev/null 2>&1 || sr_die "ssh-keygen -A for the node's host keys failed"
}

# The PID (on this machine) of the container's PID 1, or nothing.
sr_leader() {
  local npid c ns
  npid=$(cat "$SR_DIR/nspawn.pid" 2>/dev/null) || return 1
  for c in $(pgrep -P "$npid" 2>/dev/null); do
    ns=$(awk '/^NSpid:/{print $NF}' "/proc/$c/status" 2>/dev/null)
    [ "$ns" = 1 ] && { echo "$c"; return 0; }
  done
  return 1
}

# sr_exec CMD...: run CMD inside the booted root (all its namespaces, its root, a clean env).
sr_exec() {
  local l
  l=$(sr_leader) || sr_die "machine $SR_NAME is not running"
  nsenter -t "$l" -m -u -i -n -p -C -r -w /usr/bin/env -i PATH=$SR_PATH LANG=C.UTF-8 TERM=dumb "$@"
}

sr_boots() { wc -l <"$SR_DIR/boots" 2>/dev/null || echo 0; }

# Wait until boot number $1 is up: PID 1 says running (or degraded, with the failed units shown).
sr_wait_booted() {
  local want=$1 deadline=$((SECONDS + ${2:-90})) state=""
  while [ "$SECONDS" -lt "$deadline" ]; do
    if [ -f "$SR_DIR/keeper.done" ]; then tail -30 "$SR_DIR/console.log" >&2; sr_die "the container exited while booting"; fi
    if [ "$(sr_boots)" -ge "$want" ] && sr_leader >/dev/null; then
      state=$(sr_exec systemctl is-system-running 2>/dev/null) || true
      case "$state" in
        running) return 0 ;;
        degraded) sr_log "booted degraded: $(sr_exec systemctl --failed --no-legend --plain | tr '\n' ' ')"; return 0 ;;
      esac
    fi
    sleep 0.2
  done
  tail -30 "$SR_DIR/console.log" >&2
  sr_die "machine $SR_NAME did not finish booting within ${2:-90} s (state '$state')"
}

# sr_boot NAME [SETUP_FUNCTION]: prepare it, run SETUP_FUNCTION (it may write into $SR_ROOT
# before the first boot), boot it in the background; returns once it is running.
sr_boot() {
  sr_prepare "$1"
  SR_MACHINES+=("$SR_NAME")
  if [ -n "${2:-}" ]; then "$2"; fi
  : >"$SR_DIR/boots"
  sr_start
}

# sr_start: boot the prepared root of $SR_NAME (again, after sr_poweroff). A reboot from inside
# (exit 133) boots it again on the same root, as a real machine would.
sr_start() {
  local dir=$SR_DIR root=$SR_ROOT name=$SR_NAME iface=$SR_IFACE hip=$SR_HOST_IP
  rm -f "$SR_DIR/keeper.done"
  local want=$(( $(sr_boots) + 1 ))
  (
    set +e +u +o pipefail   # the caller's errexit must not end the keeper at a non-zero exit (133)
    trap '' HUP
    while :; do
      systemd-nspawn -q -D "$root" -b -M "$name" --register=no --keep-unit --console=pipe \
        --network-veth --resolv-conf=off --timezone=off >>"$dir/console.log" 2>&1 </dev/null &
      echo $! >"$dir/nspawn.pid"
      echo "boot $(date +%s%3N)" >>"$dir/boots"
      for _ in $(seq 100); do ip link show "$iface" >/dev/null 2>&1 && break; sleep 0.05; done
      ip addr replace "$hip/30" dev "$iface" 2>/dev/null && ip link set "$iface" up 2>/dev/null
      wait "$!"
      rc=$?
      echo "exit $rc $(date +%s%3N)" >>"$dir/exits"
      rm -rf "/run/systemd/nspawn/propagate/$name"
      [ "$rc" = 133 ] || break   # 133: the container asked for a reboot
    done
    touch "$dir/keeper.done"
  ) &
  echo $! >"$SR_DIR/keeper.pid"
  local t0
  t0=$(sr_now_ms)
  sr_wait_booted "$want" "${SR_BOOT_TIMEOUT:-90}"
  SR_LAST_BOOT_MS=$(( $(sr_now_ms) - t0 ))
  sr_log "machine $SR_NAME booted in $SR_LAST_BOOT_MS ms (systemd $(sr_exec systemctl --version | awk 'NR==1{print $2}'), node $SR_NODE_IP via $SR_IFACE)"
}

# sr_poweroff: `systemctl poweroff` inside and wait until it is down; the root stays (sr_start
# boots it again: a node that was off for a while).
sr_poweroff() {
  sr_exec systemctl poweroff 2>/dev/null || true
  local i
  for i in $(seq 300); do [ -f "$SR_DIR/keeper.done" ] && break; sleep 0.1; done
  [ -f "$SR_DIR/keeper.done" ] || sr_die "machine $SR_NAME did not power off within 30 s"
  wait "$(cat "$SR_DIR/keeper.pid")" 2>/dev/null || true
  sr_log "machine $SR_NAME is off"
}

# sr_reboot: `systemctl reboot` inside; returns when the next boot is running.
sr_reboot() {
  local next=$(( $(sr_boots) + 1 )) t0
  t0=$(sr_now_ms)
  sr_exec systemctl reboot 2>/dev/null || true  # the connection drops as PID 1 goes down
  sr_wait_booted "$next" "${SR_BOOT_TIMEOUT:-90}"
  SR_LAST_BOOT_MS=$(( $(sr_now_ms) - t0 ))
  sr_log "machine $SR_NAME rebooted in $SR_LAST_BOOT_MS ms"
}

# sr_down NAME: power off (then kill if it hangs) and remove its root.
sr_down() {
  sr_machine "$1"
  [ -d "$SR_DIR" ] || return 0
  local kp np l
  kp=$(cat "$SR_DIR/keeper.pid" 2>/dev/null || true)
  np=$(cat "$SR_DIR/nspawn.pid" 2>/dev/null || true)
  if [ ! -f "$SR_DIR/keeper.done" ] && l=$(sr_leader); then
    kill -s RTMIN+4 "$l" 2>/dev/null || true     # systemd: poweroff
    for _ in $(seq 150); do [ -f "$SR_DIR/keeper.done" ] && break; sleep 0.1; done
  fi
  if [ ! -f "$SR_DIR/keeper.done" ]; then
    [ -n "$kp" ] && kill "$kp" 2>/dev/null
    [ -n "$np" ] && kill -9 "$np" 2>/dev/null
    sleep 0.5
  fi
  [ -n "$kp" ] && wait "$kp" 2>/dev/null
  rm -rf "/run/systemd/nspawn/propagate/$SR_NAME"
  # SR_KEEP=1: keep the root and the logs (its journal is in root/var/log/journal) to look at.
  if [ -n "${SR_KEEP:-}" ]; then sr_log "machine $SR_NAME is off; root and logs kept in $SR_DIR"; else rm -rf "$SR_DIR"; fi
}

sr_cleanup() {
  local m
  for m in "${SR_MACHINES[@]}"; do sr_down "$m"; done
  SR_MACHINES=()
}

if [ "${1:-}" = "--lib" ]; then
  trap sr_cleanup EXIT
  return 0 2>/dev/null || exit 0
fi

set -euo pipefail
build=${1:?usage: deploy/systemd-root.sh BUILD_DIR [COMMAND...]}
shift
mkdir -p "$build"
build=$(cd "$build" && pwd)
sr_preflight
sr_image "$build"
trap sr_cleanup EXIT
sr_boot "sr-$$"
rc=0
if [ $# -gt 0 ]; then
  sr_exec "$@" || rc=$?
else
  sr_exec systemctl is-system-running --wait || rc=$?
  sr_exec systemctl list-timers --all --no-pager || rc=$?
fi
sr_cleanup
exit "$rc"
