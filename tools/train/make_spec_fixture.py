#!/usr/bin/env python3
"""Writes tests/spec/fixtures/dflash_pair: a tiny random glm4_moe_lite target and DFlash drafter
(fp32, seeded) from this folder's PyTorch code, plus golden.json with what that code computes:
the target's logits and captured features for a prompt, and the drafter's proposal logits for an
anchor after it. The C++ test (tests/spec/golden_test.cpp) must reproduce them, which ties the
training code to tandem-serve's model and drafter (and so to transformers, which the engine's own
goldens check). Runs on the CPU with torch only:  python3 make_spec_fixture.py OUT_DIR"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_io  # noqa: E402
from dflash_draft import DFlashDrafter, propose  # noqa: E402
from glm_lite import GlmLite, make_config  # noqa: E402


def main():
    out = sys.argv[1]
    torch.manual_seed(1234)
    V, H = 320, 64
    cfg = make_config(V, H, 3, 2, 96, 4, 32, 2, {1, 2}, max_pos=512, eos=1, bos=0)
    cfg.update({"qk_nope_head_dim": 16, "qk_rope_head_dim": 16, "v_head_dim": 16, "qk_head_dim": 32,
                "routed_scaling_factor": 1.5, "dtype": "float32"})
    target = GlmLite(cfg)
    with torch.no_grad():  # larger weights than training's init, so the logits are far from uniform
        for name, p in target.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.2)
            elif "norm" in name:
                p.uniform_(0.5, 1.5)
        for layer in target.model.layers:
            if hasattr(layer.mlp, "gate"):
                layer.mlp.gate.e_score_correction_bias.normal_(0, 0.1)
    dcfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": H, "num_hidden_layers": 2,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": V,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "num_target_layers": 3,
            "dflash_config": {"block_size": 6, "mask_token_id": V - 1, "target_layer_ids": [0, 2]}}
    drafter = DFlashDrafter(dcfg)
    with torch.no_grad():
        for name, p in drafter.named_parameters():
            if p.dim() == 2:
                p.normal_(0, 0.15)
            else:
                p.uniform_(0.5, 1.5)
    target.eval()
    drafter.eval()

    prompt = torch.tensor([5, 17, 200, 33, 90, 6, 250, 41, 12], dtype=torch.long)
    anchor = 77
    with torch.no_grad():
        logits, feats = target(prompt[None], capture=[0, 2])
        ctx = drafter.fuse(feats)
        n = 5
        block = torch.full((1, n + 1), V - 1, dtype=torch.long)
        block[0, 0] = anchor
        start = prompt.numel()
        h = drafter.run(target.model.embed_tokens(block), ctx, torch.arange(start, start + n + 1), torch.arange(start),
                        torch.ones(n + 1, start + n + 1, dtype=torch.bool))
        draft_logits = target.lm_head(h[:, 1:])[0]
        greedy = propose(drafter, target.model.embed_tokens, target.lm_head, ctx, anchor, start, n)

    tdir, ddir = os.path.join(out, "target"), os.path.join(out, "drafter")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    hf_io.write_json(os.path.join(tdir, "config.json"), cfg)
    hf_io.save_weights(tdir, dict(target.state_dict()), dtype=torch.float32)
    hf_io.write_json(os.path.join(ddir, "config.json"), dcfg)
    hf_io.save_weights(ddir, dict(drafter.state_dict()), dtype=torch.float32)
    r = lambda t: [round(float(x), 7) for x in t.reshape(-1)]  # noqa: E731
    hf_io.write_json(os.path.join(out, "golden.json"), {
        "prompt": prompt.tolist(), "anchor": anchor, "n": n,
        "last_logits": r(logits[0, -1]), "features": r(torch.cat(feats, -1)[0]),
        "draft_logits": r(draft_logits), "draft_greedy": greedy.tolist()})
    print("wrote", out)


if __name__ == "__main__":
    main()
