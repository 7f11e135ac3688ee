#!/usr/bin/env bash
# configure_without_controller.sh SOURCE_DIR BUILD_DIR: see CMakeLists.txt beside this file.
set -euo pipefail
src=${1:?usage: configure_without_controller.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: configure_without_controller.sh SOURCE_DIR BUILD_DIR}
rm -rf "$build"
if ! cmake -S "$src" -B "$build" -G Ninja -DTANDEM_WITH_CONTROLLER=OFF -DTANDEM_CUDA=OFF >"$build.log" 2>&1; then
  cat "$build.log" >&2
  echo "FAIL: the tree does not configure with -DTANDEM_WITH_CONTROLLER=OFF" >&2
  exit 1
fi
# A target_link_libraries() naming a controller library that is not built becomes -l<name>.
if grep -o -- '-ltandem_[A-Za-z0-9_]*' "$build/build.ninja" | sort -u | grep .; then
  echo "FAIL: these link against controller libraries that a build without the controller lacks" >&2
  exit 1
fi
# The target list is read once: `ninja ... | grep -q` would let grep exit at its first match and
# ninja die of SIGPIPE, which pipefail reports as a failure (a flaky FAIL on a good tree).
targets=$(ninja -C "$build" -t targets all)
for t in tandemd tandem-serve; do
  grep -q "^$t:" <<<"$targets" || { echo "FAIL: no $t target without the controller" >&2; exit 1; }
done
if grep -q '^tandemctl:' <<<"$targets"; then
  echo "FAIL: tandemctl is still built with TANDEM_WITH_CONTROLLER=OFF" >&2
  exit 1
fi
echo "ok: configures without the controller; tandemd, tandem-serve and their tests are buildable"
rm -rf "$build" "$build.log"
