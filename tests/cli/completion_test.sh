#!/usr/bin/env bash
# completion_test.sh SCRIPT BINDIRS (colon-separated): drives deploy/completions/tandem.bash as bash would (COMP_WORDS,
# COMP_CWORD) against the built programs in BINDIRS, and checks what it offers.
set -u
script=$1
export PATH="$2:$PATH"
# shellcheck disable=SC1090
source "$script"
fail=0
offers() {  # offers WANT WORD... : completing the last WORD must offer WANT
  local want=$1
  shift
  COMP_WORDS=("$@")
  COMP_CWORD=$(($# - 1))
  COMPREPLY=()
  _tandem_complete
  if ! printf '%s\n' "${COMPREPLY[@]}" | grep -qx -- "$want"; then
    echo "FAIL: '$*' offers [${COMPREPLY[*]}], not '$want'"
    fail=1
  fi
}
offers plan tandemctl pl
offers validate tandemctl va
offers init tandemctl pki i
offers --output tandemctl validate --ou
offers --log-level tandemctl --log
offers debug tandemctl --log-level d
offers json tandemctl plan -o j
offers serve tandemd se
offers --moe-backend tandem-serve --moe
exit $fail
