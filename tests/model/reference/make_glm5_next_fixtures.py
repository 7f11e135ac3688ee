#!/usr/bin/env python3
"""Golden fixtures for tandem's glm5_next_text CPU forward pass (tests/model).

Runs on the GPU machine (PyTorch and transformers 5.17; no internet needed), on its CPU:

    python3 tests/model/reference/make_glm5_next_fixtures.py OUT_DIR [--dump-sources FILE]

Same recipe as make_fixtures.py (tiny seeded random configs, weights ~ N(0, 1/fan_in) rounded to
the storage dtype, saved with save_pretrained, reloaded in fp32 eager mode for the reference), for
the GLM-5 "next" text stack: Kimi-style gated delta-rule linear attention, MLA with the DSA
lightning indexer, hyper-connection streams and the clamped-SwiGLU MoE.

Two cases, both committed (tests/model/fixtures/<case>):
  glm5_next_text         index_topk larger than any sequence, so the indexer keeps every key
                         (dense attention whichever indexer the installed transformers has);
                         forget gate with a lower bound (sigmoid form).
  glm5_next_text_sparse  index_topk 8 with k-pools of 4: the indexer drops keys, and its selection
                         matters (golden.json: dense_indexer_max_abs_diff up to 3.4); forget gate
                         without a lower bound (softplus form); 16 index heads. With 2 or 4 heads
                         the ReLU made many pool scores exactly 0 and every seed tried had 25-138
                         top-k boundaries between equal scores, where the answer is torch.topk's
                         sort order rather than the indexer's; with 16 heads there are none
                         (golden.json: indexer_ties, counted by IndexerTies; the C++ test
                         requires 0).

Per case OUT_DIR/<case>/ holds the model directory plus golden.json (input sequences, 16-token
greedy continuations through the cache, metadata, the chunked-prefill self-check of transformers)
and golden.safetensors (fp32 logits "seq<i>.logits" [T, V] for every position).

--dump-sources FILE writes the transformers sources the fixtures follow, for reading on the CPU
machine (the reference moves between releases; the fixtures are what the installed one does).
"""
import json
import math
import os
import sys
import traceback

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import round_to, run_cases, write_golden  # noqa: E402  (same recipe, same files)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

COMMON = dict(
    vocab_size=256, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
    num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4,
    n_shared_experts=1, n_routed_experts=8, routed_scaling_factor=2.5,
    kv_lora_rank=32, q_lora_rank=48, qk_rope_head_dim=0, v_head_dim=16, qk_nope_head_dim=24,
    n_group=2, topk_group=1, num_experts_per_tok=2, norm_topk_prob=True,
    hidden_act="silu", max_position_embeddings=512, rms_norm_eps=1e-5,
    layer_types=["linear_attention", "deepseek_sparse_attention", "linear_attention",
                 "deepseek_sparse_attention"],
    mlp_layer_types=["dense", "sparse", "sparse", "dense"],
    index_n_heads=2, index_head_dim=16,
    swiglu_limit=1.5,
    linear_head_dim=16, linear_num_heads=2, linear_conv_kernel_dim=4,
    hc_mult=4, hc_eps=1e-6, hc_sinkhorn_iters=20,
    attention_bias=False, tie_word_embeddings=False,
    bos_token_id=0, eos_token_id=[1, 2], pad_token_id=3,
)

CASES = {
    "glm5_next_text": dict(
        storage=torch.bfloat16,
        config=dict(COMMON, index_topk=128, index_kpool=4, index_kpool_always_select_tail=True,
                    linear_lower_bound=-5.0),
    ),
    # 16 index heads: a pool scores exactly 0 only when all 16 ReLUs are 0 (about 2^-16 of the time
    # against 2^-2 with 2 heads), so the top-k boundaries fall between distinct scores.
    "glm5_next_text_sparse": dict(
        storage=torch.bfloat16,
        config=dict(COMMON, index_n_heads=16, index_topk=8, index_kpool=4, index_kpool_always_select_tail=True,
                    linear_lower_bound=None, hc_sinkhorn_iters=7, swiglu_limit=3.0,
                    num_experts_per_tok=3, n_group=1, norm_topk_prob=False,
                    routed_scaling_factor=1.7),
    ),
}

# The long sequence crosses transformers' 64-token KDA chunk and holds many k-pools.
SEQ_LENGTHS = [7, 12, 5, 70]
GREEDY_TOKENS = 16
CHUNK_SPLIT = 40  # chunked-prefill self-check: prefill 40 tokens, then the rest through the cache


def init_weights(model, gen):
    """Deterministic weights with O(1) activations: matrices ~ N(0, 1/fan_in), norms ~ 1 + N(0, 0.1^2)."""
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            if p.dim() == 1:
                if name.endswith(".bias"):
                    base = 0.0
                elif "norm" in name or name.endswith("hc.scale"):
                    base = 1.0
                else:
                    base = 0.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))
        for name, b in sorted(model.named_buffers()):
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.05 * torch.randn(b.shape, generator=gen))



