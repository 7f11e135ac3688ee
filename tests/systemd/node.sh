# Sourced by tests/systemd/*.sh after deploy/systemd-root.sh --lib: one tandem node in a booted
# systemd root. Expects $repo and $build. The binaries come from the build tree by
# `cmake --install` (DESTDIR=the root, prefix /usr/local: the paths the units name).
# The node's "old lane" is a real unit, old-lane.service (tandem-serve on port 18888), not enabled:
# cron starts it (@reboot and every 5 minutes in /etc/crontab) and old-lane-revive.timer would
# revive it: what a bind must stop and restore.

NODE_AGENT_PORT=7443
NODE_PORT=18888
NODE_MODELS=/var/lib/tandem-test/models/dflash-pair

# Opt-in: a first run downloads the Debian root (about 140 MB) and the tests take minutes.
node_gate() {
  if [ "${TANDEM_SYSTEMD_TESTS:-0}" != 1 ]; then
    sr_skip "the systemd root tests are opt-in (they boot a debootstrap'ed Debian 12 under systemd-nspawn): set TANDEM_SYSTEMD_TESTS=1"
  fi
  local b
  for b in agent/tandemd controller/tandemctl engine/tandem-serve; do
    [ -x "$build/$b" ] || sr_die "$build/$b is not built (cmake --install needs the whole tree)"
  done
}

# A CUDA build of tandem-serve needs NVIDIA's runtime (cudart, cuBLASLt, NCCL), which no Debian
# package provides, so neither its package nor this root has it: a GPU node gets it from NVIDIA's
# own install. The root gets this machine's copies in a folder of their own, as that install would
# (the tests run tandem-serve on the CPU; no driver is needed for that).
node_cuda_runtime() {
  local libs
  libs=$(ldd "$build/engine/tandem-serve" | awk '$1 ~ /^lib(cudart|cublas|cublasLt|nccl)\.so/ && $3 ~ /^\// {print $3}')
  [ -n "$libs" ] || return 0
  mkdir -p "$SR_ROOT/opt/nvidia-runtime/lib"
  # shellcheck disable=SC2086
  cp -L $libs "$SR_ROOT/opt/nvidia-runtime/lib/"
  echo /opt/nvidia-runtime/lib >"$SR_ROOT/etc/ld.so.conf.d/nvidia-runtime.conf"
  chroot "$SR_ROOT" ldconfig
  sr_log "a CUDA tandem-serve: NVIDIA's runtime from this machine put in the root ($(for l in $libs; do basename "$l"; done | tr '\n' ' '))"
}

