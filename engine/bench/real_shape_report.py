#!/usr/bin/env python3
"""The real-shape table (engine/bench/gpu-real-shape.sh): usage real_shape_report.py OUT.

Reads OUT/{fp8,nvfp4}-{decode,prefill}.json (tandem-bench-cuda --json), prints a Markdown table of
decode (ms/step, tok/s, the floor of the quantised bytes a step reads, % of floor) and prefill per
format, and the NVFP4 / fp8 decode speed ratio against their byte ratio (issue 22 asks for at least
0.8 of it); writes OUT/summary.json. Exit 1 when a file or a measurement is missing.
"""
import json
import os
import sys

from peers_report import load  # a JSON file, or None when it is missing or unreadable

FORMATS = ("fp8", "nvfp4")


def main():
    out = sys.argv[1]
    missing = []
    runs = {}
    for fmt in FORMATS:
        d, p = load(os.path.join(out, f"{fmt}-decode.json")), load(os.path.join(out, f"{fmt}-prefill.json"))
        if d is None or not d.get("decode"):
            missing.append(f"{fmt} decode")
        if p is None or not p.get("prefill"):
            missing.append(f"{fmt} prefill")
        runs[fmt] = (d, p)
    summary = {"formats": {}, "ratios": [], "missing": missing}
    any_run = next((d for d, _ in runs.values() if d), None)
    if any_run:
        print(f"GPU: {any_run['gpu']}; device-to-device copy {any_run['copy_bandwidth_GBps']:.0f} GB/s (read + write); "
              f"prompt {any_run['prompt']}, {any_run['decode_steps']} decode steps, CUDA graphs, KV "
              f"{any_run['model']['kv_cache_dtype']}\n")
    print("| format | weights on GPU | batch | ms/step | tok/s | bytes/step | floor tok/s | % of floor |")
    print("|---|---|---|---|---|---|---|---|")
    by = {}
    for fmt in FORMATS:
        d, p = runs[fmt]
        if not d:
            continue
        m = d["model"]
        summary["formats"][fmt] = {"weight_bytes": m["weight_bytes"], "weight_formats": m["weight_formats"],
                                   "decode_weight_bytes_batch1": m["decode_weight_bytes_batch1"],
                                   "decode": d.get("decode", []), "prefill_512_tok_s": d.get("prefill_tok_s"),
                                   "prefill": (p or {}).get("prefill", [])}
        for r in d.get("decode", []):
            by[(fmt, r["batch"])] = r
            print(f"| {fmt} | {m['weight_bytes'] / 1e9:.2f} GB | {r['batch']} | {r['ms_per_step']:.3f} | {r['tok_s']:.0f} | "
                  f"{r['bytes_per_step'] / 1e9:.3f} GB | {r['floor_tok_s']:.0f} | {r['pct_of_floor']:.0f}% |")
    print("\n| format | prefill | ms | tok/s |\n|---|---|---|---|")
    for fmt in FORMATS:
        d, p = runs[fmt]
        for r in (p or {}).get("prefill", []):
            note = "" if r.get("warmup", True) else " (one run, no warm-up)"
            print(f"| {fmt} | 1 x {r['tokens']}{note} | {r['ms']:.1f} | {r['tok_s']:.0f} |")
    print("\n| batch | NVFP4 / fp8 speed | fp8 / NVFP4 bytes per step | speed / byte ratio (goal >= 0.8) |")
    print("|---|---|---|---|")
    for b in sorted({b for f, b in by if f == "fp8"}):
        f8, n4 = by.get(("fp8", b)), by.get(("nvfp4", b))
        if not (f8 and n4):
            continue
        speed, byte_ratio = n4["tok_s"] / f8["tok_s"], f8["bytes_per_step"] / n4["bytes_per_step"]
        summary["ratios"].append({"batch": b, "speed_ratio": speed, "byte_ratio": byte_ratio, "of_byte_ratio": speed / byte_ratio})
        print(f"| {b} | {speed:.2f}x | {byte_ratio:.2f}x | {speed / byte_ratio:.2f} |")
    print("\nFloor: the bytes a decode step must read (the weights as stored on the GPU, quantised with their "
          "scales: all but the routed experts once, plus the experts the batch's tokens choose, expected under "
          "uniform routing; plus the batch's cached KV rows at the mean context) over the measured copy bandwidth.")
    if missing:
        print(f"\nMISSING: {', '.join(missing)}")
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    sys.exit(1 if missing else 0)


if __name__ == "__main__":
    main()
