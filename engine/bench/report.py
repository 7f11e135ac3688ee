#!/usr/bin/env python3
"""One Markdown table from tandem-bench-cuda's JSON and hf_bench.py's: usage report.py TANDEM.json HF.json [FP8.json]."""
import json
import sys


def main():
    t = json.load(open(sys.argv[1]))
    hf = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
    fp8 = json.load(open(sys.argv[3])) if len(sys.argv) > 3 else None
    m = t["model"]
    print(f"GPU: {t['gpu']}; device-to-device copy bandwidth {t['copy_bandwidth_GBps']:.0f} GB/s (read + write)")
    print(f"Model: glm4_moe_lite, random weights, {m['weight_bytes'] / 2e9:.2f} B parameters in bf16 "
          f"({m['moe_layers']} MoE layers of {m['experts']} experts, top-{m['top_k']}); prompt {t['prompt']} tokens, "
          f"{t['decode_steps']} decode steps; KV cache {m['kv_cache_dtype']}")
    if hf:
        print(f"Hugging Face: transformers {hf['transformers']}, torch {hf['torch']}, generate(), greedy")
    print()
    print("| measure | tandem (CUDA graphs) | tandem (eager) | transformers | tandem / transformers | floor | tandem % of floor |")
    print("|---|---|---|---|---|---|---|")
    hf_pre = hf["prefill_tok_s"] if hf else None
    print(f"| prefill tok/s (1 x {t['prompt']}) | {t['prefill_tok_s']:.0f} | | {hf_pre:.0f} | {t['prefill_tok_s'] / hf_pre:.1f}x | | |"
          if hf else f"| prefill tok/s | {t['prefill_tok_s']:.0f} | | | | | |")
    by = {(d["batch"], d["mode"]): d for d in t["decode"]}
    hf_by = {d["batch"]: d for d in hf["decode"]} if hf else {}
    for b in sorted({d["batch"] for d in t["decode"]}):
        g, e = by.get((b, "graphs")), by.get((b, "eager"))
        h = hf_by.get(b)
        ratio = f"{g['tok_s'] / h['tok_s']:.1f}x" if h and g else ""
        print(f"| decode tok/s, batch {b} | {g['tok_s']:.0f} | {e['tok_s']:.0f} | {h['tok_s']:.0f} | {ratio} | "
              f"{g['floor_tok_s']:.0f} | {g['pct_of_floor']:.0f}% |" if h else
              f"| decode tok/s, batch {b} | {g['tok_s']:.0f} | {e['tok_s']:.0f} | | | {g['floor_tok_s']:.0f} | {g['pct_of_floor']:.0f}% |")
    if fp8:
        print()
        print("With --kv-cache-dtype fp8_e4m3 (CUDA graphs):")
        print()
        print("| batch | decode tok/s | floor tok/s | % of floor |\n|---|---|---|---|")
        for d in fp8["decode"]:
            if d["mode"] == "graphs":
                print(f"| {d['batch']} | {d['tok_s']:.0f} | {d['floor_tok_s']:.0f} | {d['pct_of_floor']:.0f}% |")
    print()
    print("Floor: bytes a decode step must read (weights it touches: all but the routed experts once per step, plus the "
          "experts its tokens choose, expected under uniform routing; plus the batch's cached KV rows at the mean context) "
          "over the measured copy bandwidth.")


if __name__ == "__main__":
    main()
