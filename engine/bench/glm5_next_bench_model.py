#!/usr/bin/env python3
"""A random glm5_next_text benchmark model: transformers' default Glm5NextTextConfig, scaled down.

    python3 engine/bench/glm5_next_bench_model.py OUT_DIR [--layers 8] [--max-params 2.5e9]

On the GPU machine (PyTorch and transformers with glm5_next). The shape is the default config's
(hidden size, heads, KDA, DSA and indexer sizes, hyper-connections, expert width and top-k,
vocabulary) with the first --layers layers of its layer pattern and the routed experts halved until
the model has at most --max-params parameters. Weights: transformers' own init, seeded, stored in
bf16 (save_pretrained). Prints the default shape and what was scaled, as JSON (OUT_DIR/shape.json).
"""
import argparse
import json
import os
import sys

import torch

# The fixture script's text model class: beside this file in the tree, or under the working directory
# (the repository root) when this file was copied elsewhere.
for root in (os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."), os.getcwd()):
    sys.path.insert(0, os.path.join(root, "tests", "model", "reference"))
from make_glm5_next_fixtures import build_config, text_causal_lm_class  # noqa: E402  (the text checkpoint's shape)


def params(config):
    cls = text_causal_lm_class()
    with torch.device("meta"):
        model = cls(config)
    return sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--max-params", type=float, default=2.5e9)
    args = ap.parse_args()
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig

    default = Glm5NextTextConfig()
    shape = {"default": {k: v for k, v in default.to_dict().items() if isinstance(v, (int, float, str, list, type(None)))}}
    cfg = default.to_dict()
    n = default.num_hidden_layers
    cfg["num_hidden_layers"] = args.layers
    for k, v in list(cfg.items()):  # per-layer lists (layer kinds, MLP kinds, indexer kinds)
        if k.endswith("_types") and isinstance(v, list) and len(v) == n:
            cfg[k] = v[: args.layers]
    cfg["architectures"] = ["Glm5NextTextCausalLM"]
    cfg["dtype"] = "bfloat16"
    config = build_config({k: v for k, v in cfg.items() if k not in ("model_type", "transformers_version")}, sys.stdout)
    # Halved while the groups still divide the experts and top-k finds enough of them.
    while (params(config) > args.max_params and config.n_routed_experts // 2 >= 2 * config.num_experts_per_tok and
           (config.n_routed_experts // 2) % max(config.n_group or 1, 1) == 0):
        config.n_routed_experts //= 2
    shape["scaled"] = {"num_hidden_layers": config.num_hidden_layers, "n_routed_experts": config.n_routed_experts,
                       "layer_types": getattr(config, "layer_types", None),
                       "mlp_layer_types": getattr(config, "mlp_layer_types", None), "params": params(config)}
    print(json.dumps(shape["scaled"]))
    torch.manual_seed(1234)
    cls = text_causal_lm_class()
    with torch.device("cuda"):
        model = cls._from_config(config, dtype=torch.bfloat16)
    model.config.architectures = ["Glm5NextTextCausalLM"]
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir)
    with open(os.path.join(args.out_dir, "shape.json"), "w") as f:
        json.dump(shape, f, indent=1, default=str)


if __name__ == "__main__":
    main()
