#!/usr/bin/env python3
"""The benchmark model and the Hugging Face side of the comparison (engine/bench, run by deploy/gpu-bench.sh).

--write DIR: a glm4_moe_lite of about 2 B parameters with random weights (transformers' own init,
seeded), saved as bf16 safetensors with save_pretrained; the shape follows GLM-4.7-Flash (MLA with a
512 latent, 64-dim rope, sigmoid-routed experts with a shared expert) with fewer layers and experts.
Then times transformers on the same GPU: prefill tokens/s (one prompt of --prompt tokens per forward)
and decode tokens/s of generate() at each batch size (greedy, exactly --decode new tokens; decode
time = time(decode tokens) - time(1 token), so prefill is left out). Writes --json.
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
    max_position_embeddings=4096, rms_norm_eps=1e-5, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--decode", type=int, default=128)
    ap.add_argument("--batches", default="1,4,16")
    a = ap.parse_args()
    t0 = time.perf_counter()
    model = write_model(a.write).eval()
    params = sum(p.numel() for p in model.parameters())
    print(f"model {a.write}: {params / 1e9:.2f} B parameters, ready in {time.perf_counter() - t0:.1f} s "
          f"(attention: {model.config._attn_implementation})", flush=True)
    gen = torch.Generator().manual_seed(5)
    V = model.config.vocab_size
    out = {"transformers": __import__("transformers").__version__, "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name(0), "params": params, "prompt": a.prompt, "decode_steps": a.decode}
    with torch.inference_mode():
        ids = torch.randint(3, V, (1, a.prompt), generator=gen).cuda()
        model(ids)  # warm-up
        runs = 3
        s = sum(timed(lambda: model(torch.randint(3, V, (1, a.prompt), generator=gen).cuda())) for _ in range(runs))
        out["prefill_tok_s"] = a.prompt * runs / s
        print(f"prefill: {out['prefill_tok_s']:.0f} tokens/s", flush=True)
        out["decode"] = []
        for b in [int(x) for x in a.batches.split(",")]:
            ids = torch.randint(3, V, (b, a.prompt), generator=gen).cuda()
            kw = dict(do_sample=False, pad_token_id=2, eos_token_id=None)
            model.generate(ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
            t1 = timed(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw))
            tn = timed(lambda: model.generate(ids, max_new_tokens=a.decode, min_new_tokens=a.decode, **kw))
            tps = b * (a.decode - 1) / (tn - t1)
            out["decode"].append({"batch": b, "tok_s": tps, "ms_per_step": 1e3 * (tn - t1) / (a.decode - 1)})
            print(f"decode batch {b}: {tps:.0f} tokens/s", flush=True)
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
