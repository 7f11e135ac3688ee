#!/usr/bin/env bash
# llama.cpp as a peer on the benchmark model (issue 22): the glm4_moe_lite checkpoint written as a
# deepseek2 GGUF (engine/bench/llamacpp_gguf.py, bf16), then llama-bench: prompt processing of
# PROMPT tokens and DECODE tokens generated at batch 1, every layer on the GPU, flash attention on
# and off, REPEAT runs each. llama-bench's tg test decodes from an empty context, tandem-bench-cuda's
# after a PROMPT-token prompt: not like for like in context length (said in the table).
# Usage: gpu-llamacpp.sh LLAMA_DIR MODEL_DIR OUT
#   LLAMA_DIR: llama-bench and its shared libraries (bin/, lib/), and the snapshot's gguf-py/
#   (deploy/llamacpp-pack.sh packs them from a build on the nvcc machine)
# Writes OUT/model.gguf (removed at the end), OUT/llamacpp-fa{0,1}.json, OUT/llamacpp.md.
# Exits non-zero when the conversion or a benchmark fails.
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: $0 LLAMA_DIR MODEL_DIR OUT" >&2; exit 2; }
dir=$(cd "$1" && pwd) model=$2 out=$3
prompt=${PROMPT:-512} decode=${DECODE:-128} repeat=${REPEAT:-3} ngl=${NGL:-99}
mkdir -p "$out"
export LD_LIBRARY_PATH=$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python=${PYTHON:-python3}
if ! PYTHONPATH=$dir/gguf-py "$python" "$(dirname "$0")/llamacpp_gguf.py" "$model" "$out/model.gguf"; then
  echo "gpu-llamacpp: converting $model failed"; exit 1
fi
failed=0
for fa in 1 0; do
  if ! timeout 300 "$dir/bin/llama-bench" -m "$out/model.gguf" -ngl "$ngl" -fa "$fa" -p "$prompt" -n "$decode" -r "$repeat" \
       -o json > "$out/llamacpp-fa$fa.json" 2> "$out/llamacpp-fa$fa.log"; then
    echo "gpu-llamacpp: llama-bench -fa $fa failed: $(tail -3 "$out/llamacpp-fa$fa.log")"; failed=1
  fi
done
"$python" - "$out" "$prompt" "$decode" <<'PY' | tee "$out/llamacpp.md"
import json, os, sys
out, prompt, decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("| llama.cpp test | flash attention | tok/s (mean +- sd) | build | backend |")
print("|---|---|---|---|---|")
for fa in (1, 0):
    path = os.path.join(out, f"llamacpp-fa{fa}.json")
    try:
        rows = json.load(open(path))
    except (OSError, ValueError):
        print(f"| (no result) | {fa} | | | |")
        continue
    for r in rows:
        test = f"pp{r['n_prompt']}" if r["n_gen"] == 0 else f"tg{r['n_gen']} (batch 1, from an empty context)"
        print(f"| {test} | {fa} | {r['avg_ts']:.1f} +- {r['stddev_ts']:.1f} | {r['build_commit']} | {r['backends']} |")
PY
rm -f "$out/model.gguf"
exit $failed
