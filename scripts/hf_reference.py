#!/usr/bin/env python3
"""scripts/hf_reference.py: HF transformers as the reference for inferd.

Runs on the GPU machine (its python3 has torch + transformers). Subcommands:

  make-random --config CONFIG.json --out DIR [--seed S] [--dtype bfloat16]
      write a random-weight model of that config (its architectures[0]:
      LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)
      as safetensors (config.json + model.safetensors), for comparison tests.
      The config may be in the transformers 4 or 5 format (rope_theta /
      rope_parameters, torch_dtype / dtype); it is translated to the
      installed transformers' format first. Every rope type inferd runs
      works (default, linear, dynamic, yarn, llama3): see
      configs/models/test-llama-rope-{linear,dynamic,yarn}-small.
  dump --model DIR --prompt-ids 1,2,3 [--max-new N] [--dtype bfloat16] --out FILE
      logits of the last prompt position (fp32) and N greedy tokens as JSON.
  compare --model DIR --inferd BIN [--device cuda] [--prompt-ids ...] [--atol A --rtol R]
      run both on the same prompt: compare inferd's last-position logits
      (inferd generate --dump-logits) with HF's, and the greedy tokens; print a
      table row and exit non-zero when outside tolerance.
      --prompt-len N: a seeded random prompt of N ids instead of --prompt-ids;
      the default (auto) picks original context + 64 for linear, dynamic and
      yarn models, so the comparison runs past the unscaled context.
      dynamic (NTK) rope: inferd fixes the scaled base at load, as vLLM does
      (a paged KV cache cannot re-rotate cached keys); HF recomputes it from
      each sequence's length. The HF side is therefore run with HF's own
      dynamic formula at seq_len = factor * max_position_embeddings, i.e. as
      default rope with that base (printed).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile


def _torch():
    import torch  # noqa: imported lazily so --help works anywhere
    return torch


def _config_for_installed(raw):
    """A config.json dict (transformers 4 or 5 format) as kwargs the
    installed transformers understands."""
    import transformers
    raw = dict(raw)
    major = int(transformers.__version__.split(".")[0])
    if major >= 5 and "rope_parameters" not in raw:
        rs = dict(raw.pop("rope_scaling", None) or {})
        if "type" in rs and "rope_type" not in rs:
            rs["rope_type"] = rs.pop("type")
        rs.setdefault("rope_type", "default")
        rs["rope_theta"] = raw.pop("rope_theta", 10000.0)
        raw["rope_parameters"] = rs
    if major < 5:
        rp = raw.pop("rope_parameters", None)
        if rp:
            rp = dict(rp)
            if "rope_theta" in rp:
                raw["rope_theta"] = rp.pop("rope_theta")
            if rp.get("rope_type", rp.get("type", "default")) != "default":
                raw["rope_scaling"] = rp
        if "dtype" in raw and "torch_dtype" not in raw:
            raw["torch_dtype"] = raw.pop("dtype")
    return raw


def cmd_make_random(a):
    torch = _torch()
    import transformers
    with open(a.config) as f:
        raw = json.load(f)
    arch = (raw.get("architectures") or ["LlamaForCausalLM"])[0]
    model_cls = getattr(transformers, arch, None)
    if model_cls is None:
        sys.exit(f"{a.config}: transformers {transformers.__version__} has no {arch}")
    cfg = model_cls.config_class(**_config_for_installed(raw))
    torch.manual_seed(a.seed)
    model = model_cls(cfg)
    # default init (std 0.02) gives near-uniform logits; widen it so the
    # comparison sees a peaked, meaningful distribution. Biases (Qwen2 q/k/v)
    # get a spread that visibly moves q/k/v; norm weights (Qwen3 q_norm /
    # k_norm included) stay near 1.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 1.0 / (p.shape[1] ** 0.5))
            elif name.endswith(".bias"):
                p.uniform_(-0.5, 0.5)
            else:
                p.uniform_(0.8, 1.2)
    model = model.to(getattr(torch, a.dtype))
    os.makedirs(a.out, exist_ok=True)
    model.save_pretrained(a.out, safe_serialization=True)
    print(f"wrote {a.out}: {arch}, {sum(p.numel() for p in model.parameters())/1e6:.1f}M params, {a.dtype}, "
          f"transformers {transformers.__version__}")


def _rope_of(model_dir):
    """(rope_type, scaling dict, rope_theta) of a model directory's config.json, either format."""
    with open(os.path.join(model_dir, "config.json")) as f:
        raw = json.load(f)
    rs = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    theta = rs.get("rope_theta", raw.get("rope_theta", 10000.0))
    return rs.get("rope_type", rs.get("type", "default")), rs, theta, raw


