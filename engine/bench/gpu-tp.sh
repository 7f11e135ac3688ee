#!/usr/bin/env bash
# GPU tensor parallelism on one GPU (issue 20), from the repository root of the GPU machine:
#   engine/bench/gpu-tp.sh BUNDLE OUT
# BUNDLE holds cuda_tp_check and serve/ (tandem-serve and its libraries), as packed by
# deploy/gpu-prepare.sh --tp; OUT gets the logs, tp.json and tp.md. Two ranks share the GPU, so the
# rendezvous picks the host-staged transport by itself (same GPU UUID; --tp-transport auto).
#   1. each fixture (glm4_moe_lite, its variant, glm4_moe, glm5_next_text, the sparse one; and the
#      DFlash pair's target) at TP2 vs TP1: logits within the CUDA bar (1e-2), greedy tokens
#      identical (cuda_tp_check; a differing row is listed with TP1's top-two gap), and the per-step
#      cost of the host-staged all-reduce at batch 1 and 16 (a test transport: TCP through the host)
#   2. compute-sanitizer memcheck of both ranks (when the machine has it), per TP_MEMCHECK model
#   3. kill -9 of either rank of cuda_tp_check mid-decode (TP_KILL models): the other ends within
#      10 s with an error naming the lost peer
#   4. tandem-serve --device cuda: worker then head, greedy completion equal to one rank's; kill -9
#      of either rank mid-decode ends the other within 10 s, naming the lost peer (TP_SERVE=0: skipped)
# TP_MODELS, TP_MEMCHECK and TP_KILL (space-separated model directories) narrow a run to some fixtures.
# Two GPUs (the NCCL run, a separate issue): TP_GPUS="0 1" puts rank r of the checks on GPU r
# (CUDA_VISIBLE_DEVICES), and the rendezvous then picks NCCL (distinct UUIDs).
# Exits non-zero when any check fails.
set -u
bundle=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
check=$bundle/cuda_tp_check
serve=$bundle/serve/tandem-serve
export LD_LIBRARY_PATH=$bundle/serve/lib:${LD_LIBRARY_PATH:-}
failures=0
results=()
note() { echo "$*" | tee -a "$out/tp.md"; }
ended_within() {  # pid seconds -> 0 when it exited in time
  for _ in $(seq 1 $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  return 1
}
fail() { note "FAIL $*"; failures=$((failures + 1)); }
port=29700
finish() {  # tp.json: the timing runs and the summary
  python3 - "$out" <<'EOF'
import glob, json, os, sys
out = sys.argv[1]
runs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*.tp[12].json")))}
json.dump({"runs": runs, "summary": open(os.path.join(out, "tp.md")).read()}, open(os.path.join(out, "tp.json"), "w"), indent=2)
EOF
}
read -r -a gpus <<< "${TP_GPUS:-}"
on() {  # rank command...: the rank's GPU when TP_GPUS names one
  local r=$1
  shift
  if [ -n "${gpus[$r]:-}" ]; then CUDA_VISIBLE_DEVICES=${gpus[$r]} "$@"; else "$@"; fi
}

: > "$out/tp.md"
note "# GPU tensor parallelism on one GPU ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1))"
note ""
note "| model | TP2 vs TP1 logits, teacher-forced (worst rel. error) | greedy token per row = TP1's (+ at TP1 near-ties) | free-running greedy identical | transport | step ms TP1 b1/b16 | step ms TP2 b1/b16 | all-reduce ms/step b1/b16 |"
note "|---|---|---|---|---|---|---|---|"
glm5=(tests/model/fixtures/glm5_next_text tests/model/fixtures/glm5_next_text_sparse)
read -r -a models <<< "${TP_MODELS:-tests/model/fixtures/glm4_moe_lite tests/model/fixtures/glm4_moe_lite_variant tests/model/fixtures/glm4_moe ${glm5[*]} models/dflash-pair/target}"
for m in "${models[@]}"; do
  name=$(echo "$m" | tr '/' '_')
  port=$((port + 1))
  "$check" --model "$m" --ranks 1 --out "$out/$name.tp1.bin" --timing "$out/$name.tp1.json" > "$out/$name.tp1.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then fail "$m TP1 run (rc $rc): $(tail -3 "$out/$name.tp1.log")"; continue; fi
  on 1 "$check" --model "$m" --ranks 2 --rank 1 --port $port --transport auto --reference "$out/$name.tp1.bin" > "$out/$name.rank1.log" 2>&1 &
  w=$!
  on 0 "$check" --model "$m" --ranks 2 --rank 0 --port $port --transport auto --reference "$out/$name.tp1.bin" \
    --timing "$out/$name.tp2.json" > "$out/$name.rank0.log" 2>&1
  rc0=$?
  wait $w
  rc1=$?
  cat "$out/$name.rank0.log"
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then fail "$m TP2 (rank 0 rc $rc0, rank 1 rc $rc1): $(grep -h -E 'FAIL|error|rank' "$out/$name.rank0.log" "$out/$name.rank1.log" | tail -4)"; fi
  if [ -f "$out/$name.tp2.json" ]; then
    note "$(python3 - "$out/$name.tp1.json" "$out/$name.tp2.json" "$m" <<'EOF'
import json, sys
a, b, m = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
f = lambda d, k: "%.3f" % d[k] if k in d else "-"
print("| %s | %.2e | %d / %d (+%d) | %d / %d | %s | %s / %s | %s / %s | %s / %s |" % (
    m, b.get("worst_relative_error", float("nan")), b.get("rows_greedy_agree", 0), b.get("rows", 0), b.get("rows_near_tie", 0),
    b.get("free_running_identical", 0), b.get("tokens", 0), b["transport"].split(" (")[0],
    f(a["batch_1"], "decode_step_ms"), f(a["batch_16"], "decode_step_ms"), f(b["batch_1"], "decode_step_ms"),
    f(b["batch_16"], "decode_step_ms"), f(b["batch_1"], "all_reduce_ms_per_step"), f(b["batch_16"], "all_reduce_ms_per_step")))
EOF
)"
  fi
