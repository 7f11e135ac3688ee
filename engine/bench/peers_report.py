#!/usr/bin/env python3
"""tandem against transformers eager and compiled (engine/bench/gpu-peers.sh): usage peers_report.py OUT.

Reads OUT/tandem.json, OUT/tandem-prefill.json (tandem-bench-cuda --json), OUT/hf-eager.json and
OUT/hf-compiled.json (hf_bench.py), prints one Markdown table (prefill and decode tok/s, tandem's
ratio to each, tandem's % of the bandwidth floor) and writes OUT/summary.json. Exit 1 when a file
or a measurement is missing (a failed run's recorded error is printed).
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out = sys.argv[1]
    t, tp = load(os.path.join(out, "tandem.json")), load(os.path.join(out, "tandem-prefill.json"))
    peers = {"eager": load(os.path.join(out, "hf-eager.json")), "compiled": load(os.path.join(out, "hf-compiled.json"))}
    missing = [n for n, d in [("tandem decode", t), ("tandem prefill", tp), *[(f"transformers {k}", v) for k, v in peers.items()]]
               if not d]
    for k, v in peers.items():
        if v and v.get("error"):
            missing.append(f"transformers {k}: {v['error'][:300]}")
    if t:
        m = t["model"]
        print(f"GPU: {t['gpu']}; device-to-device copy {t['copy_bandwidth_GBps']:.0f} GB/s (read + write)")
        print(f"Model: the 2 B glm4_moe_lite of hf_bench.py ({m['weight_bytes'] / 1e9:.2f} GB bf16 on the GPU, "
              f"{m['moe_layers']} MoE layers of {m['experts']} experts, top-{m['top_k']}), random weights; prompt "
              f"{t['prompt']}, {t['decode_steps']} decode steps; tandem KV {m['kv_cache_dtype']}, CUDA graphs")
    for k, v in peers.items():
        if v:
            print(f"transformers {k}: {v['transformers']}, torch {v['torch']}, attention {v.get('attention')}")
    print()
    print("| measure | tandem | transformers eager | transformers compiled | tandem / eager | tandem / compiled | tandem % of floor |")
    print("|---|---|---|---|---|---|---|")
    rows = []

    def row(name, ours, eager, compiled, floor=""):
        ratio = lambda p: f"{ours / p:.2f}x" if ours and p else ""
        fmt = lambda v: f"{v:.0f}" if v else "-"
        print(f"| {name} | {fmt(ours)} | {fmt(eager)} | {fmt(compiled)} | {ratio(eager)} | {ratio(compiled)} | {floor} |")
        rows.append({"measure": name, "tandem": ours, "eager": eager, "compiled": compiled})

    def peer_prefill(p, n):
        if not p:
            return None
        if n == p.get("prompt") and p.get("prefill_tok_s"):
            return p["prefill_tok_s"]
        return next((r["tok_s"] for r in p.get("prefill", []) if r["tokens"] == n), None)
    lengths = sorted({r["tokens"] for r in (tp or {}).get("prefill", [])})
    for n in lengths:
        ours = next(r["tok_s"] for r in tp["prefill"] if r["tokens"] == n)
        row(f"prefill tok/s, 1 x {n}", ours, peer_prefill(peers["eager"], n), peer_prefill(peers["compiled"], n))
    for d in (t or {}).get("decode", []):
        b = d["batch"]
        pe = [next((r["tok_s"] for r in (p or {}).get("decode", []) if r["batch"] == b), None) for p in peers.values()]
        row(f"decode tok/s, batch {b}", d["tok_s"], pe[0], pe[1], f"{d['pct_of_floor']:.0f}% (floor {d['floor_tok_s']:.0f})")
    print("\nDecode tok/s of transformers: generate() of the decode steps less generate() of one token (prefill left "
          "out); compiled: a static cache and the forward under torch.compile(mode=\"reduce-overhead\"), each shape "
          "warmed up twice. Prefill: one prompt, the last row's logits; 1 x 8192 and longer timed once.")
    if missing:
        print(f"\nMISSING: {'; '.join(missing)}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump({"rows": rows, "missing": missing}, f, indent=1)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
