#!/usr/bin/env python3
"""Trains the real target/drafter pair of tandem's DFlash issue and writes both in Hugging Face format:

  1. corpus: text files found on this machine (docs, source code, JSON), a few per cent held out;
  2. tokenizer: byte-level BPE (`tokenizers` package; a byte tokenizer without it);
  3. target: a small glm4_moe_lite (glm_lite.py) trained on the corpus for --target-seconds;
  4. drafter: a DFlash drafter (dflash_draft.py) trained for --draft-seconds on the frozen target's
     hidden states: random anchors, block [anchor, mask x (B-1)], soft targets = the target's own
     next-token distributions along the block (what verification will compare against);
  5. reference: greedy DFlash (z-lab's algorithm re-implemented, no KV cache) vs plain greedy on
     held-out prose / code / JSON prompts, with the bf16-rounded weights: outputs must be equal,
     and the mean acceptance length per class is what tandem-serve should reproduce.

  python3 train_pair.py --out DIR              # the real run (GPU)
  python3 train_pair.py --out DIR --tiny       # a seconds-long CPU smoke test of every step
Writes DIR/target, DIR/drafter, DIR/reference.json and DIR/train_log.txt."""
import argparse
import glob
import json
import math
import os
import random
import sys
import sysconfig
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_io  # noqa: E402
from dflash_draft import DFlashDrafter, dflash_greedy, plain_greedy, training_blocks, training_mask  # noqa: E402
from glm_lite import GlmLite, make_config  # noqa: E402

LOG = []


def log(*a):
    line = " ".join(str(x) for x in a)
    print(line, flush=True)
    LOG.append(line)


PROSE = (".txt", ".md", ".rst", "README", "copyright", "changelog", "NEWS")
CODE = (".py", ".h", ".hpp", ".c", ".cc", ".cpp", ".sh")
JSONX = (".json",)


def kind_of(path):
    base = os.path.basename(path)
    if base.endswith(JSONX):
        return "json"
    if base.endswith(CODE):
        return "code"
    if base.endswith(PROSE) or base in PROSE:
        return "prose"
    return None


def gather(roots, limit_bytes, seed):
    """Text files under `roots` by kind, read as UTF-8, until `limit_bytes` in all."""
    files = []
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in names:
                p = os.path.join(dirpath, n)
                if kind_of(p) and not os.path.islink(p):
                    files.append(p)
    files = sorted(set(files))
    random.Random(seed).shuffle(files)
    docs, total = {"prose": [], "code": [], "json": []}, 0
    share = {"prose": 0.35, "code": 0.45, "json": 0.20}
    got = {k: 0 for k in docs}
    for p in files:
        k = kind_of(p)
        if got[k] >= share[k] * limit_bytes:
            continue
        try:
            if os.path.getsize(p) > 200_000 or os.path.getsize(p) < 200:
                continue
            with open(p, "rb") as f:
                text = f.read().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        docs[k].append(text)
        got[k] += len(text)
        total += len(text)
        if total >= limit_bytes:
            break
    return docs


def lr_at(step, warmup, total_est, base):
    if step < warmup:
        return base * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total_est - warmup))
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def batches(data, seq, batch, gen, device):
    starts = torch.randint(0, data.numel() - seq - 1, (batch,), generator=gen)
    x = torch.stack([data[s: s + seq] for s in starts.tolist()])
    return x.to(device, non_blocking=True)


def train_target(model, data, a, device):
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    t0, step, est = time.time(), 0, a.target_steps_est
    amp = device.type == "cuda"
    while time.time() - t0 < a.target_seconds:
        x = batches(data, a.seq + 1, a.batch, gen, device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 50, est, a.lr)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits, _ = model(x[:, :-1])
            loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            log("target step %d loss %.3f (%.0fs)" % (step, loss.item(), time.time() - t0))
        step += 1
    log("target: %d steps, %d tokens, final loss %.3f" % (step, step * a.batch * a.seq, loss.item()))


