#!/usr/bin/env python3
"""A glm4_moe_lite checkpoint as a GGUF for llama.cpp's peer benchmark (issue 22).

glm4_moe_lite (GLM-4.7-Flash) is DeepSeek-V3's math: MLA with a query LoRA (or none), a shared
rope part, sigmoid-scored routed experts with a correction bias, shared experts, dense first
layers. llama.cpp runs that as its `deepseek2` architecture, and the llama.cpp snapshot this
project can fetch has no glm4_moe converter, so this writes the same weights under deepseek2's
tensor names and keys, with the snapshot's own gguf-py (PYTHONPATH=<llama.cpp>/gguf-py).

Checked on the CPU (engine/bench/results/llamacpp-gguf-check-2026-12-06.md): the glm4_moe_lite
fixture with one expert group, written by this script in f32, gives llama.cpp's greedy tokens equal
to tandem-serve's, 12 of 12. What is not like for like: llama.cpp's deepseek2 routes without
expert groups (with n_group > 1 the outputs part after the first tokens; the benchmark model has
one group), and the vocabulary here is synthetic (the 256 byte tokens, one merge, then tokens
named <|tN|>: the benchmark feeds token ids, never text).

usage: llamacpp_gguf.py MODEL_DIR OUT.gguf [--dtype bf16|f16|f32]
"""
import argparse
import glob
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "train"))
import hf_raw  # noqa: E402  (the raw safetensors entries and GPT-2's byte alphabet, shared with training)

try:
    import gguf
except ImportError as e:
    sys.exit(f"llamacpp_gguf.py: cannot import gguf-py ({e}): run with PYTHONPATH=<llama.cpp>/gguf-py")

# Checkpoint name (after "model.layers.N.") -> GGUF name (after "blk.N."); experts handled apart.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight",
    "self_attn.q_a_layernorm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight",
    "self_attn.kv_a_proj_with_mqa.weight": "attn_kv_a_mqa.weight",
    "self_attn.kv_a_layernorm.weight": "attn_kv_a_norm.weight",
    "self_attn.kv_b_proj.weight": "attn_kv_b.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight",
    "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}
TOP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
# Kept in fp32 whatever --dtype says (llama.cpp reads norms, the router and its bias so).
F32_ALWAYS = ("_norm.weight", "ffn_gate_inp.weight", "exp_probs_b.bias")


def read_safetensors(model_dir):
    """name -> fp32 numpy array, for every tensor of the directory's model*.safetensors (else *.safetensors)."""
    files = sorted(glob.glob(os.path.join(model_dir, "model*.safetensors"))) or \
        sorted(glob.glob(os.path.join(model_dir, "*.safetensors")))
    if not files:
        sys.exit(f"llamacpp_gguf.py: no *.safetensors in {model_dir}")
    out = {}
    for path in files:
        for name, dtype, shape, raw in hf_raw.safetensors_entries(path):
            if dtype == "BF16":
                x = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
            elif dtype in ("F32", "F16"):
                x = np.frombuffer(raw, dtype=np.float32 if dtype == "F32" else np.float16).astype(np.float32)
            else:
                sys.exit(f"llamacpp_gguf.py: {path}: {name} is {dtype}; expected BF16, F16 or F32")
            out[name] = x.reshape(shape)
    return out


def experts(weights, layer, n_experts):
    """The layer's routed experts as [E, rows, cols] gate, up, down (fused or per-expert names)."""
    p = f"model.layers.{layer}.mlp.experts."
    if p + "gate_up_proj" in weights:  # transformers' fused layout: [E, 2I, H] and [E, H, I]
        gate_up = weights.pop(p + "gate_up_proj")
        inter = gate_up.shape[1] // 2
        return gate_up[:, :inter], gate_up[:, inter:], weights.pop(p + "down_proj")
    if p + "0.gate_proj.weight" not in weights:
        return None
    stack = lambda w: np.stack([weights.pop(f"{p}{e}.{w}_proj.weight") for e in range(n_experts)])
    return stack("gate"), stack("up"), stack("down")


def add(writer, name, x, dtype):
    if dtype == "f32" or name.endswith(F32_ALWAYS):
        writer.add_tensor(name, np.ascontiguousarray(x, dtype=np.float32))
    elif dtype == "f16":
        writer.add_tensor(name, np.ascontiguousarray(x, dtype=np.float16))
    else:
        q = gguf.quants.quantize(np.ascontiguousarray(x, dtype=np.float32), gguf.GGMLQuantizationType.BF16)
        writer.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.BF16)


