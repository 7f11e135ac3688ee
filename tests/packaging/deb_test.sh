#!/usr/bin/env bash
# The Debian packages as an operator gets them (cmake/Packaging.cmake, built here with cpack):
#   tests/packaging/deb_test.sh contents BUILD_DIR
#     three packages and their -dbgsym; lintian reports no error; each holds its program, man
#     page, completion, copyright and changelog, stripped, its debug file found by build id in the
#     .ddeb; the agent's units start the tandemd the package installs; its env file is a conffile;
#     a node's package pulls in neither libssh nor the controller.
#   tests/packaging/deb_test.sh install BUILD_DIR      (opt-in: TANDEM_SYSTEMD_TESTS=1)
#     `apt-get install ./tandem-*.deb` into a debootstrap'ed Debian 12 root (deploy/systemd-root.sh)
#     fetching their dependencies from the Debian archive; `systemd-analyze verify --root` of the
#     installed units; the root booted under systemd: the programs run, the shipped manifests
#     validate, an unconfigured agent stays inactive (not failed), a configured one starts from
#     the packaged unit and answers over mutual TLS, a reinstall (upgrade path) restarts it and
#     keeps the node's env file, remove stops it, purge leaves no configuration or state.
# Exit 77 (skipped) when a tool it needs is missing here, with the reason.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mode=${1:?usage: deb_test.sh contents|install BUILD_DIR}
build=$(cd "${2:?usage: deb_test.sh contents|install BUILD_DIR}" && pwd)

fail() { echo "FAIL: $*" >&2; exit 1; }
ok() { echo "ok: $*"; }
skip() { echo "SKIP: $*" >&2; exit 77; }

for t in cpack dpkg-deb readelf; do command -v "$t" >/dev/null || skip "'$t' not installed"; done
[ -x "$build/agent/tandemd" ] && [ -x "$build/engine/tandem-serve" ] || fail "$build is not built"

