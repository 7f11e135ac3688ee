#!/usr/bin/env bash
# Runs every fuzz target of a TANDEM_FUZZ build for a bounded time, each on a fresh copy of its
# committed seed corpus (fuzz/corpus/<name>), one after the other (one core), then prints a table
# and writes results.json and results.md. Exits non-zero when any target found a crash, a leak,
# a timeout or ran out of memory; the reproducer is kept under OUT_DIR/artifacts/<name>/.
#
#   fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [OUT_DIR]
#
# BUILD_DIR is the fuzz build dir (its fuzz/ holds the *_fuzz binaries); OUT_DIR defaults to
# BUILD_DIR/fuzz-run. FUZZ_TARGETS="a b" runs only those; FUZZ_CPU=N pins the runs to core N.
# FUZZ_SEED=N fixes libFuzzer's seed: a run is then the same search every time on the same build
# (a longer or faster run only goes further along it), so a verdict can be reproduced; unset, each
# run explores from a fresh random seed.
set -euo pipefail

if [ $# -lt 2 ] || [ $# -gt 3 ]; then
  echo "usage: fuzz/run.sh BUILD_DIR SECONDS_PER_TARGET [OUT_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
seconds=$2
out=${3:-$build/fuzz-run}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
case "$seconds" in ''|*[!0-9]*) echo "fuzz/run.sh: SECONDS_PER_TARGET must be a whole number, not '$seconds'" >&2; exit 2 ;; esac

targets=${FUZZ_TARGETS:-$(cd "$here/corpus" && ls -d -- */ | tr -d /)}
pin=()
[ -n "${FUZZ_CPU:-}" ] && pin=(taskset -c "$FUZZ_CPU")
seed=()
if [ -n "${FUZZ_SEED:-}" ]; then
  case "$FUZZ_SEED" in ''|*[!0-9]*|0|0*) echo "fuzz/run.sh: FUZZ_SEED must be a whole number from 1 (libFuzzer reads 0 as 'random'), not '$FUZZ_SEED'" >&2; exit 2 ;; esac
  seed=(-seed="$FUZZ_SEED")
fi

# The commit the binaries are meant to match, taken before the run (commits made during it do not count).
commit=$(git -C "$here" rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$here" status --porcelain 2>/dev/null | grep -q . && echo true || echo false)

rm -rf "$out"
mkdir -p "$out/tmp"
# The journal and safetensors targets write their input to a file per run: keep that in OUT_DIR.
export TMPDIR="$out/tmp"
# UB aborts (the build has -fno-sanitize-recover); stack traces make a CI log enough to start on.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

# The last "cov:" / "ft:" figures libFuzzer printed, and one of its final stats.
last_field() { grep -Eo "$1: *[0-9]+" "$2" | tail -1 | grep -Eo '[0-9]+$' || echo 0; }
stat() { grep -E "^stat::$1:" "$2" | tail -1 | grep -Eo '[0-9]+$' || echo 0; }

json_rows=()
table="| target | runs | exec/s | coverage | features | corpus (seeds -> end) | crashes |"
table+=$'\n'"|---|---:|---:|---:|---:|---:|---:|"
failed=0
for t in $targets; do
  bin="$build/fuzz/${t}_fuzz"
  if [ ! -x "$bin" ]; then
    echo "fuzz/run.sh: no binary $bin (build the fuzz dir first)" >&2
    exit 2
  fi
  work="$out/corpus/$t"
  art="$out/artifacts/$t"
  mkdir -p "$work" "$art"
  cp -- "$here/corpus/$t"/* "$work/"
  seeds=$(ls "$work" | wc -l)
  log="$out/$t.log"
  printf '== %s: %ss on %s seeds%s\n' "$t" "$seconds" "$seeds" "${FUZZ_SEED:+, libFuzzer seed $FUZZ_SEED}"
  rc=0
  "${pin[@]}" "$bin" "${seed[@]}" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$art/" "$work" >"$log" 2>&1 || rc=$?
  runs=$(stat number_of_executed_units "$log")
  eps=$(stat average_exec_per_sec "$log")
  cov=$(last_field cov "$log")
  ft=$(last_field ft "$log")
  end=$(ls "$work" | wc -l)
  crashes=$(find "$art" -type f | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi  # died before writing an artifact
  if [ "$crashes" -ne 0 ]; then
    failed=1
    echo "!! $t: exit $rc, reproducer(s): $(find "$art" -type f | tr '\n' ' ')" >&2
    tail -n 40 "$log" >&2
  fi
  table+=$'\n'"| $t | $runs | $eps | $cov | $ft | $seeds -> $end | $crashes |"
  json_rows+=("{\"target\":\"$t\",\"seconds\":$seconds,\"runs\":$runs,\"exec_per_s\":$eps,\"coverage\":$cov,\"features\":$ft,\"seeds\":$seeds,\"corpus\":$end,\"crashes\":$crashes,\"exit\":$rc}")
done

{
  printf '{"commit":"%s","dirty":%s,"date":"%s","seconds_per_target":%s,"seed":%s,"targets":[' \
    "$commit" "$dirty" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$seconds" "${FUZZ_SEED:-null}"
  (IFS=,; printf '%s' "${json_rows[*]}")
  printf ']}\n'
} >"$out/results.json"
printf '%s\n' "$table" >"$out/results.md"
printf '\n%s\n\ncommit %s%s; results in %s\n' "$table" "$commit" "$([ "$dirty" = true ] && echo ' (with local changes)')" "$out"
exit "$failed"
