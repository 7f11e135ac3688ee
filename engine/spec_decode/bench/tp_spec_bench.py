#!/usr/bin/env python3
"""DFlash under tensor parallelism: one rank against two, plain against DFlash, over HTTP.

Starts tandem-serve on loopback in four set-ups (TP1 / TP2, each without and with the drafter at
its serving default, the adaptive draft length), sends the reference prompts of a trained pair one
at a time (batch 1, greedy, ignore_eos), and prints one Markdown row per set-up and prompt class:
tok/s, mean acceptance length, the drafter's share of the model work's time (proposals and context
rows, from /metrics), and whether the output equals TP1 plain output. All set-ups are up at once
and the rounds visit them in turn; tok/s is the median over the rounds. Under TP the drafter runs on
the head rank only (replicated, not sharded): while it works the other rank waits, so its share of
the step time is the most that sharding it could win back.

  python3 engine/spec_decode/bench/tp_spec_bench.py --serve build-cpu/engine/tandem-serve \\
      --pair models/dflash-pair [--max-tokens 64] [--rounds 3] [--tp 1,2] [--device cpu] [--json out.json]

Standard library only; every server listens on 127.0.0.1.
"""
import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request


def tag(spec):
    return {"": "plain", "DFlash": "dflash", "DFlash (baseline)": "dflash-baseline"}.get(spec, spec)


def free_ports(n):
    """n distinct free loopback ports (all held open until every one is chosen)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


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

    def __init__(self, args, tp, spec, logdir, binary):
        self.binary = binary
        self.procs, self.logs = [], []
        try:
            self.launch(args, tp, spec, logdir)
        except BaseException:
            self.stop()  # whatever was started (a worker whose head failed, say) does not outlive us
            raise

    def launch(self, args, tp, spec, logdir):
        self.port, master, health = free_ports(3)
        common = [str(args.pair / "target"), "--device", args.device, "--max-model-len", "1024",
                  "--max-num-seqs", "4", "--kv-cache-memory", "64MiB"]
        if tp == 2:
            common += ["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
                       "--master-port", str(master), "--rendezvous-timeout", "60s"]
            self.start(args, common + ["--node-rank", "1", "--headless", "--host", "127.0.0.1", "--port", str(health)],
                       os.path.join(logdir, f"tp{tp}-{tag(spec)}-worker.log"))
            common += ["--node-rank", "0"]
        head = common + ["--host", "127.0.0.1", "--port", str(self.port)]
        if spec:
            head += ["--speculative-config", json.dumps({"method": "dflash", "model": str(args.pair / "drafter"),
                                                         "num_speculative_tokens": args.k})]
        self.start(args, head, os.path.join(logdir, f"tp{tp}-{tag(spec)}-head.log"))
        deadline = time.time() + 120
        while time.time() < deadline:
            for p, log in zip(self.procs, self.logs):
                if p.poll() is not None:
                    sys.exit(f"tandem-serve exited with {p.returncode} at start; its log ({log}):\n" + open(log).read()[-3000:])
            try:
                if get(self.port, "/health", timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        sys.exit(f"tandem-serve did not answer /health within 120 s; logs in {logdir}")

    def start(self, args, argv, log):
        self.logs.append(log)
        self.procs.append(subprocess.Popen([self.binary] + argv, stdout=open(log, "w"), stderr=subprocess.STDOUT))

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


def combine(rs):
    """One row from a set-up's rounds: median tok/s, summed counters and times."""
    out = {k: sum(r[k] for r in rs) for k in ("tokens", "seconds", "model_seconds", "drafter_seconds", "draft_seconds",
                                              "context_seconds", "drafts", "draft_tokens", "accepted")}
    out["tok_s"] = statistics.median(r["tok_s"] for r in rs)
    out["tok_s_rounds"] = [round(r["tok_s"], 2) for r in rs]
    out["drafter_share"] = out["drafter_seconds"] / out["model_seconds"] if out["model_seconds"] else 0.0
    out["acceptance_length"] = 1 + out["accepted"] / out["drafts"] if out["drafts"] else None
    out["texts"] = rs[0]["texts"]
    out["same_every_round"] = all(r["texts"] == rs[0]["texts"] for r in rs)
    return out


