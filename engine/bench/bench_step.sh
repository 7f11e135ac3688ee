# Sourced by the GPU speed scripts (gpu-peers.sh, gpu-real-shape.sh): step NAME COMMAND... runs the
# command and, when it fails, appends "NAME (exit N)" to the caller's failed array and says so, so
# that one failed measurement neither stops the run nor is lost from its exit status.
step() {
  local name=$1 rc
  shift
  "$@"
  rc=$?
  [ "$rc" -eq 0 ] || { failed+=("$name (exit $rc)"); echo "!! $name failed: exit $rc"; }
  return "$rc"
}
