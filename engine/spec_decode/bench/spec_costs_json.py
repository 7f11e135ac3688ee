#!/usr/bin/env python3
"""The step costs of tandem_spec_bench --probe and its speed table's rows as JSON, per run: each
argument a file (tandem_spec_bench's output, or gpu-dflash.sh's gpu-dflash.txt) or a directory of
gpu-spec-ab.sh's results (DIR/<variant>/gpu-dflash.txt). Usage: spec_costs_json.py PATH... > costs.json"""
import json
import os
import re
import sys

NUM = r"([0-9.]+)"


def probe(text):
    out = {}
    for m in re.finditer(r"\| batch (\d+), k \d+ \| t_plain " + NUM + r" ms \(eager " + NUM + r"\) \| t_draft " + NUM +
                         r" ms \(eager " + NUM + r"\) \| t_verify " + NUM + r" ms \(eager " + NUM + r"\)", text):
        b = out.setdefault(m.group(1), {})
        b.update(t_plain=float(m.group(2)), t_draft=float(m.group(4)), t_verify=float(m.group(6)),
                 e_plain=float(m.group(3)), e_draft=float(m.group(5)), e_verify=float(m.group(7)))
    for m in re.finditer(r"\| batch (\d+), k \d+ \| context rows: plain step \+ rows " + NUM + r" ms \(\+" + NUM +
                         r"\) \| verify forward alone " + NUM + r" ms \(rows \+" + NUM + r"\) \| mixed lengths verify " + NUM, text):
        out.setdefault(m.group(1), {}).update(plain_with_rows=float(m.group(2)), verify_forward=float(m.group(4)),
                                               verify_rows=float(m.group(5)), mixed_verify=float(m.group(6)))
    for m in re.finditer(r"\| batch (\d+), k \d+ \| ratios to t_plain: verify " + NUM + r"x .*?mixed verify " + NUM +
                         r"x, proposal " + NUM + r"x", text):
        out.setdefault(m.group(1), {}).update(verify_ratio=float(m.group(2)), mixed_ratio=float(m.group(3)),
                                               proposal_ratio=float(m.group(4)))
    return out


def speed(text):
    rows = []
    for line in text.splitlines():
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 11 and c[0] in ("code", "json", "prose"):
            rows.append({"class": c[0], "batch": int(c[1]), "plain_tok_s": float(c[3]), "drafting": c[4],
                         "dflash_tok_s": float(c[5]), "speedup": c[6], "acceptance_length": c[7], "dflash_equals_plain": c[9]})
    return rows


def main():
    res = {}
    for path in sys.argv[1:]:
        runs = [(os.path.basename(path), path)] if os.path.isfile(path) else [
            (v, os.path.join(path, v, "gpu-dflash.txt")) for v in sorted(os.listdir(path))]
        for name, f in runs:
            if not os.path.isfile(f):
                continue
            text = open(f).read()
            st = os.path.join(os.path.dirname(f), "status.txt")
            status = open(st).read().strip() if os.path.isdir(path) and os.path.isfile(st) else None
            res[name] = {"status": status, "probe": probe(text), "speed": speed(text)}
    json.dump(res, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
