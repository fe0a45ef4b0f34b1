#!/usr/bin/env python3
"""scripts/make_tiny_tokenizer.py: build the built-in default model directory
(used by scripts/run.sh) from files in configs/models/tiny/: copy config.json
and generate a byte-level BPE tokenizer.json (one token per byte, in the
GPT-2 byte-to-unicode alphabet, no merges, then the special tokens of
tokenizer_spec.json) and a tokenizer_config.json carrying the chat template.
The weights are random (`inferd serve --load-format dummy`), so no download
is needed. Standard library only.

usage: make_tiny_tokenizer.py [--spec FILE] [--config FILE] --out DIR
"""
import argparse
import json
import os
import shutil


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable character map (ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\xa1"), ord("\xac") + 1)) + \
        list(range(ord("\xae"), ord("\xff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build(spec):
    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    specials = spec["special_tokens"]
    added = []
    for i, tok in enumerate(specials):
        tid = 256 + i
        added.append({"id": tid, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    bos = spec["bos_token"]
    bos_id = 256 + specials.index(bos)
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": spec["pre_tokenizer_regex"]}, "behavior": "Isolated",
                 "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [bos_id], "tokens": [bos]}},
        },
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": []},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos,
        "eos_token": spec["eos_token"],
        "add_bos_token": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 2048,
        "chat_template": spec["chat_template"],
        "added_tokens_decoder": {str(t["id"]): {k: v for k, v in t.items() if k != "id"} for t in added},
    }
    return tokenizer, config


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "models", "tiny")
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=os.path.join(here, "tokenizer_spec.json"))
    ap.add_argument("--config", default=os.path.join(here, "config.json"))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    with open(a.spec, encoding="utf-8") as f:
        spec = json.load(f)
    tokenizer, config = build(spec)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    shutil.copyfile(a.config, os.path.join(a.out, "config.json"))
    print(f"tiny model directory: {a.out} (random weights: serve it with --load-format dummy)")


if __name__ == "__main__":
    main()
