#!/usr/bin/env bash
# gpu_check's command line, which needs no device: --list names every group, one a line (the
# scripts that run each group in a process of its own read it), and a group name that is no
# group is refused with exit 2 and a message naming it, before any device work.
#   gpu_check_cli.sh PATH-TO-gpu_check
set -u
bin=${1:?usage: gpu_check_cli.sh GPU_CHECK}
list=$("$bin" --list) || { echo "FAIL: --list exited $?"; exit 1; }
for g in elementwise quant moe_grouped moe_grouped_small kda_chunk_few quant_grouped quant_grouped_small mla_split mla_flash mla_flash_small quant_mma quant_mma_small moe_f32; do
  grep -qx "$g" <<<"$list" || { echo "FAIL: --list lacks $g:"; echo "$list"; exit 1; }
done
out=$("$bin" quant nosuchgroup 2>&1)
rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: an unknown group exited $rc, not 2: $out"; exit 1; }
grep -q "no group named 'nosuchgroup'" <<<"$out" || { echo "FAIL: no message naming the group: $out"; exit 1; }
echo "PASS: --list names $(wc -l <<<"$list") groups; an unknown group is refused"