done
note ""

# Memcheck: both ranks of each TP_MEMCHECK model under compute-sanitizer, checks only.
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
read -r -a memcheck <<< "${TP_MEMCHECK:-tests/model/fixtures/glm4_moe_lite ${glm5[*]}}"
for m in "${memcheck[@]}"; do
  [ -n "$sanitizer" ] || { note "memcheck: compute-sanitizer is not on this machine"; break; }
  name=$(echo "$m" | tr '/' '_')
  port=$((port + 1))
  "$sanitizer" --tool memcheck --error-exitcode 9 "$check" --model $m --ranks 2 --rank 1 --port $port --steps 3 --time 0 > "$out/memcheck.$name.rank1.log" 2>&1 &
  w=$!
  "$sanitizer" --tool memcheck --error-exitcode 9 "$check" --model $m --ranks 2 --rank 0 --port $port --steps 3 --time 0 > "$out/memcheck.$name.rank0.log" 2>&1
  rc0=$?
  wait $w
  rc1=$?
  if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]; then note "memcheck ($m, TP2 host-staged, both ranks): clean ($(grep -h 'ERROR SUMMARY' "$out"/memcheck.$name.rank*.log | tr '\n' ' '))"
  else fail "memcheck $m (rank 0 rc $rc0, rank 1 rc $rc1): $(grep -h 'ERROR SUMMARY\|Invalid\|error' "$out"/memcheck.$name.rank*.log | head -4)"; fi
done

