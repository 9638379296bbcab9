#!/usr/bin/env python3
"""What a training step's split leaves for the matmuls under a target.

Reads the GPU check's raw results (a `results*.tar.gz` of `scripts/gpu-check/run.sh`, or its
unpacked folder): the profiled split of one `ddl bench train` command (`split_ms`: every kernel's
summed time in the profiled step) and PyTorch's bf16 + torch.compile step on the same card, and
prints the step's matmul and non-matmul time, the largest non-matmul kernels, and — for issue 29's
governing target, a step at most `1 / ratio` times PyTorch's — the time left to the products and
the average rate they would need (the model's 6·N·tokens FLOPs plus the blocked attention's
products over the score blocks it computes).

    python3 scripts/gpu-check/step_budget.py docs/gpu-runs/2026-11-27-h200-c/results.tar.gz \
        --torch docs/gpu-runs/2026-11-27-h200-c/results-2.tar.gz

No dependencies beyond the standard library.
"""
import argparse
import json
import os
import sys

from verdicts import open_results


def jsonl_lines(src, name):
    """The JSON lines of raw/<name> in a results tarball or folder ([] when absent)."""
    if os.path.isdir(src):
        for root, _, files in os.walk(src):
            if name in files:
                with open(os.path.join(root, name)) as f:
                    return [json.loads(l) for l in f if l.strip()]
        return []
    with open_results(src) as t:
        for m in t.getmembers():
            if m.name.endswith("/" + name) or m.name == name:
                data = t.extractfile(m).read().decode()
                return [json.loads(l) for l in data.splitlines() if l.strip()]
    return []


def attention_gflop(layers, batch, heads, head_dim, seq, block):
    """FLOPs of the blocked attention's seven products per layer (forward: scores, P·V; backward:
    scores again, dP, dV, dK, dQ), each over the (queries × keys) blocks it computes."""
    area = sum(min(block, seq - i0) * min(seq, i0 + block) for i0 in range(0, seq, block))
    return layers * 7 * 2 * batch * heads * area * head_dim / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results tarball or folder with the bench train line")
    ap.add_argument("--bench", default="bench-train-small-baseline.jsonl", help="its JSON lines file")
    ap.add_argument("--torch", help="results with torch-small-baseline-bf16-compile.jsonl (default: the same)")
    ap.add_argument("--ratio", type=float, default=0.5, help="target tok/s as a fraction of PyTorch's")
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--block", type=int, default=256, help="queries per attention block")
    ap.add_argument("--assume", default="", metavar="KERNEL=MS,...",
                    help="replace kernels' measured times by predicted ones (a scenario, said so)")
    a = ap.parse_args()

    lines = [d for d in jsonl_lines(a.results, a.bench) if d.get("bench") == "train" and "split_ms" in d]
    if not lines:
        sys.exit(f"{a.results}: no `bench train` line with a split in raw/{a.bench}")
    d = lines[0]
    split = dict(d["split_ms"])
    for kv in filter(None, a.assume.split(",")):
        k, v = kv.split("=")
        if k not in split:
            sys.exit(f"--assume: no kernel {k!r} in the split (has: {', '.join(sorted(split))})")
        print(f"assumed: {k} {float(v):.2f} ms instead of the measured {split[k]:.2f}")
        split[k] = float(v)
    total = sum(split.values())
    # The attention's products are `attention:matmul::…` since session 40 (the dispatch's role).
    def is_mm(k):
        role, sep, rest = k.partition(":")
        return k.startswith("matmul::") or (sep and not rest.startswith(":") and rest.startswith("matmul::"))
    mm = sum(v for k, v in split.items() if is_mm(k))
    other = total - mm
    print(f"{d['variant']} {d.get('precision', 'f32')} B {d['batch']} T {d['seq']}: step {d['step_ms']:.1f} ms, "
          f"profiled {total:.1f}: matmuls {mm:.1f}, the rest {other:.1f}")
    for k, v in sorted(split.items(), key=lambda kv: -kv[1]):
        if not is_mm(k) and v >= 0.5:
            print(f"  {k:40s} {v:7.2f} ms")

    torch = [t for t in jsonl_lines(a.torch or a.results, "torch-small-baseline-bf16-compile.jsonl")
             if t.get("dtype") == "bf16"]
    if not torch:
        print("no PyTorch bf16 + compile line: no budget")
        return
    t_ms = torch[0]["median_ms"]
    budget = t_ms / a.ratio
    model_gflop = d["model_gflop_per_s"] * d["step_ms"] / 1e3
    attn = attention_gflop(d["layers"], d["batch"], a.heads, a.head_dim, d["seq"], a.block)
    left = budget - other
    print(f"PyTorch bf16 + compile {t_ms:.2f} ms a step; at {a.ratio:g}× its tok/s a step may take {budget:.1f} ms")
    print(f"products: model {model_gflop:.0f} GFLOP + blocked attention {attn:.0f} GFLOP = {model_gflop + attn:.0f}")
    if left <= 0:
        print(f"the rest alone ({other:.1f} ms) exceeds it: no time is left for the products")
    else:
        print(f"left to the products with the rest as above: {left:.1f} ms, "
              f"{(model_gflop + attn) / left:.0f} TFLOP/s on average")


if __name__ == "__main__":
    main()
