#!/usr/bin/env python3
"""Golden fixtures for tandem's CPU reference forward pass (tests/model).

Runs on the GPU machine (it has PyTorch and transformers 5.17; no internet needed):

    python3 tests/model/reference/make_fixtures.py OUT_DIR [--dump-sources FILE]

For every case below it builds a tiny seeded random config, initialises the weights with a fixed
seed (scaled 1/sqrt(fan_in) so that logits are O(1), not degenerate), rounds them to the storage
dtype, saves the model with save_pretrained (safetensors) and then reloads it from disk in fp32
eager mode; the reference numbers come from that reloaded model, so they are exactly what our
loader sees. The reference runs on the CPU in fp32 (no TF32, deterministic).

Per case, OUT_DIR/<case>/ holds the HF model directory plus
  golden.json         input sequences, 16-token greedy continuations (KV cache on), metadata
  golden.safetensors  fp32 logits for every position of every sequence ("seq<i>.logits" [T, V])

The golden greedy tokens come from greedy() below (prefill, then one token at a time through the
KV cache, EOS not special). "generate_agrees" records a cross-check against model.generate(); that
call sets min_new_tokens, which suppresses EOS, so it disagrees exactly when greedy picks an EOS id
(glm4_moe_lite_variant seq0 picks id 1 at step 9).

--dump-sources FILE writes the transformers source the fixtures follow (modeling and configuration
of both architectures, rope and config utilities) for reading on the CPU machine.
"""
import argparse
import inspect
import json
import math
import os
import sys
import traceback

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

# Shared small geometry; each case overrides what its architecture needs.
CASES = {
    # GLM-4.7-Flash line: MLA with both LoRA paths, interleaved rotary, grouped sigmoid routing.
    "glm4_moe_lite": dict(
        model_type="glm4_moe_lite", storage=torch.float32, max_shard_size="400KB",
        config=dict(
            vocab_size=384, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4,
            n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=1.8,
            kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=8, v_head_dim=16, qk_nope_head_dim=16,
            n_group=2, topk_group=1, num_experts_per_tok=3, norm_topk_prob=True,
            hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
            rope_interleave=True, mlp_layer_types=["dense", "sparse", "sparse"],
            attention_bias=False, tie_word_embeddings=False,
            bos_token_id=0, eos_token_id=[1, 2], pad_token_id=3,
        ),
    ),
    # Same family, the other branches: no q LoRA (plain q_proj), rotate-half rotary, attention
    # bias, no top-k renormalisation, two shared experts, one group; stored as fp16.
    "glm4_moe_lite_variant": dict(
        model_type="glm4_moe_lite", storage=torch.float16, max_shard_size=None,
        config=dict(
            vocab_size=256, hidden_size=64, intermediate_size=80, moe_intermediate_size=24,
            num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2,
            n_shared_experts=2, n_routed_experts=6, routed_scaling_factor=2.5,
            kv_lora_rank=24, q_lora_rank=None, qk_rope_head_dim=8, v_head_dim=12, qk_nope_head_dim=12,
            n_group=1, topk_group=1, num_experts_per_tok=2, norm_topk_prob=False,
            hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 500.0},
            rope_interleave=False, mlp_layer_types=["dense", "sparse", "dense"],
            attention_bias=True, tie_word_embeddings=False,
            bos_token_id=0, eos_token_id=1, pad_token_id=None,
        ),
    ),
    # GLM-4.5/4.6 line: GQA, partial rotary, qk-norm, q/k/v bias, first_k_dense_replace; bf16.
    "glm4_moe": dict(
        model_type="glm4_moe", storage=torch.bfloat16, max_shard_size=None,
        config=dict(
            vocab_size=320, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
            n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
            n_group=2, topk_group=1, num_experts_per_tok=2, norm_topk_prob=True,
            first_k_dense_replace=1, use_qk_norm=True, attention_bias=True,
            hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-5,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            tie_word_embeddings=False,
            bos_token_id=0, eos_token_id=[1, 2], pad_token_id=3,
        ),
    ),
}

SEQ_LENGTHS = [7, 12, 5]
GREEDY_TOKENS = 16


