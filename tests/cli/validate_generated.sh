#!/usr/bin/env bash
# validate_generated.sh KIND TANDEMCTL [VALIDATE ARGS]...
# Makes a hostile "manifest" of KIND in a fresh temporary directory, runs `tandemctl validate` on it
# under a 10 s timeout (so a regression that blocks or reads without end fails instead of hanging),
# removes the directory and exits with tandemctl's status (124 when it timed out).
#   fifo  a named pipe nobody writes to        deep  100,000 nested '['
#   nul   a manifest line with a NUL byte      big   one byte over the 1 MiB cap
set -u
kind=$1 ctl=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
file=$dir/$kind.yaml
case "$kind" in
  fifo) mkfifo "$file" ;;
  deep) head -c 100000 /dev/zero | tr '\0' '[' >"$file" ;;
  nul) printf 'apiVersion: tandem/v1\nkind: B\000ind\n' >"$file" ;;
  big) { echo "apiVersion: tandem/v1"; head -c 1048554 /dev/zero | tr '\0' '#'; echo; } >"$file" ;;
  *) echo "validate_generated.sh: unknown kind '$kind'" >&2; exit 2 ;;
esac
timeout 10 "$ctl" validate "$@" "$file"