def _hf_config(model_dir):
    """The HF config to run. dynamic rope becomes default rope with vLLM's
    fixed base theta * (f*f - f + 1) ** (d / (d - 2)) (HF's own dynamic
    formula at seq_len = factor * max_position_embeddings), which is what
    inferd computes; see the module docstring."""
    from transformers import AutoConfig
    cfg = AutoConfig.from_pretrained(model_dir)
    rtype, rs, theta, raw = _rope_of(model_dir)
    if rtype != "dynamic":
        return cfg
    f = float(rs["factor"])
    d = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    max_len = raw["max_position_embeddings"] * f
    base = theta * ((f * max_len / raw["max_position_embeddings"]) - (f - 1)) ** (d / (d - 2))
    print(f"dynamic rope: HF run with the fixed base {base:.6g} (factor {f}, head_dim {d})", file=sys.stderr)
    if hasattr(cfg, "rope_parameters") and getattr(cfg, "rope_parameters", None) is not None:
        cfg.rope_parameters = {"rope_type": "default", "rope_theta": base}
    else:
        cfg.rope_scaling = None
        cfg.rope_theta = base
    return cfg


def hf_run(model_dir, ids, max_new, dtype):
    torch = _torch()
    from transformers import AutoModelForCausalLM
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(model_dir, config=_hf_config(model_dir),
                                                 dtype=getattr(torch, dtype)).to(dev).eval()
    x = torch.tensor([ids], device=dev)
    with torch.no_grad():
        logits = model(x).logits[0, -1].float().cpu()
        out = model.generate(x, max_new_tokens=max_new, do_sample=False, eos_token_id=None,
                             pad_token_id=0) if max_new > 0 else x
    return logits.tolist(), out[0, len(ids):].tolist()


def cmd_dump(a):
    ids = [int(t) for t in a.prompt_ids.split(",")]
    logits, greedy = hf_run(a.model, ids, a.max_new, a.dtype)
    with open(a.out, "w") as f:
        json.dump({"prompt_ids": ids, "logits_last": logits, "greedy": greedy}, f)
    print(f"wrote {a.out}")


def _prompt_ids(a):
    """--prompt-ids, or a seeded random prompt of --prompt-len ids (auto:
    past the original context of linear / dynamic / yarn models)."""
    n = a.prompt_len
    rtype, rs, _, raw = _rope_of(a.model)
    if n == "auto":
        if rtype not in ("linear", "dynamic", "yarn"):
            return [int(t) for t in a.prompt_ids.split(",")]
        orig = rs.get("original_max_position_embeddings") or raw["max_position_embeddings"]
        n = min(int(orig) + 64, 4096)
    elif int(n) <= 0:
        return [int(t) for t in a.prompt_ids.split(",")]
    import random
    rng = random.Random(1234)
    vocab = raw["vocab_size"]
    return [rng.randrange(3, vocab) for _ in range(int(n))]


