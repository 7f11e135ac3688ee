#!/usr/bin/env bash
# expect.sh RC [-e REGEX]... [-n REGEX]... -- COMMAND [ARGS]...
# Runs COMMAND; passes when it exits with RC, its output (stdout and stderr together) matches every
# -e extended regex and none of the -n ones. Prints the output on failure.
set -u
want_rc=$1
shift
must=()
mustnt=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    -e) must+=("$2"); shift 2 ;;
    -n) mustnt+=("$2"); shift 2 ;;
    *) echo "expect.sh: bad argument '$1'" >&2; exit 2 ;;
  esac
done
shift  # --
out=$("$@" 2>&1)
rc=$?
fail=0
if [ "$rc" != "$want_rc" ]; then
  echo "FAIL: exit status $rc, expected $want_rc"
  fail=1
fi
for re in "${must[@]+"${must[@]}"}"; do
  if ! grep -Eq -- "$re" <<<"$out"; then echo "FAIL: output does not match: $re"; fail=1; fi
done
for re in "${mustnt[@]+"${mustnt[@]}"}"; do
  if grep -Eq -- "$re" <<<"$out"; then echo "FAIL: output matches (it must not): $re"; fail=1; fi
done
if [ $fail != 0 ]; then
  echo "--- command: $*"
  echo "--- output:"
  echo "$out"
fi
exit $fail