def write_vocab(writer, vocab):
    """Byte tokens first (GPT-2's byte-to-character table, so "\\n" tokenizes), then <|tN|> names."""
    chars = hf_raw.bytes_to_unicode()
    if vocab < 257:
        sys.exit(f"llamacpp_gguf.py: a vocabulary of {vocab}: the byte tokens and one merge need 257")
    # llama.cpp's BPE loader needs at least one merge: bytes 0 and 1 into token 256.
    merge = chars[0] + chars[1]
    tokens = [chars[b] for b in range(256)] + [merge] + [f"<|t{i}|>" for i in range(257, vocab)]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([gguf.TokenType.NORMAL] * vocab)
    writer.add_token_merges([f"{chars[0]} {chars[1]}"])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(min(1, vocab - 1))


def convert(model_dir, out, dtype):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    if c.get("model_type") != "glm4_moe_lite":
        sys.exit(f"llamacpp_gguf.py: {model_dir}: model_type {c.get('model_type')!r}; expected 'glm4_moe_lite'")
    layers = c["num_hidden_layers"]
    kinds = c.get("mlp_layer_types") or ["dense"] * c.get("first_k_dense_replace", 1) + ["sparse"] * layers
    dense = next((i for i, k in enumerate(kinds[:layers]) if k != "dense"), layers)
    if any(k == "dense" for k in kinds[dense:layers]):
        sys.exit("llamacpp_gguf.py: deepseek2 takes dense layers only before the first MoE layer")
    rope = c.get("rope_parameters") or {}
    w = gguf.GGUFWriter(out, "deepseek2")
    w.add_name(os.path.basename(os.path.normpath(model_dir)))
    w.add_block_count(layers)
    w.add_context_length(c.get("max_position_embeddings", 4096))
    w.add_embedding_length(c["hidden_size"])
    w.add_feed_forward_length(c["intermediate_size"])
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_attention_heads"])
    w.add_rope_freq_base(rope.get("rope_theta", c.get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_expert_used_count(c["num_experts_per_tok"])
    w.add_leading_dense_block_count(dense)
    w.add_vocab_size(c["vocab_size"])
    if c.get("q_lora_rank"):
        w.add_q_lora_rank(c["q_lora_rank"])
    w.add_kv_lora_rank(c["kv_lora_rank"])
    w.add_key_length(c["qk_nope_head_dim"] + c["qk_rope_head_dim"])
    w.add_value_length(c["v_head_dim"])
    w.add_expert_feed_forward_length(c["moe_intermediate_size"])
    w.add_expert_count(c["n_routed_experts"])
    w.add_expert_shared_count(c["n_shared_experts"])
    w.add_expert_weights_scale(c.get("routed_scaling_factor", 1.0))
    w.add_expert_weights_norm(bool(c.get("norm_topk_prob", True)))
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_rope_dimension_count(c["qk_rope_head_dim"])
    w.add_rope_scaling_yarn_log_mul(0.0)  # read unconditionally by deepseek2; no rope scaling: mscale 1
    write_vocab(w, c["vocab_size"])

    weights = read_safetensors(model_dir)
    for src, dst in TOP_NAMES.items():
        if src in weights:
            add(w, dst, weights.pop(src), dtype)
    for layer in range(layers):
        routed = experts(weights, layer, c["n_routed_experts"])
        if routed is not None:
            for part, x in zip(("gate", "up", "down"), routed):
                add(w, f"blk.{layer}.ffn_{part}_exps.weight", x, dtype)
        prefix = f"model.layers.{layer}."
        for name in [n for n in weights if n.startswith(prefix)]:
            rest = name[len(prefix):]
            if rest not in LAYER_NAMES:
                sys.exit(f"llamacpp_gguf.py: {name}: no deepseek2 tensor for it")
            add(w, f"blk.{layer}.{LAYER_NAMES[rest]}", weights.pop(name), dtype)
    left = [n for n in weights if not re.match(r"model\.layers\.\d+\.", n) or int(n.split(".")[2]) >= layers]
    if left:
        print(f"llamacpp_gguf.py: left out (not in the text model): {left[:5]}{' ...' if len(left) > 5 else ''}")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {out} ({os.path.getsize(out) / 1e9:.2f} GB, {dtype}, deepseek2, {layers} layers, {dense} dense)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("out")
    ap.add_argument("--dtype", choices=["bf16", "f16", "f32"], default="bf16")
    a = ap.parse_args()
    convert(a.model_dir, a.out, a.dtype)


if __name__ == "__main__":
    main()