def cmd_compare(a):
    torch = _torch()
    ids = _prompt_ids(a)
    a.prompt_ids = ",".join(str(t) for t in ids)
    ref_logits, ref_greedy = hf_run(a.model, ids, a.max_new, a.dtype)
    with tempfile.TemporaryDirectory() as td:
        dump = os.path.join(td, "logits.f32")
        cmd = [a.inferd, "generate", "--model", a.model, "--device", a.device, "--prompt-ids", a.prompt_ids,
               "--temperature", "0", "--ignore-eos", "--max-tokens", str(a.max_new), "--dump-logits", dump,
               "--print-ids"]
        env = dict(os.environ)
        if env.get("INFERD_LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = env["INFERD_LD_LIBRARY_PATH"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            sys.exit(f"inferd failed: {' '.join(cmd)}")
        ours = torch.frombuffer(bytearray(open(dump, "rb").read()), dtype=torch.float32)
        our_greedy = [int(t) for t in r.stdout.split()]
    ref = torch.tensor(ref_logits)
    err = (ours - ref).abs()
    bound = a.atol + a.rtol * ref.abs()
    ok = bool((err <= bound).all())
    top_ok = int(ours.argmax()) == int(ref.argmax())
    n_same = 0
    for x, y in zip(our_greedy, ref_greedy):
        if x != y:
            break
        n_same += 1
    print(f"{'model':<28} {'max|err|':>10} {'mean|err|':>10} {'argmax':>7} {'greedy same prefix':>20} {'result':>7}")
    rtype = _rope_of(a.model)[0]
    print(f"rope {rtype}, prompt {len(ids)} tokens + {a.max_new} greedy")
    print(f"{os.path.basename(a.model.rstrip('/')):<28} {err.max().item():>10.4f} {err.mean().item():>10.5f} "
          f"{'same' if top_ok else 'DIFF':>7} {f'{n_same}/{len(ref_greedy)}':>20} {'PASS' if ok and top_ok else 'FAIL':>7}")
    sys.exit(0 if ok and top_ok else 1)


# Texts beyond the shared golden cases that exercise a byte-level BPE with
# Qwen's pre-tokenizer: CJK, digits (split one by one), emoji, code, runs of
# whitespace, ChatML control tokens.
TOK_EXTRA_TEXTS = [
    "你好，世界！今天天气很好。",
    "日本語のテキストと한국어 텍스트",
    "1234567890 3.14159 -42 1e-9",
    "emoji: 🤖🚀👍🏽 and ZWJ 👨‍👩‍👧",
    "def f(x):\n    return x ** 2  # square\n\n\n\tindented",
    "   leading and trailing spaces   ",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n",
    "<think>\n\n</think>\n\nanswer",
    "naïve café résumé Ångström",
    "",
]


def cmd_tok_golden(a):
    """HF tokenizers' ids for the shared golden texts plus TOK_EXTRA_TEXTS,
    as a JSON file the repository keeps (tests/tokenizer/golden_qwen3.json)."""
    import tokenizers
    tok = tokenizers.Tokenizer.from_file(os.path.join(a.tokenizer, "tokenizer.json"))
    texts = [c["text"] for c in json.load(open(a.cases))["cases"]] + TOK_EXTRA_TEXTS
    out = {"description": f"HF tokenizers {tokenizers.__version__} ids of {a.tokenizer}/tokenizer.json "
                          "(encode, add_special_tokens=True, special tokens parsed); made by "
                          "scripts/hf_reference.py tok-golden on the GPU machine",
           "cases": [{"text": t, "ids": tok.encode(t, add_special_tokens=True).ids} for t in texts]}
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"wrote {a.out}: {len(texts)} cases, {sum(len(c['ids']) for c in out['cases'])} ids")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make-random")
    m.add_argument("--config", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--seed", type=int, default=0)
    m.add_argument("--dtype", default="bfloat16")
    d = sub.add_parser("dump")
    d.add_argument("--model", required=True)
    d.add_argument("--prompt-ids", required=True)
    d.add_argument("--max-new", type=int, default=16)
    d.add_argument("--dtype", default="bfloat16")
    d.add_argument("--out", required=True)
    c = sub.add_parser("compare")
    c.add_argument("--model", required=True)
    c.add_argument("--inferd", required=True)
    c.add_argument("--device", default="cuda")
    c.add_argument("--prompt-ids", default="1,15043,3186,29892,920,526,366,2599,1833,29973,450,4996,17354")
    c.add_argument("--prompt-len", default="auto", help="N random prompt ids, or auto (see above)")
    c.add_argument("--max-new", type=int, default=16)
    c.add_argument("--dtype", default="bfloat16")
    c.add_argument("--atol", type=float, default=0.15)
    c.add_argument("--rtol", type=float, default=0.05)
    t = sub.add_parser("tok-golden")
    t.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    t.add_argument("--cases", required=True, help="fixtures golden/tokenizers.json (its texts)")
    t.add_argument("--out", required=True)
    a = p.parse_args()
    {"make-random": cmd_make_random, "dump": cmd_dump, "compare": cmd_compare, "tok-golden": cmd_tok_golden}[a.cmd](a)


if __name__ == "__main__":
    main()
