#!/usr/bin/env python3
"""Load and soak against a tandem-serve endpoint: N streaming clients for a while, some of them
dropping mid-stream, malformed and slow (slowloris) requests mixed in, RSS of the given processes
sampled throughout. Python's standard library only, so it runs wherever the engine does.

Every well-formed request must come back 200 with an SSE stream that ends in one finish_reason
and [DONE]; every malformed one must be answered 4xx in OpenAI's error shape (a slow one must be
closed by the server). Prints a table and writes JSON; exits 1 when any check failed.

  soak_client.py --url http://127.0.0.1:18888 --clients 64 --seconds 600 \
      --pid head=1234 --pid worker=1240 --json soak.json
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time
import urllib.parse

MALFORMED = [
    # (name, raw body, expected status)
    ("invalid-utf8", b'{"messages":[{"role":"user","content":"hi\xff"}]}', 400),
    ("overlong-utf8", b'{"prompt":"\xc0\xaf"}', 400),
    ("number-overflow", b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":1e999}', 400),
    ("temperature-overflow", b'{"messages":[{"role":"user","content":"hi"}],"temperature":1e400}', 400),
    ("not-json", b'{"messages": [', 400),
    ("unknown-param", b'{"messages":[{"role":"user","content":"hi"}],"max_tokns":3}', 400),
    ("logprobs", b'{"messages":[{"role":"user","content":"hi"}],"logprobs":true,"top_logprobs":100}', 400),
    ("logit-bias", b'{"messages":[{"role":"user","content":"hi"}],"logit_bias":{"abc":1}}', 400),
    ("deep-nesting", b'{"messages":[{"role":"user","content":"hi","name":' + b"[" * 50000 + b"}]}", 400),
    ("bad-schema", b'{"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":'
                   b'{"name":"f","parameters":{"type":"nonsense"}}}]}', 400),
    ("wrong-types", b'{"messages":[{"role":"user","content":[{"type":5,"text":"a"}]}]}', 400),
    ("huge-int", b'{"prompt":"x","max_tokens":18446744073709551615}', 400),
]

PROMPTS = [
    "#include <stdio.h>\nint main(",
    "def fibonacci(n):\n    ",
    "The configuration file lists",
    "import json\n\nwith open(",
    "// Copyright",
]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latencies = []

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, what):
        with self.lock:
            self.counts["failures"] = self.counts.get("failures", 0) + 1
            if len(self.failures) < 50:
                self.failures.append(f"{time.strftime('%H:%M:%S')} {what}")


def well_formed(host, port, stats, rng, drop):
    chat = rng.random() < 0.5
    max_tokens = rng.randint(8, 48)
    if chat:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": rng.choice(PROMPTS)}], "max_tokens": max_tokens,
                "temperature": rng.choice([0, 0.7]), "stream": True}
    else:
        path = "/v1/completions"
        body = {"prompt": rng.choice(PROMPTS), "max_tokens": max_tokens, "temperature": rng.choice([0, 0.7]),
                "stream": True}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=300)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            stats.fail(f"well-formed {path}: HTTP {resp.status} {resp.read()[:200]!r}")
            return
        finishes, done, events = 0, False, 0
        for raw in resp:
            line = raw.decode("utf-8", "strict").rstrip("\r\n")
            if not line.startswith("data: "):
                continue
            payload = line[6:]
            if payload == "[DONE]":
                done = True
                break
            events += 1
            if drop and events >= 2:
                stats.count("dropped_mid_stream")
                resp.close()  # leave without reading the rest: the server must cancel it
                return
            chunk = json.loads(payload)
            if "error" in chunk:
                stats.fail(f"well-formed {path}: error event {payload[:200]}")
                return
            for c in chunk.get("choices", []):
                if c.get("finish_reason"):
                    finishes += 1
        if drop:
            stats.count("dropped_after_end")  # the answer was shorter than the drop point
        if not done or finishes != 1:
            stats.fail(f"well-formed {path}: stream ended without [DONE] or with {finishes} finish reasons")
            return
        stats.count("ok")
        with stats.lock:
            stats.latencies.append(time.monotonic() - t0)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if drop:
            stats.count("dropped_mid_stream")
            return
        stats.fail(f"well-formed {path}: {type(e).__name__}: {e}")
    finally:
        conn.close()


def malformed(host, port, stats, rng):
    name, raw, expected = rng.choice(MALFORMED)
    path = "/v1/completions" if b'"prompt"' in raw else "/v1/chat/completions"
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        conn.request("POST", path, raw, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        body = resp.read()
        err = json.loads(body.decode("utf-8"))
        if resp.status != expected or "error" not in err or "message" not in err["error"]:
            stats.fail(f"malformed {name}: HTTP {resp.status} {body[:200]!r}")
            return
        stats.count("malformed_refused")
    except (OSError, http.client.HTTPException, ValueError) as e:
        stats.fail(f"malformed {name}: {type(e).__name__}: {e}")
    finally:
        conn.close()


def slowloris(host, port, stats, limit_s):
    """Headers that never finish: the server must close the connection within limit_s."""
    t0 = time.monotonic()
    try:
        with socket.create_connection((host, port), timeout=limit_s + 30) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n")
            while True:
                if not s.recv(4096):
                    break
        took = time.monotonic() - t0
        if took > limit_s:
            stats.fail(f"slowloris held for {took:.1f}s (limit {limit_s}s)")
        else:
            stats.count("slowloris_closed")
    except OSError as e:
        stats.fail(f"slowloris: {type(e).__name__}: {e}")


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--drop-share", type=float, default=0.1, help="share of streams left mid-way")
    ap.add_argument("--malformed-share", type=float, default=0.1)
    ap.add_argument("--slowloris-every", type=float, default=15, help="seconds between slow connections")
    ap.add_argument("--slowloris-limit", type=float, default=15, help="seconds the server may hold one")
    ap.add_argument("--pid", action="append", default=[], help="NAME=PID whose RSS is sampled")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    pids = dict(p.split("=", 1) for p in a.pid)
    stats = Stats()
    deadline = time.monotonic() + a.seconds
    rss = {name: [] for name in pids}

    def client(i):
        rng = random.Random(i)
        while time.monotonic() < deadline:
            r = rng.random()
            if r < a.malformed_share:
                malformed(host, port, stats, rng)
            else:
                well_formed(host, port, stats, rng, drop=r < a.malformed_share + a.drop_share)

    def sampler():
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            for name, pid in pids.items():
                v = rss_kib(pid)
                if v is not None:
                    rss[name].append((round(time.monotonic() - t0, 1), v))
            time.sleep(5)

    def loris():
        while time.monotonic() < deadline:
            threading.Thread(target=slowloris, args=(host, port, stats, a.slowloris_limit), daemon=True).start()
            time.sleep(a.slowloris_every)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    threads += [threading.Thread(target=sampler), threading.Thread(target=loris)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0

    lat = sorted(stats.latencies)
    pct = lambda q: round(lat[min(len(lat) - 1, int(q * len(lat)))], 3) if lat else None
    rss_summary = {}
    for name, series in rss.items():
        if not series:
            continue
        values = [v for _, v in series]
        # "Flat": the last quarter's mean within 10% (or 16 MiB) of the second quarter's, after warm-up.
        q = max(1, len(values) // 4)
        early, late = values[q:2 * q] or values[:1], values[-q:]
        early_mean, late_mean = sum(early) / len(early), sum(late) / len(late)
        flat = late_mean <= early_mean * 1.10 or late_mean - early_mean <= 16 * 1024
        rss_summary[name] = {"first_kib": values[0], "max_kib": max(values), "last_kib": values[-1],
                             "early_mean_kib": round(early_mean), "late_mean_kib": round(late_mean), "flat": flat,
                             "samples": len(values), "series_s_kib": series}
        if not flat:
            stats.fail(f"RSS of {name} grew from {early_mean:.0f} to {late_mean:.0f} KiB")
    result = {"url": a.url, "clients": a.clients, "seconds": round(elapsed, 1), "counts": stats.counts,
              "latency_s": {"p50": pct(0.5), "p90": pct(0.9), "p99": pct(0.99), "max": lat[-1] if lat else None},
              "rss": rss_summary, "failures": stats.failures, "passed": not stats.counts.get("failures")}
    print(f"soak: {a.clients} clients for {elapsed:.0f} s against {a.url}")
    print(f"  {'well-formed ok':<24}{stats.counts.get('ok', 0):>8}")
    for k in ("dropped_mid_stream", "dropped_after_end", "malformed_refused", "slowloris_closed", "failures"):
        print(f"  {k:<24}{stats.counts.get(k, 0):>8}")
    print(f"  latency p50/p90/p99    {pct(0.5)} / {pct(0.9)} / {pct(0.99)} s")
    for name, r in rss_summary.items():
        print(f"  RSS {name:<8} first {r['first_kib'] / 1024:.1f} MiB, max {r['max_kib'] / 1024:.1f}, "
              f"last {r['last_kib'] / 1024:.1f} ({'flat' if r['flat'] else 'GROWING'})")
    for f in stats.failures[:20]:
        print("  FAIL", f)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0 if result["passed"] and stats.counts.get("ok", 0) > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
