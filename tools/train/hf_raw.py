"""The parts of a Hugging Face directory that need no tensor library: the raw entries of a
safetensors file and GPT-2's byte alphabet. hf_io (torch, training) and engine/bench/llamacpp_gguf.py
(numpy, llama.cpp's peer run) build their tensors and vocabularies on these."""
import json
import struct


def safetensors_entries(path):
    """(name, dtype, shape, raw little-endian bytes) of every tensor of one safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        yield name, e["dtype"], e["shape"], data[a:b]


def bytes_to_unicode():
    """GPT-2's byte-to-printable-character map (the ByteLevel alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))