def train_drafter(target, drafter, data, a, device):
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.draft_lr, betas=(0.9, 0.95), weight_decay=0.0)
    gen = torch.Generator().manual_seed(2)
    bs = drafter.block_size
    weights = torch.exp(-torch.arange(bs - 1, device=device, dtype=torch.float32) / 5.0)
    t0, step = time.time(), 0
    amp = device.type == "cuda"
    while time.time() - t0 < a.draft_seconds:
        x = batches(data, a.seq, a.draft_batch, gen, device)
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits, feats = target(x, capture=drafter.layer_ids)
        anchors = torch.sort(torch.randperm(a.seq - bs, generator=gen)[: a.anchors] + 1).values.to(device)
        block, pos, _ = training_blocks(x, anchors, bs, drafter.mask_id)
        # Soft labels: the target's distribution for each block token (given the true prefix).
        label_pos = (anchors[:, None] + torch.arange(bs - 1, device=device)[None, :]).reshape(-1)
        p_target = torch.softmax(logits[:, label_pos].float(), -1)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 30, a.draft_steps_est, a.draft_lr)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            ctx = drafter.fuse([f.detach() for f in feats])
            noise = target.model.embed_tokens(block).detach()
            mask = training_mask(anchors, bs, a.seq, device)
            h = drafter.run(noise, ctx, pos, torch.arange(a.seq, device=device), mask)
            h = h.view(x.shape[0], len(anchors), bs, -1)[:, :, 1:]
            q_logits = target.lm_head(h).float()
        logq = torch.log_softmax(q_logits, -1).reshape(x.shape[0], -1, q_logits.shape[-1])
        ce = -(p_target * logq).sum(-1).view(x.shape[0], len(anchors), bs - 1)
        loss = (ce * weights).sum() / (weights.sum() * x.shape[0] * len(anchors))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            with torch.no_grad():
                hit = (q_logits.argmax(-1) == p_target.view_as(q_logits).argmax(-1)).float().mean(dim=(0, 1))
            log("drafter step %d loss %.3f top1-agreement by position %s (%.0fs)" % (
                step, loss.item(), " ".join("%.2f" % v for v in hit.tolist()), time.time() - t0))
        step += 1
    log("drafter: %d steps" % step)


