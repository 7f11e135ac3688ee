#!/usr/bin/env bash
# serve_from_plan.sh TANDEMCTL TANDEM_SERVE MANIFEST NODE REGEX...
# Takes the exact engine command line `tandemctl plan` shows for NODE (its `run:` line, quoted for a
# POSIX shell), runs the built tandem-serve with it plus --print-config, and checks that it exits 0
# and that its JSON matches every REGEX. Proves the displayed, executed and parsed argv agree.
set -u
tandemctl=$1 serve=$2 manifest=$3 node=$4
shift 4
patterns=("$@")
plan=$("$tandemctl" plan "$manifest") || { echo "FAIL: tandemctl plan $manifest failed"; exit 1; }
run=$(awk -v node="$node" '
  /^ *[0-9]+\. / { cur = ($2 == node) }
  cur && /action: engine.start$/ { found = 1 }
  found && /^ +run: / { sub(/^ +run: /, ""); print; exit }' <<<"$plan")
if [ -z "$run" ]; then
  echo "FAIL: no engine.start 'run:' line for $node in the plan"
  echo "$plan"
  exit 1
fi
eval "set -- $run"
shift  # the installed binary path; run the one just built instead
out=$("$serve" "$@" --print-config 2>&1)
rc=$?
fail=0
[ $rc = 0 ] || { echo "FAIL: tandem-serve exited $rc"; fail=1; }
for re in "${patterns[@]+"${patterns[@]}"}"; do
  grep -Eq -- "$re" <<<"$out" || { echo "FAIL: --print-config output does not match: $re"; fail=1; }
done
if [ $fail != 0 ]; then echo "--- run: $run"; echo "--- output:"; echo "$out"; fi
exit $fail
