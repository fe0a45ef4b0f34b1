#!/usr/bin/env python3
"""scripts/bench_gpu.py: batch-1 prefill and decode speed of inferd on a GPU,
as ratios to the hardware ceilings measured in the same run, side by side
with HF transformers (the peer available on the GPU machine).

  python3 scripts/bench_gpu.py --inferd build-gpu/cli/inferd \
      --config configs/models/llama3-8b [--prompt-len 512] [--gen 128]

Ceilings (PyTorch, same process, same GPU):
  - copy bandwidth: device-to-device copy of 4 GiB, counting read + write;
  - bf16 GEMM rate: 8192^3 torch.matmul.
Decode is bound by reading the weights once per token: achieved bandwidth =
weight bytes / decode time per token. Prefill is bound by GEMM FLOPs:
2 * n_params * prompt tokens (+ attention) / prefill time.
Both engines use random (dummy) weights of the same config in bf16.
--hf-compile times only HF's fast path instead (static KV cache +
torch.compile "reduce-overhead", i.e. CUDA graphs), in its own process:
compiling an 8B model takes minutes, and on torch 2.11 + transformers 5.17
the second generate fails ("accessing tensor output of CUDAGraphs that has
been overwritten", docs/PERF.md, twenty-second session).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time


def ceilings(torch):
    x = torch.empty(1 << 31, dtype=torch.bfloat16, device="cuda")  # 4 GiB
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 10
    for _ in range(n):
        y.copy_(x)
    torch.cuda.synchronize()
    bw = 2 * x.numel() * 2 * n / (time.perf_counter() - t)
    del x, y
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        a @ b
    torch.cuda.synchronize()
    flops = 2 * 8192 ** 3 * n / (time.perf_counter() - t)
    del a, b
    torch.cuda.empty_cache()
    return bw, flops


def n_params(cfg):
    d, f, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hd = cfg.get("head_dim") or d // cfg["num_attention_heads"]
    nq = cfg["num_attention_heads"]
    nkv = cfg.get("num_key_value_heads", nq)
    per_layer = d * (nq + 2 * nkv) * hd + nq * hd * d + 3 * d * f + 2 * d
    emb = V * d * (1 if cfg.get("tie_word_embeddings") else 2)
    return L * per_layer + emb + d, L * per_layer + V * d + d  # total, read per decode step


def run_inferd(a, ids):
    env = dict(os.environ)
    if env.get("INFERD_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["INFERD_LD_LIBRARY_PATH"]
    cmd = [a.inferd, "generate", "--device", "cuda", "--load-format", "dummy", "--model", a.config,
           "--prompt-ids", ",".join(map(str, ids)), "--max-tokens", str(a.gen), "--ignore-eos",
           "--temperature", "0", "--print-ids", "--max-model-len", str(max(4096, a.prompt_len + a.gen + 16)),
           "--max-num-seqs", "8"]
    best = None
    for _ in range(a.runs):
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"inferd failed ({r.returncode}):\n{r.stderr[-3000:]}")
        line = [l for l in r.stderr.splitlines() if "prompt tokens:" in l][-1]
        m = re.search(r"prefill: ([\d.]+) ms .*decode: ([\d.]+) ms/token", line)
        p_ms, d_ms = float(m.group(1)), float(m.group(2))
        best = (p_ms, d_ms) if best is None else (min(best[0], p_ms), min(best[1], d_ms))
    mem = [l for l in r.stderr.splitlines() if "memory:" in l]
    return best, (mem[-1] if mem else "")


def run_inferd_batch(a, prompts):
    """Throughput: every prompt at once through the engine (--prompts-file)."""
    import tempfile
    env = dict(os.environ)
    if env.get("INFERD_LD_LIBRARY_PATH"):
        env["LD_LIBRARY_PATH"] = env["INFERD_LD_LIBRARY_PATH"]
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for p in prompts:
            f.write(json.dumps({"prompt_ids": p, "max_tokens": a.gen, "ignore_eos": True}) + "\n")
        path = f.name
    cmd = [a.inferd, "generate", "--device", "cuda", "--load-format", "dummy", "--model", a.config,
           "--prompts-file", path, "--temperature", "0", "--max-num-seqs", str(len(prompts)),
           "--max-num-batched-tokens", "8192", "--max-model-len", "4096", "--log-level", "warn"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    os.unlink(path)
    if r.returncode != 0:
        sys.exit(f"inferd batch failed ({r.returncode}):\n{r.stderr[-3000:]}")
    m = re.search(r"elapsed ([\d.]+) s, steps (\d+)", r.stderr)
    run_inferd_batch.steps = int(m.group(2))
    return len(prompts) * a.gen / float(m.group(1)), float(m.group(1))


def run_hf_batch(torch, model, prompts, gen):
    x = torch.tensor(prompts, device="cuda")
    with torch.no_grad():
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(x, max_new_tokens=gen, min_new_tokens=gen, do_sample=False)
        torch.cuda.synchronize()
    el = time.perf_counter() - t
    return len(prompts) * gen / el, el


def hf_model(torch, cfg):
    from transformers import LlamaConfig, LlamaForCausalLM
    conf = LlamaConfig(**cfg)
    with torch.device("meta"):
        model = LlamaForCausalLM(conf)
    model = model.to_empty(device="cuda").to(torch.bfloat16).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.uniform_(-0.02, 0.02)
    model.generation_config.pad_token_id = 0
    return model


def run_hf(torch, a, cfg, ids, prompts):
    model = hf_model(torch, cfg)
    x = torch.tensor([ids], device="cuda")
    res = []
    with torch.no_grad():
        # untimed warm-up (CUDA context, cuBLAS handles and kernel selection),
        # as inferd's own timing excludes its start-up
        model(x)
        model.generate(x[:, :16], max_new_tokens=2, do_sample=False)
        torch.cuda.synchronize()
        for _ in range(a.runs):
            torch.cuda.synchronize()
            t = time.perf_counter()
            model(x)
            torch.cuda.synchronize()
            p_ms = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            model.generate(x, max_new_tokens=a.gen, min_new_tokens=a.gen, do_sample=False)
            torch.cuda.synchronize()
            g_ms = (time.perf_counter() - t) * 1e3
            res.append((p_ms, (g_ms - p_ms) / max(1, a.gen - 1)))
    batch = run_hf_batch(torch, model, prompts, a.gen) if prompts else None
    del model
    torch.cuda.empty_cache()
    return min(r[0] for r in res), min(r[1] for r in res), batch


def run_hf_compiled(torch, a, cfg, ids):
    """HF's fast path: a static KV cache and torch.compile(mode="reduce-overhead",
    fullgraph=True) on the forward (CUDA graphs). Prefill = a generate of one
    token; decode = (a generate of a.gen tokens - that) / (a.gen - 1). Both
    are compiled in untimed runs first (returned as the compile seconds)."""
    model = hf_model(torch, cfg)
    model.generation_config.cache_implementation = "static"
    model.forward = torch.compile(model.forward, mode="reduce-overhead", fullgraph=True)
    x = torch.tensor([ids], device="cuda")

    def gen(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        model.generate(x, max_new_tokens=n, min_new_tokens=n, do_sample=False)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) * 1e3

    with torch.no_grad():
        t = time.perf_counter()
        for _ in range(2):
            gen(1), gen(a.gen)
        compile_s = time.perf_counter() - t
        res = []
        for _ in range(a.runs):
            p_ms, g_ms = gen(1), gen(a.gen)
            res.append((p_ms, (g_ms - p_ms) / max(1, a.gen - 1)))
    del model
    torch.cuda.empty_cache()
    return min(r[0] for r in res), min(r[1] for r in res), compile_s


def print_rows(torch, a, bw, gemm, total, per_step, rows, mem):
    name = torch.cuda.get_device_name()
    print(f"device: {name}; copy bandwidth {bw/1e9:.0f} GB/s; bf16 GEMM {gemm/1e12:.0f} TFLOP/s")
    print(f"model: {a.config} ({total/1e9:.2f} B params, {per_step*2/1e9:.2f} GB bf16 read per decode step)")
    if mem:
        print(f"inferd {mem.strip()}")
    print(f"batch 1, prompt {a.prompt_len} tokens, {a.gen} generated; best of {a.runs}")
    print(f"| {'engine':<24} | {'prefill ms':>10} | {'prefill tok/s':>13} | {'% GEMM peak':>11} | "
          f"{'decode ms/tok':>13} | {'decode tok/s':>12} | {'% copy BW':>9} |")
    print("|" + "|".join("-" * w for w in (26, 12, 15, 13, 15, 14, 11)) + "|")
    for n, p_ms, d_ms in rows:
        flops = 2 * total * a.prompt_len
        print(f"| {n:<24} | {p_ms:>10.2f} | {a.prompt_len/(p_ms/1e3):>13.0f} | "
              f"{100*flops/(p_ms/1e3)/gemm:>10.1f}% | {d_ms:>13.3f} | {1e3/d_ms:>12.1f} | "
              f"{100*per_step*2/(d_ms/1e3)/bw:>8.1f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inferd", help="the inferd binary (required unless --hf-compile)")
    ap.add_argument("--config", default="configs/models/llama3-8b")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--hf-compile", action="store_true",
                    help="only the peer with a static cache + torch.compile (no inferd, no eager rows)")
    ap.add_argument("--batch", type=int, default=64, help="prompts for the throughput row (0 = skip)")
    ap.add_argument("--scaling", action=argparse.BooleanOptionalAction, default=True,
                    help="decode step time at batch 1/8/32/64")
    a = ap.parse_args()
    if not a.inferd and not a.hf_compile:
        ap.error("--inferd is required")
    import torch
    cfg = json.load(open(os.path.join(a.config, "config.json")))
    total, per_step = n_params(cfg)
    ids = [(i * 7919) % (cfg["vocab_size"] - 1000) + 500 for i in range(a.prompt_len)]
    bw, gemm = ceilings(torch)
    if a.hf_compile:
        hp, hd, cs = run_hf_compiled(torch, a, cfg, ids)
        print_rows(torch, a, bw, gemm, total, per_step, [("HF static + compile", hp, hd)], "")
        print(f"compile + warm-up runs: {cs:.1f} s")
        return
    (ip, idt), mem = run_inferd(a, ids)
    rows = [("inferd", ip, idt)]
    prompts = [[(i * 7919 + 104729 * b) % (cfg["vocab_size"] - 1000) + 500 for i in range(a.prompt_len)]
               for b in range(a.batch)]
    tput = [("inferd (engine, --prompts-file)",) + run_inferd_batch(a, prompts)] if a.batch else []
    if not a.no_peer:
        hp, hd, hb = run_hf(torch, a, cfg, ids, prompts)
        rows.append(("HF transformers (eager)", hp, hd))
        if hb:
            tput.append(("HF transformers generate",) + hb)
    print_rows(torch, a, bw, gemm, total, per_step, rows, mem)
    if a.scaling:
        # decode-dominated runs: 16-token prompts, a.gen tokens each; ms per engine step
        print(f"\ndecode step time vs batch size (16-token prompts, {a.gen} generated each)")
        print(f"| {'batch':>5} | {'steps':>5} | {'ms/step':>8} | {'generated tok/s':>15} | {'weights % copy BW':>17} |")
        print("|" + "|".join("-" * w for w in (7, 7, 10, 17, 19)) + "|")
        for bsz in (1, 8, 32, 64):
            ps = [[(i * 31 + 977 * b) % (cfg["vocab_size"] - 1000) + 500 for i in range(16)] for b in range(bsz)]
            tps, el = run_inferd_batch(a, ps)
            steps = run_inferd_batch.steps
            ms = el * 1e3 / steps
            print(f"| {bsz:>5} | {steps:>5} | {ms:>8.2f} | {tps:>15.0f} | {100*per_step*2/(ms/1e3)/bw:>16.1f}% |")
    if tput:
        print(f"\nthroughput: {a.batch} prompts x {a.prompt_len} tokens, {a.gen} generated each, all at once")
        print(f"| {'engine':<32} | {'elapsed s':>9} | {'generated tok/s':>15} |")
        print("|" + "|".join("-" * w for w in (34, 11, 17)) + "|")
        for n, tps, el in tput:
            print(f"| {n:<32} | {el:>9.2f} | {tps:>15.0f} |")


if __name__ == "__main__":
    main()
