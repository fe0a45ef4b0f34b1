#!/usr/bin/env python3
"""scripts/ncu_steps.py: where one decode step's time goes, kernel by kernel.

    python3 scripts/ncu_steps.py NCU_CSV[.gz] --batch B [--step last|all]

Reads the CSV that `ncu --metrics gpu__time_duration.sum --csv
--print-units base` writes for a `bench latency` run (device-wave.sh's
`ncustep` part), cuts the kernel list into steps at the sampling kernel
(`sample_kernel`, the last kernel of a step), keeps the pure decode steps
of B sequences (B rows sampled, no prefill attention kernel in the step)
and prints, for the last of them (or each with --step all), a table of
its kernels grouped by name and grid, the most time first: launches,
microseconds in all and each, share of the step. ncu runs kernels one at
a time, so the step's sum is above the step time of a run without ncu.
"""
import argparse
import collections
import csv
import gzip
import sys


def read_kernels(path):
    """[(name, grid, ns)] in launch order from ncu's CSV (its '==' notes skipped)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        sys.exit(f"{path}: no CSV rows")
    head = rows[0]
    try:
        ki, gi = head.index("Kernel Name"), head.index("Grid Size")
        mi, vi = head.index("Metric Name"), head.index("Metric Value")
    except ValueError as e:
        sys.exit(f"{path}: not ncu's CSV ({e})")
    return [(r[ki], r[gi], float(r[vi].replace(",", ""))) for r in rows[1:]
            if r[mi] == "gpu__time_duration.sum"]


def short_name(name):
    """The kernel's name without its parameter list (template arguments kept)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i].removeprefix("void ").strip()
    return name


def decode_steps(kernels, batch):
    """(first, last) index ranges of the pure decode steps of `batch` sequences."""
    out, start = [], 0
    for i, (name, grid, _) in enumerate(kernels):
        if not name.startswith("sample_kernel"):
            continue
        rows = int(grid.strip("()").split(",")[0])
        step = kernels[start:i + 1]
        if rows == batch and not any("prefill" in n for n, _, _ in step):
            out.append((start, i + 1))
        start = i + 1
    return out


def print_step(kernels, lo, hi):
    groups = collections.OrderedDict()
    for name, grid, ns in kernels[lo:hi]:
        g = groups.setdefault((short_name(name), grid), [0, 0.0])
        g[0] += 1
        g[1] += ns
    total = sum(ns for _, _, ns in kernels[lo:hi])
    print(f"step: kernels {lo}..{hi - 1} ({hi - lo} launches), {total / 1e3:.1f} us summed")
    print(f"| {'kernel':<70} | {'grid':<14} | {'launches':>8} | {'us':>9} | {'us each':>8} | {'share':>6} |")
    print(f"|{'-' * 72}|{'-' * 16}|{'-' * 9}:|{'-' * 10}:|{'-' * 9}:|{'-' * 7}:|")
    for (name, grid), (n, ns) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"| {name[:70]:<70} | {grid:<14} | {n:>8} | {ns / 1e3:>9.1f} | {ns / 1e3 / n:>8.2f} | "
              f"{100 * ns / total:>5.1f}% |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--batch", type=int, required=True, help="sequences in the decode steps to show")
    ap.add_argument("--step", choices=["last", "all"], default="last")
    args = ap.parse_args()
    if args.batch < 1:
        sys.exit("--batch must be at least 1")
    kernels = read_kernels(args.csv)
    steps = decode_steps(kernels, args.batch)
    if not steps:
        sys.exit(f"{args.csv}: no pure decode step of {args.batch} sequences among {len(kernels)} kernels")
    for lo, hi in steps if args.step == "all" else steps[-1:]:
        print_step(kernels, lo, hi)


if __name__ == "__main__":
    main()
