#!/usr/bin/env python3
"""The engine's matrix products against PyTorch's on the same card, product by product, and what
one small-124m training step's linear products cost at each side's rates.

    python3 scripts/gpu-check/products.py RESULTS.tar.gz [RESULTS-2.tar.gz ...]
        [--engine bench-matmul-model] [--torch torch-matmul-f32] [--layers 12]

Reads the raw JSON lines `run.sh` wrote (a later archive's stage replaces an earlier one's):
the engine's `ddl bench matmul --preset small-124m` rows (stage `--engine`: per product the
variant the engine picks, `"auto": true`, and the best variant it timed) and PyTorch's
(`scripts/torch_matmul_bench.py`, stage `--torch`), matched by the product's name. Prints a
markdown table — per product the two rates (TFLOP/s) and the engine's over PyTorch's — then
the step's products at each side's rates: per layer the q/k/v projections three times, the
output projection once, the MLP's gate and up twice, its down once, times `--layers`; the tied
LM head once; each in its forward, weight-gradient and input-gradient forms (the engine's list,
`bench::model_matmuls`). A product one side lacks is named, not guessed. The engine's product
split into pieces (`pieces:N` rows, the LM head's input gradient) counts at its picked pieces'
rate. Python's standard library only.
"""

import argparse
import sys

# The archives are read as verdicts.py reads them (this folder is on the path of a script run
# from it).
from verdicts import load

# How often one training step runs each product name's shape (per layer, or once).
PER_LAYER = {"attn.wq/wk/wv": 3, "attn.wo": 1, "mlp.w_gate/w_up": 2, "mlp.w_down": 1}
ONCE = {"lm_head": 1}


def engine_rates(rows):
    """product name -> (picked TFLOP/s, picked variant, best TFLOP/s, best variant, flop)."""
    out = {}
    for r in rows:
        if r.get("bench") != "matmul" or "gflop_per_s" not in r or "case" not in r:
            continue
        if ":" in str(r.get("variant", "")) and not str(r["variant"]).startswith(("pieces:", "split:")):
            continue  # a diagnostic half (w128:mma, …), not the product
        name, t = r["case"], r["gflop_per_s"] / 1000
        pick, pv, best, bv, flop = out.get(name, (None, None, 0.0, None, r.get("flop")))
        if r.get("auto"):
            pick, pv = t, r.get("variant")
        if t > best:
            best, bv = t, r.get("variant")
        out[name] = (pick, pv, best, bv, flop)
    return out


def torch_rates(rows):
    """product name -> (TFLOP/s, flop)."""
    return {r["case"]: (r["tflops"], 2.0 * r["m"] * r["n"] * r["k"])
            for r in rows if r.get("impl") == "torch" and r.get("bench") == "matmul"}


def times(name):
    layer = name.split(" ", 1)[0]
    return PER_LAYER.get(layer), ONCE.get(layer)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+", help="results*.tar.gz that run.sh wrote")
    ap.add_argument("--engine", default="bench-matmul-model", help="the engine's stage (default %(default)s)")
    ap.add_argument("--torch", default="torch-matmul-f32", help="PyTorch's stage (default %(default)s)")
    ap.add_argument("--layers", type=int, default=12, help="transformer layers (small-124m: 12)")
    args = ap.parse_args(argv)
    if args.layers < 1:
        ap.error(f"--layers {args.layers}: expected at least 1 (small-124m has 12)")
    stages, _ = load(args.results)
    eng = engine_rates(stages.get(args.engine, []))
    tor = torch_rates(stages.get(args.torch, []))
    if not eng and not tor:
        sys.exit(f"products.py: neither stage {args.engine} nor {args.torch} has product rows in "
                 f"{', '.join(args.results)} (the stages that ran: {', '.join(sorted(stages)) or 'none'})")
    names = [n for n in eng if times(n) != (None, None)]
    names += [n for n in tor if n not in eng and times(n) != (None, None)]
    print("| product | engine's pick TFLOP/s | engine's best | PyTorch TFLOP/s | pick / PyTorch |")
    print("|---|---|---|---|---|")
    step = {"engine": 0.0, "torch": 0.0}
    missing = {"engine": [], "torch": []}
    for n in names:
        e, t = eng.get(n), tor.get(n)
        pick = e[0] if e and e[0] is not None else (e[2] if e else None)
        flop = (e[4] if e else None) or (t[1] if t else None)
        ratio = f"{pick / t[0]:.2f}" if pick and t else "–"
        cells = [
            f"{pick:.1f} ({e[1] or e[3]})" if pick else "–",
            f"{e[2]:.1f} ({e[3]})" if e else "–",
            f"{t[0]:.1f}" if t else "–",
            ratio,
        ]
        print(f"| {n} | " + " | ".join(cells) + " |")
        per_layer, once = times(n)
        count = (per_layer or 0) * args.layers + (once or 0)
        for side, rate in (("engine", pick), ("torch", t[0] if t else None)):
            if rate and flop:
                step[side] += count * flop / (rate * 1e12) * 1e3
            else:
                missing[side].append(n)
    print()
    what = f"One training step's linear products ({args.layers} layers, the LM head once)"
    full = {side: not missing[side] and names for side in step}
    for side, label in (("engine", "the engine's picked rates"), ("torch", "PyTorch's rates")):
        if full[side]:
            print(f"{what} at {label}: {step[side]:.1f} ms.")
        else:
            print(f"{what} at {label}: not counted, {len(missing[side])} of {len(names)} products missing "
                  f"({'; '.join(missing[side][:3])}{' …' if len(missing[side]) > 3 else ''}).")
    if full["engine"] and full["torch"]:
        print(f"Engine over PyTorch: {step['engine'] / step['torch']:.2f}x the time.")


if __name__ == "__main__":
    main()
