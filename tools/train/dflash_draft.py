"""A DFlash drafter (z-lab's DFlashDraftModel layout: Qwen3-style layers, fc + hidden_norm over the
concatenated target features, no embedding or LM head of its own) in plain PyTorch, with the batched
training forward (many anchored blocks per sequence in one pass) and the one-block inference forward
used for the reference acceptance length. Written from the description in engine/spec_decode/README.md."""
import torch
from torch import nn
from torch.nn import functional as F

from glm_lite import RMSNorm, rope_angles, rope_half, sdpa


class DraftAttention(nn.Module):
    def __init__(self, h, heads, kv_heads, hd, eps):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, hd
        self.q_proj = nn.Linear(h, heads * hd, bias=False)
        self.k_proj = nn.Linear(h, kv_heads * hd, bias=False)
        self.v_proj = nn.Linear(h, kv_heads * hd, bias=False)
        self.o_proj = nn.Linear(heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, eps)
        self.k_norm = RMSNorm(hd, eps)

    def kv(self, x, cos, sin):
        B, T, _ = x.shape
        k = rope_half(self.k_norm(self.k_proj(x).view(B, T, self.kv_heads, self.hd)), cos, sin)
        v = self.v_proj(x).view(B, T, self.kv_heads, self.hd)
        return k, v

    def forward(self, x, ctx, q_cos, q_sin, c_cos, c_sin, mask):
        """x: block hidden [B, Q, H]; ctx: fused context [B, C, H]; mask: [Q, C + Q] bool (True = visible)."""
        B, Q, _ = x.shape
        q = rope_half(self.q_norm(self.q_proj(x).view(B, Q, self.heads, self.hd)), q_cos, q_sin)
        kc, vc = self.kv(ctx, c_cos, c_sin)
        kb, vb = self.kv(x, q_cos, q_sin)
        k, v = torch.cat([kc, kb], 1), torch.cat([vc, vb], 1)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        o = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask=mask)
        return self.o_proj(o.transpose(1, 2).reshape(B, Q, self.heads * self.hd))


