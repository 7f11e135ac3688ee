#!/usr/bin/env python3
"""DFlash under tensor parallelism: one rank against two, plain against DFlash, over HTTP.

Starts tandem-serve on loopback in four set-ups (TP1 / TP2, each without and with the drafter at
its serving default, the adaptive draft length), sends the reference prompts of a trained pair one
at a time (batch 1, greedy, ignore_eos), and prints one Markdown row per set-up and prompt class:
tok/s, mean acceptance length, the drafter's share of the model work's time (proposals and context
rows, from /metrics), and whether the output equals TP1 plain output. Under TP the drafter runs on
the head rank only (replicated, not sharded): while it works the other rank waits, so its share of
the step time is the most that sharding it could win back.

  python3 engine/spec/bench/tp_spec_bench.py --serve build-cpu/engine/tandem-serve \\
      --pair models/dflash-pair [--max-tokens 64] [--device cpu] [--json out.json]

Standard library only; every server listens on 127.0.0.1.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, timeout=30):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def post(port, path, body, timeout=600):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read().decode())


def metric(text, name):
    """Sum of a metric's samples (all label sets) in Prometheus text; 0 when absent."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class Group:
    """One tandem-serve set-up: a head rank serving the API and, for TP2, a headless worker."""

    def __init__(self, args, tp, spec, logdir):
        self.procs, self.logs = [], []
        self.port = free_port()
        common = [str(args.pair / "target"), "--device", args.device, "--max-model-len", "1024",
                  "--max-num-seqs", "4", "--kv-cache-memory", "64MiB"]
        if tp == 2:
            master, health = free_port(), free_port()
            common += ["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
                       "--master-port", str(master), "--rendezvous-timeout", "60s"]
            self.start(args, common + ["--node-rank", "1", "--headless", "--host", "127.0.0.1", "--port", str(health)],
                       os.path.join(logdir, f"tp{tp}-{spec}-worker.log"))
            common += ["--node-rank", "0"]
        head = common + ["--host", "127.0.0.1", "--port", str(self.port)]
        if spec:
            head += ["--speculative-config", json.dumps({"method": "dflash", "model": str(args.pair / "drafter"),
                                                         "num_speculative_tokens": args.k})]
        self.start(args, head, os.path.join(logdir, f"tp{tp}-{spec}-head.log"))
        deadline = time.time() + 120
        while time.time() < deadline:
            for p, log in zip(self.procs, self.logs):
                if p.poll() is not None:
                    self.stop()
                    sys.exit(f"tandem-serve exited with {p.returncode} at start; its log ({log}):\n" + open(log).read()[-3000:])
            try:
                if get(self.port, "/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        sys.exit(f"tandem-serve did not answer /health within 120 s; logs in {logdir}")

    def start(self, args, argv, log):
        self.logs.append(log)
        self.procs.append(subprocess.Popen([args.serve] + argv, stdout=open(log, "w"), stderr=subprocess.STDOUT))

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()


def run_class(group, prompts, max_tokens):
    before = get(group.port, "/metrics")
    texts, tokens, seconds = [], 0, 0.0
    for p in prompts:
        body = {"prompt": p["prompt_ids"], "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
        t0 = time.perf_counter()
        r = post(group.port, "/v1/completions", body)
        seconds += time.perf_counter() - t0
        texts.append(r["choices"][0]["text"])
        tokens += r["usage"]["completion_tokens"]
    after = get(group.port, "/metrics")
    d = {n: metric(after, n) - metric(before, n) for n in (
        "tandem_model_seconds_total", "tandem_spec_decode_draft_seconds_total", "tandem_spec_decode_context_seconds_total",
        "tandem_spec_decode_drafts_total", "tandem_spec_decode_accepted_tokens_total", "tandem_spec_decode_draft_tokens_total")}
    model_s = d["tandem_model_seconds_total"]
    drafter_s = d["tandem_spec_decode_draft_seconds_total"] + d["tandem_spec_decode_context_seconds_total"]
    drafts = d["tandem_spec_decode_drafts_total"]
    return {"texts": texts, "tokens": tokens, "seconds": seconds, "tok_s": tokens / seconds if seconds else 0.0,
            "model_seconds": model_s, "drafter_seconds": drafter_s,
            "draft_seconds": d["tandem_spec_decode_draft_seconds_total"],
            "context_seconds": d["tandem_spec_decode_context_seconds_total"],
            "drafter_share": drafter_s / model_s if model_s else 0.0,
            "drafts": drafts, "draft_tokens": d["tandem_spec_decode_draft_tokens_total"],
            "accepted": d["tandem_spec_decode_accepted_tokens_total"],
            "acceptance_length": 1 + d["tandem_spec_decode_accepted_tokens_total"] / drafts if drafts else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", required=True, help="the tandem-serve binary")
    ap.add_argument("--pair", required=True, help="a directory with target/, drafter/ and reference.json")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--k", type=int, default=7, help="num_speculative_tokens")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--classes", default="prose,code,json")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    from pathlib import Path
    args.pair = Path(args.pair)
    ref = json.load(open(args.pair / "reference.json"))
    classes = args.classes.split(",")
    by_class = {c: [p for p in ref["prompts"] if p["kind"] == c] for c in classes}
    for c, ps in by_class.items():
        if not ps:
            sys.exit(f"{args.pair / 'reference.json'}: no prompt of class '{c}' (classes there: "
                     f"{sorted({p['kind'] for p in ref['prompts']})})")

    logdir = tempfile.mkdtemp(prefix="tp-spec-bench-")
    results = {}
    for tp in (1, 2):
        for spec in (False, True):
            name = f"TP{tp} {'DFlash' if spec else 'plain'}"
            print(f"-- {name}: starting", file=sys.stderr, flush=True)
            g = Group(args, tp, "dflash" if spec else "", logdir)
            try:
                warm = by_class[classes[0]][0]
                post(g.port, "/v1/completions", {"prompt": warm["prompt_ids"], "max_tokens": 8, "temperature": 0})
                for c in classes:
                    results[(tp, spec, c)] = run_class(g, by_class[c], args.max_tokens)
                    r = results[(tp, spec, c)]
                    print(f"   {c}: {r['tokens']} tokens in {r['seconds']:.1f} s", file=sys.stderr, flush=True)
            finally:
                g.stop()

    print(f"| set-up | class | prompts | tokens | tok/s | vs TP1 plain | vs same TP plain | acceptance length | "
          f"drafter share of model time | output = TP1 plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for (tp, spec, c), r in results.items():
        base, same = results[(1, False, c)], results[(tp, False, c)]
        equal = r["texts"] == base["texts"]
        al = f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-"
        share = f"{100 * r['drafter_share']:.0f}% (draft {r['draft_seconds']:.2f} s, context {r['context_seconds']:.2f} s)" if spec else "-"
        print(f"| TP{tp} {'DFlash' if spec else 'plain'} | {c} | {len(by_class[c])} | {r['tokens']} | {r['tok_s']:.1f} | "
              f"{r['tok_s'] / base['tok_s']:.2f}x | {r['tok_s'] / same['tok_s']:.2f}x | {al} | {share} | {'yes' if equal else 'NO'} |")
        rows.append({"tp": tp, "dflash": spec, "class": c, "output_equals_tp1_plain": equal,
                     **{k: v for k, v in r.items() if k != "texts"}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "k": args.k, "max_tokens": args.max_tokens, "rows": rows}, f, indent=1)
    mismatched = [r for r in rows if not r["output_equals_tp1_plain"]]
    if mismatched:
        print(f"{len(mismatched)} row(s) differ from TP1 plain output (greedy must be identical)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
