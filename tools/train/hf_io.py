"""Hugging Face directory output without the safetensors/transformers packages: safetensors files
(sharded under a byte limit, with model.safetensors.index.json), config.json, and a byte-level BPE
tokenizer.json (trained with the `tokenizers` package when it is installed, else the 256 byte
tokens and no merges, which is still a valid byte-level BPE); and reading them back (weights,
config, the tokenizer through `tokenizers`) to train a new drafter for a committed target."""
import glob
import json
import os
import struct

import torch

import hf_raw

_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32"}
_TORCH = {v: k for k, v in _DTYPES.items()}


def _raw(t):
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name]
        b = _raw(t)
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: tensor} of one safetensors file written by write_safetensors (or any BF16/F16/F32 one)."""
    out = {}
    for name, dtype, shape, raw in hf_raw.safetensors_entries(path):
        t = torch.frombuffer(bytearray(raw), dtype=_TORCH[dtype]) if raw else torch.empty(0, dtype=_TORCH[dtype])
        out[name] = t.reshape(shape)
    return out


def load_weights(model_dir):
    """Every tensor of a Hugging Face directory's *.safetensors (one file or shards)."""
    tensors = {}
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        tensors.update(read_safetensors(path))
    if not tensors:
        raise FileNotFoundError("no *.safetensors in %s" % model_dir)
    return tensors


def read_json(path):
    with open(path) as f:
        return json.load(f)


def save_weights(out_dir, tensors, dtype=torch.bfloat16, max_shard_bytes=15 * 2**20):
    """One model.safetensors, or model-0000i-of-0000n.safetensors + index when over the limit."""
    tensors = {k: v.to(dtype) for k, v in tensors.items()}
    shards, cur, size = [], {}, 0
    for name in sorted(tensors):
        n = tensors[name].numel() * tensors[name].element_size()
        if cur and size + n > max_shard_bytes:
            shards.append(cur)
            cur, size = {}, 0
        cur[name] = tensors[name]
        size += n
    shards.append(cur)
    if len(shards) == 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), shards[0])
        return ["model.safetensors"]
    names, weight_map = [], {}
    for i, s in enumerate(shards):
        fn = "model-%05d-of-%05d.safetensors" % (i + 1, len(shards))
        write_safetensors(os.path.join(out_dir, fn), s)
        names.append(fn)
        for k in s:
            weight_map[k] = fn
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=1)
    return names


def write_json(path, doc):
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)


SPECIALS = ["<|endoftext|>", "<|mask|>"]


class ByteTokenizer:
    """Fallback without `tokenizers`: one token per byte, then the special tokens."""

    def __init__(self):
        self.b2u = hf_raw.bytes_to_unicode()
        self.vocab = {self.b2u[b]: b for b in range(256)}
        self.specials = {s: 256 + i for i, s in enumerate(SPECIALS)}

    def encode(self, text):
        return list(text.encode("utf-8"))

    def vocab_size(self):
        return 256 + len(SPECIALS)

    def token_id(self, s):
        return self.specials[s]

    def save(self, path):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                  "special": True} for s, i in self.specials.items()]
        doc = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
               "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
               "post_processor": None,
               "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
               "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                         "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                         "vocab": self.vocab, "merges": []}}
        write_json(path, doc)


class BpeTokenizer:
    """A byte-level BPE trained with the `tokenizers` package."""

    def __init__(self, files, vocab_size):
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train(files, trainer)
        self.tok = tok

    def encode_batch(self, texts):
        return [e.ids for e in self.tok.encode_batch(texts)]

    def encode(self, text):
        return self.tok.encode(text).ids

    def vocab_size(self):
        return self.tok.get_vocab_size()

    def token_id(self, s):
        return self.tok.token_to_id(s)

    def save(self, path):
        self.tok.save(path)


class LoadedTokenizer(BpeTokenizer):
    """A committed tokenizer.json, read with the `tokenizers` package (the same encoder it was trained with)."""

    def __init__(self, path):  # noqa: super().__init__ trains; this one only reads
        from tokenizers import Tokenizer
        self.tok = Tokenizer.from_file(path)


def make_tokenizer(files, vocab_size):
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        return ByteTokenizer()
    return BpeTokenizer(files, vocab_size)
