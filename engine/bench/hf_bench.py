#!/usr/bin/env python3
"""The benchmark model and the Hugging Face side of the comparison (engine/bench, run by deploy/gpu-bench.sh).

--write DIR: a glm4_moe_lite of about 2 B parameters with random weights (transformers' own init,
seeded), saved as bf16 safetensors with save_pretrained; the shape follows GLM-4.7-Flash (MLA with a
512 latent, 64-dim rope, sigmoid-routed experts with a shared expert) with fewer layers and experts.
Then times transformers on the same GPU: prefill tokens/s (one prompt of --prompt tokens per forward,
and of each --prefill length after the decode rows; only the last row's logits, as a server computes)
and decode tokens/s of generate() at each batch size (greedy, exactly --decode new tokens; decode
time = time(decode tokens) - time(1 token), so prefill is left out). Writes --json after every
measurement (a later failure or timeout keeps the earlier numbers; an error is recorded in it).
--compile: the same with a static KV cache and the forward under torch.compile(mode="reduce-overhead")
(CUDA graphs), each shape run twice untimed first (compile, then graph capture); eager is the default.
Prefills of 8192 tokens and more are timed once (seconds each).
"""
import argparse
import json
import os
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

CONFIG = dict(
    architectures=["Glm4MoeLiteForCausalLM"], model_type="glm4_moe_lite",
    vocab_size=151552, hidden_size=2048, intermediate_size=10240, num_hidden_layers=8,
    mlp_layer_types=["dense"] + ["sparse"] * 7,
    num_attention_heads=20, num_key_value_heads=20, q_lora_rank=768, kv_lora_rank=512,
    qk_nope_head_dim=192, qk_rope_head_dim=64, qk_head_dim=256, v_head_dim=256, rope_interleave=True,
    n_routed_experts=32, num_experts_per_tok=4, n_group=1, topk_group=1, moe_intermediate_size=768,
    n_shared_experts=1, norm_topk_prob=True, routed_scaling_factor=1.8,
    max_position_embeddings=202752, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    attention_bias=False, tie_word_embeddings=False, bos_token_id=0, eos_token_id=[1], pad_token_id=2,
    initializer_range=0.02, dtype="bfloat16",
)


def write_model(path):
    if os.path.exists(os.path.join(path, "config.json")):
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda")
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=1)
    config = AutoConfig.from_pretrained(path)
    torch.manual_seed(1234)
    with torch.device("cuda"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    return model


def timed(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def prefill_seconds(model, V, length, gen, warmups, runs):
    ids = torch.randint(3, V, (1, length), generator=gen).cuda()

    def run():
        try:
            model(ids, use_cache=False, logits_to_keep=1)
        except TypeError:  # a transformers without logits_to_keep
            model(ids, use_cache=False)
    for _ in range(warmups):
        run()
    return sum(timed(run) for _ in range(runs)) / runs


def compile_forward(model):
    """The forward under torch.compile(reduce-overhead) with a static cache in generate(); generate's
    own automatic compile is switched off so the forward is compiled once, here."""
    import torch._dynamo
    torch._dynamo.config.cache_size_limit = 64  # a recompile per batch size and prompt length
    model.generation_config.cache_implementation = "static"
    model.generation_config.disable_compile = True
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--batches", default="1,4,16", help="decode batch sizes; none: prefill only")
    ap.add_argument("--prefill", default="", help="more prefill lengths, e.g. 32768, after the decode rows")
    ap.add_argument("--compile", action="store_true", help="static cache + torch.compile(mode='reduce-overhead')")
    a = ap.parse_args()
    t0 = time.perf_counter()
    model = write_model(a.write).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"model {a.write}: {params / 1e9:.2f} B parameters, ready in {time.perf_counter() - t0:.1f} s "
          f"(attention: {model.config._attn_implementation})", flush=True)
    gen = torch.Generator().manual_seed(5)
    V = model.config.vocab_size
    out = {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "params": params, "prompt": a.prompt, "decode_steps": a.decode,
           "mode": "compiled" if a.compile else "eager", "attention": model.config._attn_implementation}

    def save():
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    warm = 2 if a.compile else 1  # compiled: the first call compiles, the second captures the graphs
    try:
        if a.compile:
            compile_forward(model)
        with torch.inference_mode():
            out["prefill_tok_s"] = a.prompt / prefill_seconds(model, V, a.prompt, gen, warm, 3)
            print(f"prefill: {out['prefill_tok_s']:.0f} tokens/s", flush=True)
            save()
            out["decode"] = []
            for b in [int(x) for x in a.batches.split(",") if x not in ("", "none")]:  # none: prefill only
                ids = torch.randint(3, V, (b, a.prompt), generator=gen).cuda()
                kw = dict(do_sample=False, pad_token_id=2, eos_token_id=None)
                for _ in range(warm):  # warm-up: every shape a timed run meets (prefill, decode step)
                    model.generate(ids, max_new_tokens=a.decode, min_new_tokens=a.decode, **kw)
                t1 = timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw))
                tn = timed(lambda: model.generate(ids, max_new_tokens=a.decode, min_new_tokens=a.decode, **kw))
                tps = b * (a.decode - 1) / (tn - t1)
                out["decode"].append({"batch": b, "tok_s": tps, "ms_per_step": 1e3 * (tn - t1) / (a.decode - 1)})
                print(f"decode batch {b}: {tps:.0f} tokens/s", flush=True)
                save()
            out["prefill"] = []
            for length in [int(x) for x in a.prefill.split(",") if x]:
                long_one = length >= 8192
                s = prefill_seconds(model, V, length, gen, warm if a.compile or not long_one else 0, 1 if long_one else 3)
                out["prefill"].append({"tokens": length, "ms": 1e3 * s, "tok_s": length / s, "runs": 1 if long_one else 3})
                print(f"prefill 1 x {length}: {1e3 * s:.1f} ms, {length / s:.0f} tokens/s", flush=True)
                save()
    except Exception as e:  # keep what was measured, say what failed, exit non-zero
        out["error"] = f"{type(e).__name__}: {e}"[:2000]
        save()
        print(f"FAILED ({out['mode']}): {out['error']}", flush=True)
        raise SystemExit(1)
    save()


if __name__ == "__main__":
    main()
