#!/usr/bin/env python3
"""How long would the grid's runs have to be to pass issue 30's length criterion?

Reads one seed's runs at two lengths (the grid's 2000 steps and the lavapipe long check's 8000,
both committed under docs/experiments/), takes from each validation curve (the fixed evaluation
subset) its change over the last fifth of the steps, fits change = c * steps^-a through the two
lengths (two points fit it exactly: an extrapolation, not a measurement) and prints, per variant,
the exponent, the change it predicts at the GPU pilot's 32 000 steps, and the length at which it
falls to the threshold (half the grid's paired seed spread, from its report). Then what 30 runs of
the longest such length cost at a given step time.

    python3 experiments/length_extrapolation.py [--threshold 0.0062] [--short DIR] [--long DIR]
        [--check DIR] [--lavapipe-step-s 0.15] [--gpu-step-ms 2,4]

--check DIR: runs of the same seed at a third length (e.g. docs/experiments/shakespeare-32k-lavapipe/runs):
each variant found there gets the fit's prediction at that length beside the measured change.
"""
import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def last_fifth(run_dir, flag):
    """(steps, change of the validation curve over the last fifth of the steps) of one run, a
    folder of the runs that FLAG (--short, --long, --check) names."""
    path = os.path.join(run_dir, "result.json")
    if not os.path.isfile(path):
        folder, run = os.path.split(run_dir)
        runs = sorted(d for d in os.listdir(folder) if os.path.isfile(os.path.join(folder, d, "result.json")))
        there = ", ".join(runs) if runs else "none (no VARIANT-seedS/result.json: not a folder of runs?)"
        sys.exit(f"length_extrapolation: {flag} {folder}: no finished run '{run}' there; --variants and "
                 f"--seed name the runs (VARIANT-seedS). Its finished runs: {there}")
    try:
        with open(path) as f:
            r = json.load(f)
    except (OSError, ValueError) as e:
        sys.exit(f"length_extrapolation: cannot read {path}: {e}")
    curve = {int(s): v for s, v in r["val_curve"]}
    n = r["steps"]
    start = n * 4 // 5
    if start not in curve or n not in curve:
        sys.exit(f"length_extrapolation: {path} has no evaluation at step {start} or {n}")
    return n, curve[start] - curve[n]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threshold", type=float, default=0.0062,
                   help="half the paired seed spread (docs/experiments/shakespeare/report.md)")
    p.add_argument("--short", default=os.path.join(ROOT, "docs/experiments/shakespeare/runs"))
    p.add_argument("--long", default=os.path.join(ROOT, "docs/experiments/shakespeare-long-lavapipe/runs"))
    p.add_argument("--check", help="runs at a third length whose change is set beside the fit's prediction")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--variants", default="baseline,ddl")
    p.add_argument("--pilot-steps", type=int, default=32000)
    p.add_argument("--runs", type=int, default=30, help="runs in the grid")
    p.add_argument("--lavapipe-step-s", type=float, default=0.15,
                   help="seconds a grid step takes alone on lavapipe (about 5 minutes a 2000-step run)")
    p.add_argument("--gpu-step-ms", default="2,4", help="predicted ms a micro step takes on the GPU (not measured)")
    a = p.parse_args()
    for flag, folder in [("--short", a.short), ("--long", a.long), ("--check", a.check)]:
        if folder is not None and not os.path.isdir(folder):
            sys.exit(f"length_extrapolation: {flag} {folder}: not a folder; give a folder of an experiment's "
                     "runs (its runs/, as docs/experiments/shakespeare-32k-lavapipe/runs)")

    print(f"| variant (seed {a.seed}) | change over the last fifth, short | long | exponent a | "
          f"predicted at {a.pilot_steps} steps | steps to reach {a.threshold} |")
    print("|---|---:|---:|---:|---:|---:|")
    need = []
    checks = []
    for v in a.variants.split(","):
        n1, c1 = last_fifth(os.path.join(a.short, f"{v}-seed{a.seed}"), "--short")
        n2, c2 = last_fifth(os.path.join(a.long, f"{v}-seed{a.seed}"), "--long")
        if c1 <= 0 or c2 <= 0 or c2 >= c1:
            print(f"| {v} | {c1:+.4f} at {n1} | {c2:+.4f} at {n2} | no power law through these | | |")
            continue
        exp = math.log(c1 / c2) / math.log(n2 / n1)
        at_pilot = c2 * (a.pilot_steps / n2) ** -exp
        steps = n2 * (c2 / a.threshold) ** (1 / exp)
        need.append(steps)
        print(f"| {v} | {c1:+.4f} at {n1} | {c2:+.4f} at {n2} | {exp:.2f} | {at_pilot:.4f} | "
              f"{steps:,.0f} ({steps / n1:.0f}× {n1}) |")
        run3 = os.path.join(a.check, f"{v}-seed{a.seed}") if a.check else None
        if run3 and os.path.exists(os.path.join(run3, "result.json")):
            n3, c3 = last_fifth(run3, "--check")
            pred = c2 * (n3 / n2) ** -exp
            checks.append(f"{v}: predicted {pred:+.4f} over the last fifth at {n3} steps, measured {c3:+.4f}")
        elif run3:
            checks.append(f"{v}: no finished run {v}-seed{a.seed} in --check {a.check}, so nothing to check "
                          "(--variants names the variants to read)")
    for c in checks:
        print()
        print(c)
    if not need:
        return
    longest = max(need)
    total = a.runs * longest
    gpu = [float(x) for x in a.gpu_step_ms.split(",")]
    print()
    print(f"{a.runs} runs × {longest:,.0f} steps = {total / 1e6:.1f} M steps: "
          f"{total * a.lavapipe_step_s / 3600:.0f} h on lavapipe at {a.lavapipe_step_s} s a step; "
          + ", ".join(f"{total * g / 1000 / 3600:.1f} h" for g in gpu)
          + f" on the GPU at {', '.join(f'{g:g}' for g in gpu)} ms a step (one run at a time).")


if __name__ == "__main__":
    main()
