#!/usr/bin/env bash
# GPU tensor parallelism on one GPU (issue 20), from the repository root of the GPU machine:
#   engine/bench/gpu-tp.sh BUNDLE OUT
# BUNDLE holds cuda_tp_check and serve/ (tandem-serve and its libraries), as packed by
# deploy/gpu-prepare.sh --tp; OUT gets the logs, tp.json and tp.md. Two ranks share the GPU, so the
# rendezvous picks the host-staged transport by itself (same GPU UUID; --tp-transport auto).
#   1. each fixture (glm4_moe_lite, its variant, glm4_moe, glm5_next_text, the sparse one; and the
#      DFlash pair's target), cuda_tp_check: TP1 plain (eager, then CUDA graphs: bit-identical to
#      eager); TP2: logits within the CUDA bar (1e-2) of plain TP1's (a differing row is listed with
#      TP1's top-two gap); for glm4_moe_lite / glm4_moe also TP1 with 2 reduction groups (eager, then
#      graphs), the mode TP2 matches: TP2's greedy tokens and logits bit-identical to it (free-running
#      and teacher-forced); step times of each (the mode's cost) and the host-staged all-reduce's
#      per-step cost at batch 1 and 16 (a test transport: TCP through the host)
#   2. compute-sanitizer memcheck of both ranks (when the machine has it), per TP_MEMCHECK model,
#      and of TP1 with 2 groups where the model has them
#   3. kill -9 of either rank of cuda_tp_check mid-decode (TP_KILL models): the other ends within
#      10 s with an error naming the lost peer
#   4. tandem-serve --device cuda (TP_SERVE=0: skipped): TP2 (worker then head) greedy 48 tokens
#      identical to TP1 --reduction-groups 2 (graphs on), and DFlash at TP2 (drafter on the head)
#      identical to it; the first tokens also equal plain TP1's; each rank sizes its KV pool from its
#      own flags (the worker given less here) and the group takes the smallest; kill -9 of either
#      rank mid-decode ends the other within 10 s, naming the lost peer
# TP_MODELS, TP_MEMCHECK and TP_KILL (space-separated model directories) narrow a run to some
# fixtures; GPU_TP_SKIP="kill" leaves the serve kills out (a short device budget).
# Two GPUs (the NCCL run, a separate issue): TP_GPUS="0 1" puts rank r of the checks on GPU r
# (CUDA_VISIBLE_DEVICES), and the rendezvous then picks NCCL (distinct UUIDs); TP2 then decodes
# from CUDA graphs with its collectives captured.
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
runs = {os.path.basename(p)[:-5]: json.load(open(p)) for p in sorted(glob.glob(os.path.join(out, "*.json"))) if not p.endswith("tp.json")}
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
skip() { case " ${GPU_TP_SKIP:-} " in *" $1 "*) return 0 ;; esac; return 1; }
note "| model | TP2 vs plain TP1 logits, teacher-forced (worst rel. error; bar 1e-2) | TP2 greedy per row = plain TP1's (+ near-ties) | TP2 = TP1 with 2 groups, bit for bit (free-running tokens; teacher-forced tokens; logit rows free + forced) | TP1 2 groups vs plain (worst rel. error) | step ms TP1 plain b1/b16: eager, graphs | step ms TP1 2 groups b1/b16: eager, graphs | step ms TP2 b1/b16 (eager over host-staged) | host-staged all-reduce ms/step b1/b16 |"
note "|---|---|---|---|---|---|---|---|---|"
glm5=(tests/model/fixtures/glm5_next_text tests/model/fixtures/glm5_next_text_sparse)
read -r -a models <<< "${TP_MODELS:-tests/model/fixtures/glm4_moe_lite tests/model/fixtures/glm4_moe_lite_variant tests/model/fixtures/glm4_moe ${glm5[*]} models/dflash-pair/target}"
has_groups() { ! grep -q '"model_type": *"glm5_next' "$1/config.json"; }  # models with reduction groups
check1() {  # tag model args...: a one-rank run of cuda_tp_check into $out/$name.$tag.{log,json}
  local tag=$1 m=$2
  shift 2
  "$check" --model "$m" --ranks 1 --timing "$out/$name.$tag.json" "$@" > "$out/$name.$tag.log" 2>&1
  local rc=$?
  grep -E "ok  |FAIL" "$out/$name.$tag.log" | sed "s|^|  [$tag] |"
  if [ $rc -ne 0 ]; then fail "$m $tag (rc $rc): $(grep -E 'FAIL|error' "$out/$name.$tag.log" | tail -3)"; return 1; fi
}
tp2_graphs=()  # two GPUs (NCCL): TP2 decodes from CUDA graphs, its collectives captured
[ -n "${TP_GPUS:-}" ] && tp2_graphs=(--eager 0)
for m in "${models[@]}"; do
  name=$(echo "$m" | tr '/' '_')
  port=$((port + 1))
  check1 tp1 "$m" --out "$out/$name.tp1.bin" || continue
  same=()  # TP2 bit for bit against TP1 with 2 groups (glm5_next has none: the bar only)
  if has_groups "$m"; then
    check1 tp1-graphs "$m" --eager 0 --identical "$out/$name.tp1.bin"
    check1 groups2 "$m" --groups 2 --reference "$out/$name.tp1.bin" --out "$out/$name.groups2.bin" || continue
    check1 groups2-graphs "$m" --groups 2 --eager 0 --reference "$out/$name.tp1.bin" --identical "$out/$name.groups2.bin"
    same=(--identical "$out/$name.groups2.bin" "${tp2_graphs[@]}")
  fi
  on 1 "$check" --model "$m" --ranks 2 --rank 1 --port $port --transport auto --reference "$out/$name.tp1.bin" \
    "${same[@]}" > "$out/$name.rank1.log" 2>&1 &
  w=$!
  on 0 "$check" --model "$m" --ranks 2 --rank 0 --port $port --transport auto --reference "$out/$name.tp1.bin" \
    "${same[@]}" --timing "$out/$name.tp2.json" > "$out/$name.rank0.log" 2>&1
  rc0=$?
  wait $w
  rc1=$?
  cat "$out/$name.rank0.log"
  if [ $rc0 -ne 0 ] || [ $rc1 -ne 0 ]; then fail "$m TP2 (rank 0 rc $rc0, rank 1 rc $rc1): $(grep -h -E 'FAIL|error|rank' "$out/$name.rank0.log" "$out/$name.rank1.log" | tail -4)"; fi
  if [ -f "$out/$name.tp2.json" ]; then
    note "$(python3 - "$out" "$name" "$m" <<'EOF'
