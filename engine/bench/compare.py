#!/usr/bin/env python3
"""Before/after decode table from tandem-bench-cuda JSON files of one run (graph mode):
usage compare.py NAME=FILE.json [NAME=FILE.json ...]; the first is the baseline."""
import json
import sys


def main():
    runs = [(a.split("=", 1)[0], json.load(open(a.split("=", 1)[1]))) for a in sys.argv[1:]]
    graphs = [{d["batch"]: d for d in r["decode"] if d["mode"] == "graphs"} for _, r in runs]
    batches = sorted(set().union(*graphs))
    names = [n for n, _ in runs]
    print("| batch | " + " | ".join(f"{n} tok/s (ms/step)" for n in names) + " | floor tok/s | "
          + " | ".join(f"{n} % of floor" for n in names) + " | speed-up |")
    print("|---" * (2 * len(names) + 3) + "|")
    for b in batches:
        row = [graphs[i].get(b) for i in range(len(runs))]
        floor = next(d["floor_tok_s"] for d in row if d)
        cells = [f"{d['tok_s']:.0f} ({d['ms_per_step']:.3f})" if d else "" for d in row]
        pct = [f"{d['pct_of_floor']:.0f}%" if d else "" for d in row]
        up = f"{row[-1]['tok_s'] / row[0]['tok_s']:.2f}x" if row[0] and row[-1] else ""
        print(f"| {b} | " + " | ".join(cells) + f" | {floor:.0f} | " + " | ".join(pct) + f" | {up} |")


if __name__ == "__main__":
    main()