def main():
    # A SIGTERM (a timeout around this script) unwinds like an error, so every server is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--serve", required=True, help="the tandem-serve binary")
    ap.add_argument("--pair", required=True, help="a directory with target/, drafter/ and reference.json")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--baseline-serve", help="another tandem-serve build whose DFlash set-ups run beside --serve's "
                                             "(before / after a change, side by side in one run)")
    ap.add_argument("--k", type=int, default=7, help="num_speculative_tokens")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--classes", default="prose,code,json")
    ap.add_argument("--rounds", type=int, default=3, help="passes over the prompts per set-up, interleaved")
    ap.add_argument("--tp", default="1,2", help="tensor-parallel sizes to run, comma-separated (1 and/or 2)")
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
    sizes = [int(t) for t in args.tp.split(",")]
    if 1 not in sizes or any(t not in (1, 2) for t in sizes):
        sys.exit(f"--tp {args.tp}: give 1 (the baseline every row is compared with) and optionally 2")
    # Every set-up is up at once (an idle server costs nothing) and the rounds go through them in
    # turn, so a slow spell of the machine falls on all of them alike; tok/s is the rounds' median.
    kinds = ["plain", "DFlash"] + (["DFlash (baseline)"] if args.baseline_serve else [])
    setups = [(tp, spec) for tp in sizes for spec in kinds]
    groups = {}
    runs = {}
    try:
        for tp, spec in setups:
            print(f"-- TP{tp} {spec}: starting", file=sys.stderr, flush=True)
            binary = args.baseline_serve if spec == "DFlash (baseline)" else args.serve
            groups[(tp, spec)] = g = Group(args, tp, spec if spec != "plain" else "", logdir, binary)
            warm = by_class[classes[0]][0]
            post(g.port, "/v1/completions", {"prompt": warm["prompt_ids"], "max_tokens": 8, "temperature": 0})
        for rnd in range(args.rounds):
            for c in classes:
                for tp, spec in setups:
                    r = run_class(groups[(tp, spec)], by_class[c], args.max_tokens)
                    runs.setdefault((tp, spec, c), []).append(r)
                    print(f"   round {rnd + 1}/{args.rounds} {c} TP{tp} {spec}: "
                          f"{r['tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
    finally:
        for g in groups.values():
            g.stop()
    results = {key: combine(rs) for key, rs in runs.items()}

    print(f"| set-up | class | prompts | tokens | tok/s (median of {args.rounds}) | vs TP1 plain | vs same TP plain | acceptance length | "
          f"drafter share of model time | output = TP1 plain |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for (tp, spec, c), r in results.items():
        base, same = results[(1, "plain", c)], results[(tp, "plain", c)]
        equal = r["texts"] == base["texts"] and r["same_every_round"]
        al = f"{r['acceptance_length']:.2f}" if r["acceptance_length"] else "-"
        share = f"{100 * r['drafter_share']:.0f}% (draft {r['draft_seconds']:.2f} s, context {r['context_seconds']:.2f} s)" if spec != "plain" else "-"
        print(f"| TP{tp} {spec} | {c} | {len(by_class[c])} | {r['tokens']} | {r['tok_s']:.1f} | "
              f"{r['tok_s'] / base['tok_s']:.2f}x | {r['tok_s'] / same['tok_s']:.2f}x | {al} | {share} | {'yes' if equal else 'NO'} |")
        rows.append({"tp": tp, "setup": spec, "class": c, "output_equals_tp1_plain": equal,
                     **{k: v for k, v in r.items() if k != "texts"}})
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": args.device, "k": args.k, "max_tokens": args.max_tokens, "rounds": args.rounds, "rows": rows}, f, indent=1)
    mismatched = [r for r in rows if not r["output_equals_tp1_plain"]]
    if mismatched:
        print(f"{len(mismatched)} row(s) differ from TP1 plain output (greedy must be identical)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
