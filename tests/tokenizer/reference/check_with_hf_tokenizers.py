#!/usr/bin/env python3
"""Cross-check the committed golden ids (made with the JS port @huggingface/tokenizers) against
the Rust `tokenizers` library, where it is installed (the GPU machine has tokenizers 0.23.2).

    python3 check_with_hf_tokenizers.py <tokenizer.json> <golden.json> [<tokenizer.json> <golden.json> ...]

Prints one line per mismatch and exits 1 if there is any.
"""
import json
import sys

import tokenizers


def check(tokenizer_path, golden_path):
    tok = tokenizers.Tokenizer.from_file(tokenizer_path)
    cases = json.load(open(golden_path, encoding="utf-8"))["cases"]
    bad = 0
    for c in cases:
        for key, special in (("ids", False), ("ids_with_special", True)):
            got = tok.encode(c["text"], add_special_tokens=special).ids
            if got != c[key]:
                bad += 1
                print(f"MISMATCH {golden_path} {key} {c['text']!r}\n  rust: {got}\n  gold: {c[key]}")
        decoded = tok.decode(c["ids"], skip_special_tokens=False)
        if decoded != c["decoded"]:
            bad += 1
            print(f"DECODE MISMATCH {golden_path} {c['text']!r}: rust {decoded!r} gold {c['decoded']!r}")
    print(f"{golden_path}: {len(cases)} cases, {bad} mismatches (tokenizers {tokenizers.__version__})")
    return bad


def main(args):
    if len(args) < 2 or len(args) % 2:
        print(__doc__)
        return 2
    bad = sum(check(args[i], args[i + 1]) for i in range(0, len(args), 2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