def init_weights(model, gen):
    """Deterministic weights with O(1) activations: matrices ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1^2)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                base = 1.0 if "norm" in name else 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=gen))


def round_to(model, dtype):
    with torch.no_grad():
        for _, p in model.named_parameters():
            p.copy_(p.to(dtype).to(torch.float32))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(b.to(dtype).to(torch.float32))


def greedy(model, ids, n):
    """Greedy decoding with the KV cache: one prefill, then one token at a time."""
    out = model(input_ids=ids, use_cache=True)
    past = out.past_key_values
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    tokens = [int(nxt)]
    for _ in range(n - 1):
        out = model(input_ids=nxt, past_key_values=past, use_cache=True)
        past = out.past_key_values
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(int(nxt))
    return tokens


def make_case(name, case, out_dir, log):
    seed = sum(map(ord, name))
    gen = torch.Generator().manual_seed(seed)
    config = AutoConfig.for_model(case["model_type"], **case["config"])
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager", dtype=torch.float32)
    init_weights(model, gen)
    round_to(model, case["storage"])
    model.eval()

    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=case["config"]["bos_token_id"], eos_token_id=case["config"]["eos_token_id"],
        pad_token_id=case["config"]["pad_token_id"], do_sample=False)
    kwargs = {"safe_serialization": True}
    if case["max_shard_size"]:
        kwargs["max_shard_size"] = case["max_shard_size"]
    model.to(case["storage"]).save_pretrained(path, **kwargs)

    ref = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    ref.eval()
    sequences, tensors = [], {}
    with torch.no_grad():
        for i, length in enumerate(SEQ_LENGTHS):
            ids = torch.randint(4, config.vocab_size, (1, length), generator=gen)
            logits = ref(input_ids=ids, use_cache=False).logits[0].float().contiguous()
            tensors[f"seq{i}.logits"] = logits
            tokens = greedy(ref, ids, GREEDY_TOKENS)
            gen_ok = None
            try:
                g = ref.generate(ids, max_new_tokens=GREEDY_TOKENS, min_new_tokens=GREEDY_TOKENS,
                                 do_sample=False, use_cache=True)
                gen_ok = g[0, length:].tolist() == tokens
            except Exception as e:  # generate() is only a cross-check
                log.write(f"{name}: generate() failed: {e!r}\n")
            sequences.append({"input_ids": ids[0].tolist(), "greedy": tokens, "generate_agrees": gen_ok})
            log.write(f"{name} seq{i}: len {length} logits absmax {logits.abs().max():.3f} "
                      f"std {logits.std():.3f} greedy {tokens} generate_agrees {gen_ok}\n")
    write_golden(path, name, case["model_type"], seed, case["storage"], sequences, tensors, log)


def write_golden(path, name, model_type, seed, storage, sequences, tensors, log, **extra):
    """golden.safetensors (per-position fp32 logits) and golden.json beside the saved model, and a
    log of what the model directory holds (tensor names, dtypes and shapes, config.json)."""
    save_file(tensors, os.path.join(path, "golden.safetensors"))
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump({
            "case": name, "model_type": model_type, "seed": seed,
            "storage_dtype": str(storage).replace("torch.", ""),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "reference": "fp32 eager on CPU, from the saved checkpoint reloaded as fp32",
            "sequences": sequences, **extra,
        }, f, indent=1)
    log.write(f"{name}: files {sorted(os.listdir(path))}\n")
    from safetensors import safe_open
    for fn in sorted(os.listdir(path)):
        if fn.endswith(".safetensors") and not fn.startswith("golden"):
            with safe_open(os.path.join(path, fn), "pt") as f:
                for k in f.keys():
                    t = f.get_slice(k)
                    log.write(f"  {fn} {k} {t.get_dtype()} {t.get_shape()}\n")
    log.write(open(os.path.join(path, "config.json")).read() + "\n")


def dump_modules(dest, mods):
    """The installed transformers' sources of `mods`, for reading on a machine without it."""
    import importlib
    with open(dest, "w") as f:
        f.write(f"transformers {transformers.__version__} at {os.path.dirname(transformers.__file__)}\n")
        for m in mods:
            f.write(f"\n\n######## {m}\n")
            try:
                f.write(inspect.getsource(importlib.import_module(m)))
            except Exception as e:
                f.write(f"could not read: {e!r}\n")


def run_cases(cases, make_case, log_name, source_modules):
    """The command line both fixture scripts share: OUT_DIR [--dump-sources FILE] [--only CASE...];
    --dump-sources writes the sources of `source_modules`."""
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--dump-sources")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    if args.dump_sources:
        try:
            dump_modules(args.dump_sources, source_modules)
        except Exception:
            traceback.print_exc()
    os.makedirs(args.out_dir, exist_ok=True)
    failed = 0
    with open(os.path.join(args.out_dir, log_name), "w") as log:
        log.write(f"transformers {transformers.__version__} torch {torch.__version__}\n")
        for name, case in cases.items():
            if args.only and name not in args.only:
                continue
            try:
                make_case(name, case, args.out_dir, log)
            except Exception:
                failed += 1
                log.write(f"{name}: FAILED\n{traceback.format_exc()}\n")
            log.flush()
    sys.stdout.write(open(os.path.join(args.out_dir, log_name)).read())
    return 1 if failed else 0


SOURCE_MODULES = ["transformers.models.glm4_moe_lite.modeling_glm4_moe_lite",
                  "transformers.models.glm4_moe_lite.configuration_glm4_moe_lite",
                  "transformers.models.glm4_moe.modeling_glm4_moe",
                  "transformers.models.glm4_moe.configuration_glm4_moe",
                  "transformers.conversion_mapping",
                  "transformers.modeling_rope_utils",
                  "transformers.configuration_utils"]


def main():
    return run_cases(CASES, make_case, "make_fixtures.log", SOURCE_MODULES)

if __name__ == "__main__":
    sys.exit(main())
