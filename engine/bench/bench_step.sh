# Sourced by the GPU speed scripts (gpu-peers.sh, gpu-real-shape.sh). step NAME COMMAND... runs the
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

# finish REPORT.py: the report (REPORT.py $out) into $out/table.md and printed, then the failed
# steps and exit 1, or "all steps passed".
finish() {
  echo "## report ($SECONDS s)"
  step report python3 "$1" "$out" > "$out/table.md"  # (no pipe: step must run in this shell)
  cat "$out/table.md"
  echo "total $SECONDS s"
  if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}"
    exit 1
  fi
  echo "all steps passed"
}
