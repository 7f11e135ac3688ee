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
from dflash_draft import DFlashDrafter, block_loss, dflash_greedy, plain_greedy, sample_anchors  # noqa: E402
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
    weights = torch.exp(-torch.arange(drafter.block_size - 1, device=device, dtype=torch.float32) / 5.0)
    t0, step = time.time(), 0
    amp = device.type == "cuda"
    while time.time() - t0 < a.draft_seconds:
        x = batches(data, a.seq, a.draft_batch, gen, device)
        anchors = sample_anchors(a.seq, drafter.block_size, a.anchors, gen, device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, 30, a.draft_steps_est, a.draft_lr)
        loss, hit, _ = block_loss(target, drafter, x, anchors, weights, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % 50 == 0:
            log("drafter step %d loss %.3f top1-agreement by position %s (%.0fs)" % (
                step, loss.item(), " ".join("%.2f" % v for v in hit.tolist()), time.time() - t0))
        step += 1
    log("drafter: %d steps" % step)


def drafter_config(target_cfg, block, mask, layers=2, intermediate=None):
    """config.json of a DFlash drafter for `target_cfg`: Qwen3-style layers as wide as the target (it
    uses the target's embedding and LM head), reading target layers spread over the stack (the last
    one's output included); intermediate size 3x hidden unless given."""
    h, heads, n = target_cfg["hidden_size"], target_cfg["num_attention_heads"], target_cfg["num_hidden_layers"]
    layer_ids = sorted({1, n // 2, n - 1}) if n >= 3 else [n - 1]
    return {"architectures": ["DFlashDraftModel"], "model_type": "qwen3", "hidden_size": h,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": max(1, heads // 3),
            "head_dim": 64 if h >= 256 else 16, "intermediate_size": intermediate or h * 3,
            "vocab_size": target_cfg["vocab_size"], "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
            "attention_bias": False, "tie_word_embeddings": False, "max_position_embeddings": 4096,
            "num_target_layers": n, "dtype": "bfloat16",
            "dflash_config": {"block_size": block, "mask_token_id": mask, "target_layer_ids": layer_ids}}


def round_bf16_(module):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).float())


def make_reference(target, drafter, prompts, block, max_new, device):
    """reference.json's content: for each (kind, prompt ids), plain greedy and greedy DFlash output
    (block - 1 drafts every step) and the acceptance lengths, computed in fp32 (the models are
    switched to fp32: their weights must already be bf16-rounded); logs the mean per kind."""
    target.float()
    drafter.float()
    ref = {"block_size": block, "num_speculative_tokens": block - 1, "max_new_tokens": max_new, "prompts": []}
    lengths_by_kind = {}
    for kind, ids in prompts:
        prompt = torch.tensor(ids, device=device)
        plain = plain_greedy(target, prompt, max_new)
        spec, lengths = dflash_greedy(target, drafter, prompt, max_new, block - 1)
        lengths_by_kind.setdefault(kind, []).extend(lengths)
        ref["prompts"].append({"kind": kind, "prompt_ids": ids, "plain_greedy": plain, "dflash_greedy": spec,
                               "identical": plain == spec, "acceptance_lengths": lengths})
    for kind, lengths in lengths_by_kind.items():
        if lengths:
            log("reference %s: mean acceptance length %.2f over %d verifications" % (
                kind, sum(lengths) / len(lengths), len(lengths)))
    ref["identical_all"] = all(p["identical"] for p in ref["prompts"])
    log("reference: DFlash greedy == plain greedy on every prompt:", ref["identical_all"])
    return ref


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
    dcfg = drafter_config(cfg, a.block, mask)
    drafter = DFlashDrafter(dcfg).to(device)
    log("drafter params: %.2fM, target layers %s, block %d" % (
        sum(p.numel() for p in drafter.parameters()) / 1e6, drafter.layer_ids, a.block))
    train_drafter(target, drafter, data, a, device)
    drafter.eval()
    round_bf16_(drafter)
    hf_io.write_json(os.path.join(ddir, "config.json"), dcfg)
    log("drafter files:", hf_io.save_weights(ddir, {k: v for k, v in drafter.state_dict().items()}))

    # 5. Reference acceptance on held-out text, fp32 compute on the bf16-rounded weights.
    prompts = [(kind, tok.encode(text)[:96]) for kind, texts in held.items() for text in texts[: a.eval_prompts]]
    ref = make_reference(target, drafter, prompts, a.block, a.eval_tokens, device)
    hf_io.write_json(os.path.join(a.out, "reference.json"), ref)
    log("total %.0fs" % (time.time() - t_start))
    with open(os.path.join(a.out, "train_log.txt"), "w") as f:
        f.write("\n".join(LOG) + "\n")


if __name__ == "__main__":
    main()
