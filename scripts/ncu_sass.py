#!/usr/bin/env python3
"""scripts/ncu_sass.py: where one kernel's instructions and stalls sit, region by region.

    python3 scripts/ncu_sass.py SASS_CSV[.gz] [--top N] [--min-share PCT]

Reads what `ncu -i REPORT --page source --csv --print-source sass` writes
for a report taken with `--set full` (per-instruction executed counts and
warp stall samples) and prints:
  - the totals: SASS instructions, instructions executed, stall samples;
  - the regions: runs of consecutive instructions executed the same number
    of times (a CTA's prologue runs once a warp, a loop body once an
    iteration), each with its share of the executed instructions and of
    the stall samples and its leading stall reasons; regions under
    --min-share percent of both are summed in one "other" row;
  - the --top instructions by stall samples, with their reasons.
The executed count per instruction tells which code a region is (divide
it by the warps of the launch: 1 = once a warp).
"""
import argparse
import csv
import gzip
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(s):
    s = s.replace(",", "").strip()
    return int(float(s)) if s not in ("", "-") else 0


def read_sass(path):
    """(kernel name, [dict(index, sass, executed, samples, reasons)]) from ncu's source CSV."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    kernel, head_at = "?", None
    for i, r in enumerate(rows):
        if len(r) >= 2 and r[0] == "Kernel Name":
            kernel = r[1]
        if SAMPLES in r and EXECUTED in r and "Source" in r:
            head_at = i
            break
    if head_at is None:
        sys.exit(f"{path}: not ncu's per-instruction CSV (no '{SAMPLES}' / '{EXECUTED}' columns)")
    head = rows[head_at]
    col = {h: i for i, h in enumerate(head)}
    reasons = [h for h in head if h.startswith("stall_") and not h.endswith("(Not Issued)")]
    out = []
    for r in rows[head_at + 1:]:
        if len(r) != len(head):
            continue
        out.append({
            "index": len(out),
            "sass": r[col["Source"]].strip(),
            "executed": number(r[col[EXECUTED]]),
            "samples": number(r[col[SAMPLES]]),
            "reasons": {h[len("stall_"):]: number(r[col[h]]) for h in reasons},
        })
    if not out:
        sys.exit(f"{path}: no instruction rows")
    return kernel, out


def regions(instrs):
    """Runs of consecutive instructions with one executed count (never-executed ones skipped)."""
    out = []
    for ins in instrs:
        if ins["executed"] == 0 and ins["samples"] == 0:
            continue
        last = out[-1] if out else None
        if last and last["each"] == ins["executed"] and last["last"] == ins["index"] - 1:
            last["last"] = ins["index"]
            last["instructions"] += ins["executed"]
            last["samples"] += ins["samples"]
            for k, v in ins["reasons"].items():
                last["reasons"][k] = last["reasons"].get(k, 0) + v
        else:
            out.append({"first": ins["index"], "last": ins["index"], "each": ins["executed"],
                        "instructions": ins["executed"], "samples": ins["samples"], "reasons": dict(ins["reasons"])})
    return out


def lead(reasons, n=3):
    top = sorted(((v, k) for k, v in reasons.items() if v > 0), reverse=True)[:n]
    return ", ".join(f"{k} {v}" for v, k in top) or "-"


def pct(part, total):
    return 100.0 * part / total if total else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=12, help="instructions to list by stall samples")
    ap.add_argument("--min-share", type=float, default=2.0,
                    help="percent of instructions or samples a region needs for a row of its own")
    args = ap.parse_args()
    if args.top < 0 or args.min_share < 0:
        sys.exit("--top and --min-share must not be negative")
    kernel, instrs = read_sass(args.csv)
    n_exec = sum(i["executed"] for i in instrs)
    n_samp = sum(i["samples"] for i in instrs)
    print(f"kernel: {kernel}")
    print(f"{len(instrs)} SASS instructions, {n_exec:,} executed, {n_samp:,} stall samples")
    print()
    print(f"| {'instructions':<13} | {'executed each':>13} | {'executed':>14} | {'share':>6} | {'samples':>7} "
          f"| {'share':>6} | leading stall reasons |")
    print(f"|{'-' * 15}|{'-' * 14}:|{'-' * 15}:|{'-' * 7}:|{'-' * 8}:|{'-' * 7}:|{'-' * 23}|")
    other = {"n": 0, "instructions": 0, "samples": 0, "reasons": {}}
    for g in regions(instrs):
        si, ss = pct(g["instructions"], n_exec), pct(g["samples"], n_samp)
        if si < args.min_share and ss < args.min_share:
            other["n"] += 1
            other["instructions"] += g["instructions"]
            other["samples"] += g["samples"]
            for k, v in g["reasons"].items():
                other["reasons"][k] = other["reasons"].get(k, 0) + v
            continue
        span = f"{g['first']}..{g['last']}"
        print(f"| {span:<13} | {g['each']:>13,} | {g['instructions']:>14,} | {si:>5.1f}% | {g['samples']:>7,} "
              f"| {ss:>5.1f}% | {lead(g['reasons'])} |")
    if other["n"]:
        label = f"other ({other['n']})"
        print(f"| {label:<13} | {'':>13} | {other['instructions']:>14,} | {pct(other['instructions'], n_exec):>5.1f}% "
              f"| {other['samples']:>7,} | {pct(other['samples'], n_samp):>5.1f}% | {lead(other['reasons'])} |")
    if args.top == 0:
        return
    print()
    print(f"| {'#':>5} | {'executed':>10} | {'samples':>7} | {'share':>6} | {'SASS':<48} | stall reasons |")
    print(f"|{'-' * 6}:|{'-' * 11}:|{'-' * 8}:|{'-' * 7}:|{'-' * 50}|{'-' * 15}|")
    top = sorted((i for i in instrs if i["samples"] > 0), key=lambda i: (-i["samples"], i["index"]))[:args.top]
    for i in top:
        print(f"| {i['index']:>5} | {i['executed']:>10,} | {i['samples']:>7,} | {pct(i['samples'], n_samp):>5.1f}% "
              f"| {i['sass'][:48]:<48} | {lead(i['reasons'])} |")


if __name__ == "__main__":
    main()
