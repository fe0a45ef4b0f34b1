#!/usr/bin/env python3
"""scripts/gemm_operands.py: how the bf16 GEMM rate depends on its operands.

  python3 scripts/gemm_operands.py [--dim 8192] [--iters 10,200]

Times an 8192^3 bf16 torch.matmul (CUDA events, after 5 warm-up products)
on zero operands, randn operands, uniform [-1, 1] (the generator of
inferd's ceiling and of --load-format dummy) and uniform [-0.02, 0.02]
(the dummy weights' scale), each for a short and a sustained run, and
prints a table of TFLOP/s. Zeros draw less power than real data and keep
a higher clock, so a ceiling measured on zeros is not one real operands
reach: inferd's `bench latency` ceiling uses uniform random operands
(kernels/cuda/ceilings.cu). The zeros rows run first and last, so a drift
of the device over the run shows.
"""
import argparse
import time


def operands(torch, kind, d):
    if kind == "zeros":
        return torch.zeros(d, d, dtype=torch.bfloat16, device="cuda")
    if kind == "randn":
        return torch.randn(d, d, dtype=torch.bfloat16, device="cuda")
    scale = {"uniform 1": 1.0, "uniform 0.02": 0.02}[kind]
    return ((torch.rand(d, d, device="cuda") * 2 - 1) * scale).to(torch.bfloat16)


def rate(torch, a, b, iters):
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(iters):
        a @ b
    e1.record()
    torch.cuda.synchronize()
    d = a.shape[0]
    return 2 * d**3 * iters / e0.elapsed_time(e1) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dim", type=int, default=8192)
    ap.add_argument("--iters", default="10,200", help="comma-separated run lengths")
    args = ap.parse_args()
    import torch

    runs = [int(x) for x in args.iters.split(",")]
    print(f"device: {torch.cuda.get_device_name()}; bf16 torch.matmul {args.dim}^3, TFLOP/s")
    print("| operands | " + " | ".join(f"{n} products" for n in runs) + " |")
    print("|---|" + "---:|" * len(runs))
    for kind in ["zeros", "randn", "uniform 1", "uniform 0.02", "zeros"]:
        a, b = operands(torch, kind, args.dim), operands(torch, kind, args.dim)
        for _ in range(5):
            a @ b
        torch.cuda.synchronize()
        cells = []
        for n in runs:
            time.sleep(1.0)  # every run starts from an idle device
            cells.append(f"{rate(torch, a, b, n):.1f}")
        print(f"| {kind} | " + " | ".join(cells) + " |", flush=True)
        del a, b


if __name__ == "__main__":
    main()