# kill -9 of either rank of the check mid-decode: the other rank's step fails on the lost link and
# it exits (3) within 10 s, its message naming the peer ("rank 0 at ..." / "rank 1 at ...").
read -r -a killed <<< "${TP_KILL-${glm5[*]}}"
for m in "${killed[@]}"; do
  name=$(echo "$m" | tr '/' '_')
  for victim in 1 0; do
    port=$((port + 1))
    other=$((1 - victim))
    klog() { echo "$out/kill.$name.$victim.rank$1.log"; }
    pids=()
    for r in 1 0; do  # env execs the check, so the pid is the rank's own
      env ${gpus[$r]:+CUDA_VISIBLE_DEVICES=${gpus[$r]}} "$check" --model "$m" --ranks 2 --rank $r --port $port --time 0 --hold 60 \
        > "$(klog $r)" 2>&1 &
      pids[$r]=$!
    done
    for _ in $(seq 1 300); do  # both ranks decoding (at most 30 s)
      grep -q "decoding until killed" "$(klog 0)" && grep -q "decoding until killed" "$(klog 1)" && break
      sleep 0.1
    done
    sleep 0.3
    kill -9 "${pids[$victim]}"
    t0=$(date +%s.%N)
    if ended_within "${pids[$other]}" 10; then
      took=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
      wait "${pids[$other]}"
      rc=$?
      said=$(grep -m1 "decoding ended" "$(klog $other)" | cut -c1-260)
      if [ $rc -eq 3 ] && echo "$said" | grep -q "rank $victim at"; then note "kill -9 of rank $victim of $m mid-decode: rank $other ended after ${took} s (rc 3): $said"
      else fail "kill -9 of rank $victim of $m: rank $other ended (rc $rc) without naming rank $victim: $(tail -2 "$(klog $other)")"; fi
    else
      fail "kill -9 of rank $victim of $m: rank $other still runs after 10 s"; kill -9 "${pids[$other]}"
    fi
    wait 2>/dev/null
  done
done
note ""
if [ "${TP_SERVE:-1}" = 0 ]; then
  note "failures: $failures"
  finish
  [ $failures -eq 0 ]
  exit
fi

# tandem-serve at TP2 on the GPU.
target=models/dflash-pair/target
common=(--device cuda --max-model-len 1024 --max-num-seqs 4 --kv-cache-memory 128MiB --peer-timeout 8s --rendezvous-timeout 120s)
healthy() { curl -sf "http://127.0.0.1:$1/health" > /dev/null; }
wait_healthy() {  # port pid what
  for _ in $(seq 1 600); do
    healthy "$1" && return 0
    kill -0 "$2" 2>/dev/null || { echo "$3 exited"; return 1; }
    sleep 0.2
  done
  echo "$3 did not answer /health within 120 s"; return 1
}
complete() {  # port max_tokens
  curl -sf "http://127.0.0.1:$1/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"t\",\"prompt\":\"The quick brown fox\",\"max_tokens\":$2,\"temperature\":0,\"ignore_eos\":true}" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["text"])'
}
start_pair() {  # tag [extra flags for both ranks]
  local mp=$((port + 1)) hp=$((port + 2)) ap=$((port + 3)) tag=$1
  shift
  port=$((port + 3))
  "$serve" $target "${common[@]}" "$@" --tensor-parallel-size 2 --nnodes 2 --node-rank 1 --headless --host 127.0.0.1 --port $hp \
    --master-addr 127.0.0.1 --master-port $mp > "$out/serve-$tag-worker.log" 2>&1 &
  worker=$!
  wait_healthy $hp $worker "the worker ($tag)" || return 1
  "$serve" $target "${common[@]}" "$@" --tensor-parallel-size 2 --nnodes 2 --node-rank 0 --host 127.0.0.1 --port $ap \
    --master-addr 127.0.0.1 --master-port $mp --served-model-name t > "$out/serve-$tag-head.log" 2>&1 &
  head=$!
  api=$ap
  wait_healthy $ap $head "the head ($tag)"
}

