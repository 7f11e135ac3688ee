#!/usr/bin/env bash
# Cross build for arm64 (the seed's DGX Sparks) on an amd64 Debian 12 machine, the CPU test suite
# run under qemu-user, and the arm64 .debs: deploy/cross-arm64.sh [BUILD_DIR [RESULTS_DIR]]
#
#   BUILD_DIR    default build-arm64 beside the source
#   RESULTS_DIR  default tests/packaging/results/arm64: results.md (table) and results.json
#
# It installs what it needs from Debian's packages (multiarch: dpkg --add-architecture arm64,
# crossbuild-essential-arm64, qemu-user-static, the NAME:arm64 -dev libraries), so it runs as
# root. The CUDA back end is not cross built (no arm64 CUDA toolkit on amd64): build it on the
# Spark itself (docs/operating.md, "arm64 and the DGX Spark"). Exits non-zero when the build, a test or a
# package check fails.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(realpath -m "${1:-$here/build-arm64}")
results=$(realpath -m "${2:-$here/tests/packaging/results/arm64}")
jobs=${JOBS:-2}
# What was measured: the commit at the start, and whether tracked files differed from it.
commit=$(git -C "$here" rev-parse HEAD)
dirty=false
[ -z "$(git -C "$here" status --porcelain --untracked-files=no)" ] || dirty=true
step() { printf '\n== %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "cross-arm64.sh: run as root (it installs packages and registers qemu)" >&2; exit 2; }

step "Debian packages for an arm64 cross build"
dpkg --print-foreign-architectures | grep -qx arm64 || { dpkg --add-architecture arm64; apt-get update -qq; }
# libyaml-cpp-dev is not co-installable across architectures (Multi-Arch: no): its arm64 runtime
# comes from apt, its arm64 CMake files are unpacked under BUILD_DIR (below).
arm64_libs=(libssl-dev libssh-dev libyaml-cpp0.7 libspdlog-dev libfmt-dev libpcre2-dev libicu-dev libboost-dev)
want=(crossbuild-essential-arm64 qemu-user-static file "${arm64_libs[@]/%/:arm64}")
missing=()
for p in "${want[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-remove "${missing[@]}"
fi

extra="$build/arm64-extra"
if [ ! -f "$extra/usr/lib/aarch64-linux-gnu/cmake/yaml-cpp/yaml-cpp-config.cmake" ]; then
  step "unpacking libyaml-cpp-dev:arm64 into $extra"
  mkdir -p "$build/downloads" "$extra"
  (cd "$build/downloads" && apt-get download -qq libyaml-cpp-dev:arm64 2>/dev/null)
  dpkg-deb -x "$build"/downloads/libyaml-cpp-dev_*_arm64.deb "$extra"
  # Its CMake files name the library beside them; the library itself is the multiarch one.
  for f in libyaml-cpp.so libyaml-cpp.so.0.7 libyaml-cpp.so.0.7.0; do
    ln -sf /usr/lib/aarch64-linux-gnu/libyaml-cpp.so.0.7.0 "$extra/usr/lib/aarch64-linux-gnu/$f"
  done
  rm -f "$extra/usr/lib/aarch64-linux-gnu/libyaml-cpp.a"
fi

# Test scripts start the programs directly, so the kernel must hand arm64 ELF files to qemu.
binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/qemu-aarch64" ]; then
  step "registering qemu-aarch64-static with binfmt_misc"
  [ -e "$binfmt/register" ] || mount -t binfmt_misc binfmt_misc "$binfmt"
  # The ELF header of an aarch64 executable, and the mask of the bytes that must match;
  # F: the kernel opens the interpreter now, so it also works inside chroots.
  printf '%s' ':qemu-aarch64:M::\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00:\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-aarch64-static:F' \
    > "$binfmt/register"
fi

fresh=true
[ ! -f "$build/build.ninja" ] || fresh=false   # the build time below is a fresh build's or an incremental one's
launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
step "configuring $build (aarch64-linux-gnu, CUDA off)"
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_TOOLCHAIN_FILE="$here/cmake/toolchains/aarch64-linux-gnu.cmake" \
  -DCMAKE_PREFIX_PATH="$extra/usr" -DTANDEM_ARM64_EXTRA_PREFIX="$extra" -DTANDEM_CUDA=OFF \
  "${launcher[@]}" >/dev/null
t0=$(date +%s)
step "building with $jobs jobs"
cmake --build "$build" -j "$jobs"
build_s=$(( $(date +%s) - t0 ))

step "checking the binaries are arm64"
for b in controller/tandemctl agent/tandemd engine/tandem-serve; do
  file -b "$build/$b" | grep -q "ARM aarch64" || { echo "FAIL: $b is not an aarch64 program: $(file -b "$build/$b")" >&2; exit 1; }
done
"$build/controller/tandemctl" --version -o json

step "tests under qemu-user (tests without their own limit get 30 min: emulation is slower)"
t0=$(date +%s)
set +e
ctest --test-dir "$build" -j "$jobs" --timeout 1800 --output-on-failure --output-junit "$build/ctest-arm64.xml" \
  > "$build/ctest-arm64.log" 2>&1
test_rc=$?
set -e
test_s=$(( $(date +%s) - t0 ))
tail -n 40 "$build/ctest-arm64.log"

step "arm64 packages"
rm -f "$build"/*.deb "$build"/*.ddeb
(cd "$build" && cpack -G DEB >/dev/null)
pkg_rc=0
for d in "$build"/*.deb; do
  arch=$(dpkg-deb -f "$d" Architecture)
  [ "$arch" = arm64 ] || { echo "FAIL: $(basename "$d") is Architecture $arch" >&2; pkg_rc=1; }
done
lintian_errors=0
if command -v lintian >/dev/null 2>&1; then
  lintian_errors=$(lintian --no-tag-display-limit "$build"/*.deb 2>/dev/null | grep -c '^E:' || true)
  [ "$lintian_errors" -eq 0 ] || { lintian "$build"/*.deb | grep '^E:' >&2; pkg_rc=1; }
fi

step "results in $results"
mkdir -p "$results"
python3 - "$build" "$results" "$commit" "$dirty" "$fresh" "$build_s" "$test_s" "$lintian_errors" <<'PY'
import json, os, re, subprocess, sys, xml.etree.ElementTree as ET
build, results, commit, dirty, fresh, build_s, test_s, lintian_errors = sys.argv[1:]
root = ET.parse(os.path.join(build, "ctest-arm64.xml")).getroot()
cases = []
for c in root.iter("testcase"):
    status = c.get("status", "run")
    if c.find("failure") is not None: status = "fail"
    elif c.find("skipped") is not None or status == "disabled": status = "skip"
    elif status == "run": status = "pass"
    cases.append({"name": c.get("name"), "status": status, "seconds": float(c.get("time", 0))})
count = {s: sum(1 for c in cases if c["status"] == s) for s in ("pass", "fail", "skip")}
debs = []
for f in sorted(os.listdir(build)):
    if f.endswith((".deb", ".ddeb")):
        p = os.path.join(build, f)
        arch = subprocess.run(["dpkg-deb", "-f", p, "Architecture"], capture_output=True, text=True).stdout.strip()
        debs.append({"file": f, "architecture": arch, "bytes": os.path.getsize(p)})
doc = {"commit": commit, "dirty": dirty == "true", "target": "aarch64-linux-gnu", "emulator": "qemu-aarch64-static",
       "build_seconds": int(build_s), "fresh_build": fresh == "true", "test_seconds": int(test_s), "tests": count,
       "failed": [c["name"] for c in cases if c["status"] == "fail"],
       "skipped": [c["name"] for c in cases if c["status"] == "skip"],
       "packages": debs, "lintian_errors": int(lintian_errors)}
json.dump(doc, open(os.path.join(results, "results.json"), "w"), indent=1)
with open(os.path.join(results, "results.md"), "w") as md:
    md.write(f"# arm64 cross build at {commit[:7]}{' (with uncommitted changes)' if dirty == 'true' else ''}\n\n`deploy/cross-arm64.sh`: aarch64-linux-gnu-g++ 12, Debian 12 multiarch libraries, "
             f"tests under qemu-aarch64-static on an amd64 host.\n\n")
    md.write("| step | result |\n|---|---|\n")
    md.write(f"| build (2 jobs, {'fresh' if fresh == 'true' else 'incremental'}) | {build_s} s |\n")
    md.write(f"| ctest under qemu | {count['pass']} passed, {count['fail']} failed, {count['skip']} skipped, {test_s} s |\n")
    for d in debs:
        md.write(f"| {d['file']} | Architecture {d['architecture']}, {d['bytes']/1e6:.1f} MB |\n")
    md.write(f"| lintian | {lintian_errors} errors |\n")
    if doc["failed"]: md.write("\nFailed: " + ", ".join(doc["failed"]) + "\n")
    if doc["skipped"]: md.write("\nSkipped (each says why in ctest's log): " + ", ".join(doc["skipped"]) + "\n")
print(open(os.path.join(results, "results.md")).read())
PY
[ "$test_rc" -eq 0 ] || { echo "FAIL: tests under qemu (log: $build/ctest-arm64.log)" >&2; exit 1; }
[ "$pkg_rc" -eq 0 ] || { echo "FAIL: package checks" >&2; exit 1; }
echo "arm64: build, tests and packages OK"