class DraftMlp(nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DraftLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(h, eps)
        self.self_attn = DraftAttention(h, cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"], eps)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.mlp = DraftMlp(h, cfg["intermediate_size"])

    def forward(self, x, ctx, *rope_and_mask):
        x = x + self.self_attn(self.input_layernorm(x), ctx, *rope_and_mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class DFlashDrafter(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        d = cfg["dflash_config"]
        h = cfg["hidden_size"]
        self.block_size, self.mask_id, self.layer_ids = d["block_size"], d["mask_token_id"], d["target_layer_ids"]
        self.layers = nn.ModuleList([DraftLayer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.fc = nn.Linear(len(self.layer_ids) * h, h, bias=False)
        self.hidden_norm = RMSNorm(h, cfg["rms_norm_eps"])
        self.norm = RMSNorm(h, cfg["rms_norm_eps"])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)

    def fuse(self, feats):
        return self.hidden_norm(self.fc(torch.cat(feats, -1)))

    def run(self, noise, ctx, q_pos, c_pos, mask):
        theta, hd = self.cfg["rope_theta"], self.cfg["head_dim"]
        q_cos, q_sin = rope_angles(q_pos, hd, theta, noise.device)
        c_cos, c_sin = rope_angles(c_pos, hd, theta, noise.device)
        x = noise
        for layer in self.layers:
            x = layer(x, ctx, q_cos, q_sin, c_cos, c_sin, mask)
        return self.norm(x)


def training_blocks(ids, anchors, block_size, mask_id):
    """Block tokens [B, n*bs] (anchor token, then mask ids), their positions, and the targets (the
    tokens that follow each anchor). anchors: [n] positions, each <= T - block_size."""
    offs = torch.arange(block_size, device=ids.device)
    pos = (anchors[:, None] + offs[None, :]).reshape(-1)  # [n*bs]
    block = ids[:, pos].clone()
    block.view(ids.shape[0], len(anchors), block_size)[:, :, 1:] = mask_id
    targets = ids[:, pos].view(ids.shape[0], len(anchors), block_size)[:, :, 1:]
    return block, pos, targets


def training_mask(anchors, block_size, ctx_len, device):
    """Block queries see context rows strictly before their anchor, and their own block entirely."""
    n = len(anchors)
    q_block = torch.arange(n, device=device).repeat_interleave(block_size)  # [n*bs]
    q_anchor = anchors.repeat_interleave(block_size)
    ctx_vis = torch.arange(ctx_len, device=device)[None, :] < q_anchor[:, None]
    blk_vis = q_block[:, None] == q_block[None, :]
    return torch.cat([ctx_vis, blk_vis], 1)


def sample_anchors(seq_len, block_size, n, gen, device, lo=1):
    """n distinct sorted anchor positions in lo .. seq_len - block_size (a block must fit, and an
    anchor needs at least one context row before it: lo >= 1)."""
    lo = max(1, lo)
    span = seq_len - block_size - lo + 1
    if span < 1:
        raise ValueError("no anchor fits: rows of %d tokens, blocks of %d, anchors from %d" % (seq_len, block_size, lo))
    n = min(n, span)
    return torch.sort(torch.randperm(span, generator=gen)[:n] + lo).values.to(device)


def block_loss(target, drafter, x, anchors, weights, amp):
    """The drafter's training loss on sequences x [B, T] with blocks at `anchors`: cross-entropy of
    each draft position against the frozen target's own next-token distribution there (soft labels:
    what verification compares against), position i of a block weighted by weights[i]. Also returns
    the top-1 agreement by position and the mean acceptance length the blocks would get if verified
    (1 + the number of leading positions whose argmax equals the target's)."""
    bs, device = drafter.block_size, x.device
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        logits, feats = target(x, capture=drafter.layer_ids)
    block, pos, _ = training_blocks(x, anchors, bs, drafter.mask_id)
    label_pos = (anchors[:, None] + torch.arange(bs - 1, device=device)[None, :]).reshape(-1)
    p_target = torch.softmax(logits[:, label_pos].float(), -1)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
        ctx = drafter.fuse([f.detach() for f in feats])
        noise = target.model.embed_tokens(block).detach()
        mask = training_mask(anchors, bs, x.shape[1], device)
        h = drafter.run(noise, ctx, pos, torch.arange(x.shape[1], device=device), mask)
        h = h.view(x.shape[0], len(anchors), bs, -1)[:, :, 1:]
        q_logits = target.lm_head(h).float()
    logq = torch.log_softmax(q_logits, -1).reshape(x.shape[0], -1, q_logits.shape[-1])
    ce = -(p_target * logq).sum(-1).view(x.shape[0], len(anchors), bs - 1)
    loss = (ce * weights).sum() / (weights.sum() * x.shape[0] * len(anchors))
    with torch.no_grad():
        hit = q_logits.argmax(-1) == p_target.view_as(q_logits).argmax(-1)  # [B, n, bs-1]
        accept = 1.0 + hit.int().cumprod(-1).sum(-1).float().mean()
    return loss, hit.float().mean(dim=(0, 1)), accept


@torch.no_grad()
def propose(drafter, embed, head, feats_ctx, anchor_token, start, n):
    """Greedy drafts d1..dn after `anchor_token` at position `start`, from context rows 0..start-1."""
    dev = embed.weight.device
    block = torch.full((1, n + 1), drafter.mask_id, dtype=torch.long, device=dev)
    block[0, 0] = anchor_token
    noise = embed(block)
    q_pos = torch.arange(start, start + n + 1, device=dev)
    c_pos = torch.arange(0, start, device=dev)
    mask = torch.ones(n + 1, start + n + 1, dtype=torch.bool, device=dev)
    h = drafter.run(noise, feats_ctx[:, :start], q_pos, c_pos, mask)
    return head(h[:, 1:]).argmax(-1)[0]


@torch.no_grad()
def dflash_greedy(target, drafter, prompt, max_new, k):
    """The reference algorithm (z-lab's dflash_generate, greedy) without a KV cache: returns the
    generated tokens and the acceptance length of every verification (accepted drafts + 1)."""
    ids = prompt.clone()
    logits, feats = target(ids[None], capture=drafter.layer_ids)
    ctx = drafter.fuse(feats)
    out = [int(logits[0, -1].argmax())]
    lengths = []
    while len(out) < max_new:
        start = ids.shape[0]  # the anchor out[-1] sits here
        # As tandem-serve does: never draft a token that max_new could not keep.
        n = min(k, max_new - len(out) - 1)
        drafts = (propose(drafter, target.model.embed_tokens, target.lm_head, ctx, out[-1], start, n) if n > 0
                  else torch.zeros(0, dtype=torch.long, device=ids.device))
        block = torch.cat([torch.tensor([out[-1]], device=ids.device), drafts])
        seq = torch.cat([ids, block])
        logits, feats = target(seq[None], capture=drafter.layer_ids)
        post = logits[0, start:].argmax(-1)
        acc = 0
        while acc < n and int(drafts[acc]) == int(post[acc]):
            acc += 1
        emitted = [int(t) for t in drafts[:acc]] + [int(post[acc])]
        if n > 0:
            lengths.append(acc + 1)
        ids = torch.cat([ids, block[: acc + 1]])
        ctx = drafter.fuse([f[:, : ids.shape[0]] for f in feats])
        out.extend(emitted)
    return out[:max_new], lengths


@torch.no_grad()
def plain_greedy(target, prompt, max_new):
    ids = prompt.clone()
    out = []
    for _ in range(max_new):
        logits, _ = target(ids[None])
        t = int(logits[0, -1].argmax())
        out.append(t)
        ids = torch.cat([ids, torch.tensor([t], device=ids.device)])
    return out
