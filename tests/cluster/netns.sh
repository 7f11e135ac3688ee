#!/usr/bin/env bash
# Two test hosts on this machine: network namespaces A and B, joined by a veth pair (the fabric,
# like the direct link between two GPU nodes), each also linked to the root namespace (the
# management network the controller uses). Nothing leaves the machine.
#
#   netns.sh up STATE_DIR [--owner PID]   create; print and write STATE_DIR/netns.env
#   netns.sh down STATE_DIR               kill every process in both namespaces, delete all
#
# Addresses (N derived from this script's pid, so parallel runs do not collide):
#   root <-> A: 10.N.1.1/30 <-> 10.N.1.2/30        A <-> B (fabric, "fab0"): 10.N.3.1/24 <-> 10.N.3.2/24
#   root <-> B: 10.N.2.1/30 <-> 10.N.2.2/30
# With --owner, a detached guard tears everything down once PID is gone, so even a test killed
# with SIGKILL leaves no namespace, link or process behind. Exit 77 when namespaces cannot be made
# (not root, no `ip`, or no permission, as in an unprivileged container).
set -euo pipefail

usage() { echo "usage: $0 up STATE_DIR [--owner PID] | down STATE_DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 state=$2
shift 2
self=$(readlink -f "${BASH_SOURCE[0]}")

down() {
  local env="$state/netns.env"
  [ -f "$env" ] || return 0
  # shellcheck disable=SC1090
  . "$env"
  if [ -n "${GUARD_PID:-}" ] && [ "${GUARD_PID}" != "${TANDEM_NETNS_GUARD:-}" ]; then
    kill "$GUARD_PID" 2>/dev/null || true
  fi
  for ns in "$NS_A" "$NS_B"; do
    ip netns list 2>/dev/null | grep -qw "$ns" || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill $pids 2>/dev/null || true
    for _ in $(seq 20); do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -z "$pids" ] && break
      sleep 0.1
    done
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  # Deleting a namespace deletes its ends of the veth pairs, and with them the root-side peers;
  # these are for a namespace that was never made whole.
  ip link del "$LINK_A" 2>/dev/null || true
  ip link del "$LINK_B" 2>/dev/null || true
  rm -f "$env"
}

skip() { echo "netns.sh: skipped: $*" >&2; exit 77; }

up() {
  local owner=""
  while [ $# -gt 0 ]; do
    case $1 in
      --owner) owner=${2:?--owner needs a PID}; shift 2 ;;
      *) usage ;;
    esac
  done
  [ "$(id -u)" -eq 0 ] || skip "network namespaces need root (uid is $(id -u))"
  command -v ip >/dev/null || skip "no 'ip' command (Debian: iproute2)"
  mkdir -p "$state"
  local id=$(( $$ % 60000 ))
  local n=$(( (id % 200) + 20 ))
  local tag="t${id}"
  NS_A="tandem-${tag}-a" NS_B="tandem-${tag}-b" LINK_A="${tag}ma" LINK_B="${tag}mb"
  ip netns add "$NS_A" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed: no CAP_SYS_ADMIN?)"
  cat > "$state/netns.env" <<ENV
NS_A=$NS_A
NS_B=$NS_B
LINK_A=$LINK_A
LINK_B=$LINK_B
CTL_A=10.$n.1.1
CTL_B=10.$n.2.1
A_ADDR=10.$n.1.2
B_ADDR=10.$n.2.2
A_FABRIC=10.$n.3.1
B_FABRIC=10.$n.3.2
FABRIC_IF=fab0
ENV
  trap 'echo "netns.sh: set-up failed; tearing down" >&2; down' ERR
  ip netns add "$NS_B"
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  # management links: root <-> A, root <-> B
  ip link add "$LINK_A" type veth peer name mgmt0 netns "$NS_A"
  ip link add "$LINK_B" type veth peer name mgmt0 netns "$NS_B"
  ip addr add "10.$n.1.1/30" dev "$LINK_A" && ip link set "$LINK_A" up
  ip addr add "10.$n.2.1/30" dev "$LINK_B" && ip link set "$LINK_B" up
  ip -n "$NS_A" addr add "10.$n.1.2/30" dev mgmt0 && ip -n "$NS_A" link set mgmt0 up
  ip -n "$NS_B" addr add "10.$n.2.2/30" dev mgmt0 && ip -n "$NS_B" link set mgmt0 up
  # the fabric: one veth pair between A and B
  ip link add "${tag}fa" netns "$NS_A" type veth peer name "${tag}fb" netns "$NS_B"
  ip -n "$NS_A" link set "${tag}fa" name fab0
  ip -n "$NS_B" link set "${tag}fb" name fab0
  ip -n "$NS_A" addr add "10.$n.3.1/24" dev fab0 && ip -n "$NS_A" link set fab0 up
  ip -n "$NS_B" addr add "10.$n.3.2/24" dev fab0 && ip -n "$NS_B" link set fab0 up
  trap - ERR

  if [ -n "$owner" ]; then
    # The guard runs detached (own session, no terminal) so killing the owner's process group
    # does not take it along; TANDEM_NETNS_GUARD tells `down` not to kill the guard itself.
    TANDEM_NETNS_GUARD=guard setsid bash -c '
      while kill -0 "$1" 2>/dev/null; do sleep 1; done
      TANDEM_NETNS_GUARD=$$ exec "$2" down "$3"' guard "$owner" "$self" "$state" </dev/null >/dev/null 2>&1 &
    echo "GUARD_PID=$!" >> "$state/netns.env"
  fi
  cat "$state/netns.env"
}

case $cmd in
  up) up "$@" ;;
  down) down ;;
  *) usage ;;
esac
