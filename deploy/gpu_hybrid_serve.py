#!/usr/bin/env python3
"""tandem-serve --device cuda with a hybrid model (glm5_next_text: recurrent state slots on the
device beside the paged pool), end to end over HTTP, on the GPU machine.

    python3 deploy/gpu_hybrid_serve.py SERVE_DIR FIXTURES_DIR OUT_DIR

SERVE_DIR holds tandem-serve and, in SERVE_DIR/lib, the shared libraries the GPU machine lacks
(deploy/gpu-prepare.sh makes it). For each glm5_next fixture (dense and sparse indexer):
  1. its golden prompts, all at once: the greedy completions must equal transformers' greedy
     continuations in golden.json, token for token;
  2. 12 prompts at once on --max-num-seqs 4: every state slot in use, requests queued behind
     them; the answers must equal the same prompts sent one at a time;
  3. the same 12 prompts at once with a random DFlash drafter (--speculative-config, 7 drafts a
     step, nearly all rejected): the answers must equal plain decoding's, so every rejected
     draft was rolled out of the recurrent states on the device; /metrics shows the drafts;
  4. prefix caching of the recurrent state: the 12 prompts again, one at a time: the answers must
     equal the first ones, and the prompts longer than a block resume from the state kept at
     their last block boundary (tandem_prefix_cache_hit_tokens_total grows by that much);
  5. tensor parallelism (TP2: a worker rank and a head, both on this machine's one GPU through
     the host-staged transport): phases 1, 2 and 4 again, then 3 against TP2's plain answers
     (the worker must roll rejected drafts out of its part of the states too). TP2 sums each
     layer in another order than TP1, so its answers are compared with TP1's and reported, not
     required to match; transformers' greedy continuations are;
  6. the seed's --kv-cache-dtype fp8_e4m3 (TP1): phases 2, 4 and 3 again on an fp8 DSA pool (its
     scales calculated by the first request's step); phase 1's agreement with transformers is
     reported, not required (the pool's rounding moves these tiny models' logits).
TANDEM_DEVICE=cpu runs the same on the CPU reference path (a check of the script itself).
The fixtures have no tokenizer: a copy gets one whose ids are single characters (U+0100 + id), so
prompts and completions are exact token ids. Exit status 0 only when every comparison holds.
"""
import json
import os
import random
import shutil
import struct
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


def random_drafter(path, target_cfg, layers=(0, 2)):
    """A seeded random DFlash drafter for the target (z-lab's DFlashDraftModel layout, the shapes
    tests/spec/drafter_fixture.cpp writes): it accepts almost nothing, so it exercises rollback."""
    H, V, L, heads, kv, hd, inter = target_cfg["hidden_size"], target_cfg["vocab_size"], 2, 4, 2, 16, 96
    os.makedirs(path, exist_ok=True)
    json.dump({"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": L,
               "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": hd, "intermediate_size": inter,
               "vocab_size": V, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
               "attention_bias": False, "tie_word_embeddings": False,
               "num_target_layers": target_cfg["num_hidden_layers"],
               "dflash_config": {"block_size": 8, "mask_token_id": V - 1, "target_layer_ids": list(layers)}},
              open(os.path.join(path, "config.json"), "w"))
    rng = random.Random(7)
    t = {}

    def bf16(values):  # round to nearest even, then the high 16 bits of each float32
        out = bytearray()
        for v in values:
            u = struct.unpack("<I", struct.pack("<f", v))[0]
            out += struct.pack("<H", ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF)
        return bytes(out)

    def rnd(name, shape):
        t[name] = (shape, bf16(rng.gauss(0.0, 1.0) / shape[-1] ** 0.5 for _ in range(shape[0] * shape[1])))

    def ones(name, n):
        t[name] = ((n,), bf16([1.0] * n))

    rnd("fc.weight", (H, len(layers) * H))
    ones("hidden_norm.weight", H)
    ones("norm.weight", H)
    for l in range(L):
        p = f"layers.{l}."
        ones(p + "input_layernorm.weight", H)
        ones(p + "post_attention_layernorm.weight", H)
        rnd(p + "self_attn.q_proj.weight", (heads * hd, H))
        rnd(p + "self_attn.k_proj.weight", (kv * hd, H))
        rnd(p + "self_attn.v_proj.weight", (kv * hd, H))
        rnd(p + "self_attn.o_proj.weight", (H, heads * hd))
        ones(p + "self_attn.q_norm.weight", hd)
        ones(p + "self_attn.k_norm.weight", hd)
        rnd(p + "mlp.gate_proj.weight", (inter, H))
        rnd(p + "mlp.up_proj.weight", (inter, H))
        rnd(p + "mlp.down_proj.weight", (H, inter))
    # The safetensors layout by hand (8-byte header length, JSON header, raw little-endian data).
    header, at = {}, 0
    for name, (shape, raw) in t.items():
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    head = json.dumps(header).encode()
    head += b" " * (-len(head) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(len(head).to_bytes(8, "little") + head + b"".join(raw for _, raw in t.values()))


def metric(port, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name) and not line.startswith("#"))


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


class Server:
    """A tandem-serve process for the length of a `with` block; `up` says whether it answered."""

    def __init__(self, cmd, port, log, env):
        self.cmd, self.port, self.log, self.env = cmd, port, log, env

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        self.up = wait_health(self.port, self.proc)
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait()