def round_bf16_(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: tiny corpus, model and budgets")
    ap.add_argument("--corpus-mb", type=float, default=40)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--target-seconds", type=float, default=170)
    ap.add_argument("--target-steps-est", type=int, default=2500)
    ap.add_argument("--draft-seconds", type=float, default=110)
    ap.add_argument("--draft-steps-est", type=int, default=1500)
    ap.add_argument("--draft-batch", type=int, default=32)
    ap.add_argument("--draft-lr", type=float, default=2e-3)
    ap.add_argument("--anchors", type=int, default=32)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--eval-prompts", type=int, default=4)
    ap.add_argument("--eval-tokens", type=int, default=64)
    a = ap.parse_args()
    if a.tiny:
        a.corpus_mb, a.vocab, a.hidden, a.layers, a.heads, a.seq, a.batch = 0.3, 512, 64, 4, 2, 64, 4
        a.target_seconds, a.draft_seconds, a.draft_batch, a.anchors = 8, 8, 2, 4
        a.target_steps_est, a.draft_steps_est, a.eval_prompts, a.eval_tokens = 100, 100, 1, 12
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    tdir, ddir = os.path.join(a.out, "target"), os.path.join(a.out, "drafter")
    os.makedirs(tdir, exist_ok=True)
    os.makedirs(ddir, exist_ok=True)
    log("torch", torch.__version__, "device", device)

    # 1. Corpus.
    paths = sysconfig.get_paths()
    roots = ["/usr/include", paths["stdlib"], paths["purelib"], "/usr/share"]
    docs = gather([r for r in roots if os.path.isdir(r)], int(a.corpus_mb * 2**20), seed=0)
    held = {k: v[: max(2, len(v) // 50)] for k, v in docs.items()}
    train_docs = [d for k, v in docs.items() for d in v[max(2, len(v) // 50):]]
    log("corpus: %s training docs, %.1f MB; held out %s" % (
        len(train_docs), sum(map(len, train_docs)) / 2**20, {k: len(v) for k, v in held.items()}))
    corpus_file = os.path.join(a.out, "corpus.txt")
    with open(corpus_file, "w") as f:
        f.write("\n".join(train_docs))

    # 2. Tokenizer.
    tok = hf_io.make_tokenizer([corpus_file], a.vocab)
    os.remove(corpus_file)
    eos, mask = tok.token_id("<|endoftext|>"), tok.token_id("<|mask|>")
    if hasattr(tok, "encode_batch"):
        seqs = tok.encode_batch(train_docs)
    else:
        seqs = [tok.encode(d) for d in train_docs]
    flat = []
    for s in seqs:
        flat.extend(s)
        flat.append(eos)
    data = torch.tensor(flat, dtype=torch.long)
    V = tok.vocab_size()
    V_pad = (V + 63) // 64 * 64
    log("tokenizer: %d ids (vocab_size %d), %d training tokens (%.1fs)" % (V, V_pad, data.numel(), time.time() - t_start))

    # 3. Target.
    cfg = make_config(V_pad, a.hidden, a.layers, a.heads, a.hidden * 3, 8, a.hidden // 2, 2, {a.layers - 1},
                      max_pos=4096, eos=eos, bos=eos)
    cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"] = a.hidden // a.heads - 16, 16, a.hidden // a.heads - 16
    cfg["qk_head_dim"] = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    target = GlmLite(cfg).to(device)
    log("target params: %.2fM" % (sum(p.numel() for p in target.parameters()) / 1e6))
    train_target(target, data, a, device)
    target.eval()
    for p in target.parameters():
        p.requires_grad_(False)
    round_bf16_(target)
    hf_io.write_json(os.path.join(tdir, "config.json"), cfg)
    hf_io.write_json(os.path.join(tdir, "generation_config.json"), {"eos_token_id": [eos], "bos_token_id": eos})
    tok.save(os.path.join(tdir, "tokenizer.json"))
    hf_io.write_json(os.path.join(tdir, "tokenizer_config.json"), {"eos_token": "<|endoftext|>", "mask_token": "<|mask|>",
                                                                    "model_max_length": 4096})
    log("target files:", hf_io.save_weights(tdir, {k: v for k, v in target.state_dict().items()}))

    # 4. Drafter: reads target layers spread over the stack (the last one's output included).
    n = a.layers
    layer_ids = sorted({1, n // 2, n - 1}) if n >= 3 else [n - 1]
    dcfg = {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": a.hidden,
            "num_hidden_layers": 2, "num_attention_heads": a.heads, "num_key_value_heads": max(1, a.heads // 3),
            "head_dim": 64 if a.hidden >= 256 else 16, "intermediate_size": a.hidden * 3, "vocab_size": V_pad,
            "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu", "attention_bias": False,
            "tie_word_embeddings": False, "max_position_embeddings": 4096, "num_target_layers": n, "dtype": "bfloat16",
            "dflash_config": {"block_size": a.block, "mask_token_id": mask, "target_layer_ids": layer_ids}}
    drafter = DFlashDrafter(dcfg).to(device)
    log("drafter params: %.2fM, target layers %s, block %d" % (
        sum(p.numel() for p in drafter.parameters()) / 1e6, layer_ids, a.block))
    train_drafter(target, drafter, data, a, device)
    drafter.eval()
    round_bf16_(drafter)
    hf_io.write_json(os.path.join(ddir, "config.json"), dcfg)
    log("drafter files:", hf_io.save_weights(ddir, {k: v for k, v in drafter.state_dict().items()}))

    # 5. Reference acceptance on held-out text, fp32 compute on the bf16-rounded weights.
    target.float()
    drafter.float()
    ref = {"block_size": a.block, "num_speculative_tokens": a.block - 1, "max_new_tokens": a.eval_tokens, "prompts": []}
    for kind, texts in held.items():
        lengths_all = []
        for text in texts[: a.eval_prompts]:
            ids = tok.encode(text)[:96]
            prompt = torch.tensor(ids, device=device)
            plain = plain_greedy(target, prompt, a.eval_tokens)
            spec, lengths = dflash_greedy(target, drafter, prompt, a.eval_tokens, a.block - 1)
            lengths_all += lengths
            ref["prompts"].append({"kind": kind, "prompt_ids": ids, "plain_greedy": plain, "dflash_greedy": spec,
                                   "identical": plain == spec, "acceptance_lengths": lengths})
        if lengths_all:
            log("reference %s: mean acceptance length %.2f over %d verifications" % (
                kind, sum(lengths_all) / len(lengths_all), len(lengths_all)))
    ref["identical_all"] = all(p["identical"] for p in ref["prompts"])
    log("reference: DFlash greedy == plain greedy on every prompt:", ref["identical_all"])
    hf_io.write_json(os.path.join(a.out, "reference.json"), ref)
    log("total %.0fs" % (time.time() - t_start))
    with open(os.path.join(a.out, "train_log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")


if __name__ == "__main__":
    main()
