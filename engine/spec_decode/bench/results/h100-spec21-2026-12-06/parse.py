#!/usr/bin/env python3
"""spec21: the step costs and speed rows of each variant's gpu-dflash.txt under DIR, as JSON and a
markdown table (usage: parse.py DIR > table.md; writes DIR/costs.json)."""
import json, os, re, sys

d = sys.argv[1]
out = {}
for v in sorted(os.listdir(d)):
    f = os.path.join(d, v, "gpu-dflash.txt")
    if not os.path.isfile(f):
        continue
    t = open(f).read()
    r = {"status": open(os.path.join(d, v, "status.txt")).read().strip() if os.path.exists(os.path.join(d, v, "status.txt")) else "?"}
    for m in re.finditer(r"\| batch (\d+), k 7 \| t_plain ([\d.]+) ms \(eager ([\d.]+)\) \| t_draft ([\d.]+) ms \(eager ([\d.]+)\) \| t_verify ([\d.]+) ms \(eager ([\d.]+)\)", t):
        b = m.group(1)
        r.setdefault(b, {}).update(t_plain=float(m.group(2)), t_draft=float(m.group(4)), t_draft_eager=float(m.group(5)),
                                   t_verify=float(m.group(6)))
    for m in re.finditer(r"\| batch (\d+), k 7 \| context rows: plain step \+ rows [\d.]+ ms \(\+([\d.]+)\) \| verify forward alone ([\d.]+) ms \(rows \+([\d.-]+)\)", t):
        r.setdefault(m.group(1), {}).update(context_rows=float(m.group(4)), verify_forward=float(m.group(3)))
    for m in re.finditer(r"\| batch (\d+), k 7 \| ratios to t_plain: verify ([\d.]+)x .*?mixed verify ([\d.]+)x, proposal ([\d.]+)x", t):
        r.setdefault(m.group(1), {}).update(verify_ratio=float(m.group(2)), mixed_ratio=float(m.group(3)), proposal_ratio=float(m.group(4)))
    for m in re.finditer(r"\| batch (\d+), k 7 \| tokens read back instead of logits: t_plain ([\d.]+) ms, t_verify ([\d.]+) ms, ratio ([\d.]+)x", t):
        r.setdefault(m.group(1), {}).update(greedy_verify_ratio=float(m.group(4)))
    r["speed"] = [l for l in t.splitlines() if re.match(r"^\| (code|json|prose) \|", l)]
    r["check"] = [l.strip() for l in t.splitlines() if re.match(r"^(PASS|FAIL)", l.strip())]
    out[v] = r
json.dump(out, open(os.path.join(d, "costs.json"), "w"), indent=1)
print("| variant | batch | t_plain ms | t_draft ms (ratio) | t_verify ms (ratio) | verify forward alone | its context rows | greedy-readback verify ratio | check |")
print("|---|---|---|---|---|---|---|---|---|")
for v, r in out.items():
    for b in ("1", "6"):
        if b not in r:
            continue
        x = r[b]
        print(f"| {v} | {b} | {x.get('t_plain', 0):.3f} | {x.get('t_draft', 0):.3f} ({x.get('proposal_ratio', 0):.2f}x) | "
              f"{x.get('t_verify', 0):.3f} ({x.get('verify_ratio', 0):.2f}x) | {x.get('verify_forward', 0):.3f} | "
              f"{x.get('context_rows', 0):.3f} | {x.get('greedy_verify_ratio', 0):.2f}x | {(r['check'] or ['?'])[0]} |")
