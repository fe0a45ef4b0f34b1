#!/usr/bin/env python3
"""scripts/bench_tokenizer.py: encode a ~100 KB prompt with HF `tokenizers`
(the Rust library, the peer) and with inferd (tests/tokenizer/test_tok_perf,
which prints its own timings) on the same machine, and print a table.

  python3 scripts/bench_tokenizer.py --fixtures DIR --perf-bin build/tests/tokenizer/test_tok_perf

The prompt is built exactly like test_tok_perf.c: the golden strings of
golden/tokenizers.json without special-token text, each followed by a
newline, repeated up to 100 KiB and cut at a character boundary.
"""
import argparse
import json
import os
import re
import subprocess
import time

PROMPT_BYTES = 100 * 1024


def make_prompt(fixtures):
    cases = json.load(open(os.path.join(fixtures, "golden/tokenizers.json")))["cases"]
    buf = bytearray()
    while len(buf) < PROMPT_BYTES:
        for c in cases:
            s = c["text"].encode()
            if b"<" in s:
                continue
            if len(buf) + len(s) + 1 > PROMPT_BYTES + 4000:
                break
            buf += s + b"\n"
    n = min(len(buf), PROMPT_BYTES)
    while n > 0 and n < len(buf) and (buf[n] & 0xC0) == 0x80:
        n -= 1
    return bytes(buf[:n]).decode()


def hf_time(path, text):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(path)
    best, ids = 1e9, []
    for _ in range(5):
        t = time.perf_counter()
        ids = tok.encode(text).ids
        best = min(best, time.perf_counter() - t)
    return best * 1e3, ids


def inferd_ids(inferd, tok_dir, text, env):
    """The ids `inferd tokenize` prints for text (checks equality with HF)."""
    r = subprocess.run([inferd, "tokenize", "--tokenizer", tok_dir, "--", text], capture_output=True,
                       text=True, env=env)
    return json.loads(r.stdout) if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--perf-bin", required=True)
    ap.add_argument("--inferd", help="inferd binary: also compare `inferd tokenize` ids with HF's")
    a = ap.parse_args()
    text = make_prompt(a.fixtures)
    env = dict(os.environ, INFERD_FIXTURES=a.fixtures)
    if env.get("INFERD_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["INFERD_LD_LIBRARY_PATH"]
    out = subprocess.run([a.perf_bin], capture_output=True, text=True, env=env).stdout
    ours = {m.group(1): (float(m.group(3)), int(m.group(2)))
            for m in re.finditer(r"PERF encode (\S+)\s+\d+ bytes -> (\d+) tokens: ([\d.]+) ms", out)}
    print(f"prompt: {len(text.encode())} bytes; best of 5 encodes, single thread")
    print(f"| {'tokenizer':<12} | {'tokens':>7} | {'inferd ms':>9} | {'HF tokenizers ms':>16} | {'inferd / HF':>11} |")
    print("|" + "|".join("-" * w for w in (14, 9, 11, 18, 13)) + "|")
    for name, rel in (("llama3", "tokenizers/llama3/tokenizer.json"),
                      ("llama2", "tokenizers/llama2/tokenizer.json"),
                      ("stories260K", "models/stories260K/tokenizer.json")):
        hf_ms, hf_ids = hf_time(os.path.join(a.fixtures, rel), text)
        hf_n = len(hf_ids)
        our_ms, our_n = ours.get(name, (float("nan"), -1))
        flag = "" if our_n == hf_n else f" (count differs: {our_n} vs {hf_n})"
        if a.inferd:
            ids = inferd_ids(a.inferd, os.path.dirname(os.path.join(a.fixtures, rel)), text, env)
            if ids == hf_ids:
                flag += " ids identical"
            elif ids is not None:
                k = next((i for i, (x, y) in enumerate(zip(ids, hf_ids)) if x != y), min(len(ids), len(hf_ids)))
                flag += f" ids differ at {k}: ours {ids[max(0,k-3):k+3]} hf {hf_ids[max(0,k-3):k+3]}"
        print(f"| {name:<12} | {hf_n:>7} | {our_ms:>9.2f} | {hf_ms:>16.2f} | {our_ms / hf_ms:>10.2f}x |{flag}")


if __name__ == "__main__":
    main()
