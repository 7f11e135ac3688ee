#!/usr/bin/env python3
"""A seeded glm4_moe model directory that tandem-serve can load: the glm4_moe fixture's shapes and
weight initialisation (make_fixtures.py), with the vocabulary and tokenizer of a model directory
that has one (tandem-serve --write-demo-model writes such a directory). For serving it end to end
on a GPU (deploy/gpu-serve-smoke.sh with SERVE_MODEL=OUT_DIR); random weights, so its text is
gibberish. Runs where PyTorch and transformers are (the GPU machine):

    python3 tests/model/reference/make_serve_model.py OUT_DIR TOKENIZER_DIR
"""
import json
import os
import shutil
import sys

import torch
from transformers import AutoConfig, AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import CASES, init_weights  # noqa: E402


def main():
    out_dir, tok_dir = sys.argv[1], sys.argv[2]
    tok_config = json.load(open(os.path.join(tok_dir, "config.json")))
    case = CASES["glm4_moe"]
    config = dict(case["config"], vocab_size=tok_config["vocab_size"],
                  max_position_embeddings=tok_config.get("max_position_embeddings", 4096))
    gen = torch.Generator().manual_seed(sum(map(ord, "glm4_moe serve")))
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("glm4_moe", **config), dtype=torch.float32)
    init_weights(model, gen)
    os.makedirs(out_dir, exist_ok=True)
    model.to(case["storage"]).save_pretrained(out_dir, safe_serialization=True)
    # The tokenizer, its chat template and the generation config (eos ids) of the other directory.
    for name in os.listdir(tok_dir):
        if name != "config.json" and not name.endswith((".safetensors", ".safetensors.index.json")):
            shutil.copy(os.path.join(tok_dir, name), os.path.join(out_dir, name))
    print(f"{out_dir}: glm4_moe, vocab {config['vocab_size']}, files {sorted(os.listdir(out_dir))}")


if __name__ == "__main__":
    main()
