#!/bin/bash
# deploy/hashbench-pack.sh BUILD OUT.tar.xz: tandem-hash-bench as a self-contained bundle for
# another machine (the GPU host of a device run): the bench linked against static OpenSSL and
# yaml-cpp, the shared libraries it still needs and this machine's loader beside it, and run.sh,
# which makes a tree of 2 files per core (512 MiB each) and writes hash.json + hash.md under
# ${1:-$OUT/hash}. Run there: tar xJf OUT.tar.xz -C /tmp && /tmp/hashbench/run.sh
set -euo pipefail
BUILD=$(cd "$1" && pwd)
DEST=$(realpath -m "$2")
ninja -C "$BUILD" tandem-hash-bench >/dev/null
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
P=$W/hashbench
mkdir -p "$P/lib"
# The link line ninja used, with the static archives where they exist.
link=$(ninja -C "$BUILD" -t commands agent/tandem-hash-bench | tail -1 | sed -e 's/^: && //' -e 's/ && :$//')
link=${link/libcrypto.so/libcrypto.a}
link=${link/libyaml-cpp.so.0.7.0/libyaml-cpp.a}
link=${link/-o agent\/tandem-hash-bench/-o $P/tandem-hash-bench}
(cd "$BUILD" && eval "$link -ldl -lpthread -s")
for l in $(ldd "$P/tandem-hash-bench" | awk '/=>/ {print $3} /ld-linux/ {print $1}'); do cp -L "$l" "$P/lib/"; done
strip "$P/lib/"* 2>/dev/null || true
cat > "$P/run.sh" <<'EOF'
#!/bin/sh
# Hash throughput of this node (issue 27: >= 1.5 GB/s per node, multi-threaded), self-contained:
# the bench and the libraries it was built with, run through their own loader so the host's C
# library does not matter. Writes hash.json and hash.md under $1 (default $OUT/hash) and prints
# the table. The tree: 2 files per core, 512 MiB each (warm page cache: the CPU's rate).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-${OUT:-/tmp}/hash}
mkdir -p "$out"
cores=$(nproc)
tree=${HASHBENCH_TREE:-/tmp/hashbench-tree}
rm -rf "$tree"
bench() { "$here/lib/ld-linux-x86-64.so.2" --library-path "$here/lib" "$here/tandem-hash-bench" "$@"; }
bench "$tree" --make "$((2 * cores)):512" > /dev/null   # write the tree (and warm the cache)
{ echo "# hash throughput, $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo; echo '```'; bench "$tree" --json-out "$out/hash.json"; echo '```'; } > "$out/hash.md"
cat "$out/hash.md"
rm -rf "$tree"
EOF
chmod +x "$P/run.sh"
mkdir -p "$(dirname "$DEST")"
tar -C "$W" -cJf "$DEST" hashbench
ls -la "$DEST"