# What goes into the root before its first boot.
node_setup() {
  if [ -n "${NODE_DEBS:-}" ]; then
    node_install_debs "$NODE_DEBS"
  else
    DESTDIR=$SR_ROOT cmake --install "$build" --prefix /usr/local >"$SR_DIR/install.log" 2>&1 ||
      { cat "$SR_DIR/install.log" >&2; sr_die "cmake --install into the root failed"; }
  fi
  node_cuda_runtime
  mkdir -p "$SR_ROOT$NODE_MODELS" "$SR_ROOT/var/lib/tandem-test/cache"
  cp -r "$repo/models/dflash-pair/." "$SR_ROOT$NODE_MODELS/"
  cat >"$SR_ROOT/etc/systemd/system/old-lane.service" <<UNIT
[Unit]
Description=the old serving lane (tandem-serve, one CPU rank) that a bind replaces
After=network-online.target
Wants=network-online.target
[Service]
ExecStart=/usr/local/bin/tandem-serve $NODE_MODELS/target --device cpu --host 0.0.0.0 --port $NODE_PORT --served-model-name old-lane
Restart=no
UNIT
  # A timer that would bring the old lane back during the outage (the hygiene's timer step).
  cat >"$SR_ROOT/etc/systemd/system/old-lane-revive.timer" <<UNIT
[Unit]
Description=revive the old lane if it is down
[Timer]
OnCalendar=*:0/10
Unit=old-lane-revive.service
[Install]
WantedBy=timers.target
UNIT
  cat >"$SR_ROOT/etc/systemd/system/old-lane-revive.service" <<UNIT
[Unit]
Description=start old-lane.service
[Service]
Type=oneshot
ExecStart=/usr/bin/systemctl start old-lane.service
UNIT
  mkdir -p "$SR_ROOT/etc/systemd/system/timers.target.wants" "$SR_ROOT/etc/systemd/system/multi-user.target.wants"
  ln -sf ../old-lane-revive.timer "$SR_ROOT/etc/systemd/system/timers.target.wants/old-lane-revive.timer"
  # Only cron starts the old lane (at boot and every 5 minutes), as in the seed: a bind comments
  # these lines out, so after a reboot mid-bind only the dead-man can bring the old lane back.
  printf 'SHELL=/bin/sh\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n@reboot root systemctl start old-lane.service\n*/5 * * * * root systemctl start old-lane.service  # keep :%s up\n' \
    "$NODE_PORT" >"$SR_ROOT/etc/crontab"
  # A harness artifact, not a unit change for real nodes: nspawn gives the container its own boot
  # id by mounting a file over /proc/sys/kernel/random/boot_id, and in a service with
  # ProtectControlGroups=yes (tandemd.service) systemd 252 under nspawn shows the host's boot id
  # instead (measured: `systemd-run -p ProtectControlGroups=yes cat .../boot_id`). tandemd would then
  # record its rank and dead-man under another boot id than `tandemd restore` (run by the timer)
  # reads, and would never see a reboot. On a real machine there is one boot id.
  mkdir -p "$SR_ROOT/etc/systemd/system/tandemd.service.d"
  printf '# tests/systemd: see node.sh (nspawn boot id vs ProtectControlGroups)\n[Service]\nProtectControlGroups=no\n' \
    >"$SR_ROOT/etc/systemd/system/tandemd.service.d/10-nspawn-boot-id.conf"
  # SSH in as root with this test's key only (strict host keys: known_hosts from the root's keys).
  NODE_STATE=$SR_DIR/ctl
  mkdir -p "$NODE_STATE" "$SR_ROOT/root/.ssh"
  chmod 700 "$SR_ROOT/root/.ssh"
  [ -f "$NODE_STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$NODE_STATE/id_ed25519"
  cp "$NODE_STATE/id_ed25519.pub" "$SR_ROOT/root/.ssh/authorized_keys"
  chmod 600 "$SR_ROOT/root/.ssh/authorized_keys"
  echo "$SR_NODE_IP $(cut -d' ' -f1,2 "$SR_ROOT/etc/ssh/ssh_host_ed25519_key.pub")" >"$NODE_STATE/known_hosts"
  node_manifest "${NODE_DEADMAN_DELAY:-10m}"
  TANDEM_PKI=$NODE_STATE/pki
  "$build/controller/tandemctl" pki init "$TANDEM_PKI" "$NODE_MANIFEST" >"$NODE_STATE/pki.log" 2>&1 ||
    { cat "$NODE_STATE/pki.log" >&2; sr_die "tandemctl pki init failed"; }
}

# node_manifest DELAY: a one-node bind of this root (the head is the node), dead-man on systemd.
node_manifest() {
  NODE_MANIFEST=$NODE_STATE/bind.yaml
  cat >"$NODE_MANIFEST" <<YAML
apiVersion: tandem/v1
kind: Bind
metadata:
  name: sysd
nodes:
  - name: node1
    address: $SR_NODE_IP
    role: head
    ssh: { user: root, port: 22 }
    agent: { port: $NODE_AGENT_PORT }
    root: /
engine:
  binary: /usr/local/bin/tandem-serve
  model_dir: $NODE_MODELS/target
  run_user: root
  cache_dir: /var/lib/tandem-test/cache
  serve:
    served_model_name: tiny-glm
    host: 0.0.0.0
    port: $NODE_PORT
    tensor_parallel_size: 1
    gpu_memory_utilization: 0.5
    max_model_len: 1024
    max_num_seqs: 2
    device: cpu
    tool_call_parser: glm47
    enable_auto_tool_choice: true
  rendezvous: { port: 18521, timeout: 5s }
hygiene:
  cron: { patterns: ["old-lane"] }
  stop:
    commands:
      - { on: head, run: [/usr/bin/systemctl, stop, old-lane.service], timeout: 30s }
    port_dark_timeout: 10s
  shm: { patterns: ["tandem-test-*"] }
  page_cache: { drop: false, min_mem_available: 128MiB }
  cache_dir: { user_owned: true }
gates:
  serve_timeout: 60s
deadman:
  delay: $1
  backend: systemd
rollback:
  commands:
    - { on: head, run: [/usr/bin/systemctl, start, old-lane.service], timeout: 1m }
  verify:
    url: http://$SR_NODE_IP:$NODE_PORT/health
    timeout: 1m
YAML
}

node_boot() { SR_BOOT_TIMEOUT=${SR_BOOT_TIMEOUT:-120} sr_boot "$1" node_setup; }

# node_install_debs DIR: install DIR's .deb files into the (not yet booted) root the way an operator
# would, `apt-get install ./pkg.deb` (apt fetches their dependencies from the Debian archive), in a
# chroot on this machine's network. Nothing in the root runs systemd yet: the maintainer scripts see
# no /run/systemd/system, as in a debootstrap or image build.
node_install_debs() {
  local dir=$1 r=$SR_ROOT
  mkdir -p "$r/var/cache/tandem-debs"
  cp "$dir"/*.deb "$r/var/cache/tandem-debs/"
  cp -L /etc/resolv.conf "$r/etc/resolv.conf"
  local debs
  debs=$(cd "$r" && ls var/cache/tandem-debs/*.deb | sed 's|^|/|' | tr '\n' ' ')
  # A private mount namespace: the chroot's /proc and /dev mounts vanish with it.
  unshare --mount --propagation private sh -c "
    mount -t proc proc '$r/proc' && mount --rbind /dev '$r/dev' &&
    chroot '$r' /usr/bin/env -i PATH=$SR_PATH DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 \
      sh -c 'apt-get update -qq && apt-get install -y -q --no-install-recommends $debs'" >"$SR_DIR/install.log" 2>&1 ||
    { tail -30 "$SR_DIR/install.log" >&2; sr_die "apt-get install of the packages into the root failed"; }
}

# Without enroll: the env file and certificate that tandemctl enroll would write.
node_install_agent_config() {
  sr_exec mkdir -p /etc/tandem/pki/nodes
  local f
  for f in ca.pem nodes/node1.pem nodes/node1.key; do
    sr_exec sh -c "cat > /etc/tandem/pki/$f" <"$TANDEM_PKI/$f"
  done
  sr_exec chmod 600 /etc/tandem/pki/nodes/node1.key
  sr_exec sh -c "cat > /etc/tandem/tandemd.env" <<ENV
TANDEMD_NODE=node1
TANDEMD_LISTEN=$SR_NODE_IP:$NODE_AGENT_PORT
TANDEMD_ALLOW_EXEC="--allow-exec /usr/local/bin/tandem-serve --allow-exec /usr/bin/systemctl"
ENV
}

ctl() { TANDEM_STATE_DIR=$NODE_STATE/state "$build/controller/tandemctl" "$@"; }

# node_status_json: `tandemctl status -o json` of the bind (empty when the agent does not answer).
node_status_json() { ctl status "$NODE_MANIFEST" --pki-dir "$TANDEM_PKI" -o json 2>/dev/null || true; }

node_wait_agent() {
  local deadline=$((SECONDS + ${1:-30}))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if node_status_json | jq -e '.nodes[0].agent.ok == true' >/dev/null 2>&1; then return 0; fi
    sleep 0.3
  done
  return 1
}