port=$((port + 1))
"$serve" $target "${common[@]}" --host 127.0.0.1 --port $port --served-model-name t > "$out/serve-tp1.log" 2>&1 &
one=$!
if wait_healthy $port $one "TP1 tandem-serve"; then tp1_first=$(complete $port 4); tp1_text=$(complete $port 48); fi
kill $one 2>/dev/null; wait $one 2>/dev/null
if start_pair greedy; then
  tp2_first=$(complete $api 4)
  tp2_text=$(complete $api 48)
  transport=$(grep -o 'device all-reduce: [a-z-]*' "$out/serve-greedy-head.log" | head -1)
  # The gate: the first tokens through the whole served path. The 48-token text is reported: a
  # free-running sequence departs at a near-tie (TP2 is within the bar of TP1, not bit-equal).
  if [ -n "${tp1_first:-}" ] && [ "$tp1_first" = "$tp2_first" ]; then note "serve: TP2 (worker + head on one GPU, $transport) greedy first 4 tokens identical to TP1's"
  else fail "serve: TP2 greedy first tokens differ from TP1's: [${tp1_first:-}] vs [$tp2_first]"; fi
  same=$(python3 -c 'import os,sys; a,b=sys.argv[1],sys.argv[2]; print(len(os.path.commonprefix([a,b])), "of", len(a))' "${tp1_text:-}" "$tp2_text")
  if [ "${tp1_text:-}" = "$tp2_text" ]; then note "serve: 48-token greedy completion identical to TP1's"
  else note "serve: 48-token greedy completion: the first $same characters identical to TP1's, then it departs"; fi
  grep -q "CUDA graphs off" "$out/serve-greedy-head.log" && note "serve: the head logged its transport and that CUDA graphs are off under it"
  kill $head; wait $head 2>/dev/null; ended_within $worker 10 || kill -9 $worker
else
  fail "serve: the TP2 pair did not start: $(tail -3 "$out"/serve-greedy-*.log)"
fi

# DFlash at TP2: the drafter on the head rank, verification by the sharded target. Greedy output
# equals the sharded target's plain greedy output (same rows: the kernels are batch-invariant).
spec='{"method":"dflash","model":"models/dflash-pair/drafter","num_speculative_tokens":4}'
if start_pair dflash --speculative-config "$spec"; then
  dflash_text=$(complete $api 48)
  accepted=$(curl -sf "http://127.0.0.1:$api/metrics" | grep -E '^tandem_spec_decode_(draft|accepted)_tokens_total' | tr '\n' ' ')
  if [ -n "${tp2_text:-}" ] && [ "$dflash_text" = "$tp2_text" ]; then note "serve: DFlash at TP2 (drafter on the head) greedy 48 tokens identical to TP2 plain ($accepted)"
  else fail "serve: DFlash at TP2 differs from TP2 plain: [$dflash_text] vs [${tp2_text:-}] ($accepted)"; fi
  kill $head; wait $head 2>/dev/null; ended_within $worker 10 || kill -9 $worker
else
  fail "serve: the TP2 DFlash pair did not start: $(tail -3 "$out"/serve-dflash-*.log)"
fi

for victim in worker head; do
  if ! start_pair kill-$victim; then fail "serve: the TP2 pair did not start for the kill of the $victim"; continue; fi
  complete $api 4000 > /dev/null 2>&1 &
  req=$!
  sleep 1.5
  if [ $victim = worker ]; then dead=$worker survivor=$head slog="$out/serve-kill-worker-head.log" peer="tensor-parallel group"
  else dead=$head survivor=$worker slog="$out/serve-kill-head-worker.log" peer="lost rank 0"; fi
  kill -9 $dead
  t0=$(date +%s.%N)
  if ended_within $survivor 10; then
    took=$(python3 -c "import time; print('%.1f' % (time.time() - $t0))")
    if grep -q "$peer" "$slog"; then note "serve: kill -9 of the $victim mid-decode: the other rank ended after ${took} s: $(grep -m1 "$peer" "$slog" | cut -c1-200)"
    else fail "serve: kill -9 of the $victim: the survivor ended but its log does not name the peer ('$peer'): $(tail -2 "$slog")"; fi
  else
    fail "serve: kill -9 of the $victim: the other rank still runs after 10 s"; kill -9 $survivor
  fi
  wait $req 2>/dev/null
  wait 2>/dev/null
done

note ""
note "failures: $failures"
finish
[ $failures -eq 0 ]
