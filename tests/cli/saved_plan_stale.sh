#!/usr/bin/env bash
# saved_plan_stale.sh TANDEMCTL SEED_MANIFEST WORKDIR
# `tandemctl plan M --out P` then `tandemctl bind P`: while M is unchanged bind gets past the plan
# check (and stops later, at the missing PKI of this test); once a node's address changed, bind
# refuses the plan with exit 1, names the node, the field and both values, and touches nothing.
set -u
ctl=$1 seed=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
cp "$seed" "$work/m.yaml"
fail() { echo "FAIL: $*"; echo "--- output:"; cat "$work/out"; exit 1; }

"$ctl" plan "$work/m.yaml" --out "$work/p.json" > "$work/out" 2>&1 || fail "plan --out exited $?"
grep -q "^Saved to $work/p.json; run exactly this plan with \`tandemctl bind $work/p.json\`\.$" "$work/out" || fail "no 'Saved to' line"
grep -q '"tandem_saved_plan": 1' "$work/p.json" || fail "p.json is not a saved plan"

"$ctl" bind "$work/p.json" --pki-dir "$work/no-pki" --state-dir "$work/state" > "$work/out" 2>&1
rc=$?
[ $rc = 3 ] || fail "bind of a fresh plan exited $rc, expected 3 (no PKI here)"
grep -q "no longer matches" "$work/out" && fail "a fresh plan was called stale"

sed -i 's/address: 10.0.0.2/address: 10.0.0.9/' "$work/m.yaml"
"$ctl" bind "$work/p.json" --pki-dir "$work/no-pki" --state-dir "$work/state2" > "$work/out" 2>&1
rc=$?
[ $rc = 1 ] || fail "bind of a stale plan exited $rc, expected 1"
grep -q "the saved plan $work/p.json no longer matches $work/m.yaml; nothing was run" "$work/out" || fail "no refusal"
grep -q "^  - manifest $work/m.yaml: sha256 was " "$work/out" || fail "the digest change is not named"
grep -q "^  - node spark2: address was 10.0.0.2, is now 10.0.0.9$" "$work/out" || fail "the node change is not named"
[ ! -e "$work/state2" ] || fail "a refused plan created state"
echo "ok"