# --- the packages, made from this build (seconds: the binaries are already built)
debs=$(mktemp -d /tmp/tandem-debs.XXXXXX)
cleanup_debs() { rm -rf "$debs"; }
trap cleanup_debs EXIT
(cd "$build" && cpack -G DEB -B "$debs" >"$debs/cpack.log" 2>&1) || { cat "$debs/cpack.log" >&2; fail "cpack -G DEB failed"; }
rm -rf "$debs/_CPack_Packages"
version=$(sed -n 's/^project(tandem VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
# A cross build names its target (CMake passes TANDEM_DEB_ARCH); a native one is this machine's.
arch=${TANDEM_DEB_ARCH:-$(dpkg --print-architecture)}
pkgs=(tandem-agent tandem-controller tandem-serve)
if [ ! -x "$build/controller/tandemctl" ]; then pkgs=(tandem-agent tandem-serve); fi

contents() {
  local p deb ddeb
  for p in "${pkgs[@]}"; do
    deb=$debs/${p}_${version}_${arch}.deb
    ddeb=$debs/${p}-dbgsym_${version}_${arch}.ddeb
    [ -f "$deb" ] || fail "cpack made no $(basename "$deb") (made: $(ls "$debs"))"
    [ -f "$ddeb" ] || fail "cpack made no $(basename "$ddeb")"
    [ "$(dpkg-deb -f "$deb" Package)" = "$p" ] || fail "$deb is not package $p"
    local list
    list=$(dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|')
    for f in /usr/share/doc/$p/copyright /usr/share/doc/$p/changelog.gz; do
      grep -qx "$f" <<<"$list" || fail "$p lacks $f"
    done
    local prog dir section
    case $p in
      tandem-agent) prog=tandemd; dir=/usr/sbin; section=8 ;;
      tandem-controller) prog=tandemctl; dir=/usr/bin; section=1 ;;
      tandem-serve) prog=tandem-serve; dir=/usr/bin; section=1 ;;
    esac
    grep -qx "$dir/$prog" <<<"$list" || fail "$p lacks $dir/$prog"
    grep -qx "/usr/share/bash-completion/completions/$prog" <<<"$list" || fail "$p lacks the $prog bash completion"
    grep -qx "/usr/share/zsh/vendor-completions/_$prog" <<<"$list" || fail "$p lacks the $prog zsh completion"
    if command -v help2man >/dev/null; then
      grep -qx "/usr/share/man/man$section/$prog.$section.gz" <<<"$list" || fail "$p lacks the $prog($section) man page"
    fi
    # Stripped, and its debug information in the .ddeb under its build id.
    local x
    x=$(mktemp -d "$debs/x.XXXX")
    dpkg-deb -x "$deb" "$x/pkg"
    dpkg-deb -x "$ddeb" "$x/dbg"
    readelf -S "$x/pkg$dir/$prog" | grep -q '\.debug_info' && fail "$dir/$prog in $p is not stripped"
    local id
    id=$(readelf -n "$x/pkg$dir/$prog" | awk '/Build ID/{print $3}')
    [ -n "$id" ] || fail "$dir/$prog has no build id (the .ddeb cannot be matched to it)"
    [ -f "$x/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" ] ||
      fail "$p-dbgsym has no /usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug for $prog"
    readelf -S "$x/dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug" 2>/dev/null | grep -q '\.debug_info' ||
      fail "$p-dbgsym's debug file holds no .debug_info"
    ok "$p: $prog stripped ($(du -k "$x/pkg$dir/$prog" | cut -f1) KiB), debug info in $p-dbgsym by build id ${id:0:12}..., man page, completion, copyright, changelog"
    rm -rf "$x"
  done

  # The agent: units naming the installed tandemd, the env file a conffile, maintainer scripts.
  local a=$debs/tandem-agent_${version}_${arch}.deb x
  x=$(mktemp -d "$debs/x.XXXX")
  dpkg-deb -x "$a" "$x/pkg"
  dpkg-deb -e "$a" "$x/ctl"
  grep -qx 'ExecStart=/usr/sbin/tandemd serve .*' "$x/pkg/lib/systemd/system/tandemd.service" ||
    fail "tandemd.service does not start /usr/sbin/tandemd: $(grep ExecStart= "$x/pkg/lib/systemd/system/tandemd.service")"
  grep -q 'ExecStart=/usr/sbin/tandemd deadman-fire ' "$x/pkg/lib/systemd/system/tandem-deadman@.service" ||
    fail "tandem-deadman@.service does not run /usr/sbin/tandemd"
  grep -rq /usr/local "$x/pkg/lib/systemd/system" && fail "a packaged unit still names /usr/local: $(grep -rn /usr/local "$x/pkg/lib/systemd/system")"
  grep -qx /etc/tandem/tandemd.env "$x/ctl/conffiles" || fail "/etc/tandem/tandemd.env is not a conffile"
  [ -f "$x/pkg/etc/tandem/tandemd.env" ] || fail "the agent package ships no /etc/tandem/tandemd.env"
  for s in postinst prerm postrm; do [ -x "$x/ctl/$s" ] || fail "the agent package has no executable $s"; done
  grep -Eq '(systemctl|deb-systemd-helper|invoke) +enable' "$x/ctl/postinst" && fail "postinst enables the agent (a node starts it once enrolled)"
  local deps
  deps=$(dpkg-deb -f "$a" Depends)
  grep -q libssh <<<"$deps" && fail "tandem-agent depends on libssh: $deps"
  grep -q tandem-controller <<<"$deps" && fail "tandem-agent depends on the controller: $deps"
  ok "tandem-agent: units start /usr/sbin/tandemd, /etc/tandem/tandemd.env is a conffile, maintainer scripts present, Depends: $deps"
  rm -rf "$x"

  if command -v lintian >/dev/null; then
    local out
    out=$(lintian --tag-display-limit 0 "$debs"/*.deb 2>&1 | grep -v 'running with root privileges' || true)
    [ -n "$out" ] && echo "$out"
    grep -q '^E: ' <<<"$out" && fail "lintian reports errors (above)"
    ok "lintian: no errors on ${#pkgs[@]} packages ($(grep -c '^W: ' <<<"$out" || true) warnings)"
  else
    echo "SKIP: lintian not installed (deploy/setup.sh --test installs it); packages not linted" >&2
  fi
  ls -l "$debs"/*.deb "$debs"/*.ddeb | awk '{printf "  %8d KiB  %s\n", $5/1024, $9}'
}

install() {
  # shellcheck source=../../deploy/systemd-root.sh
  source "$repo/deploy/systemd-root.sh" --lib
  source "$repo/tests/systemd/node.sh"
  node_gate
  sr_preflight
  sr_image "$build"
  trap 'cleanup_debs; sr_cleanup' EXIT
  NODE_DEBS=$debs
  pkg_setup() {
    node_setup
    grep -E '^(Setting up|Unpacking) tandem-' "$SR_DIR/install.log" | sed 's/^/  /'
    # systemd-analyze verify --root: the installed units checked against the root's own tree.
    local out
    # --man=no: the root has no man-db to look man:tandemd(8) up with (the page is checked by `contents`).
    out=$(systemd-analyze verify --man=no --root="$SR_ROOT" /lib/systemd/system/tandemd.service \
      /lib/systemd/system/tandem-deadman@verify.service /lib/systemd/system/tandem-deadman@verify.timer 2>&1) ||
      fail "systemd-analyze verify --root=$SR_ROOT: $out"
    grep -E 'tandem' <<<"$out" && fail "systemd-analyze verify --root warned about the units (above)"
    ok "apt-get install ./tandem-*.deb into the Debian 12 root; systemd-analyze verify --root passes the installed units"
  }
  SR_BOOT_TIMEOUT=120 sr_boot "sdpkg$$" pkg_setup

  local p
  for p in "${pkgs[@]}"; do
    sr_exec dpkg-query -W -f='${Status}' "$p" | grep -q 'install ok installed' || fail "$p is not installed in the root"
  done
  local v
  v=$(sr_exec tandemd --version) || fail "tandemd --version failed in the root"
  sr_exec tandem-serve --version >/dev/null || fail "tandem-serve --version failed in the root"
  if [ -x "$build/controller/tandemctl" ]; then
    sr_exec tandemctl --version -o json | jq -e '.version' >/dev/null || fail "tandemctl --version -o json is not JSON with a version"
    local m
    for m in local.yaml local-cuda.yaml two-spark-dflash.yaml; do
      sr_exec tandemctl validate "/usr/share/tandem/manifests/$m" >/dev/null || fail "tandemctl validate /usr/share/tandem/manifests/$m failed in the root"
    done
    ok "in the root: $v; tandemctl --version -o json; the shipped manifests validate"
  fi
  [ "$(sr_exec stat -c %a /var/lib/tandem)" = 700 ] || fail "postinst did not make /var/lib/tandem 0700"
  [ "$(sr_exec stat -c %a /etc/tandem/tandemd.env)" = 640 ] || fail "/etc/tandem/tandemd.env is not 0640"

  # Unconfigured: not enabled, and a start is skipped by its condition (inactive, not failed).
  [ "$(sr_exec systemctl is-enabled tandemd.service || true)" = disabled ] || fail "tandemd.service is enabled before enrolment"
  sr_exec systemctl start tandemd.service || fail "systemctl start of the unconfigured agent returned an error"
  [ "$(sr_exec systemctl is-active tandemd.service || true)" = inactive ] || fail "the unconfigured agent is $(sr_exec systemctl is-active tandemd.service)"
  [ "$(sr_exec systemctl show -p ConditionResult --value tandemd.service)" = no ] || fail "tandemd.service's condition did not hold it back"
  ok "unconfigured: tandemd.service disabled; a start is skipped by ConditionPathExists (inactive, not failed)"

  # Configured (what enroll writes): the packaged unit starts /usr/sbin/tandemd and it answers.
  node_install_agent_config
  sr_exec systemctl enable --now tandemd.service >/dev/null 2>&1 || fail "systemctl enable --now tandemd failed: $(sr_exec journalctl -u tandemd -n 20 --no-pager)"
  node_wait_agent 30 || fail "the packaged tandemd did not answer over mTLS: $(sr_exec journalctl -u tandemd -n 20 --no-pager)"
  sr_exec systemctl show -p ExecStart --value tandemd.service | grep -q 'path=/usr/sbin/tandemd ' || fail "tandemd.service does not run /usr/sbin/tandemd"
  local pid1 pid2
  pid1=$(sr_exec systemctl show -p MainPID --value tandemd.service)
  ok "configured: the packaged tandemd.service runs /usr/sbin/tandemd (pid $pid1), answering over mutual TLS"

  # A reinstall goes through the upgrade path: postinst restarts the agent, the env file stays.
  sr_exec sh -c "dpkg -i /var/cache/tandem-debs/tandem-agent_${version}_${arch}.deb" >/dev/null || fail "dpkg -i (reinstall) failed"
  pid2=$(sr_exec systemctl show -p MainPID --value tandemd.service)
  [ "$pid2" != "$pid1" ] && [ "$pid2" != 0 ] || fail "the reinstall did not restart the agent (pid $pid1 -> $pid2)"
  sr_exec grep -qx 'TANDEMD_NODE=node1' /etc/tandem/tandemd.env || fail "the reinstall replaced the node's env file"
  node_wait_agent 30 || fail "the agent did not answer after the reinstall"
  ok "reinstall: postinst restarted the agent (pid $pid1 -> $pid2), the node's env file kept"

  sr_exec dpkg -r tandem-agent >/dev/null || fail "dpkg -r tandem-agent failed"
  [ "$(sr_exec systemctl is-active tandemd.service || true)" != active ] || fail "remove left the agent running"
  sr_exec test -f /etc/tandem/tandemd.env || fail "remove deleted the conffile (only purge should)"
  sr_exec dpkg --purge tandem-agent >/dev/null || fail "dpkg --purge tandem-agent failed"
  sr_exec test ! -e /etc/tandem/tandemd.env || fail "purge left /etc/tandem/tandemd.env"
  sr_exec test ! -e /var/lib/tandem || fail "purge left /var/lib/tandem"
  sr_exec test ! -e /etc/tandem/pki || fail "purge left /etc/tandem/pki"
  ok "remove stopped the agent and kept its configuration; purge removed configuration, keys and state"
}

case $mode in
  contents) contents ;;
  install)
    [ "${TANDEM_SYSTEMD_TESTS:-0}" = 1 ] || skip "installing into a booted Debian 12 root is opt-in (it fetches packages from the Debian archive): set TANDEM_SYSTEMD_TESTS=1"
    install ;;
  *) fail "unknown mode '$mode' (contents or install)" ;;
esac