def run(model, ids, past=None, seen=0):
    """One forward with an all-ones 2D attention mask over cache + new tokens, as generate() does."""
    mask = torch.ones(1, seen + ids.shape[1], dtype=torch.long)
    try:
        return model(input_ids=ids, attention_mask=mask, past_key_values=past, use_cache=True)
    except Exception:
        if past is not None:
            raise  # a failed call may have advanced the cache: no retry
        traceback.print_exc()
        return model(input_ids=ids, past_key_values=past, use_cache=True)


def greedy(model, ids, n):
    """Greedy decoding with the cache: one prefill, then one token at a time."""
    out = run(model, ids)
    past, seen = out.past_key_values, ids.shape[1]
    nxt = out.logits[:, -1].argmax(-1, keepdim=True)
    tokens = [int(nxt)]
    for _ in range(n - 1):
        out = run(model, nxt, past, seen)
        past, seen = out.past_key_values, seen + 1
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        tokens.append(int(nxt))
    return tokens


def logits_no_cache(model, ids):
    mask = torch.ones(1, ids.shape[1], dtype=torch.long)
    try:
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits
    except Exception:
        traceback.print_exc()
        return model(input_ids=ids, use_cache=False).logits


def greedy_no_cache(model, ids, n):
    seq = ids
    tokens = []
    for _ in range(n):
        nxt = logits_no_cache(model, seq)[:, -1].argmax(-1, keepdim=True)
        tokens.append(int(nxt))
        seq = torch.cat([seq, nxt], dim=1)
    return tokens


def build_config(cfg, log):
    from transformers.models.glm5_next.configuration_glm5_next import Glm5NextTextConfig
    try:
        return Glm5NextTextConfig(**cfg)
    except Exception as e:
        log.write(f"Glm5NextTextConfig(**cfg) failed: {e!r}; retrying with the fields it declares\n")
    known = set(getattr(Glm5NextTextConfig, "__annotations__", {}))
    dropped = sorted(k for k in cfg if k not in known)
    log.write(f"dropping {dropped}\n")
    return Glm5NextTextConfig(**{k: v for k, v in cfg.items() if k in known})


def text_causal_lm_class():
    """transformers has no text-only causal LM for glm5_next (only the multimodal wrapper):
    the text trunk under an untied head, the shape of a text checkpoint (model.*, lm_head.*)."""
    from torch import nn
    from transformers.modeling_outputs import CausalLMOutputWithPast
    from transformers.models.glm5_next import modeling_glm5_next as m

    class Glm5NextTextCausalLM(m.Glm5NextPreTrainedModel):
        config: m.Glm5NextTextConfig
        config_class = m.Glm5NextTextConfig
        base_model_prefix = "model"

        def __init__(self, config):
            super().__init__(config)
            self.model = m.Glm5NextTextModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
            self.post_init()

        def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None,
                    **kwargs):
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=past_key_values, use_cache=use_cache)
            return CausalLMOutputWithPast(logits=self.lm_head(out.last_hidden_state),
                                          past_key_values=out.past_key_values)

    return Glm5NextTextCausalLM


def build_model(config, log):
    from transformers import AutoModelForCausalLM
    try:
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager",
                                                dtype=torch.float32), AutoModelForCausalLM
    except Exception as e:
        log.write(f"AutoModelForCausalLM.from_config failed: {e!r}; using the text trunk + lm_head\n")
    cls = text_causal_lm_class()
    try:
        return cls._from_config(config, attn_implementation="eager", dtype=torch.float32), cls
    except Exception as e:
        log.write(f"_from_config failed: {e!r}; constructing directly\n")
    return cls(config).float(), cls


class IndexerTies:
    """Counts the indexer's top-k boundaries that fall between equal usable scores (the k-th and
    (k+1)-th largest equal and above the masked value): torch.topk's choice there is its sort
    algorithm's, which a golden fixture should not depend on."""

    def __enter__(self):
        self.ties = 0
        self.topk = torch.Tensor.topk
        outer = self

        def topk(t, k, dim=-1, largest=True, sorted=True):
            out = outer.topk(t, k, dim=dim, largest=largest, sorted=sorted)
            if largest and t.is_floating_point() and t.shape[dim] > k:
                top = outer.topk(t, k + 1, dim=dim).values
                kth, nxt = top.select(dim, k - 1), top.select(dim, k)
                outer.ties += int(((kth == nxt) & (nxt > torch.finfo(t.dtype).min)).sum())
            return out

        torch.Tensor.topk = topk
        return self

    def __exit__(self, *exc):
        torch.Tensor.topk = self.topk