def plain_phases(port, case, golden, exact=True):
    """Phases 1 and 2; returns the failures and the 12 prompts with their answers together.
    exact=False (an fp8 pool, whose rounding moves the logits): phase 1 is reported, not required."""
    with ThreadPoolExecutor(16) as pool:
        got = list(pool.map(lambda s: complete(port, s["input_ids"], len(s["greedy"])), golden))
    same = sum(g == s["greedy"] for g, s in zip(got, golden))
    print(f"{case}: golden prompts at once: {same} of {len(golden)} greedy continuations equal transformers'"
          + ("" if exact else " (reported)"))
    failures = exact and same != len(golden)
    prompts = [golden[i % len(golden)]["input_ids"] + [(17 * i + 5) % 200 + 4] * (i // len(golden)) for i in range(12)]
    alone = [complete(port, p, 24) for p in prompts]
    t0 = time.time()
    with ThreadPoolExecutor(12) as pool:
        together = list(pool.map(lambda p: complete(port, p, 24), prompts))
    same = sum(a == b for a, b in zip(alone, together))
    print(f"{case}: 12 prompts at once on 4 state slots ({time.time() - t0:.2f} s): {same} of 12 equal their answers alone")
    return failures + (same != 12), prompts, together


def prefix_phase(port, case, prompts, first, block=16):
    """Phase 4: the failures. Each prompt resumes at its last block boundary below its length."""
    before = metric(port, "tandem_prefix_cache_hit_tokens_total")
    again = [complete(port, p, 24) for p in prompts]
    hits = metric(port, "tandem_prefix_cache_hit_tokens_total") - before
    want = sum((len(p) - 1) // block * block for p in prompts)
    same = sum(a == b for a, b in zip(again, first))
    print(f"{case}: the 12 prompts again, one at a time: {same} of 12 equal their first answers; "
          f"{hits:.0f} prompt tokens from the prefix cache (the kept states reach {want})")
    return int(same != 12 or hits != want)


def drafter_phase(port, case, prompts, plain):
    """Phase 3: the failures."""
    with ThreadPoolExecutor(12) as pool:
        drafted = list(pool.map(lambda p: complete(port, p, 24), prompts))
    same = sum(a == b for a, b in zip(drafted, plain))
    d, a = metric(port, "tandem_spec_decode_draft_tokens_total"), metric(port, "tandem_spec_decode_accepted_tokens_total")
    print(f"{case}: 12 prompts at once with a random drafter: {same} of 12 equal plain decoding's; {d:.0f} drafted, {a:.0f} accepted")
    return int(same != 12 or d == 0)


class Pair:
    """A TP2 tandem-serve group (worker rank 1, then the head) for the length of a `with` block."""

    def __init__(self, cmd, port, log, env):
        self.cmd, self.port, self.log, self.env = cmd, port, log, env

    def __enter__(self):
        group = ["--tensor-parallel-size", "2", "--nnodes", "2", "--master-addr", "127.0.0.1",
                 "--master-port", str(self.port + 100), "--rendezvous-timeout", "120s", "--peer-timeout", "20s"]
        worker = [a if a != str(self.port) else str(self.port + 200) for a in self.cmd]
        self.worker = subprocess.Popen(worker + group + ["--node-rank", "1", "--headless"], stdout=self.log,
                                       stderr=subprocess.STDOUT, env=self.env)
        self.head = subprocess.Popen(self.cmd + group + ["--node-rank", "0"], stdout=self.log, stderr=subprocess.STDOUT,
                                     env=self.env)
        self.up = wait_health(self.port, self.head)
        return self

    def __exit__(self, *exc):
        self.head.terminate()
        self.head.wait()
        try:
            self.worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.worker.kill()
            self.worker.wait()


def run_case(case, model, serve, spec, port, log, env, golden):
    """Phases 1-6 for one fixture; returns the failures."""
    failures, answers = 0, {}
    for tp, phase in ((1, "plain"), (1, "drafter"), (2, "plain"), (2, "drafter"), ("1 fp8", "plain"), ("1 fp8", "drafter")):
        fp8 = ["--kv-cache-dtype", "fp8_e4m3"] if tp == "1 fp8" else []
        cmd = serve + ["--port", str(port)] + fp8 + (spec if phase == "drafter" else [])
        name = f"{case} TP{tp}"
        if phase == "drafter" and (tp, "plain") not in answers:
            continue
        try:
            with (Pair if tp == 2 else Server)(cmd, port, log, env) as server:
                if not server.up:
                    print(f"{name} ({phase}): the server did not come up")
                    failures += 1
                    continue
                if phase == "plain":
                    f, prompts, together = plain_phases(port, name, golden, exact=not fp8)
                    f += prefix_phase(port, name, prompts, together)
                    answers[(tp, "plain")] = (prompts, together)
                else:
                    prompts, together = answers[(tp, "plain")]
                    f = drafter_phase(port, name, prompts, together)
                failures += f
        except Exception as e:
            print(f"{name} ({phase}): {e!r}")
            failures += 1
    if (1, "plain") in answers and (2, "plain") in answers:
        one, two = answers[(1, "plain")][1], answers[(2, "plain")][1]
        same = sum(a == b for a, b in zip(one, two))
        print(f"{case}: TP2's 12 answers against TP1's: {same} of 12 identical (reported; other sums)")
    return failures


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
        serve = [os.path.join(serve_dir, "tandem-serve"), model, "--device", os.environ.get("TANDEM_DEVICE", "cuda"),
                 "--host", "127.0.0.1", "--max-model-len", "256", "--max-num-seqs", "4", "--kv-cache-memory", "64MiB"]
        drafter = f"/tmp/{case}-drafter"
        random_drafter(drafter, cfg)
        spec = ["--speculative-config", '{"method":"dflash","model":"%s","num_speculative_tokens":7}' % drafter]
        with open(os.path.join(out, f"serve-{case}.log"), "w") as log:
            failures += run_case(case, model, serve, spec, port, log, env, golden)
        for line in open(os.path.join(out, f"serve-{case}.log")):
            if "pool" in line or "error" in line:
                print("  " + line.rstrip())
    print("PASS" if failures == 0 else f"FAIL: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