import json, os, sys
out, name, m = sys.argv[1:]
def load(tag):
    p = os.path.join(out, "%s.%s.json" % (name, tag))
    return json.load(open(p)) if os.path.exists(p) else {}
a, e, g, gg, b = load("tp1"), load("tp1-graphs"), load("groups2"), load("groups2-graphs"), load("tp2")
def ms(d, batch, key="decode_step_ms"):
    return "%.3f" % d[batch][key] if batch in d and key in d[batch] else "-"
def pair(d, key="decode_step_ms"):
    return "%s / %s" % (ms(d, "batch_1", key), ms(d, "batch_16", key))
rows = b.get("rows", 0)
print("| %s | %.2e | %d / %d (+%d) | %s: %d / %d; %d / %d; %d + %d / %d + %d | %.2e | %s, %s | %s, %s | %s | %s |" % (
    m, b.get("worst_relative_error", float("nan")), b.get("rows_greedy_agree", 0), rows, b.get("rows_near_tie", 0),
    "identical" if b.get("identical_ok") else "no reduction groups" if "identical_ok" not in b else "DIFFERENT", b.get("identical_free_tokens", 0), b.get("tokens", 0),
    b.get("identical_forced_tokens", 0), rows, b.get("identical_free_logit_rows", 0), b.get("identical_forced_logit_rows", 0), rows, rows,
    g.get("worst_relative_error", float("nan")), pair(a), pair(e), pair(g), pair(gg), pair(b), pair(b, "all_reduce_ms_per_step")))
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
  rcg=0
  if has_groups "$m"; then
    "$sanitizer" --tool memcheck --error-exitcode 9 "$check" --model $m --ranks 1 --groups 2 --steps 3 --time 0 > "$out/memcheck.$name.groups2.log" 2>&1
    rcg=$?
  fi
  "$sanitizer" --tool memcheck --error-exitcode 9 "$check" --model $m --ranks 2 --rank 1 --port $port --steps 3 --time 0 > "$out/memcheck.$name.rank1.log" 2>&1 &
  w=$!
  "$sanitizer" --tool memcheck --error-exitcode 9 "$check" --model $m --ranks 2 --rank 0 --port $port --steps 3 --time 0 > "$out/memcheck.$name.rank0.log" 2>&1
  rc0=$?
  wait $w
  rc1=$?
  if [ $rcg -eq 0 ] && [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ]; then
    note "memcheck ($m, TP2 host-staged, both ranks$(has_groups "$m" && echo '; TP1 with 2 groups')): clean ($(grep -h 'ERROR SUMMARY' "$out"/memcheck.$name.*.log | tr '\n' ' '))"
  else fail "memcheck $m (groups rc $rcg, rank 0 rc $rc0, rank 1 rc $rc1): $(grep -h 'ERROR SUMMARY\|Invalid\|error' "$out"/memcheck.$name.*.log | head -4)"; fi
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
common=(--device cuda --max-model-len 1024 --max-num-seqs 4 --peer-timeout 8s --rendezvous-timeout 120s)
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
# Each rank sizes its KV pool from its own flags: the worker is given less than the head, and both
# must run with the worker's count.
start_pair() {  # tag [extra flags for both ranks]
  local mp=$((port + 1)) hp=$((port + 2)) ap=$((port + 3)) tag=$1
  shift
  port=$((port + 3))
  "$serve" $target "${common[@]}" --kv-cache-memory 96MiB "$@" --tensor-parallel-size 2 --nnodes 2 --node-rank 1 --headless \
    --host 127.0.0.1 --port $hp --master-addr 127.0.0.1 --master-port $mp > "$out/serve-$tag-worker.log" 2>&1 &
  worker=$!
  wait_healthy $hp $worker "the worker ($tag)" || return 1
  "$serve" $target "${common[@]}" --kv-cache-memory 128MiB "$@" --tensor-parallel-size 2 --nnodes 2 --node-rank 0 --host 127.0.0.1 \
    --port $ap --master-addr 127.0.0.1 --master-port $mp --served-model-name t > "$out/serve-$tag-head.log" 2>&1 &
  head=$!
  api=$ap
  wait_healthy $ap $head "the head ($tag)"
}
serve_one() {  # tag port max_tokens [flags]: one rank's greedy completions, "first|text" (4 tokens, then max_tokens)
  local tag=$1 p=$2 n=$3 pid
  shift 3
  "$serve" $target "${common[@]}" --kv-cache-memory 128MiB "$@" --host 127.0.0.1 --port "$p" --served-model-name t > "$out/serve-$tag.log" 2>&1 &
  pid=$!
  if wait_healthy "$p" $pid "TP1 tandem-serve ($tag)" > /dev/null; then echo "$(complete "$p" 4)|$(complete "$p" "$n")"; fi
  kill $pid 2>/dev/null; wait $pid 2>/dev/null
}

