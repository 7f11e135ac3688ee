"""A glm4_moe_lite decoder (GLM-4.7-Flash's architecture: multi-head latent attention, sigmoid-routed
MoE with a shared expert) in plain PyTorch, written from the architecture's description so that a
model trained here loads in tandem-serve (engine/model) and in transformers. Only what training
and our checks need, plus a plain KV cache for generating training rows in bulk (`greedy`)."""
import math

import torch
from torch import nn
from torch.nn import functional as F


def rms_norm(x, w, eps):
    x32 = x.float()
    y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return (y * w.float()).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


def sdpa(q, k, v, mask=None, causal=False):
    """softmax(q k^T / sqrt(d)) v over [B, heads, T, d]; mask: bool [Tq, Tk], True = visible.
    torch.nn.functional's fused kernel when this torch has it (2.x), else the same math by hand (1.13)."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
    s = (q @ k.transpose(-1, -2)).float() / math.sqrt(q.shape[-1])
    if causal:
        mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, -1).to(v.dtype)) @ v


def rope_angles(positions, dim, theta, device):
    inv = 1.0 / (theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
    ang = positions.float()[..., None] * inv  # [..., dim/2]
    return torch.cos(ang), torch.sin(ang)


def rope_half(x, cos, sin):
    """rotate_half layout: pairs (x[i], x[i + d/2]). x: [..., T, heads, d]; cos/sin: [..., T, d/2]."""
    h = x.shape[-1] // 2
    a, b = x[..., :h].float(), x[..., h:].float()
    c, s = cos[..., None, :], sin[..., None, :]
    return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)


def rope_interleaved(x, cos, sin):
    """DeepSeek/GLM-4.7-Flash layout: pairs (x[2i], x[2i+1]), written de-interleaved (as transformers)."""
    a, b = x[..., 0::2].float(), x[..., 1::2].float()
    c, s = cos[..., None, :], sin[..., None, :]
    return torch.cat([a * c - b * s, b * c + a * s], -1).to(x.dtype)


class Mlp(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Gate(nn.Module):
    def __init__(self, h, e):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(e, h))
        nn.init.normal_(self.weight, std=0.02)
        # Selection-only bias (aux-loss-free balancing); kept at zero here.
        self.register_buffer("e_score_correction_bias", torch.zeros(e))


class Moe(nn.Module):
    """noaux_tc routing with n_group = topk_group = 1: sigmoid scores, top-k of score + bias, weights
    are the unbiased scores renormalised (norm_topk_prob) times routed_scaling_factor."""

    def __init__(self, cfg):
        super().__init__()
        h, e = cfg["hidden_size"], cfg["n_routed_experts"]
        self.top_k, self.scale, self.norm = cfg["num_experts_per_tok"], cfg["routed_scaling_factor"], cfg["norm_topk_prob"]
        self.gate = Gate(h, e)
        self.experts = nn.ModuleList([Mlp(h, cfg["moe_intermediate_size"]) for _ in range(e)])
        self.shared_experts = Mlp(h, cfg["moe_intermediate_size"] * cfg["n_shared_experts"])

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        scores = torch.sigmoid(F.linear(x2.float(), self.gate.weight.float()))
        _, idx = torch.topk(scores + self.gate.e_score_correction_bias, self.top_k, dim=-1)
        w = scores.gather(-1, idx)
        if self.norm:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
        w = (w * self.scale).to(x.dtype)
        out = torch.zeros_like(x2)
        for e, expert in enumerate(self.experts):
            hit = (idx == e)
            rows = hit.any(-1).nonzero(as_tuple=True)[0]
            if rows.numel() == 0:
                continue
            we = (w * hit).sum(-1)[rows]
            out.index_add_(0, rows, (expert(x2[rows]) * we[:, None]).to(out.dtype))
        return (out + self.shared_experts(x2)).reshape(shape)


class Mla(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, n = cfg["hidden_size"], cfg["num_attention_heads"]
        self.n, self.nope, self.rope, self.vd = n, cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.lora = cfg["kv_lora_rank"]
        self.q_proj = nn.Linear(h, n * (self.nope + self.rope), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, self.lora + self.rope, bias=False)
        self.kv_a_layernorm = RMSNorm(self.lora, 1e-6)
        self.kv_b_proj = nn.Linear(self.lora, n * (self.nope + self.vd), bias=False)
        self.o_proj = nn.Linear(n * self.vd, h, bias=False)

    def forward(self, x, cos, sin, cache=None, start=0):
        """cache: None, or a dict this layer keeps its expanded keys and values in ([B, heads, L, d]
        tensors allocated for cache["length"] positions); x then holds positions start..start+T-1,
        either a whole prefix (start 0) or one token after it."""
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n, self.nope + self.rope)
        q_nope, q_rope = q.split([self.nope, self.rope], -1)
        c, k_rope = self.kv_a_proj_with_mqa(x).split([self.lora, self.rope], -1)
        kv = self.kv_b_proj(self.kv_a_layernorm(c)).view(B, T, self.n, self.nope + self.vd)
        k_nope, v = kv.split([self.nope, self.vd], -1)
        q_rope = rope_interleaved(q_rope, cos, sin)
        k_rope = rope_interleaved(k_rope[:, :, None, :], cos, sin).expand(B, T, self.n, self.rope)
        q = torch.cat([q_nope, q_rope], -1).transpose(1, 2)
        k = torch.cat([k_nope, k_rope], -1).transpose(1, 2)
        v = v.transpose(1, 2)
        causal = True
        if cache is not None:
            if "k" not in cache:
                cache["k"] = k.new_zeros(B, self.n, cache["length"], k.shape[-1])
                cache["v"] = v.new_zeros(B, self.n, cache["length"], v.shape[-1])
            cache["k"][:, :, start:start + T] = k
            cache["v"][:, :, start:start + T] = v
            if start > 0:
                if T != 1:
                    raise ValueError("a cached step after the prefix takes one token, not %d" % T)
                k, v, causal = cache["k"][:, :, :start + 1], cache["v"][:, :, :start + 1], False
        o = sdpa(q, k, v, causal=causal)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, self.n * self.vd))


class Layer(nn.Module):
    def __init__(self, cfg, moe):
        super().__init__()
        eps = cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.self_attn = Mla(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], eps)
        self.mlp = Moe(cfg) if moe else Mlp(cfg["hidden_size"], cfg["intermediate_size"])

    def forward(self, x, cos, sin, cache=None, start=0):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, start)
        return x + self.mlp(self.post_attention_layernorm(x))


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList([Layer(cfg, t == "sparse") for t in cfg["mlp_layer_types"]])
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class GlmLite(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        nn.init.normal_(self.model.embed_tokens.weight, std=0.02)

    def forward(self, ids, capture=(), caches=None, start=0):
        """Logits [B, T, V] and the residual stream after each layer in `capture` (list). caches:
        one dict per layer (Mla.forward), ids then at positions start..start+T-1."""
        B, T = ids.shape
        pos = torch.arange(start, start + T, device=ids.device)
        cos, sin = rope_angles(pos, self.cfg["qk_rope_head_dim"], self.cfg["rope_parameters"]["rope_theta"], ids.device)
        x = self.model.embed_tokens(ids)
        feats = []
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, caches[i] if caches else None, start)
            if i in capture:
                feats.append(x)
        return self.lm_head(self.model.norm(x)), feats

    @torch.no_grad()
    def greedy(self, prefix, n_new):
        """prefix [B, P] followed by n_new greedy tokens, through a KV cache: one token per step
        after the prefix, so generating a row costs about one forward of it, not one per token."""
        B, P = prefix.shape
        caches = [{"length": P + n_new} for _ in self.model.layers]
        logits, _ = self(prefix, caches=caches)
        out = [prefix]
        for i in range(n_new):
            out.append(logits[:, -1].float().argmax(-1, keepdim=True))
            if i + 1 < n_new:
                logits, _ = self(out[-1], caches=caches, start=P + i)
        return torch.cat(out, 1)


def make_config(vocab, hidden, layers, heads, dense_inter, experts, moe_inter, top_k, sparse_layers, max_pos, eos, bos):
    """config.json of a glm4_moe_lite model as transformers 5.17 and tandem-serve read it."""
    types = ["sparse" if i in sparse_layers else "dense" for i in range(layers)]
    return {
        "architectures": ["Glm4MoeLiteForCausalLM"],
        "model_type": "glm4_moe_lite",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": bos,
        "eos_token_id": [eos],
        "pad_token_id": eos,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": dense_inter,
        "kv_lora_rank": hidden // 4,
        "max_position_embeddings": max_pos,
        "mlp_layer_types": types,
        "moe_intermediate_size": moe_inter,
        "n_group": 1,
        "n_routed_experts": experts,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_experts_per_tok": top_k,
        "num_hidden_layers": layers,
        "num_key_value_heads": heads,
        "q_lora_rank": None,
        "qk_head_dim": 48,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 16,
        "rms_norm_eps": 1e-5,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "routed_scaling_factor": 1.0,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "v_head_dim": 32,
        "vocab_size": vocab,
        "dtype": "bfloat16",
    }
