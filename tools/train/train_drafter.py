#!/usr/bin/env python3
"""Trains a new DFlash drafter for the committed target of a pair (models/dflash-pair) without
touching the target, and recomputes the pair's reference acceptance lengths with it:

  1. data: the training corpus as train_pair.py gathers it (same roots, size and seed, so the same
     held-out files stay out; any document that starts with a reference prompt is dropped as well),
     encoded with the pair's tokenizer.json; plus continuations the target itself generates greedily
     from random corpus prefixes. Drafts are verified against the target's greedy tokens, so on
     these sequences every block position's label is exactly what verification will ask for (on the
     corpus, positions after the first are conditioned on the corpus tokens instead);
  2. train: the drafter (dflash_draft.py) on the frozen target's hidden states, alternating corpus
     and generated batches, many anchors per sequence (the DFlash paper samples anchors densely),
     block positions weighted exp(-i / gamma) (gamma 4 for blocks of 8, as the paper's recipe),
     learning rate on a cosine over the time budget;
  3. reference: plain greedy and greedy DFlash on the prompts of the pair's reference.json (fp32 on
     the bf16-rounded weights); plain greedy must reproduce the committed plain outputs (the target
     was loaded right), and the new acceptance lengths replace the old ones.

  python3 train_drafter.py --pair models/dflash-pair --out DIR [--data DIR/data.pt] [--data-only]
      [--layers 2] [--intermediate 1536] [--seconds 200]
  python3 train_drafter.py --pair models/dflash-pair --out DIR --tiny   # CPU smoke test of every step
Writes DIR/drafter (config.json, model.safetensors), DIR/reference.json, DIR/train_log.txt. With
--data FILE the corpus and generated sequences are read from FILE when it exists and written to it
otherwise, so that several drafters (--data-only first, then one process per shape) share them."""
import argparse
import math
import os
import random
import sys
import sysconfig
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_io  # noqa: E402
import train_pair  # noqa: E402
from dflash_draft import DFlashDrafter, block_loss, sample_anchors  # noqa: E402
from glm_lite import GlmLite  # noqa: E402
from train_pair import batches, drafter_config, gather, log, make_reference, round_bf16_  # noqa: E402


def load_target(tdir, device):
    cfg = hf_io.read_json(os.path.join(tdir, "config.json"))
    target = GlmLite(cfg)
    missing, unexpected = target.load_state_dict({k: v.float() for k, v in hf_io.load_weights(tdir).items()},
                                                 strict=False)
    # The routing correction bias is a buffer the writer saved too; anything else missing is an error.
    if [m for m in missing if "e_score_correction_bias" not in m] or unexpected:
        raise RuntimeError("target weights do not match its config: missing %s, unexpected %s" % (missing, unexpected))
    target.to(device).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    return cfg, target


