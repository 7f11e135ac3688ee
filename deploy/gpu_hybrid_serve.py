#!/usr/bin/env python3
"""tandem-serve --device cuda with a hybrid model (glm5_next_text: recurrent state slots on the
device beside the paged pool), end to end over HTTP, on the GPU machine.

    python3 deploy/gpu_hybrid_serve.py SERVE_DIR FIXTURES_DIR OUT_DIR

SERVE_DIR holds tandem-serve and, in SERVE_DIR/lib, the shared libraries the GPU machine lacks
(deploy/gpu-prepare.sh makes it). For each glm5_next fixture (dense and sparse indexer):
  1. its golden prompts, all at once: the greedy completions must equal transformers' greedy
     continuations in golden.json, token for token;
  2. 12 prompts at once on --max-num-seqs 4: every state slot in use, requests queued behind
     them; the answers must equal the same prompts sent one at a time.
TANDEM_DEVICE=cpu runs the same on the CPU reference path (a check of the script itself).
The fixtures have no tokenizer: a copy gets one whose ids are single characters (U+0100 + id), so
prompts and completions are exact token ids. Exit status 0 only when every comparison holds.
"""
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

BASE = 0x100


def tokenizer(vocab_size):
    vocab = {chr(BASE + i): i for i in range(vocab_size)}
    return {"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": None,
            "post_processor": None, "decoder": None,
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                      "ignore_merges": False, "vocab": vocab, "merges": []}}


def complete(port, ids, n):
    body = json.dumps({"prompt": "".join(chr(BASE + i) for i in ids), "max_tokens": n, "temperature": 0,
                       "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"Content-Type": "application/json"})
    doc = json.loads(urllib.request.urlopen(req, timeout=120).read())
    return [ord(c) - BASE for c in doc["choices"][0]["text"]]


def wait_health(port, proc):
    for _ in range(120):
        if proc.poll() is not None:
            return False
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return True
        except Exception:
            time.sleep(0.5)
    return False


def main():
    serve_dir, fixtures, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(
        [os.path.join(serve_dir, "lib"), "/usr/local/cuda/lib64", os.environ.get("LD_LIBRARY_PATH", "")]))
    failures = 0
    for port, case in ((8131, "glm5_next_text"), (8132, "glm5_next_text_sparse")):
        model = f"/tmp/{case}"
        shutil.rmtree(model, ignore_errors=True)
        os.makedirs(model)
        for f in ("config.json", "model.safetensors"):
            shutil.copy(os.path.join(fixtures, case, f), model)
        cfg = json.load(open(os.path.join(model, "config.json")))
        json.dump(tokenizer(cfg["vocab_size"]), open(os.path.join(model, "tokenizer.json"), "w"))
        golden = json.load(open(os.path.join(fixtures, case, "golden.json")))["sequences"]
        log = open(os.path.join(out, f"serve-{case}.log"), "w")
        proc = subprocess.Popen([os.path.join(serve_dir, "tandem-serve"), model, "--device", os.environ.get("TANDEM_DEVICE", "cuda"), "--port", str(port),
                                 "--max-model-len", "256", "--max-num-seqs", "4", "--kv-cache-memory", "64MiB"],
                                stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            if not wait_health(port, proc):
                print(f"{case}: server did not come up")
                failures += 1
                continue
            with ThreadPoolExecutor(16) as pool:
                got = list(pool.map(lambda s: complete(port, s["input_ids"], len(s["greedy"])), golden))
            same = sum(g == s["greedy"] for g, s in zip(got, golden))
            print(f"{case}: golden prompts at once: {same} of {len(golden)} greedy continuations equal transformers'")
            failures += same != len(golden)
            prompts = [golden[i % len(golden)]["input_ids"] + [(17 * i + 5) % 200 + 4] * (i // len(golden))
                       for i in range(12)]
            alone = [complete(port, p, 24) for p in prompts]
            t0 = time.time()
            with ThreadPoolExecutor(12) as pool:
                together = list(pool.map(lambda p: complete(port, p, 24), prompts))
            same = sum(a == b for a, b in zip(alone, together))
            print(f"{case}: 12 prompts at once on 4 state slots ({time.time() - t0:.2f} s): {same} of 12 equal "
                  f"their answers alone")
            failures += same != 12
        except Exception as e:
            print(f"{case}: {e!r}")
            failures += 1
        finally:
            proc.terminate()
            proc.wait()
            log.close()
        for line in open(os.path.join(out, f"serve-{case}.log")):
            if "pool" in line or "error" in line:
                print("  " + line.rstrip())
    print("PASS" if failures == 0 else f"FAIL: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
