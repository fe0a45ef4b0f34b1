#!/usr/bin/env python3
"""tests/fuzz/make_seeds.py: seed corpora for the libFuzzer harnesses.

    python3 tests/fuzz/make_seeds.py FIXTURES OUT_DIR

Writes OUT_DIR/<harness>/ for each harness in tests/fuzz, from the hand-written
seeds in tests/fuzz/seeds/ and, at run time, from the fixtures (no fixture file
is copied into the repository): config.json files, tokenizer.json files
(shrunk to a few hundred vocab entries so that one execution stays fast, with
their normalizer, pre-tokenizer, decoder, post-processor, added tokens and
tokenizer_config.json intact), the chat templates and conversations, and the
tokenizer golden texts and ids. Missing fixtures only mean fewer seeds.
Each seed file is named by the SHA-1 of its content, as libFuzzer does.
"""
import glob
import hashlib
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HARNESSES = ["fuzz_safetensors", "fuzz_config", "fuzz_tok_load", "fuzz_tok_encode", "fuzz_openai", "fuzz_chat"]
# fuzz_chat: SRV_CHAT_* family numbers of server/srv_chat.h
FAMILIES = {"none": 0, "llama2": 1, "llama3": 2, "llama31": 3, "chatml": 4, "mistral": 5}
ROLES = {"system": 0, "user": 1, "assistant": 2}


def load_json(path):
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


class Corpus:
    def __init__(self, out):
        self.out = out
        self.counts = {}

    def add(self, harness, data):
        if data is None:
            return
        if isinstance(data, str):
            data = data.encode()
        d = os.path.join(self.out, harness)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, hashlib.sha1(data).hexdigest()), "wb") as f:
            f.write(data)
        self.counts[harness] = self.counts.get(harness, 0) + 1


def hand_written(c):
    for h, sub in [("fuzz_openai", "openai"), ("fuzz_safetensors", "safetensors"), ("fuzz_config", "config")]:
        for p in sorted(glob.glob(os.path.join(HERE, "seeds", sub, "*"))):
            c.add(h, read(p))


