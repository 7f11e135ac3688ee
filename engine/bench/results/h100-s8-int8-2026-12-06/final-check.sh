#!/usr/bin/env bash
# Final check of main after the integrated call: the parts changed since (quant_pairs_f32 on
# grid.x, the quantised-stack rule of prefill, glm5_next's fp32 default for quantised weights).
cd "$(dirname "$0")/.." || exit 1
tar xJf build-deps/fin.tar.xz -C /tmp || exit 1
B=/tmp/fin; O=$OUT/fin; mkdir -p "$O"; FX=tests/model/fixtures
export PATH=/usr/local/cuda/bin:$PATH LD_LIBRARY_PATH=/usr/local/cuda/lib64
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$O/card.txt"; echo "binaries: $(cat $B/COMMIT)" | tee -a "$O/card.txt"
fails=0
run() {  # NAME CAP [VAR=value ...] COMMAND...
  local name=$1 cap=$2 envs=() t0=$SECONDS; shift 2
  while [[ $1 == *=* ]]; do envs+=("$1"); shift; done
  env "${envs[@]}" timeout "$cap" "$@" >"$O/$name.txt" 2>&1; local rc=$?
  echo "$name: exit $rc, $((SECONDS - t0)) s: $(grep -v '^\s*$' "$O/$name.txt" | tail -1 | cut -c1-140)"
  [ $rc = 0 ] || fails=$((fails + 1))
}
run gpu_check.quant 60 $B/gpu_check quant quant_grouped gemm moe
grep -E "FAIL" "$O/gpu_check.quant.txt" | head -5
run glm5_next_cuda_check 40 $B/glm5_next_cuda_check $FX
grep -E "FAIL|products|every product" "$O/glm5_next_cuda_check.txt" | head -8 | cut -c1-160
run glm5_next_cuda_check.token-kda 40 TANDEM_KDA_CHUNK=0 $B/glm5_next_cuda_check $FX
run cuda_model_check 40 $B/cuda_model_check $FX
run cuda_spec_check 40 $B/cuda_spec_check models/dflash-pair
run memcheck.glm5-quant 45 compute-sanitizer --tool memcheck --error-exitcode 9 $B/glm5_next_cuda_check $FX --only-quantised glm5_next_text_sparse:nvfp4
echo "done at $SECONDS s; failed: $fails"
cd "$OUT" && tar czf fin.tgz fin
[ $fails = 0 ]
