# shellcheck shell=bash disable=SC2034,SC2154
# Shared by the call scripts beside it (sourced): the environment, the card line, the two ways a
# step runs: `check` (a failure fails the call) and `bench` (a tandem-bench-cuda timing; a failure
# is listed), the compiled transformers peer and the call's end. Expects `here` (the bundle folder)
# and `budget` (benchmarks start only before it); FX is for the scripts.
B=$here/bin; O=$OUT/int9; mkdir -p "$O"
FX=tests/model/fixtures
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
failed=(); slow=()
pack() { (cd "$OUT" && tar czf int9.tgz int9); }
# Cut off by the call's limit: keep what was written (the run tool brings back only a few files).
trap 'pack; exit 124' TERM INT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$O/card.txt"
echo "binaries built at $(cat "$here/COMMIT")" | tee -a "$O/card.txt"
check() {  # check NAME SECONDS [VAR=value ...] COMMAND...
  local name=$1 limit=$2 t0=$SECONDS envs=(); shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$limit" "$@" >"$O/$name.txt" 2>&1; local rc=$?
  printf '%-36s exit %3d %4d s  %s\n' "$name" "$rc" $((SECONDS - t0)) "$(grep -v '^\s*$' "$O/$name.txt" | tail -1 | cut -c1-110)"
  [ "$rc" -eq 0 ] || failed+=("$name")
}
kernel_group() {  # kernel_group GROUP PATTERN: gpu_check GROUP (its rows matching PATTERN shown), then under memcheck
  check "gpu_check_$1" 60 "$B/gpu_check" "$1"
  grep -E "$2|FAIL|passed|failed" "$O/gpu_check_$1.txt" | cut -c1-200 | tail -30
  check "gpu_check_$1_memcheck" 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/gpu_check" "$1"
  grep -E "ERROR SUMMARY" "$O/gpu_check_$1_memcheck.txt" | tail -1
}
bench() {  # bench NAME SECONDS MODEL [VAR=value ...] -- FLAGS...
  local name=$1 limit=$2 model=$3 t0=$SECONDS envs=(); shift 3
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  if [ $SECONDS -ge "$budget" ]; then echo "## $name: skipped (at $SECONDS s)"; slow+=("$name"); return; fi
  env "${envs[@]}" timeout "$limit" "$B/tandem-bench-cuda" "$model" --modes graphs --json "$O/$name.json" "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  echo "## $name (exit $rc, $((SECONDS - t0)) s): ${envs[*]} $*"
  grep -E "^prefill|^\| [0-9]+ \| graphs|moe experts|flash prefill|paged attention|\*\*sum|tandem-bench-cuda:" "$O/$name.txt" | cut -c1-160
  [ "$rc" -eq 0 ] || slow+=("$name")
}
# compiled_peer MODEL LENGTHS [NAME]: transformers compiled (static cache, reduce-overhead), prefill
# only (its decode crashes in the cudagraph step), on hf_bench.py's model, while time is left;
# output in NAME.json / .txt (default hf-compiled).
compiled_peer() {
  local name=${3:-hf-compiled}
  [ $SECONDS -lt "$budget" ] || { echo "## transformers compiled $2: skipped (at $SECONDS s)"; return; }
  timeout $((560 - SECONDS)) python3 engine/bench/hf_bench.py --write "$1" --json "$O/$name.json" --batches none \
    --prefill "$2" --compile >"$O/$name.txt" 2>&1
  echo "## transformers compiled $2, prefill only (exit $?)"; grep -E "^prefill|FAILED" "$O/$name.txt" | cut -c1-200
}
# finish MODEL: remove the model, say what failed, pack the output; the call's status is the checks'.
finish() {
  rm -rf "$1"
  echo "done at $SECONDS s; checks failed: ${failed[*]:-none}; timings not finished: ${slow[*]:-none}"
  pack
  [ ${#failed[@]} -eq 0 ]
}