def corpus_tokens(tdir, reference, a):
    """The training token stream (documents separated by EOS) and the held-out prompt count kept out."""
    prompts = [p["prompt_ids"] for p in reference["prompts"]]
    if a.tiny:  # no corpus walk: the reference's own sequences, enough to run every step
        flat = [t for p in reference["prompts"] for t in p["prompt_ids"] + p["plain_greedy"] + [0]]
        return torch.tensor(flat * 4, dtype=torch.long)
    tok = hf_io.LoadedTokenizer(os.path.join(tdir, "tokenizer.json"))
    eos = tok.token_id("<|endoftext|>")
    paths = sysconfig.get_paths()
    roots = ["/usr/include", paths["stdlib"], paths["purelib"], "/usr/share"]
    docs = gather([r for r in roots if os.path.isdir(r)], int(a.corpus_mb * 2**20), seed=0)
    train_docs = [d for v in docs.values() for d in v[max(2, len(v) // 50):]]
    seqs = tok.encode_batch(train_docs)
    kept = [s for s in seqs if not any(s[: len(p)] == p for p in prompts)]
    log("corpus: %d training docs, %.1f MB, %d dropped for starting with a reference prompt" % (
        len(kept), sum(map(len, train_docs)) / 2**20, len(seqs) - len(kept)))
    flat = []
    for s in kept:
        flat.extend(s)
        flat.append(eos)
    return torch.tensor(flat, dtype=torch.long)


@torch.no_grad()
def generate(target, data, a, device):
    """Rows of a.gen_len tokens: a random corpus prefix of a.gen_prefix[0]..a.gen_prefix[1] tokens
    (one length per chunk of rows; the reference prompts are 69-96 tokens), then the target's greedy
    continuation (bf16, through glm_lite's KV cache). Stored as int16 (vocabularies up to 32768)."""
    gen = torch.Generator().manual_seed(3)
    amp = device.type == "cuda"
    lo, hi = a.gen_prefix
    if not 1 <= lo <= hi < a.gen_len:
        raise ValueError("--gen-prefix %d %d must satisfy 1 <= lo <= hi < --gen-len %d" % (lo, hi, a.gen_len))
    rows, new_tokens, t0 = [], 0, time.time()
    while time.time() - t0 < a.gen_seconds:
        p = int(torch.randint(lo, hi + 1, (1,), generator=gen))
        x = batches(data, p, a.gen_batch, gen, device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            x = target.greedy(x, a.gen_len - p)
        rows.append(x.to(torch.int16).cpu())
        new_tokens += x.shape[0] * (a.gen_len - p)
    out = torch.cat(rows)
    log("generated: %d rows of %d tokens (prefixes of %d..%d), %d continuation tokens (%.0fs)" % (
        out.shape[0], a.gen_len, lo, hi, new_tokens, time.time() - t0))
    return out


def lr_by_time(frac, step, base, warmup=30):
    if step < warmup:
        return base * (step + 1) / warmup
    return base * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def train(target, drafter, data, gen_rows, a, device):
    opt = torch.optim.AdamW(drafter.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(2)
    weights = torch.exp(-torch.arange(drafter.block_size - 1, device=device, dtype=torch.float32) / a.gamma)
    amp = device.type == "cuda"
    t0, step = time.time(), 0
    while time.time() - t0 < a.seconds:
        # a.gen_share of the steps on generated rows, spread evenly.
        on_gen = gen_rows is not None and int((step + 1) * a.gen_share) > int(step * a.gen_share)
        if on_gen:
            x = gen_rows[torch.randint(0, gen_rows.shape[0], (a.batch * a.seq // gen_rows.shape[1],), generator=g)]
            x = x.to(device, non_blocking=True).long()
            # Anchors from the last prefix token on: every label is then the target's own greedy
            # token after the target's own tokens, as in a verification.
            anchors = sample_anchors(x.shape[1], drafter.block_size, a.anchors * x.shape[1] // a.seq, g, device,
                                     lo=a.gen_prefix[1] - 1)
        else:
            x = batches(data, a.seq, a.batch, g, device)
            anchors = sample_anchors(a.seq, drafter.block_size, a.anchors, g, device)
        for group in opt.param_groups:
            group["lr"] = lr_by_time((time.time() - t0) / a.seconds, step, a.lr)
        loss, hit, accept = block_loss(target, drafter, x, anchors, weights, amp)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(drafter.parameters(), 1.0)
        opt.step()
        if step % a.log_every < 2:
            log("step %d %s loss %.3f acceptance %.2f top1-agreement by position %s (%.0fs)" % (
                step, "generated" if on_gen else "corpus   ", loss.item(), accept.item(),
                " ".join("%.2f" % v for v in hit.tolist()), time.time() - t0))
        step += 1
    log("drafter: %d steps in %.0fs" % (step, time.time() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", required=True, help="directory with target/ and reference.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--data", help="corpus + generated rows: read if it exists, else written")
    ap.add_argument("--data-only", action="store_true")
    ap.add_argument("--tiny", action="store_true", help="CPU smoke test: the reference's tokens as corpus, seconds")
    ap.add_argument("--corpus-mb", type=float, default=24, help="as the pair's train_pair.py run (train_log.txt)")
    ap.add_argument("--gen-seconds", type=float, default=30)
    ap.add_argument("--gen-batch", type=int, default=2048)
    ap.add_argument("--gen-len", type=int, default=160)
    ap.add_argument("--gen-prefix", type=int, nargs=2, default=[32, 96], metavar=("MIN", "MAX"),
                    help="corpus prefix lengths of the generated rows")
    ap.add_argument("--gen-share", type=float, default=0.5, help="share of the steps on generated rows")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--intermediate", type=int, default=0, help="0: 3x hidden")
    ap.add_argument("--seconds", type=float, default=200)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--anchors", type=int, default=256, help="per --seq tokens (scaled for shorter rows)")
    ap.add_argument("--gamma", type=float, default=4.0)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--no-generated", action="store_true", help="corpus batches only")
    a = ap.parse_args()
    if a.tiny:
        a.gen_seconds, a.gen_batch, a.gen_len, a.seconds, a.seq, a.batch, a.anchors, a.log_every = 1, 2, 64, 6, 64, 2, 8, 2
        a.gen_prefix = [16, 32]
    torch.manual_seed(0)
    random.seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    t_start = time.time()
    os.makedirs(a.out, exist_ok=True)
    tdir = os.path.join(a.pair, "target")
    reference = hf_io.read_json(os.path.join(a.pair, "reference.json"))
    log("torch", torch.__version__, "device", device, "args", vars(a))
    tcfg, target = load_target(tdir, device)
    log("target: %s, %.2fM parameters" % (tdir, sum(p.numel() for p in target.parameters()) / 1e6))

    if a.data and os.path.exists(a.data):
        saved = torch.load(a.data)
        data, gen_rows = saved["data"], saved["generated"]
        log("data from %s: %d corpus tokens, %d generated rows" % (a.data, data.numel(), gen_rows.shape[0]))
    else:
        data = corpus_tokens(tdir, reference, a)
        log("corpus tokens: %d (%.0fs)" % (data.numel(), time.time() - t_start))
        gen_rows = generate(target, data, a, device)
        if a.data:
            torch.save({"data": data, "generated": gen_rows}, a.data)
    if a.data_only:
        return
    if a.no_generated:
        gen_rows = None

    added = hf_io.read_json(os.path.join(tdir, "tokenizer.json"))["added_tokens"]
    mask = next(t["id"] for t in added if t["content"] == "<|mask|>")
    block = reference["block_size"]
    dcfg = drafter_config(tcfg, block, mask, layers=a.layers, intermediate=a.intermediate or None)
    drafter = DFlashDrafter(dcfg).to(device)
    log("drafter: %d layers, intermediate %d, %.2fM parameters, target layers %s, block %d" % (
        a.layers, dcfg["intermediate_size"], sum(p.numel() for p in drafter.parameters()) / 1e6, drafter.layer_ids, block))
    train(target, drafter, data, gen_rows, a, device)
    drafter.eval()
    round_bf16_(drafter)
    ddir = os.path.join(a.out, "drafter")
    os.makedirs(ddir, exist_ok=True)
    hf_io.write_json(os.path.join(ddir, "config.json"), dcfg)
    log("drafter files:", hf_io.save_weights(ddir, dict(drafter.state_dict())))

    kept = reference["prompts"]
    if a.tiny:  # one prompt per kind, 12 tokens: the reference without a KV cache is slow on a CPU
        kept = [p for i, p in enumerate(kept) if p["kind"] not in {q["kind"] for q in kept[:i]}]
    max_new = 12 if a.tiny else reference["max_new_tokens"]
    ref = make_reference(target, drafter, [(p["kind"], p["prompt_ids"]) for p in kept], block, max_new, device)
    same = sum(new["plain_greedy"] == old["plain_greedy"][:max_new] for new, old in zip(ref["prompts"], kept))
    log("reference: plain greedy equal to the committed reference's on %d of %d prompts" % (same, len(kept)))
    hf_io.write_json(os.path.join(a.out, "reference.json"), ref)
    log("total %.0fs" % (time.time() - t_start))
    with open(os.path.join(a.out, "train_log.txt"), "w") as f:
        f.write("\n".join(train_pair.LOG) + "\n")


if __name__ == "__main__":
    main()