def st_file(entries, payload):
    """A safetensors file: {name: (dtype, shape, bytes)} packed in order."""
    hdr, data = {"__metadata__": {"format": "pt"}}, b""
    for name, (dt, shape, raw) in entries.items():
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(hdr, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data + payload


def safetensors_seeds(c, fix):
    path = os.path.join(fix, "models", "stories260K", "model.safetensors")
    raw = read(path)
    if not raw or len(raw) < 8:
        return
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    base = 8 + n
    # The real header over a truncated data region: every offset check fires.
    c.add("fuzz_safetensors", raw[:base])
    # The real small tensors (norm weights), repacked with their real bytes.
    small = {}
    for name, e in sorted(hdr.items()):
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        if en - b <= 512:
            small[name] = (e["dtype"], e["shape"], raw[base + b:base + en])
        if len(small) >= 6:
            break
    c.add("fuzz_safetensors", st_file(small, b""))
    # One real big tensor's header entry, data cut to 1 KiB (shape mismatch).
    name, e = next((k, v) for k, v in hdr.items() if k != "__metadata__")
    c.add("fuzz_safetensors", st_file({name: (e["dtype"], e["shape"], b"\0" * 1024)}, b""))


def config_seeds(c, fix):
    paths = sorted(glob.glob(os.path.join(fix, "models", "*", "config.json")))
    paths += sorted(glob.glob(os.path.join(ROOT, "configs", "models", "*", "config.json")))
    for p in paths:
        cfg = read(p)
        gen = read(os.path.join(os.path.dirname(p), "generation_config.json"))
        c.add("fuzz_config", cfg)
        if gen:
            c.add("fuzz_config", cfg + b"\0" + gen)


def shrink_tokenizer(tok, keep):
    """tokenizer.json with the vocab cut to ids < keep (plus the added
    tokens) and the merges whose parts and result survive."""
    model = tok.get("model", {})
    vocab = model.get("vocab")
    if isinstance(vocab, dict):
        model["vocab"] = {k: v for k, v in vocab.items() if isinstance(v, int) and v < keep}
        kept = model["vocab"]
        merges = []
        for m in model.get("merges", []):
            a, b = (m.split(" ", 1) + [""])[:2] if isinstance(m, str) else (m + ["", ""])[:2]
            if a in kept and b in kept and (a + b) in kept:
                merges.append(m)
        model["merges"] = merges
    return tok


def tokenizer_seeds(c, fix):
    dirs = sorted(glob.glob(os.path.join(fix, "tokenizers", "*"))) + sorted(glob.glob(os.path.join(fix, "models", "*")))
    for d in dirs:
        tj = os.path.join(d, "tokenizer.json")
        raw = read(tj)
        if raw is None:
            continue
        cfg = read(os.path.join(d, "tokenizer_config.json"))
        if len(raw) > 64 * 1024:
            tok = json.loads(raw)
            raw = json.dumps(shrink_tokenizer(tok, 400), ensure_ascii=False).encode()
        c.add("fuzz_tok_load", raw)
        if cfg:
            c.add("fuzz_tok_load", raw + b"\0" + cfg)


def encode_seeds(c, fix):
    gold = load_json(os.path.join(fix, "golden", "tokenizers.json")) or {}
    texts = [case.get("text", "") for case in gold.get("cases", [])]
    texts += [case.get("text", "") for case in gold.get("official_llama2_vectors", {}).get("cases", [])]
    conv = load_json(os.path.join(fix, "chat_templates", "conversations.json")) or {}
    for cv in conv.get("conversations", []):
        for m in cv.get("messages", []):
            if isinstance(m.get("content"), str):
                texts.append(m["content"])
    texts.append("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nhi<|eot_id|><s>[INST]</s>")
    for i, t in enumerate(texts):
        b = t.encode()
        # modes: tokenizer bit 0, flags bits 2-4 (see fuzz_tok_encode.c)
        c.add("fuzz_tok_encode", bytes([(i & 1) | ((i % 8) << 2)]) + b)
        c.add("fuzz_tok_encode", bytes([((i + 1) & 1) | 0x0C]) + b)
    for case in gold.get("cases", []):
        for k, mode in (("llama2", 0), ("llama3", 1)):
            ids = case.get(k, {}).get("ids", [])
            if ids:
                c.add("fuzz_tok_encode", bytes([mode | 2 | 32]) + b"".join(struct.pack("<I", i)[:3] for i in ids))
                if all(i < 65536 for i in ids):
                    c.add("fuzz_tok_encode", bytes([mode | 2 | 16 | 64]) + b"".join(struct.pack("<H", i) for i in ids))


def chat_seeds(c, fix):
    conv = load_json(os.path.join(fix, "chat_templates", "conversations.json")) or {}
    for cv in conv.get("conversations", []):
        msgs = []
        for m in cv.get("messages", []):
            role, content = m.get("role"), m.get("content")
            if role in ROLES and isinstance(content, str):
                msgs.append(bytes([ROLES[role]]) + content.encode())
        body = b"\x1e".join(msgs)
        for name, f in FAMILIES.items():
            c.add("fuzz_chat", bytes([f, 3]) + body)
        # The same conversation as an OpenAI chat request body.
        c.add("fuzz_openai", json.dumps({"messages": [m for m in cv.get("messages", [])], "max_tokens": 16}))
    for p in sorted(glob.glob(os.path.join(fix, "chat_templates", "*.json"))):
        t = load_json(p)
        if isinstance(t, dict) and isinstance(t.get("chat_template"), str):
            c.add("fuzz_chat", bytes([0, 0]) + t["chat_template"].encode())


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_seeds.py FIXTURES OUT_DIR")
    fix, out = sys.argv[1], sys.argv[2]
    c = Corpus(out)
    for h in HARNESSES:
        os.makedirs(os.path.join(out, h), exist_ok=True)
    hand_written(c)
    safetensors_seeds(c, fix)
    config_seeds(c, fix)
    tokenizer_seeds(c, fix)
    encode_seeds(c, fix)
    chat_seeds(c, fix)
    print("seeds: " + ", ".join("%s %d" % (h, c.counts.get(h, 0)) for h in HARNESSES))


if __name__ == "__main__":
    main()