def make_case(name, case, out_dir, log):
    from transformers import GenerationConfig
    seed = sum(map(ord, name))
    gen = torch.Generator().manual_seed(seed)
    config = build_config(case["config"], log)
    config._attn_implementation = "eager"
    log.write(f"{name}: config class {type(config).__name__}\n{config.to_json_string()}\n")
    torch.manual_seed(seed)
    model, loader = build_model(config, log)
    log.write(f"{name}: model class {type(model).__name__}\n")
    init_weights(model, gen)
    round_to(model, case["storage"])
    model.eval()

    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    model.generation_config = GenerationConfig(
        bos_token_id=case["config"]["bos_token_id"], eos_token_id=case["config"]["eos_token_id"],
        pad_token_id=case["config"]["pad_token_id"], do_sample=False)
    model.to(case["storage"]).save_pretrained(path, safe_serialization=True)

    try:
        ref = loader.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
        reloaded = True
    except Exception as e:
        log.write(f"{name}: from_pretrained failed ({e!r}); using the in-memory model in fp32\n")
        ref = model.to(torch.float32)
        reloaded = False
    ref.eval()
    # The reload must reproduce the rounded weights (a silent re-init would make the fixture lie).
    mem = {k: v.float() for k, v in model.to(torch.float32).state_dict().items()}
    mismatched = [k for k, v in ref.state_dict().items() if k in mem and not torch.equal(mem[k], v.float())]
    log.write(f"{name}: reloaded {reloaded}, params differing from the saved model: {mismatched[:8]}\n")

    # The same weights with an indexer that keeps every key: where the fixture's logits differ from
    # this model's, the indexer's selection is what the fixture checks.
    dense = None
    if case["config"]["index_topk"] < max(SEQ_LENGTHS):
        dense_cfg = build_config(dict(case["config"], index_topk=4096), log)
        dense_cfg._attn_implementation = "eager"
        dense, _ = build_model(dense_cfg, log)
        dense.load_state_dict(ref.state_dict())
        dense.eval()

    sequences, tensors = [], {}
    ties = IndexerTies()
    with torch.no_grad(), ties:
        for i, length in enumerate(SEQ_LENGTHS):
            ids = torch.randint(4, config.vocab_size, (1, length), generator=gen)
            logits = logits_no_cache(ref, ids)[0].float().contiguous()
            tensors[f"seq{i}.logits"] = logits
            entry = {"input_ids": ids[0].tolist()}
            if dense is not None:
                entry["dense_indexer_max_abs_diff"] = float((logits_no_cache(dense, ids)[0].float() - logits).abs().max())
            try:
                entry["greedy"] = greedy(ref, ids, GREEDY_TOKENS)
                entry["greedy_path"] = "cache"
            except Exception:
                log.write(f"{name} seq{i}: cached greedy failed\n{traceback.format_exc()}\n")
                entry["greedy"] = greedy_no_cache(ref, ids, GREEDY_TOKENS)
                entry["greedy_path"] = "recompute"
            try:
                entry["greedy_agrees_with_recompute"] = (
                    greedy_no_cache(ref, ids, GREEDY_TOKENS) == entry["greedy"])
            except Exception as e:
                log.write(f"{name} seq{i}: recompute greedy failed: {e!r}\n")
            if length > CHUNK_SPLIT:
                try:
                    first = run(ref, ids[:, :CHUNK_SPLIT])
                    rest = run(ref, ids[:, CHUNK_SPLIT:], first.past_key_values, CHUNK_SPLIT)
                    chunked = torch.cat([first.logits[0], rest.logits[0]]).float()
                    entry["hf_chunked_prefill_max_abs_diff"] = float((chunked - logits).abs().max())
                except Exception as e:
                    log.write(f"{name} seq{i}: chunked prefill failed: {e!r}\n")
            sequences.append(entry)
            log.write(f"{name} seq{i}: len {length} logits absmax {logits.abs().max():.3f} "
                      f"std {logits.std():.3f} {json.dumps({k: v for k, v in entry.items() if k != 'input_ids'})}\n")
    # Where the indexer's k-th and (k+1)-th pool scores are equal, transformers' choice is torch.topk's
    # sort order (the CPU path follows it: glm5_next_dsa.cpp); the count says how much the fixture
    # leans on that.
    log.write(f"{name}: indexer top-k boundaries between equal scores: {ties.ties}\n")
    write_golden(path, name, "glm5_next_text", seed, case["storage"], sequences, tensors, log,
                 indexer_ties=ties.ties)


SOURCE_MODULES = ["transformers.models.glm5_next.modeling_glm5_next",
                  "transformers.models.glm5_next.configuration_glm5_next",
                  "transformers.models.glm_moe_dsa.modeling_glm_moe_dsa",
                  "transformers.cache_utils",
                  "transformers.masking_utils",
                  "transformers.conversion_mapping",
                  "transformers.integrations.sdpa_attention"]


def main():
    return run_cases(CASES, make_case, "make_glm5_next_fixtures.log", SOURCE_MODULES)

if __name__ == "__main__":
    sys.exit(main())
