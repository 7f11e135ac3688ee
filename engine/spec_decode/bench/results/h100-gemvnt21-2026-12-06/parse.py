#!/usr/bin/env python3
"""gpu-dflash.txt files -> JSON (probe step costs, ratios, checks, speed rows, drafter profile)."""
import json, re, sys

def parse(path):
    t = open(path).read()
    r = {"cuda_spec_check": None, "probe": {}, "speed": [], "drafter_profile": {}, "drafter_rows": []}
    m = re.search(r"^(PASS|FAIL)[^\n]*", t, re.M)
    r["cuda_spec_check"] = m.group(0) if m else None
    r["drafter_rows"] = re.findall(r"drafter: largest relative error of a draft row vs the CPU drafter ([0-9.e+-]+)", t)
    r["verify_bits"] = re.findall(r"verify: largest relative error of a block row vs decoding it alone ([0-9.e+-]+)", t)
    m = re.search(r"ERROR SUMMARY: (\d+) errors", t)
    if m: r["memcheck_errors"] = int(m.group(1))
    for m in re.finditer(r"\| batch (\d+), k 7 \| t_plain ([\d.]+) ms \(eager ([\d.]+)\) \| t_draft ([\d.]+) ms \(eager ([\d.]+)\) \| t_verify ([\d.]+) ms \(eager ([\d.]+)\)", t):
        b = m.group(1)
        r["probe"][b] = dict(zip(["t_plain_ms", "t_plain_eager_ms", "t_draft_ms", "t_draft_eager_ms", "t_verify_ms", "t_verify_eager_ms"],
                                 map(float, m.groups()[1:])))
    for m in re.finditer(r"\| batch (\d+), k 7 \| context rows: plain step \+ rows ([\d.]+) ms \([^)]*\) \| verify forward alone ([\d.]+) ms \([^)]*\) \| mixed lengths verify ([\d.]+) ms", t):
        r["probe"][m.group(1)].update(t_plain_with_context_ms=float(m.group(2)), t_verify_forward_ms=float(m.group(3)), t_mixed_verify_ms=float(m.group(4)))
    for b, p in r["probe"].items():
        p["verify_ratio"] = round(p["t_verify_ms"] / p["t_plain_ms"], 3)
        p["proposal_ratio"] = round(p["t_draft_ms"] / p["t_plain_ms"], 3)
    for m in re.finditer(r"^\| (code|json|prose) \| (\d+) \| (\d+) \| ([\d.]+) \| (fixed k|adaptive) \| ([\d.]+) \| ([\d.]+)x \| ([\d.]+) \| [\d.]+ \| (yes|NO) \|", t, re.M):
        r["speed"].append(dict(cls=m.group(1), batch=int(m.group(2)), plain_tok_s=float(m.group(4)), mode=m.group(5),
                               dflash_tok_s=float(m.group(6)), speedup=float(m.group(7)), acceptance_length=float(m.group(8)),
                               equal_to_plain=m.group(9) == "yes"))
    for sec in re.finditer(r"Drafter profile: an eager proposal of (\d+) x (\d+) rows.*?\n\n(.*?)(?:\n\n|\n\||\Z)", t, re.S):
        pass
    cur = None
    for line in t.splitlines():
        m = re.match(r"Drafter profile: an eager proposal of (\d+) x", line)
        if m: cur = m.group(1); r["drafter_profile"][cur] = {}; continue
        if cur and line.startswith("| ") and not line.startswith("| op") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 3:
                r["drafter_profile"][cur][cells[0]] = float(cells[2])
                if cells[0] == "total": cur = None
    return r

out = {}
for a in sys.argv[1:]:
    name, path = a.split("=", 1)
    out[name] = parse(path)
print(json.dumps(out, indent=1))