plain=$(serve_one tp1 $((port + 1)) 48)
tp1_first=${plain%%|*} tp1_text=${plain#*|}
grouped=$(serve_one tp1-groups2 $((port + 2)) 48 --reduction-groups 2)
port=$((port + 2))
g_text=${grouped#*|}
[ -n "$g_text" ] || fail "serve: TP1 --reduction-groups 2 gave no completion: $(tail -3 "$out/serve-tp1-groups2.log")"
grep -q "reduction groups: each layer summed as 2 tensor-parallel ranks" "$out/serve-tp1-groups2.log" || fail "serve: TP1 --reduction-groups 2 did not log its mode"
if start_pair greedy; then
  tp2_first=$(complete $api 4)
  tp2_text=$(complete $api 48)
  transport=$(grep -o 'device all-reduce: [a-z-]*' "$out/serve-greedy-head.log" | head -1)
  # The gate against plain TP1: the first tokens through the whole served path (within the bar).
  if [ -n "$tp1_first" ] && [ "$tp1_first" = "$tp2_first" ]; then note "serve: TP2 (worker + head on one GPU, $transport) greedy first 4 tokens identical to plain TP1's"
  else fail "serve: TP2 greedy first tokens differ from plain TP1's: [$tp1_first] vs [$tp2_first]"; fi
  if [ -n "$g_text" ] && [ "$tp2_text" = "$g_text" ]; then note "serve: TP2 48-token greedy completion identical to TP1 --reduction-groups 2 (CUDA graphs on at TP1)"
  else fail "serve: TP2 48-token greedy completion differs from TP1 --reduction-groups 2: [$tp2_text] vs [$g_text]"; fi
  same=$(python3 -c 'import os,sys; a,b=sys.argv[1],sys.argv[2]; print(len(os.path.commonprefix([a,b])), "of", len(a))' "$tp1_text" "$tp2_text")
  if [ "$tp1_text" = "$tp2_text" ]; then note "serve: ... and identical to plain TP1's too"
  else note "serve: against plain TP1 (other sums): the first $same characters identical, then it departs"; fi
  grep -q "CUDA graphs off" "$out/serve-greedy-head.log" && note "serve: the head logged its transport and that CUDA graphs are off under it"
  agreed=$(grep -h -o 'the ranks. flags allow .*' "$out/serve-greedy-head.log" "$out/serve-greedy-worker.log" | sort -u)
  if [ "$(echo "$agreed" | wc -l)" = 1 ] && grep -q "KV pool:.* blocks of 16 tokens on the device" "$out/serve-greedy-worker.log" &&
     python3 -c 'import re,sys; n=[int(x) for x in re.findall(r"rank \d (\d+)", sys.argv[1])]; t=int(re.search(r"takes (\d+)", sys.argv[1]).group(1)); sys.exit(not (len(n)==2 and n[1]<n[0] and t==n[1]))' "$agreed"
  then note "serve: KV pool per rank (head --kv-cache-memory 128MiB, worker 96MiB): both logged \"$agreed\""
  else fail "serve: the KV agreement: [$agreed] $(grep -h 'KV pool' "$out"/serve-greedy-*.log | head -4)"; fi
  kill $head; wait $head 2>/dev/null; ended_within $worker 10 || kill -9 $worker
else
  fail "serve: the TP2 pair did not start: $(tail -3 "$out"/serve-greedy-*.log)"
fi

# DFlash at TP2: the drafter on the head rank, verification by the sharded target. Greedy output
# equals TP1 plain decoding in the matching mode (the kernels are batch-invariant).
spec='{"method":"dflash","model":"models/dflash-pair/drafter","num_speculative_tokens":4}'
if start_pair dflash --speculative-config "$spec"; then
  dflash_text=$(complete $api 48)
  accepted=$(curl -sf "http://127.0.0.1:$api/metrics" | grep -E '^tandem_spec_decode_(draft|accepted)_tokens_total' | tr '\n' ' ')
  if [ -n "$g_text" ] && [ "$dflash_text" = "$g_text" ]; then
    note "serve: DFlash at TP2 (drafter on the head) greedy 48 tokens identical to TP1 plain --reduction-groups 2 ($accepted)"
  else fail "serve: DFlash at TP2 differs from TP1 plain --reduction-groups 2: [$dflash_text] vs [$g_text] ($accepted)"; fi
  kill $head; wait $head 2>/dev/null; ended_within $worker 10 || kill -9 $worker
else
  fail "serve: the TP2 DFlash pair did not start: $(tail -3 "$out"/serve-dflash-*.log)"
fi

for victim in worker head; do
  if skip kill; then note "kill -9 of the $victim: left out (GPU_TP_SKIP)"; continue; fi
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
