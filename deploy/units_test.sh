#!/usr/bin/env bash
# Verify deploy/systemd/*.service and *.timer with `systemd-analyze verify`.
#   deploy/units_test.sh TANDEMD_BINARY
# verify insists the ExecStart binary exists, so each unit is checked as a temp copy whose
# /usr/local/sbin/tandemd is the built binary; templates are checked as instance "test".
# Exit 77 (ctest: skipped) when systemd-analyze is not installed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bin=${1:?usage: units_test.sh TANDEMD_BINARY}
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not installed; unit files not verified" >&2
  exit 77
fi
[[ -x $bin ]] || { echo "FAIL: $bin is not an executable" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units=()
for f in "$here"/systemd/*.service "$here"/systemd/*.timer; do
  name=$(basename "$f")
  name=${name/@./@test.}  # a template is verified as one of its instances
  sed "s|/usr/local/sbin/tandemd|$bin|g" "$f" >"$tmp/$name"
  units+=("$tmp/$name")
done
# --man=no: Documentation=man:tandemd(8) names the page the package installs, not one on this machine.
out=$(cd "$tmp" && systemd-analyze verify --man=no "${units[@]}" 2>&1) || {
  echo "FAIL: systemd-analyze verify:" >&2
  echo "$out" >&2
  exit 1
}
# verify exits 0 on some warnings (unknown keys, bad values): any line about our units fails.
if grep -F "$tmp/" <<<"$out" >&2; then
  echo "FAIL: systemd-analyze verify warned about the units above" >&2
  exit 1
fi
echo "ok: ${#units[@]} unit files verified (${units[*]##*/})"
